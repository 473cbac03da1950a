"""structlog set-up: one JSON object per line for machines, a readable console on a terminal.

Events go to stderr so that commands that print results (``eval``, ``bench``) keep stdout clean. A last
processor masks anything that looks like a URL with a password, so a secret that slips into an event or
an exception message is still not written out.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SECRET_IN_URL = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]+@", re.I)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def scrub(text: str) -> str:
    """``redis://u:pw@h`` -> ``redis://u:***@h`` anywhere inside ``text``."""
    return _SECRET_IN_URL.sub(r"\g<scheme>\g<user>:***@", text)


def _scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str) and "@" in value:
            event[key] = scrub(value)
        elif isinstance(value, dict):
            event[key] = {k: scrub(v) if isinstance(v, str) else v for k, v in value.items()}
    return event


def _lead_with_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """timestamp, level, event, logger first: what a person scanning the JSON lines looks for."""
    head = {k: event.pop(k) for k in ("timestamp", "level", "event", "logger") if k in event}
    return {**head, **event}


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """Configure structlog once for the process. ``fmt`` is auto, json or console."""
    out = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if console:
        processors += [_scrub_secrets, structlog.dev.ConsoleRenderer()]
    else:
        processors += [
            structlog.processors.dict_tracebacks,
            _scrub_secrets,
            _lead_with_event,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A bound logger that carries its name, the way stdlib loggers do."""
    return structlog.get_logger().bind(logger=name)

"""structlog set-up: one JSON object per line for machines, a readable console on a terminal.

Events go to stderr so that commands that print results (``eval``, ``bench``) keep stdout clean. A last
processor masks anything that looks like a URL with a password, so a secret that slips into an event or
an exception message is still not written out.

``bind`` fields (the worker id) are added to every event, whichever thread logs it. Records of the
standard library's ``logging`` (redis-py, transformers, warnings) go through the same processors and
renderer, so a log shipper reading JSON lines sees nothing else; with JSON output, transformers' and
Hugging Face's progress bars are switched off (they draw on a terminal, not in lines).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO, cast

import structlog

_SECRET_IN_URL = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]+@", re.I)
# redis-py also reads the password from the URL's query: redis://host/0?password=secret
_SECRET_IN_QUERY = re.compile(r"(?P<key>[?&]password=)[^&#\s'\"]*", re.I)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def scrub(text: str) -> str:
    """``redis://u:pw@h`` -> ``redis://u:***@h`` and ``?password=pw`` -> ``?password=***`` anywhere
    inside ``text``."""
    if "@" in text:
        text = _SECRET_IN_URL.sub(r"\g<scheme>\g<user>:***@", text)
    if "password=" in text.lower():
        text = _SECRET_IN_QUERY.sub(r"\g<key>***", text)
    return text


def _scrubbed(value: Any, depth: int = 0) -> Any:
    """Strings anywhere inside lists, tuples and dicts (a traceback's frames, a settings dict)."""
    if isinstance(value, str):
        return scrub(value)
    if depth > 20:
        return value
    if isinstance(value, dict):
        return {k: _scrubbed(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v, depth + 1) for v in value]
    return value


def _scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        event[key] = _scrubbed(value)
    return event


def _lead_with_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """timestamp, level, event, logger first: what a person scanning the JSON lines looks for."""
    head = {k: event.pop(k) for k in ("timestamp", "level", "event", "logger") if k in event}
    return {**head, **event}


def _static(fields: Mapping[str, Any]) -> Any:
    def add(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in fields.items():
            event.setdefault(key, value)
        return event

    return add


def configure(
    fmt: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    *,
    bind: Mapping[str, Any] | None = None,
    stdlib: bool | None = None,
) -> None:
    """Configure structlog (and the standard library's root logger) once for the process.

    ``fmt`` is auto, json or console; ``bind`` fields go into every event, e.g. ``worker_id``.
    ``stdlib`` (default: when logging to the process's stderr) routes ``logging`` records too."""
    out = stream or cast(TextIO, _Stderr())
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _static(dict(bind or {})),
    ]
    if console:
        tail: list[Any] = [
            structlog.processors.format_exc_info,  # a traceback as text, so it is scrubbed too
            _scrub_secrets,
            structlog.dev.ConsoleRenderer(),
        ]
    else:
        tail = [
            structlog.processors.dict_tracebacks,
            _scrub_secrets,
            _lead_with_event,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    threshold = _LEVELS.get(level, logging.INFO)
    structlog.configure(
        processors=[*shared, *tail],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    if stdlib if stdlib is not None else stream is None:
        _route_stdlib(out, threshold, shared, tail)
        if not console:
            _quiet_progress_bars()


def _route_stdlib(out: TextIO, threshold: int, shared: list[Any], tail: list[Any]) -> None:
    """Standard-library records through structlog's processors: one format on the stream, not two."""
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_ticketq", False)]:
        root.removeHandler(old)
    handler._ticketq = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    # Libraries are chatty at info (transformers' load reports): warnings and up, unless asked.
    root.setLevel(max(threshold, logging.WARNING) if threshold > logging.DEBUG else logging.DEBUG)
    logging.captureWarnings(True)
    if "transformers" in sys.modules:  # imported before us: its records stop at its own handler
        with contextlib.suppress(Exception):
            hf_logging = sys.modules["transformers"].utils.logging
            hf_logging.disable_default_handler()
            hf_logging.enable_propagation()


class _Stderr:
    """The process's stderr as it is when a line is written, not when logging was configured: a
    replaced ``sys.stderr`` (a test's capture, a daemon's redirect) may be closed by then."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def _quiet_progress_bars() -> None:
    """tqdm bars redraw one terminal line with carriage returns: noise in a JSON log. Off, set in the
    environment so that transformers and huggingface_hub read it when (and if) they are imported."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    if "transformers" in sys.modules:
        with contextlib.suppress(Exception):
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def get_logger(name: str) -> Any:
    """A bound logger that carries its name, the way stdlib loggers do."""
    return structlog.get_logger().bind(logger=name)

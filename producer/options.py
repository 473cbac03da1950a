"""The Redis connection settings every command shares, declared once (see :mod:`producer.config`).

``ticketq-worker run`` (whose :class:`~worker.settings.Settings` extends :class:`RedisOptions`),
``ticketq-producer``, ``ticketq-dashboard``, ``ticketq-worker check`` and ``ticketq-worker train
--from-redis`` all take them, so a deployment sets ``TICKETQ_REDIS_URL``, ``TICKETQ_PREFIX`` and
``TICKETQ_CLUSTER`` once for all of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from producer.config import Check, problems, setting
from producer.protocol import DEFAULT_PREFIX
from producer.strictjson import encodable

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SCHEMES = ("redis", "rediss", "unix")


def plain_text(value: str) -> bool:
    """Non-empty, encodable as UTF-8 (no lone surrogates from undecodable bytes in an environment
    variable or argument), printable, without spaces: what a key prefix or a worker id may be (each is
    shown in tables and logs, and ends up in key names)."""
    return bool(value) and " " not in value and value.isprintable() and encodable(value)


_DB_PATH = re.compile(r"/?[0-9]*")


def url_problem(url: str, cluster: bool = False) -> str | None:
    """What is wrong with a Redis URL, without quoting it (a password may be in it), or None.

    redis-py reads ``redis://127.0.0.1:6379/notadb`` as db 0, silently; and its message for a password
    with ``/`` in it quotes the password."""
    if not (encodable(url) and url.isprintable()):
        return "not UTF-8 text, or it holds control characters"
    try:
        parts = urlsplit(url)
    except ValueError:  # "redis://[::1": an unclosed IPv6 address
        return "cannot be read as a URL (an IPv6 address is written in brackets: redis://[::1]:6379/0)"
    if parts.scheme not in SCHEMES:
        return "must be redis://, rediss:// or unix://"
    try:
        kwargs = redis.connection.parse_url(url)
    except (ValueError, TypeError):
        return (
            "cannot be read as a Redis URL (a port that is not 1..65535? a password holding '/', '?', '#' "
            "or '@' must be percent-encoded: %2F, %3F, %23, %40)"
        )
    if parts.scheme != "unix" and not _DB_PATH.fullmatch(parts.path):
        return "the path must be a database number (redis://host:6379/0)"
    for name in ("socket_timeout", "socket_connect_timeout"):
        value = kwargs.get(name)
        if value is not None and not (isinstance(value, float | int) and math.isfinite(value) and value > 0):
            return f"{name} must be a positive number of seconds"
    if cluster and int(kwargs.get("db") or 0) != 0:
        return "Redis Cluster has database 0 only"
    return None


@dataclass(frozen=True)
class RedisOptions:
    redis_url: str = setting(
        DEFAULT_REDIS_URL,
        help="Redis URL; `rediss://` for TLS; the password is masked in every log",
    )
    prefix: str = setting(
        DEFAULT_PREFIX,
        help="key prefix; a hash tag like `{ticketq}` for Redis Cluster",
        check=Check(plain_text, "must be non-empty UTF-8 text, without spaces or control characters"),
    )
    cluster: bool = setting(
        False, help="Redis Cluster client: `--redis-url` names any node; the prefix gets a hash tag"
    )

    def __post_init__(self) -> None:
        found = problems(self) + self.url_problems()
        if found:
            raise ValueError("; ".join(found))

    def url_problems(self) -> list[str]:
        """The URL's problems beyond its declared rule (each command's settings check them)."""
        trouble = url_problem(self.redis_url, self.cluster)
        return [f"redis-url: {trouble}"] if trouble else []


@dataclass(frozen=True)
class QuestionOptions:
    """Which of a task's questions a command is about (``train``, ``eval``, ``label``, ``heads``...)."""

    question: str | None = setting(
        None,
        help="the task's further question NAME ([questions.NAME])",
        env=False,
        metavar="NAME",
        shown="the primary question",
    )

"""The Redis connection settings every command shares, declared once (see :mod:`producer.config`).

``ticketq-worker run`` (whose :class:`~worker.settings.Settings` extends :class:`RedisOptions`),
``ticketq-producer``, ``ticketq-dashboard``, ``ticketq-worker check`` and ``ticketq-worker train
--from-redis`` all take them, so a deployment sets ``TICKETQ_REDIS_URL``, ``TICKETQ_PREFIX`` and
``TICKETQ_CLUSTER`` once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from producer.config import Check, problems, setting
from producer.protocol import DEFAULT_PREFIX

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisOptions:
    redis_url: str = setting(
        DEFAULT_REDIS_URL,
        help="Redis URL; `rediss://` for TLS; the password is masked in every log",
        check=Check(lambda url: urlsplit(url).scheme in SCHEMES, "must be redis://, rediss:// or unix://"),
    )
    prefix: str = setting(
        DEFAULT_PREFIX,
        help="key prefix; a hash tag like `{ticketq}` for Redis Cluster",
        check=Check(lambda p: bool(p) and " " not in p, "must be non-empty, without spaces"),
    )
    cluster: bool = setting(
        False, help="Redis Cluster client: `--redis-url` names any node; the prefix gets a hash tag"
    )

    def __post_init__(self) -> None:
        found = problems(self)
        if found:
            raise ValueError("; ".join(found))

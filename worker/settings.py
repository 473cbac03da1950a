"""The worker's settings: one frozen object, built from flags over ``TICKETQ_*`` variables over defaults.

Validated once, at start-up, so a bad value fails before anything is claimed. The Redis password never
leaves this module in clear: ``repr``, :meth:`Settings.public` and :func:`mask_url` all mask it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from producer.client import mask_url as mask_url  # re-exported: one helper, in the light package
from producer.learning import DEFAULT_KEEP_TEXT_S
from producer.options import DEFAULT_REDIS_URL as DEFAULT_REDIS_URL  # re-exported for the worker's modules
from producer.options import TRUE_WORDS
from producer.protocol import DEFAULT_PREFIX
from worker.engine.options import FLAGS as ENGINE_FLAGS
from worker.engine.options import EngineOptions, add_engine_arguments
from worker.errors import ConfigError

LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")


def default_worker_id() -> str:
    """host-pid-random: readable in ``ticketq-producer stats``, unique even when pids repeat in containers."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    prefix: str = DEFAULT_PREFIX
    drain: int = 256  # payloads claimed at once; the engine buckets them by length
    max_wait_ms: int = 50  # how long a claim keeps filling after the first payload arrived
    engine: EngineOptions = field(
        default_factory=EngineOptions
    )  # model, task, batch size...: every default there
    burst: bool = False
    worker_id: str = field(default_factory=default_worker_id)
    log_format: str = "auto"
    log_level: str = "info"
    routes: tuple[tuple[str, str], ...] = ()  # (label, RQ queue name)
    route_handler: str | None = None
    heartbeat_s: float = 15.0  # heartbeat TTL; refreshed every heartbeat_s / 5
    max_attempts: int = 3  # dead workers a payload may be in flight on before it is poison
    stall_timeout_s: float | None = None  # watchdog; None: derived from the batch budget (see stall_timeout)
    metrics_port: int | None = None  # serve Prometheus /metrics on this port; None: off
    keep_results_s: float = 7 * 24 * 3600.0  # results older than this are deleted; 0 keeps them forever
    max_dead: int = 10_000  # newest dead letters kept; 0 keeps every one
    burst_wait_s: float = 30.0  # --burst gives up (exit 5) after Redis was unreachable this long
    cluster: bool = False  # Redis Cluster client (the prefix gets a hash tag)
    keep_text_s: int = DEFAULT_KEEP_TEXT_S  # P:text:<id> TTL, so corrections can be trained on; 0: keep none
    review_below: float | None = None  # mark results less confident for review; None: the task's (review.py)

    def __post_init__(self) -> None:
        problems = [p for p in self._problems() if p]
        if problems:
            raise ConfigError("; ".join(problems))

    def _problems(self) -> list[str]:
        return [
            ""
            if urlsplit(self.redis_url).scheme in ("redis", "rediss", "unix")
            else "redis-url: not redis://",
            "" if self.prefix and " " not in self.prefix else "prefix: empty or has a space",
            "" if 1 <= self.drain <= 100_000 else "drain: must be 1..100000",
            "" if self.engine.batch_size <= self.drain else "batch-size: must be 1..drain",
            "" if 0 <= self.max_wait_ms <= 60_000 else "max-wait-ms: must be 0..60000",
            "" if self.worker_id and ":" not in self.worker_id else "worker-id: empty or has ':'",
            "" if self.log_format in LOG_FORMATS else f"log-format: one of {', '.join(LOG_FORMATS)}",
            "" if self.log_level in LOG_LEVELS else f"log-level: one of {', '.join(LOG_LEVELS)}",
            "" if 0.5 <= self.heartbeat_s <= 3600 else "heartbeat-s: must be 0.5..3600",
            "" if 1 <= self.max_attempts <= 100 else "max-attempts: must be 1..100",
            ""
            if self.stall_timeout_s is None or self.stall_timeout_s >= 1
            else "stall-timeout: must be >= 1",
            ""
            if self.metrics_port is None or 0 <= self.metrics_port <= 65535
            else "metrics-port: must be 0..65535",
            "" if self.keep_results_s >= 0 else "keep-results-s: must be >= 0 (0 keeps results forever)",
            "" if self.max_dead >= 0 else "max-dead: must be >= 0 (0 keeps every dead letter)",
            "" if self.burst_wait_s >= 0 else "burst-wait-s: must be >= 0",
            ""
            if not (self.cluster and self.routes)
            else "route: RQ routing needs a plain Redis, not --cluster",
            "" if not self.cluster or self.redis_url.startswith("redis") else "cluster: needs a redis:// URL",
            "" if 0 <= self.keep_text_s <= 366 * 86400 else "keep-text-s: must be 0..31622400 (a year)",
            ""
            if self.review_below is None or 0.0 <= self.review_below <= 1.0
            else "review-below: must be 0..1 (a probability)",
        ]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.public().items())
        return f"Settings({inner})"

    def public(self) -> dict[str, Any]:
        """Every setting, safe to log."""
        out = asdict(self)
        out["redis_url"] = mask_url(self.redis_url)
        out["routes"] = dict(self.routes)
        return out

    @property
    def heartbeat_every_s(self) -> float:
        return self.heartbeat_s / 5

    @property
    def stall_timeout(self) -> float:
        """Seconds without progress before the watchdog ends the worker. Progress is counted per forward
        pass, so this must cover the slowest pass: the full token budget at 10 tokens/s (a float32 run on
        2 cores under a load of 7 measured 26 real tokens/s), and never under a minute."""
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        return max(60.0, self.engine.max_batch_tokens / 10)


# flag name, type, help. The env variable is TICKETQ_<NAME>, e.g. --max-wait-ms -> TICKETQ_MAX_WAIT_MS.
_FLAGS: list[tuple[str, type, str]] = [
    ("redis-url", str, f"Redis URL (default {DEFAULT_REDIS_URL})"),
    ("prefix", str, f"key prefix; a hash tag like {{ticketq}} for Redis Cluster (default {DEFAULT_PREFIX})"),
    ("drain", int, "payloads claimed at once and bucketed by length together (default 256)"),
    ("max-wait-ms", int, "after the first payload, keep filling a drain this long (default 50)"),
    ("worker-id", str, "unique id of this worker (default host-pid-random)"),
    ("log-format", str, "auto (console on a TTY, else JSON), json, console"),
    ("log-level", str, "debug, info, warning, error (default info)"),
    ("route-handler", str, "dotted path of the RQ job function for routed tickets"),
    ("heartbeat-s", float, "heartbeat TTL in seconds; a silent worker is recovered after it (default 15)"),
    ("max-attempts", int, "dead workers a ticket may be in flight on before it is dead-lettered (default 3)"),
    (
        "stall-timeout",
        float,
        "seconds without progress before the watchdog ends a hung worker, exit 6 "
        "(default max(60, max-batch-tokens / 10))",
    ),
    ("metrics-port", int, "serve Prometheus metrics at http://0.0.0.0:PORT/metrics (default off)"),
    (
        "keep-results-s",
        float,
        "delete results older than this; 0 keeps them forever (default 604800, 7 days)",
    ),
    ("max-dead", int, "newest dead letters kept; 0 keeps all (default 10000)"),
    (
        "burst-wait-s",
        float,
        "with --burst, give up (exit 5) when Redis is unreachable this long (default 30)",
    ),
    ("keep-text-s", int, "keep each ticket's text this long for corrections; 0 keeps none (default 604800)"),
    (
        "review-below",
        float,
        "results less confident than this need review (P:review); overrides the task's review_below and "
        "auto_accuracy (default: the task's)",
    ),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every setting as a flag. Defaults are ``None`` so that :func:`from_args` can tell "not given"."""
    for name, kind, text in _FLAGS:
        parser.add_argument(f"--{name}", type=kind, default=None, help=f"{text} [env TICKETQ_{_env(name)}]")
    add_engine_arguments(parser, env=True)
    parser.add_argument(
        "--burst", action="store_true", default=None, help="exit once the input is empty [env TICKETQ_BURST]"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        default=None,
        help="Redis Cluster: --redis-url names any node; the prefix gets a hash tag [env TICKETQ_CLUSTER]",
    )
    parser.add_argument(
        "--route",
        action="append",
        default=None,
        metavar="LABEL=QUEUE",
        help="enqueue an RQ job on QUEUE for tickets labelled LABEL; repeatable [env TICKETQ_ROUTES=a=q,b=r]",
    )


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Flags win over ``TICKETQ_*`` variables, which win over the defaults. Raises :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    known = {f.name: f for f in fields(Settings)}
    values: dict[str, Any] = {}
    engine_flags = [(name.replace("_", "-"), kind, "") for name, (kind, _) in ENGINE_FLAGS.items()]
    flags = [*_FLAGS, *engine_flags, ("burst", bool, ""), ("cluster", bool, ""), ("route", str, "")]
    for name, kind, _ in flags:
        attr = _ATTRS.get(name, name.replace("-", "_"))
        given = getattr(args, name.replace("-", "_"), None)
        raw_env = env.get(f"TICKETQ_{_env(name)}" if name != "route" else "TICKETQ_ROUTES")
        try:
            if attr == "route":
                values["routes"] = _parse_routes(given if given is not None else _split(raw_env))
            elif given is not None:
                values[attr] = given
            elif raw_env not in (None, ""):
                values[attr] = _from_env(kind, raw_env)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    try:
        values["engine"] = EngineOptions(**{k: values.pop(k) for k in list(values) if k in ENGINE_FLAGS})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Settings(**{k: v for k, v in values.items() if k in known})


# flags whose Settings field has a unit suffix the flag leaves out
_ATTRS = {"stall-timeout": "stall_timeout_s"}


def _env(flag: str) -> str:
    return flag.upper().replace("-", "_")


def _from_env(kind: type, raw: str) -> Any:
    if kind is bool:
        if raw.lower() in TRUE_WORDS:
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {raw!r}")
    return kind(raw)


def _split(raw: str | None) -> list[str]:
    return [p.strip() for p in (raw or "").split(",") if p.strip()]


def _parse_routes(items: list[str]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for item in items:
        label, sep, queue = item.partition("=")
        if not sep or not label.strip() or not queue.strip():
            raise ValueError(f"expected LABEL=QUEUE, got {item!r}")
        out[label.strip()] = queue.strip()
    return tuple(out.items())

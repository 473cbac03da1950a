"""The worker's settings: one frozen object, built from flags over ``TICKETQ_*`` variables over defaults.

Each setting is declared once below (type, default, help, variable, rule; see :mod:`producer.config`),
the Redis connection's in :class:`~producer.options.RedisOptions`, the engine's in
:class:`~worker.engine.options.EngineOptions`. Validated once, at start-up, so a bad value fails before
anything is claimed. The Redis password never leaves in clear: ``repr`` and :meth:`Settings.public` mask it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from producer import config
from producer.client import mask_url
from producer.config import Check, at_least, between, group, setting
from producer.learning import DEFAULT_KEEP_TEXT_S
from producer.options import RedisOptions, plain_text
from worker.engine.options import EngineOptions
from worker.errors import ConfigError

LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
WEEK_S = 7 * 24 * 3600.0


def default_worker_id() -> str:
    """host-pid-random: readable in ``ticketq-producer stats``, unique even when pids repeat in containers."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def parse_routes(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``LABEL=QUEUE`` items -> ((label, queue), ...); a label given twice keeps its last queue."""
    out: dict[str, str] = {}
    for item in items:
        label, sep, queue = item.partition("=")
        if not sep or not label.strip() or not queue.strip():
            raise ValueError(f"expected LABEL=QUEUE, got {item!r}")
        out[label.strip()] = queue.strip()
    return tuple(out.items())


@dataclass(frozen=True)
class Settings(RedisOptions):
    drain: int = setting(
        256,
        help="most tickets claimed at once, then sorted and packed together",
        # the bound keeps a dead worker's recovery (steps of ~512 KiB over what it held) short
        check=between(1, 2_000),
    )
    max_wait_ms: int = setting(
        50, help="after the first ticket arrives, keep filling a drain this long", check=between(0, 60_000)
    )
    engine: EngineOptions = group(EngineOptions, "engine")
    burst: bool = setting(False, help="exit once the input is empty")
    worker_id: str = setting(
        default_factory=default_worker_id,
        help="unique id of this worker, per live process",
        shown="host-pid-random",
        check=Check(
            lambda w: plain_text(w) and ":" not in w,
            "must be non-empty UTF-8 text, without ':', spaces or control characters",
        ),
    )
    log_format: str = setting(
        "auto", help="`auto` (console on a TTY, else JSON), `json`, `console`", choices=LOG_FORMATS
    )
    log_level: str = setting("info", help="`debug`, `info`, `warning`, `error`", choices=LOG_LEVELS)
    routes: tuple[tuple[str, str], ...] = setting(
        (),
        help="enqueue an RQ job on QUEUE for tickets labelled LABEL; repeatable (the variable: `a=q,b=r`)",
        flag="route",
        env="TICKETQ_ROUTES",
        metavar="LABEL=QUEUE",
        repeat=parse_routes,
    )
    route_handler: str | None = setting(
        None, help="dotted path of the function RQ workers call for routed tickets", shown="the task file's"
    )
    heartbeat_s: float = setting(
        15.0,
        help="heartbeat TTL in seconds: how soon a dead worker's claims are requeued (renewed every TTL/5)",
        check=between(0.5, 3600),
    )
    max_attempts: int = setting(
        3,
        help="dead workers a ticket may be in flight on before it is poison (dead-lettered)",
        check=between(1, 100),
    )
    stall_timeout_s: float | None = setting(
        None,
        help="seconds without progress before the watchdog logs `stalled` and ends the worker (exit 6)",
        flag="stall-timeout",
        shown="max(60, max-batch-tokens / 10) s",
        check=at_least(1),
    )
    metrics_port: int | None = setting(
        None,
        help="serve Prometheus metrics at `http://0.0.0.0:PORT/metrics`",
        shown="off",
        check=between(0, 65535),
    )
    keep_results_s: float = setting(
        WEEK_S, help="delete results older than this (seconds); `0` keeps them forever", check=at_least(0)
    )
    max_dead: int = setting(10_000, help="newest dead letters kept; `0` keeps all", check=at_least(0))
    burst_wait_s: float = setting(
        30.0,
        help="with `--burst`, give up (exit 5) after Redis was unreachable this long (seconds)",
        check=at_least(0),
    )
    result_scores: int | None = setting(
        None,
        help="keep each answer's N most probable labels' scores in its result (a result carries every "
        "label's: 3.1 KiB of Redis for 77 intents, 0.6 KiB with 5, measured); at least 2, the two the review "
        "queue's margin needs",
        shown="every label's",
        check=between(2, 100_000),
        metavar="N",
    )
    keep_text_s: int = setting(
        DEFAULT_KEEP_TEXT_S,
        help="keep each ticket's text this long (seconds) so corrections can be trained on; `0`: none",
        check=between(0, 366 * 86400, "(a year)"),
    )
    strict: bool = setting(
        False,
        help="refuse to start (exit 2) unless Redis's `maxmemory-policy` is `noeviction` and its "
        "`proto-max-bulk-len` at most 1 MiB (without it: a warning)",
    )
    review_below: float | None = setting(
        None,
        help='results less confident than this need review (`"review": true`, `P:review`); overrides the '
        "task's `review_below` and `auto_accuracy` for the primary question only (each `[questions.NAME]` "
        "sets its own; worker/review.py)",
        shown="the task's",
        check=between(0, 1, "(a probability)"),
    )

    def __post_init__(self) -> None:
        found = config.problems(self) + self.url_problems() + self._cross_problems()
        if found:
            raise ConfigError("; ".join(found))

    def _cross_problems(self) -> list[str]:
        """Rules between settings; each setting's own rule is declared with it."""
        checks = [
            (self.engine.batch_size <= self.drain, "batch-size: must be 1..drain"),
            (not (self.cluster and self.routes), "route: RQ routing needs a plain Redis, not --cluster"),
            (not self.cluster or self.redis_url.startswith("redis"), "cluster: needs a redis:// URL"),
        ]
        return [problem for ok, problem in checks if not ok]

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every setting as a flag, its help naming its default and its variable."""
    config.add_arguments(parser, Settings)


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Flags win over ``TICKETQ_*`` variables, which win over the defaults. Raises :class:`ConfigError`."""
    try:
        return config.resolve(Settings, args, os.environ if environ is None else environ)
    except ValueError as exc:  # a variable that cannot be read, or an engine option out of range
        raise ConfigError(str(exc)) from None

"""Connections to Redis (plain or Cluster) and what their failures mean for the worker.

:func:`connect` builds a client that fails fast (the service backs off itself, logged and interruptible).
:func:`transient` sorts redis-py's exceptions: those that go away by waiting become
:class:`~worker.errors.TransientError` (retried), those no wait can fix become
:class:`~worker.errors.FatalError` with the worker's exit code (a wrong password, missing ACL
permissions: 3; a key of the wrong type: 4).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from producer.exitcodes import Exit
from worker.errors import FatalError, TransientError

SOCKET_TIMEOUT_S = 15.0  # the worker's: above the longest BLMOVE block (1 s), below "looks hung"
P = ParamSpec("P")
T = TypeVar("T")


def connect(url: str, *, socket_timeout: float = 10.0, cluster: bool = False) -> redis.Redis:
    """A client that fails fast: redis-py's own retries are off because the service backs off itself
    (logged, interruptible by a stop signal) instead of hanging inside one call.

    With ``cluster``, a :class:`redis.cluster.RedisCluster` seeded from ``url`` (any node). It follows
    MOVED/ASK redirects and refreshes its slot map after a failover; its own retries are kept small,
    and what still fails reaches the service's back-off as a :class:`TransientError`. It offers the
    calls the queue makes (scripts, transactions with WATCH on one slot, blocking moves, pub/sub), so
    the rest of the code takes it as a ``redis.Redis``.
    """
    if cluster:
        from redis.cluster import RedisCluster

        client: Any = RedisCluster.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=5.0,
            retry=Retry(NoBackoff(), 1),
        )
        return client
    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


# Failures that go away without the worker doing anything: a lost or slow connection, a Redis at
# maxmemory that refuses writes until memory is freed (exiting on that would crash-loop the fleet and
# count an attempt against every claim each time, turning good tickets into "poison"), and a Redis
# Cluster in the middle of a failover (slots uncovered, a replica not yet promoted, TRYAGAIN).
_TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,
)
# Error replies that mean "not now": a script running too long (BUSY), a restart loading its data
# (LOADING), a failed RDB save that stops writes (MISCONF), too few replicas (NOREPLICAS), a replica whose
# master is down (MASTERDOWN), a cluster resharding or failing over (TRYAGAIN, CLUSTERDOWN), a read-only
# replica or a full Redis (READONLY, OOM). Matched by the reply's code, whatever class redis-py gives it.
TRANSIENT_CODES = frozenset(
    {"BUSY", "LOADING", "MISCONF", "NOREPLICAS", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "OOM"}
)


def is_transient(exc: BaseException) -> bool:
    """A failure that waiting can cure: a lost connection (reset, refused, timed out) or a reply above."""
    if isinstance(exc, _TRANSIENT):
        return True
    return isinstance(exc, redis.ResponseError) and reply_code(exc) in TRANSIENT_CODES


def reply_code(exc: BaseException) -> str:
    """The error code of a Redis error reply (``WRONGTYPE``, ``BUSY``...); redis-py prefixes a pipeline's
    with ``Command # N (...) of pipeline caused error: ``."""
    text = str(exc)
    _, sep, tail = text.partition(" of pipeline caused error: ")
    return (tail if sep else text).split(" ", 1)[0]


# ...and failures that never go away by waiting: AuthenticationError is a ConnectionError to redis-py,
# so these are checked first. A wrong password retried forever looked like an outage in the logs.
_AUTH = (redis.AuthenticationError, redis.exceptions.AuthorizationError, redis.exceptions.NoPermissionError)


def fatal_from(exc: BaseException) -> FatalError | None:
    """The :class:`FatalError` a Redis exception amounts to, or ``None`` when it is not fatal."""
    if isinstance(exc, _AUTH):
        return FatalError(
            f"Redis refused us ({type(exc).__name__}): {exc}", cause="auth", exit_code=Exit.REDIS_ACCESS
        )
    if isinstance(exc, redis.exceptions.InvalidResponse):  # an HTTP server, a proxy, another protocol
        return FatalError(
            f"the server does not answer as Redis does (another service on that port?): {exc}"[:300],
            cause="protocol",
            exit_code=Exit.REDIS_ACCESS,
        )
    if isinstance(exc, redis.ResponseError) and reply_code(exc) == "WRONGTYPE":
        return FatalError(
            f"a ticketq key holds the wrong type (another program writes under this prefix?): {exc}",
            cause="wrongtype",
            exit_code=Exit.REDIS_REFUSED,
        )
    return None


def transient(fn: Callable[P, T]) -> Callable[P, T]:
    """Turn the failures in ``_TRANSIENT`` into :class:`TransientError`, the one thing callers retry,
    and those no retry can fix into :class:`FatalError`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            fatal = fatal_from(exc)
            if fatal is not None:
                raise fatal from exc
            if is_transient(exc):
                refresh = getattr(args[0], "refresh_slots", None) if args else None
                if refresh is not None and getattr(args[0], "cluster", False):
                    refresh()
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
            raise

    return wrapper


def is_cluster(client: Any) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)

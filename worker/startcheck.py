"""What a worker does before it serves. Before the model loads (seconds to minutes on a cold machine):
check the credentials, the ACL permissions and the key types the worker needs, and Redis's memory
policy (a wrong password used to be reported only after the model; an evicting Redis silently drops
tickets, in-flight lists or heartbeats: false poison letters). Once it runs: the task's labels, for the
label script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from producer.exitcodes import Exit
from producer.protocol import Keys, cluster_prefix
from worker.connection import SOCKET_TIMEOUT_S, connect, transient
from worker.errors import FatalError, TransientError
from worker.queue import RedisQueue
from worker.settings import Settings


@transient
def check_access(queue: RedisQueue) -> None:
    """The commands the worker will use (so the threat model's ACL suffices), without writing: raises
    :class:`FatalError` (exit 3 or 4) for what no wait can fix, TransientError when unreachable."""
    k = queue.keys
    with queue.redis.pipeline(transaction=False) as pipe:
        for key in (k.tickets, k.dead, queue.inflight):
            pipe.llen(key)  # WRONGTYPE unless a list (or absent)
        for key in (k.results, k.attempts, k.head):
            pipe.hexists(key, "")  # ... a hash
        pipe.zrangebyscore(k.done, "+inf", "+inf", start=0, num=1)  # ... a sorted set
        pipe.smembers(k.workers)  # ... a set
        pipe.get(k.heartbeat(queue.worker_id))  # ... a string
        pipe.execute()
    queue.load_scripts()


@transient
def publish_labels(queue: RedisQueue, labels: Sequence[str]) -> None:
    """``P:labelset``: the task's labels, which label.lua checks corrections against (a result may be
    trimmed before a person corrects it). Replaced whole, in one transaction, at every worker's start."""
    if not labels:
        return
    with queue.redis.pipeline(transaction=True) as pipe:
        pipe.delete(queue.keys.labelset)
        pipe.sadd(queue.keys.labelset, *labels)
        pipe.execute()


def memory_policy(client: Any) -> str | None:
    """Redis's ``maxmemory-policy``, or ``None`` when CONFIG is refused or renamed (managed services
    do that). Anything but ``noeviction`` may evict tickets, in-flight lists or heartbeats."""
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except (redis.ResponseError, redis.exceptions.RedisClusterException):
        return None
    if isinstance(policy, bytes):
        policy = policy.decode()
    return policy if isinstance(policy, str) else None


def check_redis(settings: Settings, log: Any) -> int | None:
    """Credentials, ACL permissions, key types and the memory policy, before the model loads (seconds to
    minutes on a cold machine): an exit status when the worker must not start, else ``None``. An
    unreachable Redis is not an error here: the service waits for it, as it would mid-run."""
    keys = Keys(cluster_prefix(settings.prefix) if settings.cluster else settings.prefix)
    client = connect(settings.redis_url, socket_timeout=SOCKET_TIMEOUT_S, cluster=settings.cluster)
    try:
        queue = RedisQueue(client, keys, settings.worker_id)
        check_access(queue)
        policy = memory_policy(client)
    except FatalError as exc:
        log.error(
            "fatal",
            cause=exc.cause,
            error=str(exc),
            exit_code=exc.exit_code,
            when="before loading",
            redis_url=settings.public()["redis_url"],
        )
        return exc.exit_code
    except TransientError as exc:
        log.warning("redis_unchecked", error=str(exc), note="unreachable now: the worker waits for it")
        return None
    finally:
        client.close()
    if policy is None:
        log.warning(
            "memory_policy_unchecked",
            note="CONFIG GET is refused or renamed here: make sure maxmemory-policy is noeviction",
        )
    elif policy != "noeviction":
        (log.error if settings.strict else log.warning)(
            "memory_policy",
            policy=policy,
            risk="Redis may evict tickets, in-flight lists or heartbeats (false poison letters)",
            fix="CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in redis.conf)",
            strict=settings.strict,
        )
        if settings.strict:
            return Exit.CONFIG
    return None

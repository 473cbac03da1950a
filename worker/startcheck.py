"""What a worker does before it serves. Before the model loads (seconds to minutes on a cold machine):
check the credentials, the ACL permissions and the key types the worker needs, and Redis's memory
policy (a wrong password used to be reported only after the model; an evicting Redis silently drops
tickets, in-flight lists or heartbeats: false poison letters) and its ``proto-max-bulk-len`` (the only
bound on one payload, which the claim script copies). Once it runs: the task's labels and its further
questions' labels, for the label script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        for key in (k.done, k.review, *(k.asking(q).review for q in queue.questions)):
            pipe.zrangebyscore(key, "+inf", "+inf", start=0, num=1)  # ... a sorted set
        pipe.get(k.heartbeat(queue.worker_id))  # ... a string
        pipe.execute()
    try:  # ... a set, never read whole (SMEMBERS of one grown by hand held Redis 14-16 ms)
        queue.redis.sscan(k.workers, 0, count=10)
    except redis.exceptions.NoPermissionError:  # an ACL line from before +sscan: as before
        queue.redis.smembers(k.workers)
    queue.load_scripts()


@transient
def publish_labels(
    queue: RedisQueue, labels: Sequence[str], questions: Mapping[str, Sequence[str]] | None = None
) -> None:
    """``P:labelset``: the task's labels, which label.lua checks corrections against (a result may be
    trimmed before a person corrects it); ``P:questions``, the further questions' names, and each one's
    ``P:q:NAME:labelset``, which label.lua checks a correction for NAME against (there may be no answer to
    NAME to check it by: no head yet). Replaced whole, in one transaction, at every worker's start; a
    question dropped from the task leaves ``P:questions``, so label.lua refuses it."""
    if not labels:
        return
    asked = {q: list(names) for q, names in (questions or {}).items() if names}
    with queue.redis.pipeline(transaction=True) as pipe:
        pipe.delete(queue.keys.labelset, queue.keys.questions)
        pipe.sadd(queue.keys.labelset, *labels)
        for question, names in asked.items():
            key = queue.keys.asking(question).labelset
            pipe.delete(key)
            pipe.sadd(key, *names)
        if asked:
            pipe.sadd(queue.keys.questions, *asked)
        pipe.execute()


def question_labels(classifier: Any) -> dict[str, list[str]]:
    """Each further question the classifier answers -> its labels (its task's ``[questions.NAME]``).
    Read defensively, as :mod:`worker.review` does: test doubles have no task."""
    task = getattr(classifier, "task", None)
    asked = set(getattr(classifier, "questions", ()) or ())
    out: dict[str, list[str]] = {}
    for q in getattr(task, "questions", ()) or ():
        name, labels = getattr(q, "name", None), getattr(q, "labels", None)
        if isinstance(name, str) and name in asked and isinstance(labels, list | tuple):
            out[name] = [str(x) for x in labels]
    return out


def _config(client: Any, name: str) -> str | None:
    """One CONFIG GET value, or ``None`` when CONFIG is refused or renamed (managed services do that)."""
    try:
        value = client.config_get(name).get(name)
    except (redis.ResponseError, redis.exceptions.RedisClusterException):
        return None
    if isinstance(value, bytes):
        value = value.decode()
    return value if isinstance(value, str) else None


def memory_policy(client: Any) -> str | None:
    """Redis's ``maxmemory-policy``, or ``None`` when CONFIG is refused or renamed (managed services
    do that). Anything but ``noeviction`` may evict tickets, in-flight lists or heartbeats."""
    return _config(client, "maxmemory-policy")


#: Above this ``proto-max-bulk-len``, the start check warns (``--strict``: refuses). Valid payloads are
#: under 64 KiB; claim.lua copies each payload it looks at (about 4 ms a MiB), so one huge payload
#: blocks the shared Redis that long per claim. 1 MiB is Redis's minimum.
MAX_BULK_LEN = 1024 * 1024


def max_bulk_len(client: Any) -> int | None:
    """Redis's ``proto-max-bulk-len`` in bytes (the largest value a client may write), or ``None`` when
    CONFIG is refused or renamed."""
    value = _config(client, "proto-max-bulk-len")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


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
        bulk = max_bulk_len(client)
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
    if bulk is not None and bulk > MAX_BULK_LEN:
        (log.error if settings.strict else log.warning)(
            "max_bulk_len",
            proto_max_bulk_len=bulk,
            risk="a producer may push one payload this large: each claim that reads it blocks Redis for "
            "about 4 ms a MiB (valid payloads are under 64 KiB)",
            fix="CONFIG SET proto-max-bulk-len 1mb (and proto-max-bulk-len 1mb in redis.conf)",
            strict=settings.strict,
        )
        if settings.strict:
            return Exit.CONFIG
    return None

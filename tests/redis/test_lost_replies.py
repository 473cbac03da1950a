"""Replies lost on the way back, and what producers push that a claim must bound: the queue, real Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from support import tickets, wait_for

from producer.protocol import Keys
from worker.connection import connect
from worker.errors import TransientError
from worker.queue import RedisQueue

MB = 1024 * 1024


# -- a lost reply --------------------------------------------------------------------------------------


def _reply_lost(step: Callable[..., Any]) -> Callable[..., Any]:
    """The command runs on the server, then the connection drops before its reply arrives."""

    def lossy(*args: Any, **kwargs: Any) -> Any:
        step(*args, **kwargs)
        raise redis.ConnectionError("connection dropped before the reply")

    return lossy


@pytest.mark.parametrize("step", ["_claim", "_blmove"])
def test_a_claim_whose_reply_was_lost_hands_its_payloads_back(
    redis_url: str, r: redis.Redis, keys: Keys, step: str
) -> None:
    q = RedisQueue(connect(redis_url), keys, "w1")
    if step == "_claim":
        r.lpush(keys.tickets, *tickets(5))
    real = getattr(q, step)
    setattr(q, step, _reply_lost(real))
    if step == "_blmove":
        r.lpush(keys.tickets, *tickets(5))  # arrives while the claim blocks on an empty input
        q._claim_now = lambda n, held: ([], False)  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        q.claim(3, block_s=0.2, max_wait_s=0)
    assert r.llen(keys.inflight("w1")) > 0  # moved on the server; the worker never saw them
    setattr(q, step, real)  # the connection is back; the service retries the claim
    vars(q).pop("_claim_now", None)
    got = q.claim(10, block_s=0.2, max_wait_s=0)
    assert got == tickets(5)  # every payload, oldest first: none stranded in the in-flight list
    assert r.llen(keys.inflight("w1")) == 5 and r.llen(keys.tickets) == 0


@pytest.mark.parametrize("path", ["script", "blocking"])
def test_a_worker_taken_for_dead_while_alive_is_recovered_if_it_dies_later(
    redis_url: str, r: redis.Redis, keys: Keys, path: str
) -> None:
    """A's heartbeat lapsed (Redis was away longer than the TTL) but A lives: B recovers A's list and
    deregisters it. If A then claims and dies before its next beat, its claims must still be found."""
    a = RedisQueue(connect(redis_url), keys, "A")
    b = RedisQueue(connect(redis_url), keys, "B")
    a.beat({}, ttl_s=0.1)
    wait_for(lambda: not r.exists(keys.heartbeat("A")), what="A's heartbeat to lapse")
    assert [rec.worker for rec in b.recover()] == ["A"]  # A looks dead: deregistered
    r.lpush(keys.tickets, *tickets(3))
    if path == "blocking":  # as if the input had been empty and the payload arrived during the block
        a._claim_now = lambda n, held: ([], False)  # type: ignore[method-assign]
    assert len(a.claim(3, block_s=0.2, max_wait_s=0)) >= 1  # A is alive after all, and claims
    # A dies here, before its heartbeat thread beats again.
    (rec,) = b.recover()
    assert rec.worker == "A" and rec.requeued >= 1
    assert r.llen(keys.tickets) == 3 and r.llen(keys.inflight("A")) == 0


def test_a_claim_stops_at_its_byte_budget_whatever_producers_push(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Oversized payloads are refused, but only after they are read: the claim bounds how many at once."""
    q = RedisQueue(connect(redis_url), keys, "w1", max_claim_bytes=1_000_000)
    r.lpush(keys.tickets, *[b"x" * 300_000 + b"%d" % i for i in range(10)])
    sizes = []
    while r.llen(keys.tickets):
        got = q.claim(256, block_s=0.1, max_wait_s=0)
        assert sum(map(len, got)) <= 1_000_000
        sizes.append(len(got))
        r.delete(keys.inflight("w1"))
    assert sizes == [3, 3, 3, 1]
    r.lpush(keys.tickets, b"y" * 2_000_000, b"small")
    assert q.claim(256, block_s=0.1, max_wait_s=0) == [b"y" * 2_000_000]  # over the budget: alone
    assert q.claim(256, block_s=0.1, max_wait_s=0) == [b"small"]

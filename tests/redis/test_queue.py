"""The reliable queue on a real Redis: claim, ack, duplicates, recovery, poison, hash-tagged keys."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any, cast

import pytest
import redis
from redis.crc import key_slot
from support import finished, narrow_redis

from producer.client import Client
from producer.protocol import MAX_EVENT_BYTES, DeadLetter, Event, Keys, Result, decode_ticket, payload_digest
from worker import queue as queue_module
from worker.connection import connect
from worker.contract import Finished, Rejected
from worker.errors import FatalError, TransientError
from worker.queue import RedisQueue

pytestmark = pytest.mark.redis


def payload(i: int | str, text: str = "hello") -> bytes:
    return json.dumps({"id": f"t{i}", "text": f"{text} {i}"}).encode()


@pytest.fixture
def q(r: redis.Redis, keys: Keys) -> RedisQueue:
    return RedisQueue(r, keys, "w1", max_attempts=3)


def test_claim_takes_the_oldest_first_up_to_n(q: RedisQueue, r: redis.Redis, keys: Keys) -> None:
    r.lpush(keys.tickets, *[payload(i) for i in range(5)])
    assert q.claim(3, max_wait_s=0) == [payload(0), payload(1), payload(2)]
    assert r.llen(keys.inflight("w1")) == 3 and r.llen(keys.tickets) == 2


def test_claim_on_empty_input_blocks_then_returns_nothing(q: RedisQueue) -> None:
    began = time.monotonic()
    assert q.claim(10, block_s=0.2) == []
    assert 0.15 < time.monotonic() - began < 1.5


def test_claim_keeps_filling_until_max_wait(q: RedisQueue, r: redis.Redis, keys: Keys) -> None:
    def late() -> None:
        for i in range(3):
            time.sleep(0.05)
            r.lpush(keys.tickets, payload(i))

    threading.Thread(target=late).start()
    got = q.claim(10, block_s=2, max_wait_s=0.6)
    assert got == [payload(0), payload(1), payload(2)]


def test_ack_writes_results_and_dead_letters_and_releases_in_one_step(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(keys.tickets, payload(1), b"junk")
    good, bad = q.claim(10, max_wait_s=0)
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.events)
    assert pubsub.get_message(timeout=2) is None  # the confirmation, consumed
    report = q.ack([finished(good)], [Rejected(bad, DeadLetter("not JSON", bad, worker="w1"))])
    assert report.written == ["t1"] and len(report.dead) == 1
    assert Result.from_json(r.hget(keys.results, "t1")).label == "billing"  # type: ignore[arg-type]
    assert DeadLetter.from_json(r.lindex(keys.dead, 0)).payload == b"junk"  # type: ignore[arg-type]
    assert r.llen(keys.inflight("w1")) == 0
    message = pubsub.get_message(timeout=2)
    assert message is not None and Event.from_json(message["data"]) == Event(ids=["t1"])


def test_a_drain_of_large_payloads_is_claimed_a_bounded_number_of_bytes_a_call(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit: 256 valid payloads of 64 KiB were moved by one claim.lua call, 60-150 ms of Redis. Now a
    call moves at most CLAIM_CALL_BYTES (and at least one payload); the claim still takes them all, in
    order, and the stale payloads a claim hands back first are handed back in bounded calls too."""
    monkeypatch.setattr(queue_module, "CLAIM_CALL_BYTES", 200_000)
    calls: list[tuple[int, int]] = []  # (bytes moved, stale handed back) per call
    script = q._claim

    def counted(**kw: object) -> object:
        out = script(**kw)
        calls.append((sum(map(len, out[1])), int(out[2])))
        return out

    q._claim = counted
    big = [payload(i, "x" * 60_000) for i in range(12)]
    r.lpush(keys.inflight("w1"), *big[:5])  # left by a lost ack: stale, handed back first
    r.lpush(keys.tickets, *big[5:])
    got = q.claim(256, max_wait_s=0, holds_nothing=True)
    assert got == big and q.stale == 5  # the stale ones first, oldest first, as one call did
    assert len(calls) >= 4 and all(moved <= 200_000 for moved, _ in calls), calls
    assert sum(s for _, s in calls) == 5
    assert r.llen(keys.inflight("w1")) == 12 and r.llen(keys.tickets) == 0


def test_an_ack_of_large_payloads_settles_a_bounded_number_of_bytes_a_transaction(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit: one ack transaction settled a whole drain of 256 valid 64 KiB tickets (13-19 ms of Redis,
    116-131 ms with routing), read the whole claim back to check its rejects (14-59 ms) and every earlier
    result of a re-pushed id in one HMGET. Now: steps of ACK_STEP_BYTES, oldest claim first; the rejects
    checked against the step's own tail of the in-flight list; earlier results read a bounded run at once."""
    monkeypatch.setattr(queue_module, "ACK_STEP_BYTES", 200_000)
    monkeypatch.setattr(queue_module, "READ_BYTES", 200_000)
    monkeypatch.setattr(queue_module, "_FEW_REJECTS", 1)  # the steps' rejects are checked by one read
    reads: list[tuple[str, tuple[Any, ...], int]] = []
    for name in ("lrange", "hmget"):
        real = getattr(redis.client.Pipeline, name)

        def spy(self: Any, *args: Any, _real: Any = real, _name: str = name) -> Any:
            out = _real(self, *args)
            if isinstance(out, list):  # immediate (under WATCH): the reply; queued ones return the pipe
                reads.append((_name, args[1:], sum(len(x or b"") for x in out)))
            return out

        monkeypatch.setattr(redis.client.Pipeline, name, spy)
    raws = [json.dumps({"id": f"t{i}", "text": "hi", "pad": "x" * 60_000}).encode() for i in range(12)]
    r.lpush(keys.tickets, *raws)
    got = q.claim(12, max_wait_s=0)
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.events)
    assert pubsub.get_message(timeout=2) is None
    bad = [Rejected(raw, DeadLetter("not wanted", raw, worker="w1")) for raw in got[6:]]
    done = [finished(raw) for raw in reversed(got[:6])]
    done = [replace(f, result=replace(f.result, fields=f.ticket.fields)) for f in done]  # as the service does
    report = q.ack(done, bad)
    assert sorted(report.written) == [f"t{i}" for i in range(6)] and len(report.dead) == 6
    assert r.hlen(keys.results) == 6 and r.llen(keys.dead) == 6 and r.llen(keys.inflight("w1")) == 0
    events = 0
    while pubsub.get_message(timeout=0.5) is not None:
        events += 1
    assert events >= 4  # 720 KB of payloads, 200 KB a transaction
    windows = [args for name, args, _ in reads if name == "lrange"]
    assert windows and all(start < 0 and start >= -3 for start, _ in windows), (
        windows
    )  # never the whole claim
    assert all(size <= 200_000 for name, _, size in reads if name == "lrange")
    # the same ids again, other texts: each earlier result is read to tell a duplicate from a redelivery
    reads.clear()
    again = [payload(i, "other") for i in range(6)]
    r.lpush(keys.tickets, *again)
    report = q.ack([finished(raw) for raw in q.claim(6, max_wait_s=0)], [])
    assert [d.reason for d in report.dead] == ["duplicate id"] * 6
    runs = [size for name, _, size in reads if name == "hmget"]
    assert len(runs) >= 2 and max(runs) <= 200_000 + 70_000, runs  # a run stops past the bound


def test_results_larger_than_their_payloads_count_in_the_ack_steps(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result can be four times its payload (its fields re-encoded: 1e15 is written 1000000000000000.0):
    a step counted by payload bytes alone could write 2 MiB of results in one transaction."""
    monkeypatch.setattr(queue_module, "ACK_STEP_BYTES", 200_000)
    numbers = b",".join([b"1e15"] * 2000)
    raws = [b'{"id": "t%d", "text": "hi", "n": [%s]}' % (i, numbers) for i in range(6)]
    assert sum(map(len, raws)) < 200_000  # one step by payload bytes alone
    r.lpush(keys.tickets, *raws)
    got = q.claim(6, max_wait_s=0)
    done = [finished(raw) for raw in got]
    done = [replace(f, result=replace(f.result, fields=f.ticket.fields)) for f in done]
    assert all(len(f.result.to_json()) > 3 * len(f.raw) for f in done)
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.events)
    assert pubsub.get_message(timeout=2) is None
    report = q.ack(done, [])
    assert sorted(report.written) == [f"t{i}" for i in range(6)] and r.llen(keys.inflight("w1")) == 0
    steps = []
    while (message := pubsub.get_message(timeout=0.5)) is not None:
        steps.append(Event.from_json(message["data"]).ids)
    assert len(steps) >= 2, steps
    assert all(sum(r.hstrlen(keys.results, i) for i in ids) <= 200_000 for ids in steps)


def test_an_ack_by_a_user_refused_hstrlen_reads_earlier_results_as_before(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    with narrow_redis(r, redis_url, keys.prefix, "-hstrlen") as narrow:
        q = RedisQueue(narrow, keys, "w1")
        r.lpush(keys.tickets, payload(1), payload(1, "other"))
        first, second = q.claim(2, max_wait_s=0)
        report = q.ack([finished(first), finished(second)], [])
        assert report.written == ["t1"] and [d.reason for d in report.dead] == ["duplicate id"]


def test_an_ack_of_long_ids_publishes_a_bounded_event_and_every_waiter_finishes(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    """256 tickets with ids of 256 four-byte characters made one ack's event ~300 KB, copied by Redis to
    every waiter; now the event stays within MAX_EVENT_BYTES and names the ordinary ticket acked beside
    them, and a waiter for a long id left out reads its result back."""
    longs = [json.dumps({"id": f"{i:03d}" + "\U0001f600" * 253, "text": "hi"}).encode() for i in range(256)]
    r.lpush(keys.tickets, payload(1), *longs)
    claimed = q.claim(300, max_wait_s=0)
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.events)
    assert pubsub.get_message(timeout=2) is None
    q.ack([finished(raw) for raw in claimed], [])
    named: list[str] = []
    cut: list[str] = []
    while len(named) + len(cut) < 257:  # one event per ack step
        message = pubsub.get_message(timeout=2)
        assert message is not None and len(message["data"]) <= MAX_EVENT_BYTES
        event = Event.from_json(message["data"])
        named, cut = named + event.ids, cut + event.left_out
    assert "t1" in named and cut and len(named) + len(cut) == 257
    waited = Client(r, keys.prefix).wait([decode_ticket(longs[-1]).id, "t1"], timeout=5)
    assert waited.complete and not waited.dead


def test_redelivery_rewrites_and_is_not_fresh(q: RedisQueue, r: redis.Redis, keys: Keys) -> None:
    r.lpush(keys.tickets, payload(1))
    (raw,) = q.claim(1, max_wait_s=0)
    assert [f.result.id for f in q.ack([finished(raw)], []).fresh] == ["t1"]
    r.lpush(keys.tickets, raw)  # the same bytes again, e.g. after a recovery
    (again,) = q.claim(1, max_wait_s=0)
    report = q.ack([finished(again, label="technical")], [])
    assert report.fresh == [] and report.redelivered == ["t1"] and report.dead == []
    assert Result.from_json(r.hget(keys.results, "t1")).label == "technical"  # type: ignore[arg-type]


def test_a_different_payload_with_a_taken_id_is_dead(q: RedisQueue, r: redis.Redis, keys: Keys) -> None:
    first, other = payload(1, "first"), json.dumps({"id": "t1", "text": "second"}).encode()
    r.lpush(keys.tickets, first, other)
    claimed = q.claim(2, max_wait_s=0)
    report = q.ack([finished(p) for p in claimed], [])
    assert report.written == ["t1"] and [d.reason for d in report.dead] == ["duplicate id"]
    assert Result.from_json(r.hget(keys.results, "t1")).digest == payload_digest(first)  # type: ignore[arg-type]
    assert DeadLetter.from_json(r.lindex(keys.dead, 0)).id == "t1"  # type: ignore[arg-type]
    assert r.llen(keys.inflight("w1")) == 0


def test_an_ack_repeated_after_an_unknown_outcome_adds_nothing(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(keys.tickets, payload(1), b"junk")
    good, bad = q.claim(2, max_wait_s=0)
    args = ([finished(good)], [Rejected(bad, DeadLetter("not JSON", bad))])
    q.ack(*args)
    again = q.ack(*args)
    assert again.fresh == [] and again.dead == []
    assert r.llen(keys.dead) == 1 and r.hlen(keys.results) == 1


def test_ack_retries_when_the_results_hash_changes_under_it(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(keys.tickets, payload(1))
    (raw,) = q.claim(1, max_wait_s=0)
    calls = 0
    original = q._plan

    def racing_plan(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == 1:  # another worker writes the same id between WATCH and EXEC
            r.hset(keys.results, "t1", finished(payload(1, "other")).result.to_json())
        return original(*args, **kwargs)

    q._plan = racing_plan  # type: ignore[method-assign]
    report = q.ack([finished(raw)], [])
    assert calls == 2 and report.written == [] and [d.reason for d in report.dead] == ["duplicate id"]


def test_recovery_requeues_a_dead_workers_claims_to_be_served_next(r: redis.Redis, keys: Keys) -> None:
    dead_worker = RedisQueue(r, keys, "gone")
    dead_worker.beat({}, ttl_s=60)
    r.lpush(keys.tickets, *[payload(i) for i in range(4)])
    assert dead_worker.claim(3, max_wait_s=0) == [payload(0), payload(1), payload(2)]
    r.lpush(keys.tickets, payload(9))  # newer work arrives meanwhile
    alive = RedisQueue(r, keys, "w1")
    assert alive.recover() == []  # heartbeat still there: not an orphan
    r.delete(keys.heartbeat("gone"))
    (rec,) = alive.recover()
    assert (rec.worker, rec.requeued, rec.dead) == ("gone", 3, 0)
    assert not r.sismember(keys.workers, "gone") and r.llen(keys.inflight("gone")) == 0
    # the recovered payloads are suspects: each is claimed alone, oldest first, before newer work
    order = [alive.claim(10, max_wait_s=0) for _ in range(3)]
    assert order == [[payload(0)], [payload(1)], [payload(2)]]
    assert alive.claim(10, max_wait_s=0) == [payload(3), payload(9)]
    assert r.hget(keys.attempts, payload_digest(payload(0))) == b"1"


def _counting(q: RedisQueue, name: str) -> list[int]:
    """The bytes of every argument q's script ``name`` is called with from now on, one entry a call."""
    sent: list[int] = []
    script = getattr(q, name)

    def counted(**kw: Any) -> Any:
        sent.append(sum(len(a) for a in kw["args"] if isinstance(a, bytes | str)))
        return script(**kw)

    setattr(q, name, counted)
    return sent


@pytest.mark.parametrize("max_attempts", [3, 1])
def test_a_large_claim_is_recovered_in_bounded_steps_in_the_same_order(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch, max_attempts: int
) -> None:
    """An audit: recovering a dead worker's claim of 256 valid 64 KiB payloads read the list whole and sent
    it back to recover.lua in one call, 140-200 ms of Redis (poison letters too). Now in steps of
    RECOVER_STEP_BYTES, with the same outcome: the oldest served next, or every payload a letter."""
    monkeypatch.setattr(queue_module, "RECOVER_STEP_BYTES", 200_000)
    raws = [payload(i, "x" * 60_000) for i in range(12)]
    r.lpush(keys.inflight("gone"), *raws)  # as claim.lua left them: the oldest (0) at the tail
    r.sadd(keys.workers, "gone")
    q = RedisQueue(r, keys, "w1", max_attempts=max_attempts)
    sent = _counting(q, "_recover")
    (rec,) = q.recover()
    assert len(sent) >= 4 and max(sent) <= 2 * 200_000, sent  # payloads, and letters as large
    assert not r.exists(keys.inflight("gone")) and not r.sismember(keys.workers, "gone")
    if max_attempts == 1:
        assert (rec.requeued, rec.dead) == (0, 12) and r.llen(keys.dead) == 12 and r.hlen(keys.attempts) == 0
        assert {DeadLetter.from_json(x).payload for x in r.lrange(keys.dead, 0, -1)} == set(raws)
    else:
        assert (rec.requeued, rec.dead) == (12, 0)
        assert r.lrange(keys.tickets, 0, -1) == raws[::-1]  # oldest rightmost: served next, as before
        assert {r.hget(keys.attempts, payload_digest(x)) for x in raws} == {b"1"}


@pytest.mark.parametrize("max_attempts", [3, 2])
def test_copies_of_one_payload_in_different_steps_count_one_death(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch, max_attempts: int
) -> None:
    monkeypatch.setattr(queue_module, "RECOVER_STEP_BYTES", 1)  # one payload a step
    a, b = payload("a"), payload("b")
    r.lpush(keys.inflight("gone"), a, b, a)
    r.sadd(keys.workers, "gone")
    r.hset(keys.attempts, payload_digest(a), 1)  # a died once already
    q = RedisQueue(r, keys, "w1", max_attempts=max_attempts)
    sent = _counting(q, "_recover")
    (rec,) = q.recover()
    assert len(sent) == 3
    if max_attempts == 3:  # a's second death: 2 < 3, both copies back
        assert (rec.requeued, rec.dead) == (3, 0) and r.hget(keys.attempts, payload_digest(a)) == b"2"
    else:  # its last: both copies dead, each with the letter of its second death
        assert (rec.requeued, rec.dead) == (1, 2) and not r.hexists(keys.attempts, payload_digest(a))
        letters = [DeadLetter.from_json(x) for x in r.lrange(keys.dead, 0, -1)]
        assert [(x.payload, x.attempts) for x in letters] == [(a, 2), (a, 2)]


class _Stop(Exception):
    pass


def test_copies_in_steps_taken_by_different_workers_are_one_death(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review: the first copy's count lived in one recoverer's memory, so a peer taking the next step
    (or the same worker after a dropped connection) counted the second copy's death again: a payload that
    had died once was dead-lettered as poison (3) instead of requeued twice (2)."""
    monkeypatch.setattr(queue_module, "RECOVER_STEP_BYTES", 1)  # one payload a step
    a, b = payload("a"), payload("b")
    r.lpush(keys.inflight("gone"), a, b, a)
    r.sadd(keys.workers, "gone")
    r.hset(keys.attempts, payload_digest(a), 1)
    first = RedisQueue(r, keys, "w1", max_attempts=3)
    script = first._recover

    def one_step(**kw: Any) -> Any:
        script(**kw)
        raise _Stop  # the first recoverer goes away after one step

    first._recover = one_step
    assert first.recover() == [] and "gone" in first.recovery_errors  # one step done, then gone
    (rec,) = RedisQueue(r, keys, "w2", max_attempts=3).recover()
    assert (rec.requeued, rec.dead) == (2, 0) and r.llen(keys.tickets) == 3 and r.llen(keys.dead) == 0
    assert r.hget(keys.attempts, payload_digest(a)) == b"2"
    assert not r.exists(keys.recovering("gone")) and not r.sismember(keys.workers, "gone")


def test_a_requeued_copy_acked_between_steps_does_not_stall_the_recovery(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review: once a peer served the first copy (its P:attempts entry deleted by the ack), every later
    step conflicted until recovery raised TransientError."""
    monkeypatch.setattr(queue_module, "RECOVER_STEP_BYTES", 1)
    a, b = payload("a"), payload("b")
    r.lpush(keys.inflight("gone"), a, b, a)
    r.sadd(keys.workers, "gone")
    q = RedisQueue(r, keys, "w1")
    peer = RedisQueue(r, keys, "w2")
    script = q._recover
    calls: list[bytes] = []

    def then_served(**kw: Any) -> Any:
        out = script(**kw)
        if not calls:
            (raw,) = peer.claim(1, max_wait_s=0)
            peer.ack([finished(raw)], [])
        calls.append(out[0])
        return out

    q._recover = then_served
    (rec,) = q.recover()
    assert calls == [b"ok", b"ok", b"ok"] and (rec.requeued, rec.dead) == (3, 0)
    assert not r.exists(keys.inflight("gone")) and not r.exists(keys.recovering("gone"))


def test_a_step_of_oversized_payloads_is_bounded_by_their_size(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Payloads over DIGEST_BYTES are not sent back, so the review saw a step move 32 of 200 KB (6.4 MB):
    a step counts what it moves."""
    big = [b"x" * 200_000 + str(i).encode() for i in range(10)]
    r.lpush(keys.inflight("gone"), *big)
    r.sadd(keys.workers, "gone")
    q = RedisQueue(r, keys, "w1")
    per_call: list[int] = []
    script = q._recover

    def counted(**kw: Any) -> Any:
        per_call.append((len(kw["args"]) - 4) // 4)
        return script(**kw)

    q._recover = counted
    (rec,) = q.recover()
    assert rec.requeued == 10 and max(per_call) <= 3, per_call  # 512 KiB a step: two, and one past it at most


def test_a_worker_found_alive_between_steps_keeps_the_rest(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_module, "RECOVER_STEP_BYTES", 1)
    raws = [payload(i) for i in range(3)]
    r.lpush(keys.inflight("gone"), *raws)
    r.sadd(keys.workers, "gone")
    q = RedisQueue(r, keys, "w1")
    script = q._recover

    def then_alive(**kw: Any) -> Any:
        out = script(**kw)
        r.set(keys.heartbeat("gone"), "{}", ex=60)  # it was only slow
        return out

    q._recover = then_alive
    (rec,) = q.recover()
    assert (rec.requeued, rec.dead) == (1, 0) and r.llen(keys.inflight("gone")) == 2
    assert r.sismember(keys.workers, "gone")  # still registered: its heartbeat decides from here
    assert not r.exists(keys.recovering("gone"))  # a later death is a new one


def test_a_worker_hands_back_a_large_claim_in_bounded_calls(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_module, "CLAIM_CALL_BYTES", 200_000)
    q = RedisQueue(r, keys, "w1")
    q.beat({}, ttl_s=60)
    raws = [payload(i, "x" * 60_000) for i in range(12)]
    r.lpush(keys.tickets, *raws)
    assert q.claim(12, max_wait_s=0) == raws
    calls: list[int] = []
    script = q._requeue

    def counted(**kw: Any) -> Any:
        out = script(**kw)
        calls.append(int(out[0]))
        assert r.exists(keys.heartbeat("w1")) == (int(out[1]) > 0)  # it leaves with the last move only
        return out

    q._requeue = counted
    assert q.requeue_own(leave=True) == 12
    assert len(calls) >= 3 and max(calls) <= 4, calls  # a call stops once past the bound
    assert r.lrange(keys.tickets, 0, -1) == raws[::-1] and not r.sismember(keys.workers, "w1")


def test_a_suspect_is_not_swept_into_a_drain_already_started(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(keys.tickets, payload(1), payload(2))
    r.hset(keys.attempts, payload_digest(payload(2)), 1)
    assert q.claim(10, max_wait_s=0) == [payload(1)]
    assert q.claim(10, max_wait_s=0) == [payload(2)]


def test_a_drain_larger_than_one_script_call_is_claimed_in_steps_oldest_first(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_module, "CLAIM_STEP", 3)
    moved: list[int] = []
    script = q._claim

    def counted(**kw: object) -> object:
        out = script(**kw)
        moved.append(len(out[1]))
        return out

    q._claim = counted
    r.lpush(keys.tickets, *[payload(i) for i in range(11)])
    r.hset(keys.attempts, payload_digest(payload(8)), 1)  # a suspect stops the claim where it stands
    assert q.claim(10, max_wait_s=0) == [payload(i) for i in range(8)]
    assert moved[:3] == [3, 3, 2] and max(moved) <= 3  # one bounded call per step
    assert q.claim(10, max_wait_s=0) == [payload(8)]  # and travels alone
    assert q.claim(10, max_wait_s=0) == [payload(9), payload(10)]
    assert r.llen(keys.inflight("w1")) == 11 and r.llen(keys.tickets) == 0


def test_an_ack_releases_its_payloads_from_the_tail_oldest_first_whatever_order_it_is_given(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claim.lua puts the oldest payload at the in-flight list's tail: released oldest first from there,
    each LREM finds its payload at once (from the head, each walked the whole list, inside the
    transaction: quadratic in the drain). A repeated payload is released as often as it was claimed."""
    n = 400
    r.lpush(keys.tickets, *[payload(i) for i in range(n)], payload(0))
    got = q.claim(n + 1, max_wait_s=0)
    removed: list[tuple[int, bytes]] = []
    lrem = redis.client.Pipeline.lrem

    def spy(self: redis.client.Pipeline, name: str, count: int, value: bytes) -> object:
        removed.append((count, value))
        return lrem(self, name, count, value)  # type: ignore[call-overload]

    monkeypatch.setattr(redis.client.Pipeline, "lrem", spy)
    done = [finished(raw) for raw in got[1:-1:2]][::-1]  # not the claim's order
    bad = [Rejected(raw, DeadLetter("not wanted", raw, worker="w1")) for raw in got[0:-1:2]]
    report = q.ack(done, [*bad, Rejected(got[-1], DeadLetter("again", got[-1], worker="w1"))])
    assert len(report.written) == len(done) and len(report.dead) == len(bad) + 1
    assert r.llen(keys.inflight("w1")) == 0
    assert [count for count, _ in removed] == [-1] * (n + 1)
    assert [value for _, value in removed] == sorted(got, key=got.index)  # the claim's order, oldest first


def test_rejects_are_checked_in_flight_with_one_read_not_a_scan_each(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether each rejected payload is still held was one LPOS per reject, each scanning the in-flight
    list from its head inside the WATCH: quadratic in the drain (audit, twenty-third session). One LRANGE
    now past a few rejects; a copy held once is dead-lettered once, however many rejects name it."""
    n = 300
    raws = [json.dumps({"id": f"b{i}", "text": "x" * 500 + str(i)}).encode() for i in range(n)]
    r.lpush(keys.tickets, *raws)
    got = q.claim(n, max_wait_s=0)
    calls: list[str] = []
    for name in ("lpos", "lrange"):
        real = getattr(redis.client.Pipeline, name)

        def spy(
            self: redis.client.Pipeline, *args: Any, _real: Any = real, _name: str = name, **kw: Any
        ) -> Any:
            calls.append(_name)
            return _real(self, *args, **kw)

        monkeypatch.setattr(redis.client.Pipeline, name, spy)
    bad = [Rejected(raw, DeadLetter("not wanted", raw, worker="w1")) for raw in got]
    report = q.ack([], [*bad, Rejected(got[0], DeadLetter("twice", got[0], worker="w1"))])
    assert calls == ["lrange"] and len(report.dead) == n and r.llen(keys.dead) == n
    assert sorted(DeadLetter.from_json(x).payload for x in r.lrange(keys.dead, 0, -1)) == sorted(raws)
    assert r.llen(keys.inflight("w1")) == 0
    assert q.ack([], bad[:3]).dead == [] and r.llen(keys.dead) == n  # acked already: no second letter
    # a few rejects (the usual bad payload in a drain): an LPOS each, not the whole claim read back
    r.lpush(keys.tickets, *raws[:10], raws[0])
    got = q.claim(11, max_wait_s=0)
    calls.clear()
    twice = [Rejected(raws[0], DeadLetter("bad", raws[0], worker="w1"))] * 3  # two copies held, three named
    report = q.ack([finished(raw) for raw in got if raw != raws[0]], twice)
    assert calls == ["lpos"] and len(report.dead) == 2 and r.llen(keys.inflight("w1")) == 0


def test_a_poison_payload_is_dead_after_max_attempts(r: redis.Redis, keys: Keys) -> None:
    poison = payload("p")
    r.lpush(keys.tickets, poison)
    for n in range(1, 4):
        victim = RedisQueue(r, keys, f"victim{n}", max_attempts=3)
        victim.beat({}, ttl_s=60)
        assert victim.claim(1, max_wait_s=0) == [poison]
        r.delete(keys.heartbeat(f"victim{n}"))  # it died holding the payload
        (rec,) = RedisQueue(r, keys, "w1", max_attempts=3).recover()
        assert (rec.requeued, rec.dead) == ((1, 0) if n < 3 else (0, 1))
    letter = DeadLetter.from_json(r.lindex(keys.dead, 0))  # type: ignore[arg-type]
    assert letter.reason == "poison: killed 3 workers" and letter.id == "tp" and letter.payload == poison
    assert r.llen(keys.tickets) == 0 and r.hlen(keys.attempts) == 0


def test_copies_of_one_payload_held_by_a_dead_worker_are_one_attempt_and_each_gets_a_letter(
    r: redis.Redis, keys: Keys
) -> None:
    """A producer's retry may push the same bytes twice: a worker that dies holding three copies has
    tried the payload once (not three times), and when it turns poison every copy gets the full letter
    (before, the count crossed the limit part way and an empty letter was pushed for a copy)."""
    twin = payload("twin")
    r.lpush(keys.tickets, twin, twin, twin)
    for death, claims in ((1, [[twin, twin, twin]]), (2, [[twin], [twin], [twin]])):
        victim = RedisQueue(r, keys, f"victim{death}", max_attempts=2)
        victim.beat({}, ttl_s=60)
        assert [victim.claim(10, max_wait_s=0) for _ in claims] == claims  # suspects travel alone
        r.delete(keys.heartbeat(f"victim{death}"))
        (rec,) = RedisQueue(r, keys, "w1", max_attempts=2).recover()
        if death == 1:
            assert (rec.requeued, rec.dead) == (3, 0)
            assert r.hget(keys.attempts, payload_digest(twin)) == b"1"
    assert (rec.requeued, rec.dead) == (0, 3)
    letters = [DeadLetter.from_json(raw) for raw in r.lrange(keys.dead, 0, -1)]
    assert [(x.reason, x.id, x.payload) for x in letters] == [("poison: killed 2 workers", "ttwin", twin)] * 3
    assert r.llen(keys.tickets) == 0 and r.hlen(keys.attempts) == 0


def test_ack_clears_the_attempt_count(q: RedisQueue, r: redis.Redis, keys: Keys) -> None:
    r.lpush(keys.tickets, payload(1))
    r.hset(keys.attempts, payload_digest(payload(1)), 2)
    (raw,) = q.claim(1, max_wait_s=0)
    q.ack([finished(raw)], [])
    assert r.hlen(keys.attempts) == 0


def test_requeue_own_hands_everything_back_in_order_and_can_leave(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    q.beat({}, ttl_s=60)
    r.lpush(keys.tickets, *[payload(i) for i in range(3)])
    q.claim(2, max_wait_s=0)
    assert q.requeue_own(leave=True) == 2
    assert r.lrange(keys.tickets, 0, -1) == [payload(2), payload(1), payload(0)]
    assert not r.exists(keys.heartbeat("w1")) and not r.sismember(keys.workers, "w1")


def test_every_key_lands_in_the_prefix_hash_slot(
    q: RedisQueue, r: redis.Redis, keys: Keys, prefix: str
) -> None:
    """With a hash-tagged prefix, everything a worker touches is in one Redis Cluster slot."""
    q.beat({}, ttl_s=60)
    r.lpush(keys.tickets, payload(1), payload(2), b"junk")
    raws = q.claim(3, max_wait_s=0)
    r.hset(keys.attempts, "x", 1)
    q.ack([finished(raws[0])], [Rejected(raws[2], DeadLetter("bad", raws[2]))])
    RedisQueue(r, keys, "other").beat({}, ttl_s=60)
    touched = list(r.scan_iter(match=f"{prefix}*"))
    assert len(touched) >= 6
    assert {key_slot(k) for k in touched} == {key_slot(prefix.encode())}


def test_scripts_build_no_key_names() -> None:
    """Cluster rule: every key reaches a script through KEYS, none is assembled inside it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("worker/*.lua"), *root.glob("producer/*.lua")]:
        code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")]
        if path.parent.name == "worker":  # no string is assembled, so no key name either
            assert not any(".." in line for line in code), path
        assert "-- KEYS:" in path.read_text() and "-- ARGV:" in path.read_text(), path
        assert "Atomic" in path.read_text() and "Cost" in path.read_text(), path


def test_a_down_redis_is_a_transient_error(keys: Keys) -> None:
    q = RedisQueue(connect("redis://127.0.0.1:1/0"), keys, "w1")
    with pytest.raises(TransientError):
        q.claim(1, block_s=0.1)
    with pytest.raises(TransientError):
        q.ack([], [])


# -- issue 19: every record is checked before the MULTI; one unwritable item never sinks the drain ---


def test_an_unwritable_result_is_dead_lettered_alone_and_its_drain_mates_are_written(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    from dataclasses import replace

    r.lpush(keys.tickets, *[payload(i) for i in range(4)])
    claimed = q.claim(4, max_wait_s=0)
    items = [finished(p) for p in claimed]
    # What a buggy engine or a decoder gap could hand the ack: NaN scores, a lone surrogate in a field.
    items[1] = replace(items[1], result=replace(items[1].result, scores={"billing": float("nan")}))
    items[2] = replace(items[2], result=replace(items[2].result, fields={"k": "\ud800"}))
    report = q.ack(items, [])
    assert report.written == ["t0", "t3"]
    reasons = {d.id: d.reason for d in report.dead}
    assert reasons["t1"].startswith("unwritable result: ValueError: Out of range float values")
    assert reasons["t2"].startswith("unwritable result: UnicodeEncodeError")
    assert r.llen(keys.inflight("w1")) == 0 and r.hlen(keys.results) == 2 and r.llen(keys.dead) == 2
    for raw in cast(list[bytes], [*r.hvals(keys.results), *r.lrange(keys.dead, 0, -1)]):
        json.loads(raw.decode("utf-8"))


def test_a_dead_letter_and_event_are_always_writable_whatever_their_text(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(keys.tickets, payload(1))
    (raw,) = q.claim(1, max_wait_s=0)
    letter = DeadLetter("engine error: \ud800 in a message", raw, worker="w\udc00", id="t\ud800")
    report = q.ack([], [Rejected(raw, letter)])
    assert len(report.dead) == 1
    stored = json.loads(cast(bytes, r.lindex(keys.dead, 0)).decode("utf-8"))
    assert stored["reason"] == "engine error: \ufffd in a message" and stored["id"] == "t\ufffd"


def test_recovery_handles_each_orphan_on_its_own(r: redis.Redis, keys: Keys) -> None:
    """Orphans the strict decoder refuses (a lone-surrogate id, junk bytes, a BOM) are requeued like any
    other, and every dead worker's list is recovered, whatever the others held."""
    hostile = [
        rb'{"id":"\ud800","text":"hello"}',
        b"\xff\xfe junk",
        b'\xef\xbb\xbf{"id": "bom", "text": "x"}',
        b'{"id": "deep", "text": "x", "d": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    ]
    for n, wid in enumerate(("gone1", "gone2")):
        RedisQueue(r, keys, wid).beat({}, ttl_s=60)
        r.delete(keys.heartbeat(wid))
        r.lpush(keys.inflight(wid), *hostile, payload(n))
    peer = RedisQueue(r, keys, "peer", max_attempts=1)  # one death is enough: every orphan dead-lettered
    done = peer.recover()
    assert sorted((d.worker, d.dead) for d in done) == [("gone1", 5), ("gone2", 5)]
    letters = [json.loads(raw.decode("utf-8")) for raw in cast(list[bytes], r.lrange(keys.dead, 0, -1))]
    assert len(letters) == 10 and all(d["reason"] == "poison: killed 1 workers" for d in letters)
    assert sorted(d.get("id", "") for d in letters).count("") == 8  # no id readable from the hostile ones


def _spec_digest(raw: bytes) -> str:
    """producer.protocol's payload digest, spelled out: over 64 KiB, the sha1 of the first 64 KiB, a newline
    and the size in decimal (the Lua scripts must compute the same)."""
    import hashlib

    if len(raw) <= 65536:
        return hashlib.sha1(raw).hexdigest()
    return hashlib.sha1(raw[:65536] + b"\n" + str(len(raw)).encode()).hexdigest()


def test_an_oversized_payload_is_known_by_a_bounded_digest_in_claim_and_recovery(
    r: redis.Redis, keys: Keys
) -> None:
    """Audit finding 5: claim.lua hashed the whole of each payload it looked at, and recover.lua was sent
    it back: one 64 MiB payload held Redis for hundreds of ms per call. An oversized payload (refused anyway)
    is now known by the sha1 of its first 64 KiB plus its size, in Lua and in Python alike."""
    big = b"x" * (300 * 1024)
    twin = b"x" * (300 * 1024 + 1)  # the same first 64 KiB, another size: another digest
    assert payload_digest(big) == _spec_digest(big) != _spec_digest(twin) == payload_digest(twin)
    r.lpush(keys.tickets, big, payload(1))
    r.hset(keys.attempts, _spec_digest(big), 1)  # a suspect: claim.lua must find it by this digest
    q = RedisQueue(r, keys, "w1", max_attempts=3)
    assert q.claim(10, max_wait_s=0) == [big]  # travels alone
    # the worker dies holding it: recovery counts the attempt under the same digest and requeues it
    (rec,) = RedisQueue(r, keys, "w2", max_attempts=3).recover()
    assert (rec.worker, rec.requeued, rec.dead) == ("w1", 1, 0)
    assert r.hgetall(keys.attempts) == {_spec_digest(big).encode(): b"2"}
    assert r.lrange(keys.tickets, 0, -1) == [payload(1), big]
    # a third death makes it a poison letter (its first 64 KiB kept, with its size)
    q.claim(10, max_wait_s=0)
    RedisQueue(r, keys, "w2", max_attempts=3).recover()
    letter = json.loads(r.lindex(keys.dead, 0))  # type: ignore[arg-type]
    assert letter["payload_bytes"] == len(big) and letter["reason"] == "poison: killed 3 workers"
    assert r.hlen(keys.attempts) == 0 and r.lrange(keys.tickets, 0, -1) == [payload(1)]


def test_recovery_of_an_oversized_payload_sees_it_changed(r: redis.Redis, keys: Keys) -> None:
    """recover.lua checks an oversized payload by its digest (it is not sent back): a list that changed
    under the caller is still seen, and nothing is requeued twice."""
    big = b"y" * (100 * 1024)
    r.lpush(keys.inflight("gone"), big)
    r.sadd(keys.workers, "gone")
    q = RedisQueue(r, keys, "w1")
    script_keys = [keys.workers, keys.heartbeat("gone"), keys.inflight("gone"), keys.tickets]
    script_keys += [keys.attempts, keys.dead, keys.recovering("gone")]
    other = _spec_digest(big + b"y")  # the same first 64 KiB, another size
    status, _, _, _ = q._recover(keys=script_keys, args=["gone", 3, "0", 65536, b"", other, "", "{}"])
    assert status == b"changed" and r.llen(keys.inflight("gone")) == 1 and r.llen(keys.tickets) == 0
    status, requeued, _, left = q._recover(
        keys=script_keys, args=["gone", 3, "0", 65536, b"", _spec_digest(big), "", "{}"]
    )
    assert (status, requeued, left) == (b"ok", 1, 0) and r.lrange(keys.tickets, 0, -1) == [big]


# -- records no worker wrote (an operator, an older tool, another language): found by an audit -----------


@pytest.mark.parametrize("stored", [b"01", b" 1", b"+1", b"abc", b"1e+20", b"99999999999999999999"])
def test_recovery_reads_an_attempt_count_no_worker_wrote_and_finishes(
    r: redis.Redis, keys: Keys, stored: bytes
) -> None:
    """'01' made every recovery of the list conflict forever (Python's int() read 1 and sent back '1',
    the script compared '01'): no worker ever claimed again. 'abc' and '1e+20' failed it every round and
    stranded the list; twenty digits overflowed HINCRBY half way, after the first payload was requeued,
    so it was served again and again. Each is now a count (digits up to nine, else 0), replaced."""
    held = [payload("a"), payload("b")]
    RedisQueue(r, keys, "gone").beat({}, ttl_s=60)
    r.delete(keys.heartbeat("gone"))
    r.lpush(keys.inflight("gone"), *reversed(held))
    r.hset(keys.attempts, payload_digest(held[1]), stored)
    (rec,) = RedisQueue(r, keys, "w1", max_attempts=3).recover()
    assert (rec.requeued, rec.dead) == (2, 0) and r.llen(keys.inflight("gone")) == 0
    expected = b"2" if stored == b"01" else b"1"  # '01' is 1, the rest count afresh
    assert r.hget(keys.attempts, payload_digest(held[1])) == expected
    assert sorted(cast(list[bytes], r.lrange(keys.tickets, 0, -1))) == sorted(held)


def test_a_worker_id_that_is_not_utf8_or_a_foreign_in_flight_key_stops_no_recovery(
    r: redis.Redis, keys: Keys
) -> None:
    """A non-UTF-8 member of P:workers raised UnicodeDecodeError in every worker's recovery (exit 70, the
    whole fleet); a dead worker's in-flight key of another type was a fatal WRONGTYPE for every worker
    recovering it (exit 4). Each is now reported for the log, and the other dead workers recovered."""
    r.sadd(keys.workers, b"\xff\xfeghost", "hashed")
    r.hset(keys.inflight("hashed"), "a", "b")
    RedisQueue(r, keys, "gone").beat({}, ttl_s=60)
    r.delete(keys.heartbeat("gone"))
    r.lpush(keys.inflight("gone"), payload(1))
    peer = RedisQueue(r, keys, "w1")
    (rec,) = peer.recover()
    assert (rec.worker, rec.requeued) == ("gone", 1)
    errors = peer.recovery_errors
    assert (
        errors["hashed"]
        == f"ValueError: {keys.inflight('hashed')} is not a list: recover its payloads by hand"
    )
    assert errors["b'\\xff\\xfeghost'"].startswith("worker id is not UTF-8")
    r.set(keys.dead, "junk")  # a key the recovering worker shares is its own problem: still fatal
    r.lpush(keys.inflight("gone2"), payload(3), payload(2))
    r.hset(keys.attempts, payload_digest(payload(3)), "1")
    r.sadd(keys.workers, "gone2")
    for _ in range(2):  # ... and fails before its first write (review: it requeued, then failed, again)
        with pytest.raises(FatalError, match="WRONGTYPE"):
            RedisQueue(r, keys, "w1", max_attempts=2).recover()
    assert r.llen(keys.inflight("gone2")) == 2 and r.lrange(keys.tickets, 0, -1) == [payload(1)]
    assert r.hget(keys.attempts, payload_digest(payload(2))) is None
    assert r.hget(keys.attempts, payload_digest(payload(3))) == b"1"


def test_a_heartbeat_made_by_hand_keeps_no_claim_from_recovery(r: redis.Redis, keys: Keys) -> None:
    """A heartbeat key that never expires (set by hand, or PERSIST) counted as alive forever: its worker's
    claim was never recovered. Nor is a key of another type a heartbeat; a live worker's beat (SET with
    PX) still is one, and a forced recovery ignores it as before."""
    for wid, n in (("persisted", 1), ("hashed", 2), ("live", 3)):
        RedisQueue(r, keys, wid).beat({}, ttl_s=60)
        r.lpush(keys.inflight(wid), payload(n))
    r.persist(keys.heartbeat("persisted"))
    r.delete(keys.heartbeat("hashed"))
    r.hset(keys.heartbeat("hashed"), "at", "1")
    r.expire(keys.heartbeat("hashed"), 60)
    peer = RedisQueue(r, keys, "w1")
    recovered = sorted((rec.worker, rec.requeued) for rec in peer.recover())
    assert recovered == [("hashed", 1), ("persisted", 1)] and not peer.recovery_errors
    assert sorted(r.lrange(keys.tickets, 0, -1)) == [payload(1), payload(2)]
    assert r.lrange(keys.inflight("live"), 0, -1) == [payload(3)]
    r.lpush(keys.inflight("persisted"), payload(4))  # the script judges as the caller: asked directly
    r.set(keys.heartbeat("persisted"), "{}")
    rec = peer.recover_worker("persisted")
    assert rec is not None and rec.requeued == 1


def test_a_workers_set_grown_by_hand_is_recovered_over_bounded_passes(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100,000 ids added to P:workers by hand were read whole and looked at in one pass: the worker's loop
    stood still for most of a minute, every pass, until its stall watchdog. A pass now looks at about
    RECOVER_IDS of them (SSCAN), the next going on from there; a dead worker among them is still found."""
    monkeypatch.setattr(queue_module, "RECOVER_IDS", 50)
    r.sadd(keys.workers, *[f"ghost-{i}" for i in range(300)])
    r.sadd(keys.workers, "gone")
    r.lpush(keys.inflight("gone"), payload(1))
    peer = RedisQueue(r, keys, "w1")
    passes, requeued = 0, 0
    while True:
        before = r.scard(keys.workers)
        requeued += sum(rec.requeued for rec in peer.recover())
        passes += 1
        assert before - r.scard(keys.workers) <= 60  # about RECOVER_IDS a pass (SSCAN's COUNT is a hint)
        if peer.recovery_complete:
            break
    assert passes >= 5 and requeued == 1 and r.lrange(keys.tickets, 0, -1) == [payload(1)]
    assert r.scard(keys.workers) == 0


def test_the_workers_set_is_read_by_sscan_with_smembers_for_acl_lines_from_before(
    r: redis.Redis, redis_url: str, keys: Keys
) -> None:
    """stats, the health probe and the start check read P:workers with SMEMBERS: 100,000 ids added by hand
    held Redis 14-16 ms a read. Now SSCAN (a user refused SMEMBERS still reads it); a user refused SSCAN
    (a line from before it) reads it whole, as before."""
    from producer.client import members
    from worker.startcheck import check_access

    r.sadd(keys.workers, *[f"ghost-{i}" for i in range(1500)])
    RedisQueue(r, keys, "w1").beat({}, ttl_s=60)
    for denied in ("-smembers", "-sscan"):
        with narrow_redis(r, redis_url, keys.prefix, denied) as narrow:
            assert len(members(narrow, keys.workers)) == 1501
            stats = Client(narrow, keys.prefix).stats()
            assert len(stats.workers) == 1501 and stats.alive == 1
            check_access(RedisQueue(narrow, keys, "w1"))


def test_a_worker_whose_acl_line_predates_pttl_and_type_judges_heartbeats_as_before(
    r: redis.Redis, redis_url: str, keys: Keys
) -> None:
    """The worker's ACL line gained ``+pttl +type +sscan``: one written before still recovers dead workers
    and leaves live ones alone (by EXISTS, in Python and in recover.lua; P:workers read whole); stats
    reads with it too."""
    for wid, n in (("dead", 1), ("live", 2)):
        RedisQueue(r, keys, wid).beat({}, ttl_s=60)
        r.lpush(keys.inflight(wid), payload(n))
    r.delete(keys.heartbeat("dead"))
    with narrow_redis(r, redis_url, keys.prefix, "-pttl", "-type", "-sscan") as narrow:
        peer = RedisQueue(narrow, keys, "w1")
        assert [(rec.worker, rec.requeued) for rec in peer.recover()] == [("dead", 1)]
        assert peer.recover_worker("live") is None and not peer.recovery_errors
        alive = {w.id: w.alive for w in Client(narrow, keys.prefix).stats().workers}
    with narrow_redis(r, redis_url, keys.prefix, "-scard") as narrow:
        assert RedisQueue(narrow, keys, "w1").registered() is None  # the backlog's log line only
    assert r.lrange(keys.tickets, 0, -1) == [payload(1)] and r.llen(keys.inflight("live")) == 1
    assert alive == {"live": True}


@pytest.mark.parametrize("key", ["dead", "done", "review"])
def test_an_ack_that_cannot_place_its_payloads_puts_them_back_and_names_the_key(
    q: RedisQueue, r: redis.Redis, keys: Keys, key: str
) -> None:
    """Redis runs the rest of a transaction after a failed command: with P:dead turned into a string
    mid-run, the ack's LPUSH failed but its LREM released the payload, which was then nowhere (the worker
    exited 4). Payloads whose result or letter was not written now go back onto the queue, served next;
    the error names the key. (P:results is read under WATCH before the transaction: nothing released.)"""
    r.lpush(keys.tickets, payload(1), b"junk")
    claimed = q.claim(2, max_wait_s=0)
    done = finished(claimed[0])
    done = Finished(done.raw, done.ticket, replace(done.result, review=True))
    r.set(getattr(keys, key), "written by hand")
    lost = 1 if key == "dead" else 0
    with pytest.raises(
        FatalError, match=f"WRONGTYPE.*the ack's write to {getattr(keys, key)}; {lost} payloads"
    ):
        q.ack([done], [Rejected(b"junk", DeadLetter("not JSON", b"junk"))])
    assert r.llen(keys.inflight("w1")) == 0
    assert r.lrange(keys.tickets, 0, -1) == [b"junk"] * lost  # placed, or back in the queue
    assert r.hexists(keys.results, "t1")
    assert key == "dead" or r.llen(keys.dead) == 1


def test_a_result_nested_thousands_deep_is_no_crash_the_first_result_stands(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    """An existing result nested 100,000 deep (by hand) raised RecursionError in the ack: three workers
    died on the ticket and it was dead-lettered as poison. It is an unreadable result, so the id is taken."""
    r.hset(keys.results, "t1", b"[" * 100_000 + b"]" * 100_000)
    r.lpush(keys.tickets, payload(1))
    (raw,) = q.claim(1, max_wait_s=0)
    report = q.ack([finished(raw)], [])
    assert [d.reason for d in report.dead] == ["duplicate id"]


def test_a_large_drain_is_acknowledged_in_bounded_transactions(
    q: RedisQueue, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow-command audit: a 10,000-ticket ack was one transaction holding Redis for about 90 ms; it is
    ACK_STEP tickets a transaction now, every ticket's result and release still together."""
    monkeypatch.setattr(queue_module, "ACK_STEP", 3)
    r.lpush(keys.tickets, *[payload(i) for i in range(8)], b"junk")
    claimed = q.claim(10, max_wait_s=0)
    events = r.pubsub()
    events.subscribe(keys.events)
    report = q.ack([finished(p) for p in claimed[:8]], [Rejected(b"junk", DeadLetter("not JSON", b"junk"))])
    assert sorted(report.written) == sorted(f"t{i}" for i in range(8)) and len(report.dead) == 1
    assert r.hlen(keys.results) == 8 and r.llen(keys.dead) == 1 and r.llen(keys.inflight("w1")) == 0
    published = [m for m in iter(lambda: events.get_message(timeout=0.5), None) if m["type"] == "message"]
    assert len(published) == 3  # one event a transaction: 3 + 3 + 3 tickets


def test_a_review_queue_far_over_its_bound_is_cut_a_thousand_an_ack(
    q: RedisQueue, r: redis.Redis, keys: Keys
) -> None:
    """Slow-command audit: a P:review of 110,000 ids (an older version, by hand) was cut to the bound in one
    ZREMRANGEBYRANK of 50 ms inside the ack's transaction."""
    from producer.protocol import MAX_REVIEW

    r.zadd(keys.review, {f"old{i}": 0.5 + i / 1e6 for i in range(MAX_REVIEW + 2500)})
    r.lpush(keys.tickets, payload(1))
    (raw,) = q.claim(1, max_wait_s=0)
    done = finished(raw)
    q.ack([Finished(done.raw, done.ticket, replace(done.result, review=True))], [])
    assert r.zcard(keys.review) == MAX_REVIEW + 2500 + 1 - 1000

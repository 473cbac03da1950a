"""Operations against a real Redis: bounded results and dead letters, dead-letter replay, stale claims
handed back, fatal errors named, and the metrics and timings a drain records."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from support import FakeClassifier, finished

from producer.client import Client
from producer.exitcodes import Exit
from producer.protocol import DeadLetter, Keys, Result
from tools.redis_server import RedisServer
from worker.connection import connect
from worker.contract import Rejected
from worker.errors import FatalError
from worker.metrics import Metrics
from worker.queue import RedisQueue
from worker.service import Service
from worker.settings import Settings

pytestmark = pytest.mark.redis


def payload(i: int, text: str = "billing: refund") -> bytes:
    return json.dumps({"id": f"t{i}", "text": f"{text} {i}"}).encode()


def test_results_older_than_the_retention_are_trimmed_and_dead_letters_capped(
    r: redis.Redis, keys: Keys
) -> None:
    q = RedisQueue(r, keys, "w1", keep_results_s=100, max_dead=3)
    r.lpush(keys.tickets, *[payload(i) for i in range(6)])
    got = q.claim(10, max_wait_s=0)
    old = [finished(p) for p in got[:4]]
    q.ack(old, [Rejected(p, DeadLetter("bad", p)) for p in got[4:]])
    assert r.zcard(keys.done) == 4 and r.llen(keys.dead) == 2
    now = time.time()
    assert q.trim(now) == 0  # nothing is 100 s old yet
    assert q.trim(now + 101) == 4
    assert r.hlen(keys.results) == 0 and r.zcard(keys.done) == 0
    r.lpush(keys.dead, *[b"{}"] * 5)
    q.trim(now)
    assert r.llen(keys.dead) == 3  # the newest three
    forever = RedisQueue(r, keys, "w1", keep_results_s=0, max_dead=0)
    r.hset(keys.results, "x", "{}")
    r.zadd(keys.done, {"x": 1.0})
    assert forever.trim(now + 10**9) == 0 and r.hlen(keys.results) == 1


@pytest.mark.parametrize("key", ["review", "dead"])
def test_a_review_queue_or_dead_list_of_the_wrong_type_fails_the_trim_before_it_deletes(
    r: redis.Redis, keys: Keys, key: str
) -> None:
    """Audit: trim.lua deleted the due results, then failed on a P:review (or P:dead) turned into a string:
    a script is not rolled back. It fails first now, deleting nothing (the worker exits 4 naming the
    cause)."""
    q = RedisQueue(r, keys, "w1", keep_results_s=100, max_dead=10)
    r.hset(keys.results, "x", "{}")
    r.zadd(keys.done, {"x": 1.0})
    r.set(getattr(keys, key), "by hand")
    with pytest.raises(FatalError, match="WRONGTYPE"):
        q.trim(time.time())
    assert r.hlen(keys.results) == 1 and r.zcard(keys.done) == 1


def test_requeue_dead_moves_matching_letters_back_atomically_oldest_first(r: redis.Redis, keys: Keys) -> None:
    c = Client(r, keys.prefix)
    letters = [
        DeadLetter("engine error: boom", payload(1)),
        DeadLetter("poison: killed 3 workers", payload(2), id="t2"),
        DeadLetter("engine error: boom", payload(3), id="t3"),
        DeadLetter("not UTF-8", b"\xff\xfe", id=None),  # kept as base64: cannot be replayed
        DeadLetter("engine error: boom", payload(4), id="t4"),
    ]
    r.lpush(keys.dead, *[d.to_json() for d in letters])  # newest at the left, as workers push
    assert c.requeue_dead(reason="engine error", limit=2) == ["", "t3"]
    assert r.lrange(keys.tickets, 0, -1) == [payload(3), payload(1)]  # LPUSHed: payload(1) served first
    assert c.requeue_dead(ticket_id="t2") == ["t2"]
    assert c.requeue_dead() == ["t4"]  # the base64 letter stays
    assert [DeadLetter.from_json(d).reason for d in r.lrange(keys.dead, 0, -1)] == ["not UTF-8"]
    with pytest.raises(ValueError):
        c.requeue_dead(limit=0)


def test_a_claim_that_holds_nothing_hands_back_stale_payloads(r: redis.Redis, keys: Keys) -> None:
    """A lost ack (a cluster failover) leaves payloads in a live worker's list: hand them back."""
    q = RedisQueue(r, keys, "w1")
    r.lpush(keys.inflight("w1"), payload(1))
    r.lpush(keys.tickets, payload(2))
    got = q.claim(10, max_wait_s=0, holds_nothing=True)
    assert got == [payload(1), payload(2)] and q.stale == 1


def test_a_key_of_the_wrong_type_is_fatal_not_transient(r: redis.Redis, keys: Keys) -> None:
    r.set(keys.tickets, "not a list")
    q = RedisQueue(r, keys, "w1")
    with pytest.raises(FatalError) as err:
        q.claim(10, max_wait_s=0)
    assert err.value.exit_code == Exit.REDIS_REFUSED and "WRONGTYPE" in str(err.value)


def test_a_wrong_password_and_missing_permissions_are_fatal(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", password="right") as server:
        keys = Keys("{auth}")
        bad = RedisQueue(connect(server.url.replace(":right@", ":wrong@")), keys, "w1")
        with pytest.raises(FatalError) as err:
            bad.depth()
        assert err.value.exit_code == Exit.REDIS_ACCESS and err.value.cause == "auth"
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+@connection")
        reader = RedisQueue(connect(f"redis://reader:pw@127.0.0.1:{server.port}/0"), keys, "w1")
        assert reader.depth() == 0  # reading is allowed
        with pytest.raises(FatalError) as err:
            reader.claim(1, block_s=0.1, max_wait_s=0)
        assert err.value.exit_code == Exit.REDIS_ACCESS and "NoPermissionError" in str(err.value)


def test_a_drain_records_metrics_and_results_carry_queue_and_processing_time(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    c = Client(r, keys.prefix)
    stamp = time.time() - 5  # as if pushed five seconds ago
    c.push([{"id": f"t{i}", "text": t, "enqueued_at": stamp} for i, t in enumerate(["billing", "account"])])
    r.lpush(keys.tickets, b"not json")
    metrics = Metrics()
    settings = Settings(burst=True, redis_url=redis_url, prefix=keys.prefix)
    service = Service(settings, RedisQueue(connect(redis_url), keys, "w1"), FakeClassifier(), metrics=metrics)
    assert service.run() == 0
    result = Result.from_json(r.hget(keys.results, "t0") or b"")
    assert result.queued_s is not None and 5 <= result.queued_s < 30
    assert result.took_s is not None and 0 <= result.took_s < 5
    text = metrics.render().decode()
    assert 'ticketq_tickets_total{outcome="labelled"} 2.0' in text
    assert 'ticketq_tickets_total{outcome="dead"} 1.0' in text
    assert 'ticketq_labels_total{label="billing"} 1.0' in text
    assert "ticketq_queue_wait_seconds_count 2.0" in text
    assert r.zcard(keys.done) == 2


def test_burst_gives_up_on_an_unreachable_redis_after_the_wait(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "gone")  # never started: nothing listens on its port
    settings = Settings(burst=True, redis_url=server.url, burst_wait_s=0.5)
    service = Service(settings, RedisQueue(connect(server.url), Keys("{x}"), "w1"), FakeClassifier())
    began = time.monotonic()
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(service.run()), daemon=True)
    t.start()
    t.join(15)
    assert done == [5] and time.monotonic() - began < 10


def test_the_producer_cli_replays_dead_letters_and_names_its_failures(
    redis_url: str, r: redis.Redis, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    from producer import cli

    base = ["--redis-url", redis_url, "--prefix", keys.prefix]
    r.lpush(keys.dead, *[DeadLetter("engine error: x", payload(i), id=f"t{i}").to_json() for i in range(3)])
    assert cli.main([*base, "requeue-dead", "--reason", "engine", "--limit", "2"]) == 0
    assert capsys.readouterr().out.split() == ["t0", "t1"]  # oldest first (t0 was dead-lettered first)
    assert r.llen(keys.tickets) == 2 and r.llen(keys.dead) == 1
    Client(r, keys.prefix).push([{"id": "s", "text": "stamped"}])
    assert json.loads(r.lindex(keys.tickets, 0) or b"{}")["enqueued_at"] > time.time() - 60
    r.delete(keys.dead)
    r.set(keys.dead, "not a list")
    assert cli.main([*base, "dead"]) == 4
    assert "WRONGTYPE" in capsys.readouterr().err


def test_requeue_dead_skips_poison_unless_asked_and_keeps_its_attempts(r: redis.Redis, keys: Keys) -> None:
    from producer.protocol import payload_digest

    c = Client(r, keys.prefix)
    poison = DeadLetter("poison: killed 3 workers", payload(7), id="t7", attempts=3)
    r.lpush(keys.dead, poison.to_json(), DeadLetter("engine error: x", payload(8), id="t8").to_json())
    assert c.requeue_dead() == ["t8"]
    assert r.llen(keys.dead) == 1  # the poison letter stays
    assert c.requeue_dead(poison=True) == ["t7"]
    assert r.hget(keys.attempts, payload_digest(payload(7))) == b"3"  # travels alone, dies once more at most


def test_requeue_dead_writes_only_counts_a_worker_reads_and_names_ids_it_cannot_decode(
    r: redis.Redis, keys: Keys
) -> None:
    """Audit: a letter recording 1e20 attempts wrote '1e+20' to P:attempts, which stranded the ticket at the
    next death; a letter whose id is not UTF-8 was moved, then the command failed (exit 2) as if it had
    not been."""
    from producer.protocol import payload_digest

    big = json.loads(DeadLetter("poison: killed 3 workers", payload(7), id="t7", attempts=3).to_json())
    big["attempts"] = 1e20
    odd = DeadLetter("engine error: x", payload(8), id="t8").to_json().encode().replace(b'"t8"', b'"t\xff8"')
    r.lpush(keys.dead, json.dumps(big), odd)
    moved = Client(r, keys.prefix).requeue_dead(poison=True)
    assert moved == ["t7", "t\ufffd8"] and r.llen(keys.dead) == 0 and r.llen(keys.tickets) == 2
    assert not r.hexists(keys.attempts, payload_digest(payload(7)))  # no count a worker could not read


def test_requeue_dead_works_in_chunks_in_order_past_letters_it_skips(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from producer import dead

    n = dead.REQUEUE_LOOK * 3 + 7
    letters = [
        DeadLetter("poison: killed 3 workers" if i % 4 == 0 else "engine error: x", payload(i), id=f"t{i}")
        for i in range(n)
    ]
    r.lpush(keys.dead, *[d.to_json() for d in letters])  # t0 oldest
    calls: list[dict[str, Any]] = []
    c = Client(r, keys.prefix)
    real = c._requeue_dead

    def counted(**kw: Any) -> Any:
        calls.append(kw)
        return real(**kw)

    monkeypatch.setattr(c, "_requeue_dead", counted)
    moved = c.requeue_dead()
    assert moved == [f"t{i}" for i in range(n) if i % 4]
    assert len(calls) >= 4  # bounded steps, not one call
    assert [DeadLetter.from_json(d).id for d in r.lrange(keys.dead, 0, -1)] == [
        f"t{i}" for i in reversed(range(n)) if i % 4 == 0
    ]
    assert c.requeue_dead(limit=5, reason="poison") == ["t0", "t4", "t8", "t12", "t16"]


def test_a_replay_near_the_new_end_removes_its_letters_from_that_end(r: redis.Redis, keys: Keys) -> None:
    """Slow-command audit: the tombstones were always removed from the old end, a walk of the whole list
    for a letter near the new end (20 ms a call in 100,000 letters): LREM starts at the nearer end."""
    letters = [DeadLetter("engine error: x", payload(i), id=f"t{i}").to_json() for i in range(10)]
    r.lpush(keys.dead, *letters)  # t9 newest, at the head
    assert Client(r, keys.prefix).requeue_dead(ticket_id="t8") == ["t8"]
    left = [DeadLetter.from_json(x).id for x in r.lrange(keys.dead, 0, -1)]
    assert left == ["t9", "t7", "t6", "t5", "t4", "t3", "t2", "t1", "t0"]
    assert Client(r, keys.prefix).requeue_dead(ticket_id="t1") == ["t1"]  # near the old end
    assert [DeadLetter.from_json(x).id for x in r.lrange(keys.dead, 0, -1)] == [i for i in left if i != "t1"]


def test_a_replay_onto_an_input_of_the_wrong_type_loses_no_letter(r: redis.Redis, keys: Keys) -> None:
    """Review: requeue_dead.lua overwrote the letter with its tombstone, then failed to push onto a
    P:tickets of the wrong type: the letter was gone and its payload nowhere. It fails first now."""
    letter = DeadLetter("engine error: x", payload(1), id="t1").to_json()
    r.lpush(keys.dead, letter)
    r.set(keys.tickets, "by hand")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        Client(r, keys.prefix).requeue_dead()
    assert r.lrange(keys.dead, 0, -1) == [letter.encode()]

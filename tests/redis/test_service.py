"""The service loop in-process, with a fake classifier, on a real Redis (and a proxy to cut it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs
from support import proxied_url, wait_for

from producer.protocol import DeadLetter, Keys, Result
from worker.connection import connect
from worker.engine.options import EngineOptions
from worker.errors import Backoff
from worker.heartbeat import Heartbeat
from worker.queue import RedisQueue
from worker.service import Service
from worker.settings import Settings
from worker.stage import process

pytestmark = pytest.mark.redis


def tickets(n: int, start: int = 0) -> list[bytes]:
    topics = ["billing: my invoice is wrong", "technical: the app crashes", "account: reset my password"]
    return [
        json.dumps({"id": f"t{i}", "text": f"{topics[i % 3]} #{i}"}).encode() for i in range(start, start + n)
    ]


def make_service(
    url: str, keys: Keys, classifier: Any, *, burst: bool = True, heartbeat: bool = False, **kw: Any
) -> Service:
    settings = Settings(
        redis_url=url,
        prefix=keys.prefix,
        burst=burst,
        worker_id="w1",
        drain=16,
        engine=EngineOptions(batch_size=4),
        **kw,
    )
    queue = RedisQueue(connect(url), keys, "w1")
    beat = Heartbeat(RedisQueue(connect(url), keys, "w1"), 5.0, 0.5, {"model": "fake"}) if heartbeat else None
    return Service(settings, queue, classifier, heartbeat=beat, backoff=Backoff(base=0.05, cap=0.2))


def test_every_ticket_ends_in_results_or_dead_and_nothing_stays_in_flight(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any
) -> None:
    bad = [b"\xff", b"[]", b'{"id": "x1"}', b'{"id": "x2", "text": "   "}', b'{"id": 3, "text": "a"}']
    r.lpush(keys.tickets, *tickets(40), *bad)
    with capture_logs() as logs:
        assert make_service(redis_url, keys, fake_classifier, heartbeat=True).run() == 0
    assert r.hlen(keys.results) == 40 and r.llen(keys.dead) == len(bad)
    assert r.llen(keys.tickets) == 0 and r.llen(keys.inflight("w1")) == 0
    assert not r.sismember(keys.workers, "w1") and not r.exists(keys.heartbeat("w1"))
    reasons = sorted(DeadLetter.from_json(d).reason.split(":")[0] for d in r.lrange(keys.dead, 0, -1))
    assert reasons == ["empty field", "missing field", "not UTF-8", "not a JSON object", "wrong type"]
    labels = {i: Result.from_json(r.hget(keys.results, f"t{i}")).label for i in range(3)}  # type: ignore[arg-type]
    assert labels == {0: "billing", 1: "technical", 2: "account"}
    events = [e["event"] for e in logs]
    assert events[0] == "worker_start" and events[-1] == "burst_done"
    drains = [e for e in logs if e["event"] == "drain"]
    assert sum(d["claimed"] for d in drains) == 45 and sum(d["dead"] for d in drains) == 5
    batch = next(e for e in logs if e["event"] == "batch")
    assert {"items", "rows", "real_tokens", "padded_tokens", "padding_overhead", "ms", "items_per_s"} <= set(
        batch
    )
    assert len([e for e in logs if e["event"] == "dead_letter"]) == 5
    assert "redis_url" in logs[0]["settings"]


def test_a_workers_set_grown_by_hand_is_worked_through_and_said_while_serving(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids added to P:workers by hand are looked at a bounded number a pass; the worker logs the backlog
    at each pass that did not reach the set's end, and a burst worker ends only once it has."""
    from worker import queue as queue_module

    monkeypatch.setattr(queue_module, "RECOVER_IDS", 50)
    r.sadd(keys.workers, *[f"ghost-{i}" for i in range(300)], "gone")
    r.lpush(keys.inflight("gone"), json.dumps({"id": "g1", "text": "refund please"}))
    r.lpush(keys.tickets, *tickets(10))
    with capture_logs() as logs:
        assert make_service(redis_url, keys, fake_classifier).run() == 0
    assert r.hlen(keys.results) == 11 and r.llen(keys.tickets) == 0 and r.scard(keys.workers) == 0
    backlog = [e for e in logs if e["event"] == "recovery_backlog"]
    assert backlog and backlog[0]["log_level"] == "warning" and 250 <= backlog[0]["registered"] <= 301
    requeued = [e for e in logs if e["event"] == "requeued" and e["worker"] == "gone"]
    assert [e["count"] for e in requeued] == [1]


def test_result_scores_reaches_the_results_the_worker_writes(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any
) -> None:
    r.lpush(keys.tickets, *tickets(6))
    with capture_logs():
        assert make_service(redis_url, keys, fake_classifier, result_scores=2).run() == 0
    for i in range(6):
        result = Result.from_json(r.hget(keys.results, f"t{i}"))  # type: ignore[arg-type]
        assert len(result.scores) == 2 and result.label == next(iter(result.scores))


def test_an_engine_failure_only_sinks_the_tickets_that_cause_it(fake_classifier: Any) -> None:
    raws = [
        json.dumps({"id": f"t{i}", "text": t}).encode() for i, t in enumerate(["fine", "boom here", "ok too"])
    ]
    verdict = process(raws, fake_classifier, "w1")
    assert [f.result.id for f in verdict.finished] == ["t0", "t2"]
    (rejected,) = verdict.rejected
    assert rejected.letter.id == "t1" and rejected.letter.reason.startswith(
        "engine error: RuntimeError: boom"
    )
    assert len(fake_classifier.calls) == 4  # the drain, then one by one


def test_burst_exits_at_once_on_an_empty_queue(redis_url: str, keys: Keys, fake_classifier: Any) -> None:
    began = time.monotonic()
    assert make_service(redis_url, keys, fake_classifier).run() == 0
    assert time.monotonic() - began < 2


def test_a_stop_finishes_the_drain_and_requeues_the_rest(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any
) -> None:
    service = make_service(redis_url, keys, fake_classifier, burst=False)
    r.lpush(keys.tickets, *tickets(50))
    real = fake_classifier.classify

    def stop_during_first(texts: list[str]) -> object:
        service.stop()
        return real(texts)

    fake_classifier.classify = stop_during_first
    assert service.run() == 0
    assert r.hlen(keys.results) == 16  # the drain in hand was finished and acked
    assert r.llen(keys.tickets) == 34 and r.llen(keys.inflight("w1")) == 0


def test_a_redis_outage_is_survived_without_losing_anything(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any, proxy: Any
) -> None:
    url = proxied_url(redis_url, proxy.port)
    service = make_service(url, keys, fake_classifier, burst=False)
    r.lpush(keys.tickets, *tickets(20))
    with capture_logs() as logs:
        worker = threading.Thread(target=service.run)
        worker.start()
        wait_for(lambda: r.hlen(keys.results) == 20)
        proxy.cut()
        r.lpush(keys.tickets, *tickets(20, start=20))
        wait_for(lambda: any(e["event"] == "redis_unavailable" for e in logs))
        time.sleep(0.3)
        proxy.restore()
        wait_for(lambda: r.hlen(keys.results) == 40)
        service.stop()
        worker.join(5)
    assert not worker.is_alive()
    assert r.llen(keys.tickets) == 0 and r.llen(keys.inflight("w1")) == 0 and r.llen(keys.dead) == 0
    events = [e["event"] for e in logs]
    assert "redis_restored" in events


def test_a_stop_during_an_outage_exits_in_bounded_time_and_keeps_the_claims(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: Any, proxy: Any
) -> None:
    url = proxied_url(redis_url, proxy.port)
    service = make_service(url, keys, fake_classifier, burst=False)
    r.lpush(keys.tickets, *tickets(10))
    real: Callable[[list[str]], object] = fake_classifier.classify

    def cut_mid_drain(texts: list[str]) -> object:
        proxy.cut()  # Redis goes away while the drain is being classified
        return real(texts)

    fake_classifier.classify = cut_mid_drain
    worker = threading.Thread(target=service.run)
    worker.start()
    wait_for(lambda: r.llen(keys.tickets) == 0)
    time.sleep(0.3)
    began = time.monotonic()
    service.stop()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - began < 3
    assert r.llen(keys.inflight("w1")) == 10 and r.hlen(keys.results) == 0  # in Redis, for recovery


# -- issue 19: odd Redis replies, bugs and a dying heartbeat ------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "LOADING Redis is loading the dataset in memory",
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
        "NOREPLICAS Not enough good replicas to write.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "Command # 2 (LPUSH x y) of pipeline caused error: BUSY Redis is busy running a script.",
    ],
)
def test_replies_that_mean_not_now_are_outages(reply: str) -> None:
    from redis.connection import _RESP2Parser

    from worker.connection import transient
    from worker.errors import TransientError

    exc = _RESP2Parser.parse_error(reply)  # the class redis-py would raise for that reply

    @transient
    def step() -> None:
        raise exc

    with pytest.raises(TransientError):
        step()


def test_a_busy_redis_is_waited_out_and_logged_once(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: object
) -> None:
    r.lpush(keys.tickets, *tickets(6))
    service = make_service(redis_url, keys, fake_classifier)
    real, calls = service.queue.claim, 0

    def busy_three_times(*args: object, **kwargs: object) -> list[bytes]:
        nonlocal calls
        calls += 1
        if calls <= 3:
            from worker.errors import TransientError

            raise TransientError("ResponseError: BUSY Redis is busy running a script.")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    service.queue.claim = busy_three_times  # type: ignore[method-assign]
    with capture_logs() as logs:
        assert service.run() == 0
    spells = [e for e in logs if e["event"] == "redis_unavailable"]
    assert [e["log_level"] for e in spells] == ["warning", "debug", "debug"]
    (restored,) = [e for e in logs if e["event"] == "redis_restored"]
    assert restored["after_attempts"] == 3 and r.hlen(keys.results) == 6


def test_a_bug_ends_the_worker_with_one_fatal_event_and_its_claims_left_for_recovery(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: object
) -> None:
    from producer.exitcodes import Exit

    r.lpush(keys.tickets, *tickets(4))
    service = make_service(redis_url, keys, fake_classifier, heartbeat=True)

    def broken_ack(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug nobody classified")

    service.queue.ack = broken_ack  # type: ignore[assignment,method-assign]
    with capture_logs() as logs:
        assert service.run() == Exit.INTERNAL
    (fatal,) = [e for e in logs if e["event"] == "fatal"]
    assert fatal["cause"] == "internal" and fatal["exit_code"] == Exit.INTERNAL and fatal["exc_info"]
    assert "KeyError" in fatal["error"]
    assert r.llen(keys.inflight("w1")) == 4 and not r.exists(keys.heartbeat("w1"))  # recovery takes them now
    peer = RedisQueue(r, keys, "peer")
    (rec,) = peer.recover()
    assert rec.requeued == 4 and r.hlen(keys.attempts) == 4  # each counted: a repeat offender goes poison


def test_a_dead_heartbeat_thread_stops_the_claims(
    redis_url: str, r: redis.Redis, keys: Keys, fake_classifier: object
) -> None:
    from producer.exitcodes import Exit

    service = make_service(redis_url, keys, fake_classifier, burst=False, heartbeat=True)
    assert service.heartbeat is not None

    def broken_beat() -> None:
        raise ValueError("heartbeat bug")

    with capture_logs() as logs:
        runner = threading.Thread(target=lambda: setattr(service, "code", service.run()))
        runner.start()
        wait_for(lambda: r.exists(keys.heartbeat("w1")), 5, "the first beat")
        service.heartbeat.beat = broken_beat  # type: ignore[method-assign]
        runner.join(10)
    assert not runner.is_alive() and service.code == Exit.INTERNAL  # type: ignore[attr-defined]
    died = [e for e in logs if e["event"] == "heartbeat_died"]
    assert died and "heartbeat bug" in died[0]["error"]
    assert [e["cause"] for e in logs if e["event"] == "fatal"] == ["heartbeat"]
    r.lpush(keys.tickets, *tickets(2))
    time.sleep(0.3)
    assert r.llen(keys.tickets) == 2  # nothing claimed once the heartbeat was gone


def test_a_bug_before_the_heartbeat_starts_is_exit_70_not_a_second_traceback(
    redis_url: str, keys: Keys, fake_classifier: Any
) -> None:
    """Audit: an unexpected error in the service's start (before its heartbeat thread ran) was logged as
    fatal, exit 70, then joining the thread that never started raised RuntimeError: exit 1, a traceback."""

    calls = []
    described = fake_classifier.describe

    def broken() -> dict[str, Any]:  # fine when the service logs its start, a bug in _start
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("a bug")
        return described()

    fake_classifier.describe = broken
    with capture_logs() as logs:
        assert make_service(redis_url, keys, fake_classifier, heartbeat=True).run() == 70
    assert logs[-1]["event"] == "fatal" and logs[-1]["cause"] == "internal"

"""Routes on a real Redis with a real RQ worker (SimpleWorker, in-process, burst mode)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
import routing_handlers
from rq import Queue, SimpleWorker
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer
from structlog.testing import capture_logs
from support import FakeClassifier, finished

from producer.protocol import Keys, Result, payload_digest
from worker.connection import connect
from worker.contract import Finished
from worker.queue import RedisQueue
from worker.routing import Router, job_id
from worker.service import Service
from worker.settings import Settings

pytestmark = pytest.mark.redis


@pytest.fixture
def rq_queue(r: redis.Redis) -> Iterator[str]:
    """A unique RQ queue name; every rq:* key that names it or one of its jobs is removed afterwards."""
    name = f"tq-test-{uuid.uuid4().hex[:12]}"
    routing_handlers.CALLS.clear()
    yield name
    jobs = Queue(name, connection=r, serializer=JSONSerializer).get_job_ids()
    jobs += FailedJobRegistry(name, connection=r, serializer=JSONSerializer).get_job_ids()
    for pattern in [f"rq:*{name}*", *(f"rq:*{j}*" for j in jobs)]:
        stale = list(r.scan_iter(match=pattern, count=1000))
        if stale:
            r.delete(*stale)


def payloads(tag: str) -> list[bytes]:
    texts = ["billing: refund", "technical: crash", "billing: invoice", "account: locked"]
    return [
        json.dumps({"id": f"{tag}-{i}", "text": t, "customer": "acme"}).encode() for i, t in enumerate(texts)
    ]


def drain(redis_url: str, keys: Keys, router: Router) -> None:
    settings = Settings(redis_url=redis_url, prefix=keys.prefix, worker_id="w1", burst=True)
    service = Service(settings, RedisQueue(connect(redis_url), keys, "w1"), FakeClassifier(), hook=router)
    with capture_logs():
        assert service.run() == 0


def run_rq(r: redis.Redis, name: str) -> None:
    queue = Queue(name, connection=r, serializer=JSONSerializer)
    SimpleWorker([queue], connection=r, serializer=JSONSerializer).work(burst=True)


def test_routed_tickets_reach_the_handler_exactly_once(
    redis_url: str, r: redis.Redis, keys: Keys, rq_queue: str
) -> None:
    raws = payloads(keys.prefix)
    r.lpush(keys.tickets, *raws)
    router = Router(r, {"billing": rq_queue}, "routing_handlers.record")
    drain(redis_url, keys, router)
    queue = Queue(rq_queue, connection=r, serializer=JSONSerializer)
    expected = {job_id(f"{keys.prefix}-{i}", payload_digest(raws[i])) for i in (0, 2)}
    assert set(queue.get_job_ids()) == expected
    run_rq(r, rq_queue)
    calls = sorted(routing_handlers.CALLS, key=lambda c: c[0]["id"])
    assert [(t["id"], t["text"], t["fields"]) for t, _ in calls] == [
        (f"{keys.prefix}-0", "billing: refund", {"customer": "acme"}),
        (f"{keys.prefix}-2", "billing: invoice", {"customer": "acme"}),
    ]
    stored = Result.from_json(r.hget(keys.results, f"{keys.prefix}-0"))  # type: ignore[arg-type]
    assert calls[0][1] == json.loads(stored.to_json())


def test_a_redelivery_makes_no_second_job(redis_url: str, r: redis.Redis, keys: Keys, rq_queue: str) -> None:
    raws = payloads(keys.prefix)
    router = Router(r, {"billing": rq_queue}, "routing_handlers.record")
    r.lpush(keys.tickets, *raws)
    drain(redis_url, keys, router)
    run_rq(r, rq_queue)
    r.lpush(keys.tickets, *raws)  # every payload again, byte for byte
    drain(redis_url, keys, router)
    assert Queue(rq_queue, connection=r, serializer=JSONSerializer).count == 0
    run_rq(r, rq_queue)
    assert len(routing_handlers.CALLS) == 2


def test_unrouted_labels_enqueue_nothing(redis_url: str, r: redis.Redis, keys: Keys, rq_queue: str) -> None:
    r.lpush(keys.tickets, *payloads(keys.prefix))
    drain(redis_url, keys, Router(r, {"nothing-is-labelled-this": rq_queue}, "routing_handlers.record"))
    assert r.hlen(keys.results) == 4
    assert Queue(rq_queue, connection=r, serializer=JSONSerializer).count == 0


def test_a_failing_handler_lands_in_rq_failed_registry_and_leaves_results_alone(
    redis_url: str, r: redis.Redis, keys: Keys, rq_queue: str
) -> None:
    r.lpush(keys.tickets, *payloads(keys.prefix))
    drain(redis_url, keys, Router(r, {"technical": rq_queue}, "routing_handlers.fail"))
    before = r.hgetall(keys.results)
    run_rq(r, rq_queue)
    failed = FailedJobRegistry(rq_queue, connection=r, serializer=JSONSerializer)
    assert failed.count == 1
    assert r.hgetall(keys.results) == before and len(before) == 4 and r.llen(keys.dead) == 0


def test_jobs_are_part_of_the_ack_transaction(r: redis.Redis, keys: Keys, rq_queue: str) -> None:
    """When the ack's EXEC is aborted (another worker wrote the id first), its job goes too."""
    raw = payloads(keys.prefix)[0]
    r.lpush(keys.tickets, raw)
    q = RedisQueue(r, keys, "w1")
    (claimed,) = q.claim(1, max_wait_s=0)
    original = q._plan

    def racing_plan(*args, **kwargs):
        if not r.hexists(keys.results, f"{keys.prefix}-0"):
            other = json.dumps({"id": f"{keys.prefix}-0", "text": "billing: other"}).encode()
            r.hset(keys.results, f"{keys.prefix}-0", finished(other).result.to_json())
        return original(*args, **kwargs)

    q._plan = racing_plan  # type: ignore[method-assign]
    report = q.ack([finished(claimed)], [], Router(r, {"billing": rq_queue}, "routing_handlers.record"))
    assert report.fresh == [] and [d.reason for d in report.dead] == ["duplicate id"]
    assert Queue(rq_queue, connection=r, serializer=JSONSerializer).count == 0


def test_routes_without_a_handler_are_refused(r: redis.Redis) -> None:
    with pytest.raises(ValueError, match="handler"):
        Router(r, {"billing": "q"}, "")


def test_tickets_that_need_review_go_to_the_review_route(
    redis_url: str, r: redis.Redis, keys: Keys, rq_queue: str
) -> None:
    raws = payloads(keys.prefix)
    r.lpush(keys.tickets, *raws)
    people = f"{rq_queue}-review"
    router = Router(r, {"billing": rq_queue, "review": people}, "routing_handlers.record")
    settings = Settings(
        redis_url=redis_url, prefix=keys.prefix, worker_id="w1", burst=True, review_below=0.999
    )
    service = Service(settings, RedisQueue(connect(redis_url), keys, "w1"), FakeClassifier(), hook=router)
    with capture_logs():
        assert service.run() == 0
    try:
        assert Queue(rq_queue, connection=r, serializer=JSONSerializer).count == 0  # not the label's queue
        assert Queue(people, connection=r, serializer=JSONSerializer).count == 4
        assert r.zcard(keys.review) == 4
        assert service.metrics.review.labels("review")._value.get() == 4
    finally:
        jobs = Queue(people, connection=r, serializer=JSONSerializer).get_job_ids()
        for pattern in [f"rq:*{people}*", *(f"rq:*{j}*" for j in jobs)]:
            stale = list(r.scan_iter(match=pattern, count=1000))
            if stale:
                r.delete(*stale)


def test_a_further_questions_label_routes_with_a_job_of_its_own(
    r: redis.Redis, keys: Keys, rq_queue: str
) -> None:
    """ "intent:lost_card" routes on the result's answers.intent; a ticket matching a primary route too
    gets two jobs, with distinct ids (the primary's keeps the id it always had)."""
    raws = payloads(keys.prefix)[:2]
    for raw in raws:
        r.lpush(keys.tickets, raw)
    q = RedisQueue(r, keys, "w1")
    claimed = q.claim(2, max_wait_s=0)
    items = []
    for raw, intent in zip(claimed, ["lost_card", "refund"], strict=True):
        f = finished(raw)
        answers = {"intent": {"label": intent, "scores": {"lost_card": 0.5, "refund": 0.5}}}
        items.append(Finished(f.raw, f.ticket, replace(f.result, answers=answers)))
    routes = {"billing": rq_queue, "intent:lost_card": rq_queue}
    q.ack(items, [], Router(r, routes, "routing_handlers.record"))
    ids = set(Queue(rq_queue, connection=r, serializer=JSONSerializer).get_job_ids())
    first, second = items[0].result, items[1].result
    assert ids == {
        job_id(first.id, first.digest),
        job_id(first.id, first.digest, "intent:lost_card"),
        job_id(second.id, second.digest),
    }
    run_rq(r, rq_queue)
    routed = sorted((res["id"], res["answers"]["intent"]["label"]) for _, res in routing_handlers.CALLS)
    assert routed == [(first.id, "lost_card"), (first.id, "lost_card"), (second.id, "refund")]


def test_a_questions_unsure_answer_goes_to_its_review_route_not_its_labels(
    r: redis.Redis, keys: Keys, rq_queue: str
) -> None:
    """As the primary's "review" route takes its unsure tickets, "intent:review" takes the tickets whose
    intent answer needs review, instead of "intent:<label>"; a sure answer keeps its label's route."""
    raws = payloads(keys.prefix)[:2]
    r.lpush(keys.tickets, *raws)
    q = RedisQueue(r, keys, "w1")
    items = []
    for raw, marked in zip(q.claim(2, max_wait_s=0), [True, False], strict=True):
        f = finished(raw)
        answer = {"label": "lost_card", "scores": {"lost_card": 0.6, "refund": 0.4}, "confidence": 0.6}
        answers = {"intent": answer | ({"review": True} if marked else {})}
        items.append(Finished(f.raw, f.ticket, replace(f.result, answers=answers)))
    people = f"{rq_queue}-intent-review"
    routes = {"intent:lost_card": rq_queue, "intent:review": people}
    try:
        q.ack(items, [], Router(r, routes, "routing_handlers.record"))
        unsure, sure = items[0].result, items[1].result
        assert Queue(people, connection=r, serializer=JSONSerializer).get_job_ids() == [
            job_id(unsure.id, unsure.digest, "intent:review")
        ]
        assert Queue(rq_queue, connection=r, serializer=JSONSerializer).get_job_ids() == [
            job_id(sure.id, sure.digest, "intent:lost_card")
        ]
        assert r.zrange(keys.asking("intent").review, 0, -1) == [unsure.id.encode()]
    finally:
        jobs = Queue(people, connection=r, serializer=JSONSerializer).get_job_ids()
        for pattern in [f"rq:*{people}*", *(f"rq:*{j}*" for j in jobs)]:
            stale = list(r.scan_iter(match=pattern, count=1000))
            if stale:
                r.delete(*stale)

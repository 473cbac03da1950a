"""The review queue end to end on a real Redis: the ack queues unsure results in P:review, labelling and
trimming take them off, a review route takes them from their label's queue, the producer reads it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis
from support import finished, run_producer_cli

from producer import review
from producer.client import Client
from producer.protocol import MAX_REVIEW, Keys, Result
from producer.review import SUMMARY_CHUNK
from worker.contract import Finished
from worker.queue import RedisQueue

pytestmark = pytest.mark.redis


def unsure(i: int, confidence: float, marked: bool = True) -> tuple[bytes, Finished]:
    raw = json.dumps({"id": f"r{i}", "text": f"my card {i} does something odd"}).encode()
    item = finished(raw)
    scores = {"billing": confidence, "technical": (1 - confidence) * 0.6, "account": (1 - confidence) * 0.4}
    result = replace(item.result, scores=scores, confidence=confidence, review=marked)
    return raw, Finished(raw, item.ticket, result)


def queued(r: redis.Redis, keys: Keys) -> list[str]:
    """The review queue's ticket ids, smallest margin first."""
    return [m.decode() for m in cast(list[bytes], r.zrange(keys.review, 0, -1))]


def ack(r: redis.Redis, keys: Keys, items: list[tuple[bytes, Finished]], **kwargs: Any) -> RedisQueue:
    q = RedisQueue(r, keys, "w1", keep_text_s=60, **kwargs)
    r.lpush(keys.inflight("w1"), *[raw for raw, _ in items])
    q.ack([f for _, f in items], [])
    return q


def test_unsure_results_are_queued_least_confident_first_and_leave_when_labelled(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    ack(r, keys, [unsure(1, 0.55), unsure(2, 0.41), unsure(3, 0.97, marked=False), unsure(4, 0.62)])
    assert queued(r, keys) == ["r2", "r1", "r4"]  # r3 was sure
    stored = Result.from_json(cast(bytes, r.hget(keys.results, "r2")))
    assert stored.review and stored.confidence == 0.41
    assert "review" not in json.loads(cast(bytes, r.hget(keys.results, "r3")))  # written only when true
    client = Client(r, keys.prefix)
    items = review.queue(client, limit=2)
    assert [i.id for i in items] == ["r2", "r1"]
    assert items[0].top()[0] == ("billing", 0.41) and items[0].text == "my card 2 does something odd"
    size, oldest = review.summary(client)
    assert size == 3 and oldest is not None and 0 <= oldest < 60
    client.label("r2", "technical", by="lead")  # a correction
    client.label("r1", "billing", by="lead")  # a confirmation: also recorded, also off the queue
    assert queued(r, keys) == ["r4"]
    assert {c.id: c.label for c in client.correction_records()} == {"r2": "technical", "r1": "billing"}
    code, out, _ = run_producer_cli(redis_url, keys, "review")
    assert code == 0 and [json.loads(line)["id"] for line in out.splitlines()] == ["r4"]


def test_the_queue_is_ordered_by_margin_not_by_confidence(r: redis.Redis, keys: Keys) -> None:
    """Issue 22 item 4: the smallest margin (top probability minus the runner-up's) comes first, the order
    that taught a head most in docs/active-learning.md. Here confidence alone would put m1 first."""
    raw1, f1 = unsure(1, 0.40)  # 0.40 vs 0.36: margin 0.04
    raw2, f2 = unsure(2, 0.45)
    close = {"billing": 0.45, "technical": 0.44, "account": 0.11}  # margin 0.01, yet more confident
    f2 = Finished(raw2, f2.ticket, replace(f2.result, scores=close))
    ack(r, keys, [(raw1, f1), (raw2, f2)])
    assert queued(r, keys) == ["r2", "r1"]
    assert r.zscore(keys.review, "r2") == pytest.approx(0.01)
    item = review.queue(Client(r, keys.prefix))[0]
    assert (item.id, item.margin, item.confidence) == ("r2", pytest.approx(0.01), 0.45)


def test_the_queue_is_bounded_and_trimmed_with_results(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.queue

    monkeypatch.setattr(worker.queue, "MAX_REVIEW", 2)
    q = ack(r, keys, [unsure(1, 0.5), unsure(2, 0.3), unsure(3, 0.4)], keep_results_s=1.0)
    # margins 0.2 (r1), 0.12 (r2: technical leads at 0.42), 0.04 (r3): the largest margin went
    assert queued(r, keys) == ["r3", "r2"]
    assert q.trim(now=10**10) == 3
    assert r.zcard(keys.review) == 0


def asked(i: int, confidence: float, marked: bool = True, primary: bool = False) -> tuple[bytes, Finished]:
    """A result whose intent answer has ``confidence`` (marked for review or not); the primary is sure
    unless ``primary``."""
    raw, item = unsure(i, 0.4 if primary else 0.97, marked=primary)
    scores = {"lost_card": confidence, "refund": round(1 - confidence, 6)}
    answer = {
        "label": "lost_card",
        "scores": scores,
        "confidence": confidence,
        **({"review": True} if marked else {}),
    }
    return raw, Finished(raw, item.ticket, replace(item.result, answers={"intent": answer}))


def intent_queue(r: redis.Redis, keys: Keys) -> list[str]:
    return [m.decode() for m in cast(list[bytes], r.zrange(keys.asking("intent").review, 0, -1))]


def test_a_questions_unsure_answers_have_a_queue_of_their_own(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Issue 22 item 2: answers.intent marked for review enter P:q:intent:review by that answer's margin,
    apart from P:review; labelling the ticket for intent takes it off intent's queue only."""
    ack(r, keys, [asked(1, 0.6), asked(2, 0.52, primary=True), asked(3, 0.95, marked=False), asked(4, 0.7)])
    assert intent_queue(r, keys) == ["r2", "r1", "r4"]  # margins 0.04, 0.2, 0.4; r3 was sure
    assert r.zscore(keys.asking("intent").review, "r2") == pytest.approx(0.04)
    assert queued(r, keys) == ["r2"]  # the primary's own queue: only r2's label was unsure
    from worker.startcheck import publish_labels

    publish_labels(RedisQueue(r, keys, "w9"), ["billing", "account"], {"intent": ["lost_card", "refund"]})
    client = Client(r, keys.prefix)
    items = review.queue(client, question="intent")
    assert [(i.id, i.label, i.confidence) for i in items[:2]] == [
        ("r2", "lost_card", 0.52),
        ("r1", "lost_card", 0.6),
    ]
    assert items[0].top(1) == [("lost_card", 0.52)] and items[0].labels() == ["lost_card", "refund"]
    assert items[0].to_dict()["question"] == "intent" and "question" not in review.queue(client)[0].to_dict()
    assert review.summary(client, question="intent")[0] == 3
    client.label("r2", "refund", by="lead", question="intent")  # a correction of r2's intent
    assert intent_queue(r, keys) == ["r1", "r4"] and queued(r, keys) == ["r2"]  # its label still waits
    client.label("r2", "billing", by="lead")
    assert queued(r, keys) == [] and intent_queue(r, keys) == ["r1", "r4"]
    code, out, _ = run_producer_cli(redis_url, keys, "review", "--question", "intent", "--limit", "1")
    (line,) = out.splitlines()  # --limit 1
    assert code == 0 and json.loads(line)["id"] == "r1"
    assert json.loads(line)["question"] == "intent" and json.loads(line)["label"] == "lost_card"
    code, _, err = run_producer_cli(redis_url, keys, "label", "r1", "lost_card", "--question", "intent")
    assert code == 0 and intent_queue(r, keys) == ["r4"]
    code, _, err = run_producer_cli(redis_url, keys, "review", "--question", "a:b")
    assert code == 2 and "question name" in err


def test_each_questions_queue_is_bounded_and_trimmed_with_results(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.queue

    monkeypatch.setattr(worker.queue, "MAX_REVIEW", 2)
    q = ack(r, keys, [asked(1, 0.6), asked(2, 0.55), asked(3, 0.9)], keep_results_s=1.0)
    assert intent_queue(r, keys) == ["r2", "r1"]  # margins 0.1, 0.2, 0.8: the largest went
    assert list(q.questions) == ["intent"]  # learnt from the ack: the trim keeps it in step
    fresh = RedisQueue(r, keys, "w2", keep_results_s=1.0, questions=("intent",))  # told by the task
    assert fresh.trim(now=10**10) == 3
    assert r.zcard(keys.asking("intent").review) == 0


class TwoQuestions:
    """The keyword classifier's primary label, and two further answers (intent, urgency) whose confidence
    each text names ("i60 u90": intent 0.60, urgency 0.90), on a task asking both questions: intent
    with review_below 0.7, urgency with auto_accuracy and a head that stores 0.8."""

    name = "fake-two-questions"

    def __init__(self) -> None:
        from tools.fake import KeywordClassifier
        from worker.engine.task import Question, Task

        self.labels = ["billing", "technical", "account"]
        self._inner = KeywordClassifier(self.labels)
        self.questions = ("intent", "urgency")
        self.task = Task(
            name="asking",
            labels=tuple(self.labels),
            instructions="",
            questions=(
                Question("intent", ("lost_card", "refund"), review_below=0.7),
                Question("urgency", ("high", "low"), auto_accuracy=0.95),
            ),
        )
        self.head = None
        self.answer_heads = {
            "intent": SimpleNamespace(id="i1", version=None, review_below=None, training={}),
            "urgency": SimpleNamespace(id="u1", version=None, review_below=0.8, training={}),
        }

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "labels": self.labels}

    def classify(self, texts: Any, **kw: Any) -> tuple[list[Any], list[Any]]:
        from worker.engine.types import Answer

        out, stats = self._inner.classify(texts, **kw)
        asked = []
        for p, text in zip(out, texts, strict=True):
            i, u = (int(m) / 100 for m in re.findall(r"\b[iu](\d\d)\b", text))
            answers = {
                "intent": Answer("lost_card", {"lost_card": i, "refund": round(1 - i, 6)}, "i1"),
                "urgency": Answer("high", {"high": u, "low": round(1 - u, 6)}, "u1"),
            }
            asked.append(replace(p, answers=answers))
        return asked, stats


def test_the_worker_marks_and_queues_each_questions_unsure_answers(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Through the service: each answer carries its confidence and, below its question's own threshold
    (intent's review_below; urgency's head-stored auto_accuracy threshold), "review": true and a place
    in P:q:NAME:review. --review-below re-thresholds the primary only: at 0.99 every label is unsure,
    no answer more so."""
    from structlog.testing import capture_logs

    from worker.connection import connect
    from worker.service import Service
    from worker.settings import Settings

    texts = {"A": "billing refund i60 u90", "B": "app crash i90 u70", "C": "locked account i90 u90"}
    texts["D"] = "billing crash i50 u50"
    r.lpush(keys.tickets, *[json.dumps({"id": k, "text": t}).encode() for k, t in texts.items()])
    settings = Settings(
        redis_url=redis_url, prefix=keys.prefix, worker_id="w1", burst=True, review_below=0.99
    )
    classifier = TwoQuestions()
    service = Service(
        settings, RedisQueue(connect(redis_url), keys, "w1", questions=classifier.questions), classifier
    )
    with capture_logs() as logs:
        assert service.run() == 0
    results = {k: Result.from_json(cast(bytes, r.hget(keys.results, k))) for k in texts}
    assert {k: res.questions_to_review() for k, res in results.items()} == {
        "A": ["intent"],
        "B": ["urgency"],
        "C": [],
        "D": ["intent", "urgency"],
    }
    assert all(res.review for res in results.values())  # the flag's 0.99: the primary's only
    assert results["A"].answers["intent"] == {
        "label": "lost_card",
        "scores": {"lost_card": 0.6, "refund": 0.4},
        "confidence": 0.6,
        "review": True,
        "head": "i1",
    }
    assert (
        "review" not in results["C"].answers["intent"]
        and results["C"].answers["urgency"]["confidence"] == 0.9
    )
    assert intent_queue(r, keys) == ["D", "A"]  # margins 0.0 and 0.2
    assert [m.decode() for m in cast(list[bytes], r.zrange(keys.asking("urgency").review, 0, -1))] == [
        "D",
        "B",
    ]
    assert r.zcard(keys.review) == 4
    m = service.metrics
    for question in ("intent", "urgency"):
        assert m.question_review.labels(question, "review")._value.get() == 2
        assert m.question_review.labels(question, "auto")._value.get() == 2
    assert m.question_review_threshold.labels("intent")._value.get() == 0.7
    assert m.question_review_threshold.labels("urgency")._value.get() == 0.8
    said = {
        e.get("question"): (e["threshold"], e["source"]) for e in logs if e["event"] == "review_threshold"
    }
    assert said == {
        None: (0.99, "--review-below"),
        "intent": (0.7, "task review_below"),
        "urgency": (0.8, "head (auto_accuracy 0.95)"),
    }


def test_a_full_review_queue_is_summed_up_in_slices(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard samples the summary every few seconds: a queue at its bound (MAX_REVIEW) is read a
    slice at a time (one ZMSCORE of 10,000 ids held this Redis for about 5 ms), with the same answer."""
    n, now = MAX_REVIEW, 2_000_000_000.0
    with r.pipeline(transaction=False) as pipe:
        pipe.zadd(keys.review, {f"q{i}": (i * 7919 % n) / n for i in range(n)})  # margins in no time order
        pipe.zadd(keys.done, {f"q{i}": now - 10.0 - i % 997 for i in range(n) if i != 1234})  # one trimmed
        pipe.execute()
    sent: list[tuple[str, int]] = []
    real = redis.client.Pipeline.execute

    def recorded(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
        sent.extend((str(a[0]), len(a) - 2) for a, _ in self.command_stack)  # the elements each one names
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", recorded)
    client = Client(r, prefix=keys.prefix)
    size, oldest = review.summary(client, now)
    assert (size, oldest) == (n, 10.0 + 996)
    reads = [k for c, k in sent if c in ("ZRANGE", "ZMSCORE")]
    assert len(reads) == 2 * n // SUMMARY_CHUNK and max(reads) <= SUMMARY_CHUNK


def test_a_page_of_the_queue_reads_clipped_texts_and_a_bounded_share_of_results(
    r: redis.Redis, keys: Keys
) -> None:
    """The dashboard's review page (as its results page) reads each text's first characters, never whole
    texts, and stops before the result that would pass its byte budget; the CLI reads everything."""
    big = {"attachment": "x" * 60_000}  # producers may attach large fields: a result is then ~60 KiB
    text = "é" * 20 + "z" * 16_000  # two-byte characters first: the clip counts characters, not bytes
    with r.pipeline(transaction=False) as pipe:
        for i in range(30):
            result = Result(f"b{i}", "billing", {"billing": 0.5, "technical": 0.5}, "m", "d", fields=big)
            pipe.hset(keys.results, result.id, result.to_json())
            pipe.set(keys.text(result.id), text if i else "short one")
            pipe.zadd(keys.review, {result.id: i / 100})
        pipe.execute()
    client = Client(r, keys.prefix)
    page = review.queue(client, 100, text_chars=300, result_bytes=1 << 20)
    assert [i.id for i in page] == [f"b{i}" for i in range(17)]  # 17 x ~60 KiB fit in 1 MiB, 18 do not
    assert page[0].text == "short one"  # a short text is whole
    assert page[1].text == ("é" * 20 + "z" * 280) + "…" and all(i.result for i in page)
    assert review.queue(client, 1, text_chars=300, result_bytes=10)[0].id == "b0"  # one is always read
    whole = review.queue(client, 100)
    assert len(whole) == 30 and whole[1].text == text
    for emoji, shown in (("😀" * 300, "😀" * 300), ("😀" * 301, "😀" * 300 + "…")):  # 4 bytes each
        r.set(keys.text("b0"), emoji)
        assert review.queue(client, 1, text_chars=300)[0].text == shown
    r.delete(keys.text("b0"))
    r.hset(keys.text("b0"), "text", "a hash where a string belongs")  # WRONGTYPE for GETRANGE
    assert review.queue(client, 2, text_chars=300)[0].text is None  # no text, not a failed page
    assert review.queue(client, 2)[0].text is None  # (MGET gives nil for it)


def test_the_cli_reads_the_queue_whole_a_bounded_page_at_a_time(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ticketq-producer review --limit N`` prints whole texts and results, read in pages of at most
    READ_PAGE tickets and READ_PAGE_BYTES of results: a large N of large results is many short commands,
    not one that holds the shared Redis for the whole read."""
    big = {"attachment": "x" * 60_000}
    with r.pipeline(transaction=False) as pipe:
        for i in range(250):
            fields = big if i < 40 else {}  # the first 40 results are ~60 KiB: 17 fit in a page's bytes
            result = Result(
                f"c{i:03}", "billing", {"billing": 0.5, "technical": 0.5}, "m", "d", fields=fields
            )
            pipe.hset(keys.results, result.id, result.to_json())
            pipe.set(keys.text(result.id), f"text {i}")
            pipe.zadd(keys.review, {result.id: i / 1000})
        pipe.execute()
    reads: list[int] = []
    real = redis.client.Pipeline.execute

    def recorded(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
        reads.extend(len(a) - 2 for a, _ in self.command_stack if a[0] == "HMGET")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", recorded)
    client = Client(r, keys.prefix)
    items = list(review.read_all(client, 1000))
    assert [i.id for i in items] == [f"c{i:03}" for i in range(250)]  # all, in order, none twice
    assert all(i.result and i.text == f"text {int(i.id[1:])}" for i in items)
    assert reads == [17, 17, 100, 100, 16]  # 17 large results fill a page's bytes, else 100 a page
    assert [i.id for i in review.read_all(client, 20)] == [f"c{i:03}" for i in range(20)]

"""Corrections and published heads on a real Redis: the label script (from Python and from redis-cli, as
any language would call it), the texts workers keep, publishing heads, and a worker following them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs
from support import FakeClassifier, finished, need_binary, run_producer_cli

import producer.client as client_mod
from producer.client import Client, HeadChanged, LabelError
from producer.learning import LABEL_SCRIPT
from producer.protocol import Keys, Result, Ticket
from worker.connection import connect
from worker.corrections import read_corrections, training_set
from worker.headwatch import HeadWatch
from worker.queue import RedisQueue
from worker.service import Service
from worker.settings import Settings

LABEL_LUA = Path(__file__).resolve().parents[2] / "producer" / "label.lua"


def seen(r: redis.Redis, keys: Keys, tid: str, text: str, label: str = "billing") -> None:
    """What a worker leaves behind for a ticket it labelled: its result and its kept text."""
    scores = {"billing": 0.5, "technical": 0.3, "account": 0.2}
    r.hset(keys.results, tid, Result(tid, label, scores, "m", "d").to_json())
    r.set(keys.text(tid), text, ex=60)


def test_label_records_the_right_label_with_the_text_and_what_the_worker_said(
    r: redis.Redis, keys: Keys
) -> None:
    client = Client(r, keys.prefix)
    seen(r, keys, "T-1", "I cannot log in — ü")
    c = client.label("T-1", "account", by="alice")
    assert (c.id, c.label, c.text, c.by, c.was) == (
        "T-1",
        "account",
        "I cannot log in — ü",
        "alice",
        "billing",
    )
    assert c.at > 1e9
    c2 = client.label("T-1", "technical")  # labelling again replaces the correction
    assert c2.by is None and list(client.corrections()) == [("T-1", "I cannot log in — ü", "technical")]
    r.delete(keys.text("T-1"))  # the correction carries the text: it outlives P:text:<id>
    assert list(client.corrections()) == [("T-1", "I cannot log in — ü", "technical")]


@pytest.mark.parametrize(
    ("tid", "label", "error"),
    [
        ("nope", "billing", "unknown ticket nope (no result and no text)"),
        ("T-2", "billing", "no text kept for ticket T-2"),
        ("T-1", "refunds", "unknown label refunds (labels: account, billing, technical)"),
        ("T-1", " ", "empty label"),
        ("T-1", "bill\ning", "control character in label"),
        ("T-1", "x" * 129, "label too long: over 128 bytes"),
    ],
)
def test_label_refuses_what_cannot_be_trained_on(
    r: redis.Redis, keys: Keys, tid: str, label: str, error: str
) -> None:
    seen(r, keys, "T-1", "hello")
    seen(r, keys, "T-2", "gone")
    r.delete(keys.text("T-2"))  # its text expired
    client = Client(r, keys.prefix)
    with pytest.raises(LabelError) as info:
        client.label(tid, label)
    assert str(info.value).startswith(error)
    # the script checks the same things for callers in other languages, that skip the Python checks
    with pytest.raises(redis.ResponseError, match=r"^TICKETQ "):
        r.eval(LABEL_SCRIPT, 3, keys.results, keys.text(tid), keys.labels, tid, label)
    assert r.hlen(keys.labels) == 0


def test_a_text_without_a_result_can_be_labelled_with_any_label(r: redis.Redis, keys: Keys) -> None:
    """Results may be trimmed before the text expires: then the task's labels are checked at training."""
    r.set(keys.text("T-3"), "kept text")
    c = Client(r, keys.prefix).label("T-3", "whatever")
    assert c.was is None and c.label == "whatever"


def test_one_redis_command_from_any_language(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    need_binary("redis-cli")
    seen(r, keys, "T-9", "refund please")
    cmd = [
        "redis-cli",
        "-u",
        redis_url,
        "--eval",
        str(LABEL_LUA),
        keys.results,
        keys.text("T-9"),
        keys.labels,
    ]
    out = subprocess.run([*cmd, ",", "T-9", "account", "bob"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["label"] == "account"
    (c,) = Client(r, keys.prefix).correction_records()
    assert (c.label, c.by, c.was, c.text) == ("account", "bob", "billing", "refund please")
    bad = subprocess.run([*cmd, ",", "T-9", "nope"], capture_output=True, text=True)
    assert "TICKETQ unknown label nope" in bad.stdout + bad.stderr


def test_publishing_heads_versions_them_and_bounds_the_history(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_mod, "HEADS_KEPT", 3)
    client = Client(r, keys.prefix)
    assert client.current_head() is None and client.head_versions() == []
    versions = [client.publish_head(f"head {i}".encode(), by="ci") for i in range(5)]
    assert versions == ["1", "2", "3", "4", "5"]
    assert client.current_head() == ("5", b"head 4")
    history = client.head_versions()
    assert [h.version for h in history] == ["5", "4", "3"] and history[0].by == "ci"
    assert history[0].size == 6 and len(history[0].sha256) == 64
    with pytest.raises(ValueError, match="empty head"):
        client.publish_head(b"")


def test_the_ack_keeps_each_labelled_tickets_text_with_a_ttl(r: redis.Redis, keys: Keys) -> None:
    raw = Ticket("k1", "my card was charged twice").to_json().encode()
    clash = Ticket("k1", "another text, same id").to_json().encode()
    r.lpush(keys.tickets, raw, clash)
    queue = RedisQueue(r, keys, "w1", keep_text_s=100)
    got = queue.claim(2, max_wait_s=0)
    queue.ack([finished(p) for p in got], [])
    assert r.get(keys.text("k1")) == b"my card was charged twice"  # the duplicate did not overwrite it
    assert 90 < r.ttl(keys.text("k1")) <= 100
    r.lpush(keys.tickets, Ticket("k2", "no keeping").to_json())
    off = RedisQueue(r, keys, "w2", keep_text_s=0)
    off.ack([finished(p) for p in off.claim(1, max_wait_s=0)], [])
    assert r.exists(keys.text("k2")) == 0 and r.hexists(keys.results, "k2")


def test_read_corrections_makes_a_training_set(r: redis.Redis, keys: Keys) -> None:
    client = Client(r, keys.prefix)
    for i, label in enumerate(["account", "technical", "account"]):
        seen(r, keys, f"c{i}", f"text {i}")
        client.label(f"c{i}", label)
    rows = [("c1", "old text 1", "billing"), ("f1", "from the file", "billing")]
    data = training_set(read_corrections(client), rows)
    assert dict(zip(data.ids, zip(data.texts, data.labels, strict=True), strict=True)) == {
        "c0": ("text 0", "account"),
        "c1": ("text 1", "technical"),  # the correction wins over the file's row
        "c2": ("text 2", "account"),
        "f1": ("from the file", "billing"),
    }
    assert (data.from_redis, data.from_file) == (3, 1)


def test_the_stream_s_kept_texts_are_read_a_chunk_at_a_time_to_self_train_on(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train --from-redis`` self-trains on the texts workers kept: every result's text still kept, none
    expired, empty or not UTF-8, none whose id or text the training rows already have, each text once."""
    from worker.corrections import stream_texts

    monkeypatch.setattr(client_mod, "_KEPT_CHUNK", 7)  # several HSCAN calls and pipelines, not one
    client = Client(r, keys.prefix)
    for i in range(40):
        seen(r, keys, f"s{i}", f"stream ticket {i % 30}")  # ten texts twice
    r.delete(keys.text("s3"))  # expired: its result stays, its text is gone
    r.set(keys.text("s4"), "   ")
    r.set(keys.text("s5"), b"\xff\xfe not utf-8")
    r.set(keys.text("s6"), "x" * 16_385)  # longer than a ticket may be: not a worker's
    r.delete(keys.text("s9"))
    r.hset(keys.text("s9"), "text", "a hash where a string belongs")  # WRONGTYPE for GET: skipped
    r.set(keys.text("orphan"), "a text without a result is not walked to")
    got = dict(client.kept_texts(100))
    assert len(got) == 35 and {"s3", "s4", "s5", "s6", "s9", "orphan"}.isdisjoint(got)
    assert got["s0"] == "stream ticket 0" and got["s39"] == "stream ticket 9"
    assert len(client.kept_texts(10)) == 10 and client.kept_texts(0) == []
    assert {tid for tid, _ in client.kept_texts(100, skip={"s0", "s1"})} == set(got) - {"s0", "s1"}
    texts = stream_texts(client, 100, known_ids=["s8"], known_texts=["stream ticket 7"])
    # 3, 4, 5, 6, 8 and 9 come again from s33..s39; 7 is a training row's text
    assert len(texts) == 29 and set(texts) == {f"stream ticket {i}" for i in range(30) if i != 7}
    # a limit counts the texts learnt from: known and repeated texts read on the way do not use it up
    first = [t for _, t in client.kept_texts(40)][:12]
    limited = stream_texts(client, 10, known_ids=[], known_texts=first[:2])
    assert len(limited) == 10 and len(set(limited)) == 10 and not set(first[:2]) & set(limited)
    gets: list[str] = []
    plain_get = redis.client.Pipeline.get

    def counted(self: redis.client.Pipeline, key: str) -> Any:
        gets.append(key)
        return plain_get(self, key)

    with monkeypatch.context() as m:
        m.setattr(redis.client.Pipeline, "get", counted)
        for i in range(40):
            r.delete(keys.text(f"s{i}"))  # every text expired: at most 10 results per text wanted are read
        assert client.kept_texts(2) == [] and len(gets) == 20


class HeadClassifier(FakeClassifier):
    """The fake classifier plus the head contract: a "head" is bytes naming the label it always gives."""

    class _Head:
        def __init__(self, label: str, version: str | None) -> None:
            self.label, self.version, self.id = label, version, f"id-{label}"

    def __init__(self) -> None:
        super().__init__()
        self.head: Any = None

    def load_head(self, data: bytes, version: str) -> None:
        label = data.decode()
        if label not in self.labels:
            raise type("HeadError", (ValueError,), {})(f"head labels do not match the task: {label!r}")
        self.head = self._Head(label, version)

    def classify(self, texts: Any) -> tuple[list[Any], list[Any]]:
        predictions, stats = super().classify(texts)
        if self.head is not None:
            predictions = [
                type(p)(self.head.label, p.scores, p.logprobs, method="head", head=self.head.version)
                for p in predictions
            ]
        return predictions, stats


def test_a_worker_follows_published_heads_and_keeps_its_own_when_one_is_bad(
    r: redis.Redis, keys: Keys
) -> None:
    classifier = HeadClassifier()
    watch = HeadWatch(r, keys, classifier)
    client = Client(r, keys.prefix)
    with capture_logs() as logs:
        assert watch.check() is False  # nothing published
        client.publish_head(b"account")
        assert watch.check() is True and classifier.head.version == "1"
        assert watch.check() is False  # same version: nothing read, nothing loaded
        client.publish_head(b"\x00corrupt")
        assert watch.check() is False and watch.check() is False  # rejected once, not retried
        assert classifier.head.version == "1"
        client.publish_head(b"technical")
        assert watch.check() is True and classifier.head.label == "technical"
    events = [(e["event"], e["version"]) for e in logs]
    assert events == [("head_loaded", "1"), ("head_rejected", "2"), ("head_loaded", "3")]
    assert "head labels do not match" in logs[1]["reason"]
    client.publish_head(b"\x00corrupt")  # the last good head (3) is another: still one line, no fallback
    with capture_logs() as logs:
        assert HeadWatch(r, keys, FakeClassifier()).check() is False
    assert [e["event"] for e in logs] == ["head_rejected"] and "takes no head" in logs[0]["reason"]


@pytest.fixture
def service(redis_url: str, keys: Keys) -> Iterator[tuple[Service, HeadClassifier]]:
    settings = Settings(redis_url=redis_url, prefix=keys.prefix, worker_id="w1", max_wait_ms=5)
    classifier = HeadClassifier()
    heads = HeadWatch(connect(redis_url), keys, classifier)
    queue = RedisQueue(connect(redis_url), keys, "w1", keep_text_s=60)
    svc = Service(settings, queue, classifier, heads=heads)
    with capture_logs():
        thread = threading.Thread(target=svc.run)
        thread.start()
        yield svc, classifier
        svc.stop()
        thread.join(5)


def test_a_running_service_switches_heads_between_drains_and_results_name_them(
    r: redis.Redis, keys: Keys, service: tuple[Service, HeadClassifier]
) -> None:
    client = Client(r, keys.prefix)
    first = client.push_and_wait([{"id": "a1", "text": "billing: refund"}], timeout=10).results["a1"]
    assert (first.label, first.method, first.head) == ("billing", "zero-shot", None)
    client.label("a1", "account")
    client.publish_head(b"account")
    second = client.push_and_wait([{"id": "a2", "text": "billing: refund"}], timeout=10).results["a2"]
    assert (second.label, second.method, second.head) == ("account", "head", "1")
    assert r.get(keys.text("a2")) == b"billing: refund"


def test_producer_cli_label_corrections_heads(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "carol")
    seen(r, keys, "T-1", "locked out")
    assert run_producer_cli(redis_url, keys, "label", "T-1", "account") == (
        0,
        "",
        "T-1: account (was billing)\n",
    )
    code, out, err = run_producer_cli(redis_url, keys, "label", "T-404", "account")
    assert (code, out) == (
        2,
        "",
    ) and err == "ticketq-producer: unknown ticket T-404 (no result and no text)\n"
    code, _, err = run_producer_cli(redis_url, keys, "label", "T-1", "refunds")
    assert code == 2 and err.count("\n") == 1 and "unknown label refunds" in err
    code, out, _ = run_producer_cli(redis_url, keys, "corrections")
    row = json.loads(out)
    assert code == 0 and (row["id"], row["label"], row["by"], row["text"]) == (
        "T-1",
        "account",
        "carol",
        "locked out",
    )

    assert run_producer_cli(redis_url, keys, "heads")[2] == "no head published\n"
    head = tmp_path / "h.safetensors"
    head.write_bytes(b"\x01\x02head")
    code, _, err = run_producer_cli(redis_url, keys, "publish-head", str(head), "--by", "ci")
    assert code == 0 and "head version 1" in err
    assert Client(r, keys.prefix).current_head() == ("1", b"\x01\x02head")
    code, out, _ = run_producer_cli(redis_url, keys, "heads")
    assert code == 0 and out.splitlines()[1].split()[0] == "1" and out.splitlines()[1].split()[-1] == "ci"
    code, out, _ = run_producer_cli(redis_url, keys, "heads", "--json")
    assert json.loads(out)["version"] == "1"
    code, _, err = run_producer_cli(redis_url, keys, "publish-head", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("ticketq-producer: ") and err.count("\n") == 1


def test_a_trimmed_result_no_longer_lets_any_label_through(r: redis.Redis, keys: Keys) -> None:
    """Issue 19: the task's labels live in P:labelset (every worker writes it at start), so the label is
    checked even after the result was trimmed."""
    from worker.queue import RedisQueue
    from worker.startcheck import publish_labels

    publish_labels(RedisQueue(r, keys, "w1"), ["billing", "account"])
    r.set(keys.text("T-4"), "kept text, result trimmed")
    with pytest.raises(LabelError, match=r"unknown label whatever \(labels: account, billing\)"):
        Client(r, keys.prefix).label("T-4", "whatever")
    assert Client(r, keys.prefix).label("T-4", "account").label == "account"


def test_a_label_set_grown_by_hand_is_named_not_listed_nor_read_whole(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown label's error listed the whole set, sorted and joined inside label.lua (200,000 labels
    by hand: 364 ms of Redis and a 3 MB message), and every dashboard page read it with SMEMBERS. Now a
    set past 200 is named in the error, and labels_of reads at most MAX_OFFERED_LABELS of it."""
    from producer import client as client_module

    r.sadd(keys.labelset, *[f"L{i:04}" for i in range(300)])
    r.set(keys.text("T-4"), "kept text")
    c = Client(r, keys.prefix)
    with pytest.raises(
        LabelError, match=rf"unknown label nope \(labels: 300 of them, .*SMEMBERS {keys.labelset}"
    ):
        c.label("T-4", "nope")
    assert c.label("T-4", "L0007").label == "L0007"
    assert len(c.labels_of(also=["zz"])) == 301
    monkeypatch.setattr(client_module, "MAX_OFFERED_LABELS", 100)
    offered = c.labels_of(also=["zz"])
    assert (
        len(offered) == 101 and "zz" in offered and set(offered) <= {f"L{i:04}" for i in range(300)} | {"zz"}
    )


def test_a_further_questions_corrections_and_heads_have_keys_of_their_own(r: redis.Redis, keys: Keys) -> None:
    from worker.startcheck import publish_labels

    publish_labels(RedisQueue(r, keys, "w1"), ["billing", "account"], {"intent": ["lost_card", "refund"]})
    client = Client(r, keys.prefix)
    answers = {"intent": {"label": "lost_card", "scores": {"lost_card": 0.7, "refund": 0.3}}}
    scores = {"billing": 0.6, "account": 0.4}
    r.hset(keys.results, "T-9", Result("T-9", "billing", scores, "m", "d", answers=answers).to_json())
    r.set(keys.text("T-9"), "my card is gone", ex=60)
    with pytest.raises(
        LabelError, match=r"unknown label billing for question intent \(labels: lost_card, refund"
    ):
        client.label("T-9", "billing", question="intent")  # checked against intent's labels, not the primary
    c = client.label("T-9", "refund", by="bo", question="intent")
    assert (c.label, c.was) == ("refund", "lost_card")
    assert r.hexists(f"{keys.prefix}:q:intent:labels", "T-9") and not r.exists(keys.labels)
    assert [x.label for x in read_corrections(client, "intent")] == ["refund"]
    assert read_corrections(client) == []
    client.label("T-9", "account")  # the primary's correction is apart
    assert [x.label for x in read_corrections(client)] == ["account"]
    assert client.publish_head(b"intent-head", question="intent") == "1"
    assert client.publish_head(b"team-head") == "1"  # versions count per question
    assert client.current_head("intent") == ("1", b"intent-head")
    assert client.current_head() == ("1", b"team-head")
    assert [v.version for v in client.head_versions("intent")] == ["1"]
    with pytest.raises(ValueError, match="without ':'"):
        client.current_head("a:b")


def test_a_wrong_correction_can_be_withdrawn_and_is_no_longer_trained_on(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Labelling again replaced a correction, but nothing removed one: a slip (the wrong id, a label for
    the wrong question) stayed in every later train --from-redis."""
    from worker.startcheck import publish_labels

    publish_labels(RedisQueue(r, keys, "w1"), ["billing", "account"], {"intent": ["lost_card", "refund"]})
    client = Client(r, keys.prefix)
    for tid in ("T-1", "T-2"):
        seen(r, keys, tid, f"text of {tid}")
        client.label(tid, "account")
    client.label("T-1", "refund", question="intent")
    gone = client.unlabel("T-1")
    assert (gone.id, gone.label, gone.text, gone.was) == ("T-1", "account", "text of T-1", "billing")
    assert [c.id for c in read_corrections(client)] == ["T-2"]
    assert [c.label for c in read_corrections(client, "intent")] == ["refund"]  # the question's is apart
    with pytest.raises(LabelError, match=r"^no correction of ticket T-1$"):
        client.unlabel("T-1")
    with pytest.raises(LabelError, match=r"unknown question urgency \(questions: intent\)"):
        client.unlabel("T-1", question="urgency")
    assert client.unlabel("T-1", question="intent").label == "refund"
    assert not r.exists(f"{keys.prefix}:q:intent:labels")
    r.hset(keys.labels, "T-3", "not json")  # written by hand: still removable
    assert client.unlabel("T-3").label == "" and not r.hexists(keys.labels, "T-3")

    assert run_producer_cli(redis_url, keys, "unlabel", "T-2") == (
        0,
        "",
        "T-2: correction account withdrawn\n",
    )
    assert run_producer_cli(redis_url, keys, "unlabel", "T-2") == (
        2,
        "",
        "ticketq-producer: no correction of ticket T-2\n",
    )
    assert read_corrections(client) == [] and r.exists(
        keys.text("T-2")
    )  # the text stays: it can be relabelled
    assert client.label("T-2", "billing").label == "billing"


def test_unlabel_is_one_redis_command_from_any_language(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    need_binary("redis-cli")
    seen(r, keys, "T-5", "text")
    Client(r, keys.prefix).label("T-5", "account")
    script = str(LABEL_LUA.with_name("unlabel.lua"))
    cmd = ["redis-cli", "-u", redis_url, "--eval", script, keys.labels, ",", "T-5"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["label"] == "account" and not r.hexists(keys.labels, "T-5")
    again = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert again.strip() == ""  # nil: nothing to withdraw


class AskingClassifier(FakeClassifier):
    """Takes a head per question; the 'head' is its bytes (b'bad' is refused)."""

    questions = ("intent", "urgency")

    def __init__(self) -> None:
        super().__init__()
        self.head: Any = None
        self.answer_heads: dict[str, Any] = {}

    def load_head(self, data: bytes, version: str, question: str | None = None) -> None:
        if data == b"bad":
            raise ValueError("not a head")
        if question is None:
            self.head = (data, version)
        else:
            self.answer_heads[question] = (data, version)


def test_the_watch_follows_every_questions_published_head(r: redis.Redis, keys: Keys) -> None:
    classifier = AskingClassifier()
    watch = HeadWatch(r, keys, classifier)
    client = Client(r, keys.prefix)
    with capture_logs() as logs:
        assert watch.check() is False
        client.publish_head(b"i1", question="intent")
        assert watch.check() is True and classifier.answer_heads == {"intent": (b"i1", "1")}
        assert classifier.head is None and watch.check() is False
        client.publish_head(b"t1")
        client.publish_head(b"bad", question="urgency")
        assert watch.check() is True and classifier.head == (b"t1", "1")
        assert "urgency" not in classifier.answer_heads and watch.check() is False  # refused once
    events = [(e["event"], e.get("question"), e["version"]) for e in logs]
    assert events == [
        ("head_loaded", "intent", "1"),
        ("head_loaded", None, "1"),
        ("head_rejected", "urgency", "1"),
    ]


def test_a_worker_started_after_a_bad_publish_serves_the_fleets_last_good_head(
    r: redis.Redis, keys: Keys
) -> None:
    """Noticed in the twentieth session: after a publish every worker refuses, the running workers kept the
    head they had while a worker started since served its task's own head: the fleet disagreed until a good
    head was published. The last head a worker loaded is kept (P:head:good); one refusing the current head
    serves it, for every question."""
    client = Client(r, keys.prefix)
    running = AskingClassifier()
    old = HeadWatch(r, keys, running)
    client.publish_head(b"t1")
    client.publish_head(b"i1", question="intent")
    assert old.check() is True and r.hget(keys.head_good, "version") == b"1"
    assert r.hget(keys.asking("intent").head_good, "data") == b"i1"
    client.publish_head(b"bad")
    client.publish_head(b"bad", question="intent")
    with capture_logs() as logs:
        assert old.check() is False  # refused; it already serves the last good head: nothing reloaded
    assert (running.head, running.answer_heads["intent"]) == ((b"t1", "1"), (b"i1", "1"))
    assert [e["event"] for e in logs] == ["head_rejected", "head_rejected"]
    assert r.hget(keys.head_good, "version") == b"1"  # a refused head is never kept
    started = AskingClassifier()
    with capture_logs() as logs:
        assert HeadWatch(r, keys, started).check() is True
    assert (started.head, started.answer_heads["intent"]) == (running.head, running.answer_heads["intent"])
    fell = [(e["event"], e.get("question"), e["version"]) for e in logs if e["event"] != "head_rejected"]
    assert fell == [
        ("head_fallback", None, "1"),
        ("head_loaded", None, "1"),
        ("head_fallback", "intent", "1"),
        ("head_loaded", "intent", "1"),
    ]
    client.publish_head(b"t3")  # a good publish: every worker serves it, and it is the one kept
    assert old.check() is True and HeadWatch(r, keys, AskingClassifier()).check() is True
    assert running.head == (b"t3", "3") and r.hget(keys.head_good, "data") == b"t3"


def test_the_last_good_head_of_the_wrong_type_is_replaced_not_a_crash(r: redis.Redis, keys: Keys) -> None:
    r.set(keys.head_good, "junk")  # by hand, or an older tool
    client, classifier = Client(r, keys.prefix), AskingClassifier()
    client.publish_head(b"bad")
    watch = HeadWatch(r, keys, classifier)
    assert watch.check() is False and classifier.head is None  # no last good head to serve
    client.publish_head(b"t2")
    assert watch.check() is True and r.hmget(keys.head_good, ["version", "data"]) == [b"2", b"t2"]
    r.hdel(keys.head_good, "data")  # no data: not a head to fall back to
    client.publish_head(b"bad")
    assert HeadWatch(r, keys, AskingClassifier()).check() is False


def test_the_last_good_head_is_kept_without_copy_too(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    """keep_head.lua copies P:head inside the server (COPY: no 39 MB through Lua); a worker whose ACL
    predates it (or a Redis before 6.2) keeps the head by moving its bytes, as before, not an error."""
    user, password = f"ticketq-test-{os.urandom(4).hex()}", os.urandom(8).hex()
    r.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.prefix}*"], commands=["+@all", "-copy"]
    )
    try:
        url = redis_url.replace("redis://", f"redis://{user}:{password}@", 1)
        narrow = redis.Redis.from_url(url)
        with pytest.raises(redis.exceptions.NoPermissionError):
            narrow.copy(keys.head, keys.head_good)
        Client(r, keys.prefix).publish_head(b"t1")
        watch = HeadWatch(narrow, keys, AskingClassifier())
        assert watch.check() is True
        assert r.hmget(keys.head_good, ["version", "data"]) == [b"1", b"t1"]
        Client(r, keys.prefix).publish_head(b"t2")  # and with COPY allowed: the whole hash, copied
        assert HeadWatch(r, keys, AskingClassifier()).check() is True
        assert r.hgetall(keys.head_good) == r.hgetall(keys.head)
        narrow.close()
    finally:
        r.acl_deluser(user)


def _script_args_carried(r: redis.Redis) -> int:
    """The most bytes any EVALSHA argument had since SLOWLOG was set to log everything (it keeps the first
    128 bytes of an argument and says how many more): whether a head's bytes went through the script."""
    most = 0
    for entry in r.slowlog_get(128):
        command = entry["command"]
        if command.upper().startswith(b"EVALSHA"):
            cut = [int(m) for m in re.findall(rb"\((\d+) more bytes\)", command)]
            most = max([most, *[128 + n for n in cut]])
    return most


@pytest.mark.parametrize("denied", ["", "-rename", "-expire", "-persist", "-hexists"])
def test_a_head_is_published_through_a_staging_key_and_without_one_where_refused(
    redis_url: str, r: redis.Redis, keys: Keys, denied: str
) -> None:
    """publish_head.lua took a head's bytes as an argument: 95-115 ms of Redis for 39 MB, every client held.
    The publisher now HSETs them to a staging key of its own (with a TTL) and the script renames it onto
    P:head; a user refused RENAME, PERSIST or EXPIRE (an ACL line from before) publishes as before. Either
    way: the head whole, no TTL on it, no staging key left."""
    user, password = f"ticketq-test-{os.urandom(4).hex()}", os.urandom(8).hex()
    commands = ["+@all", *([denied] if denied else [])]
    r.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.prefix}*"], commands=commands)
    try:
        narrow = redis.Redis.from_url(redis_url.replace("redis://", f"redis://{user}:{password}@", 1))
        client = Client(narrow, keys.prefix)
        data = os.urandom(300_000)
        r.config_set("slowlog-log-slower-than", 0)
        r.slowlog_reset()
        try:
            assert client.publish_head(data, by="ci") == "1"
            carried = _script_args_carried(r)
        finally:
            r.config_set("slowlog-log-slower-than", 10000)
        assert r.hmget(keys.head, ["version", "data", "by"]) == [b"1", data, b"ci"]
        assert r.ttl(keys.head) == -1 and not list(r.scan_iter(f"{keys.prefix}:head:staging:*"))
        assert client.publish_head(b"two", question="intent") == "1"
        assert r.hmget(keys.asking("intent").head, ["version", "data"]) == [b"1", b"two"]
        assert not list(r.scan_iter(f"{keys.prefix}:q:intent:head:staging:*"))
        staged = denied != "-expire"  # EXPIRE refused: no staging key at all
        assert (carried < 1000) is staged, carried
        narrow.close()
    finally:
        r.acl_deluser(user)


def test_a_head_judged_against_another_version_leaves_no_staging_key(r: redis.Redis, keys: Keys) -> None:
    client = Client(r, keys.prefix)
    client.publish_head(b"first")
    with pytest.raises(HeadChanged):
        client.publish_head(b"second", replacing="")  # judged against none; version 1 is current
    assert client.current_head() == ("1", b"first")
    assert not list(r.scan_iter(f"{keys.prefix}:head:staging:*"))  # not left for its 10 minutes


def test_a_staging_key_gone_before_the_script_publishes_nothing(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(r, keys.prefix)
    client.publish_head(b"first")
    monkeypatch.setattr(client, "_stage", lambda k, data: k.head_staging("expired"))
    with pytest.raises(HeadChanged, match="staging key expired"):
        client.publish_head(b"second")
    assert client.current_head() == ("1", b"first") and len(client.head_versions()) == 1


def test_a_further_questions_label_is_checked_against_its_label_set_without_an_answer(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Audit finding 9: with no head for a question yet (no ``answers.NAME`` to check by), label.lua took any
    label for it, and any question name; train --from-redis then failed. Workers now publish each
    question's labels (P:q:NAME:labelset) and P:questions at start, and label.lua checks against them."""
    from worker.startcheck import publish_labels

    scores = {"billing": 0.7, "account": 0.3}
    r.hset(keys.results, "T-1", Result("T-1", "billing", scores, "m", "d").to_json())  # no answers at all
    r.set(keys.text("T-1"), "my card was stolen", ex=60)
    client = Client(r, keys.prefix)
    with pytest.raises(LabelError, match=r"unknown question intent \(questions: none published"):
        client.label("T-1", "lost_card", question="intent")  # no worker has published its questions
    queue = RedisQueue(r, keys, "w1")
    publish_labels(
        queue, ["billing", "account"], {"intent": ["lost_card", "card_arrival"], "urgency": ["high"]}
    )
    assert r.smembers(keys.questions) == {b"intent", b"urgency"}
    assert r.smembers(keys.asking("intent").labelset) == {b"lost_card", b"card_arrival"}
    code, _, err = run_producer_cli(redis_url, keys, "label", "--question", "intent", "T-1", "lost_crad")
    assert (
        code == 2 and "unknown label lost_crad for question intent (labels: card_arrival, lost_card)" in err
    )
    code, _, err = run_producer_cli(redis_url, keys, "label", "--question", "intnet", "T-1", "anything")
    assert code == 2 and "unknown question intnet (questions: intent, urgency)" in err
    assert not r.exists(keys.asking("intent").labels) and not r.exists(keys.asking("intnet").labels)
    code, _, err = run_producer_cli(redis_url, keys, "label", "--question", "intent", "T-1", "lost_card")
    assert code == 0 and [c.label for c in read_corrections(client, "intent")] == ["lost_card"]
    # a question dropped from the task (a worker started without it) is refused again, though its set stays
    publish_labels(queue, ["billing", "account"], {"intent": ["lost_card", "card_arrival"]})
    with pytest.raises(LabelError, match=r"unknown question urgency \(questions: intent\)"):
        client.label("T-1", "high", question="urgency")
    assert client.label("T-1", "account").label == "account"  # the primary is as before


def test_a_worker_publishes_its_questions_label_sets_at_start(r: redis.Redis, keys: Keys) -> None:
    from types import SimpleNamespace

    from worker.startcheck import question_labels

    task = SimpleNamespace(
        questions=[SimpleNamespace(name="intent", labels=("lost_card", "refund")), SimpleNamespace(name="x")]
    )
    classifier = SimpleNamespace(task=task, questions=("intent",))
    assert question_labels(classifier) == {"intent": ["lost_card", "refund"]}
    assert question_labels(FakeClassifier()) == {}  # a double without a task: nothing to publish


def test_a_label_outside_a_trimmed_results_scores_is_a_correction_and_a_near_miss_is_named(
    r: redis.Redis, keys: Keys
) -> None:
    """A worker run with ``--result-scores 2`` writes each result's two most probable labels only; the
    right label is often another, so label.lua checks the published label set, not the result's scores.
    A label that is not one gets the closest published ones as a hint (dozens of intents are mistyped)."""
    from worker.startcheck import publish_labels

    intents = ["card_arrival", "card_delivery_estimate", "lost_or_stolen_card", "refund_not_showing_up"]
    publish_labels(RedisQueue(r, keys, "w1"), intents)
    scores = {"card_delivery_estimate": 0.5, "lost_or_stolen_card": 0.3}  # the top two only
    r.hset(keys.results, "T-8", Result("T-8", "card_delivery_estimate", scores, "m", "d").to_json())
    r.set(keys.text("T-8"), "still no card after two weeks", ex=60)
    client = Client(r, keys.prefix)
    c = client.label("T-8", "card_arrival")
    assert (c.label, c.was) == ("card_arrival", "card_delivery_estimate")
    with pytest.raises(
        LabelError, match=r"unknown label Card arrival \(labels: .*\); did you mean card_arrival\?$"
    ):
        client.label("T-8", "Card arrival")
    publish_labels(RedisQueue(r, keys, "w1"), [*intents, "caf\u00e9"])
    with pytest.raises(
        LabelError, match=r"'café' is spelt with other code points \('cafe\\u0301' against 'caf\\xe9'\)$"
    ):
        client.label("T-8", "cafe\u0301")  # a decomposed é: the same letters to the eye
    with pytest.raises(
        LabelError, match=r"unknown label parking \(labels: [^;]*\)$"
    ):  # nothing near: no hint
        client.label("T-8", "parking")


def test_hand_written_head_records_stop_no_worker_and_no_command(
    r: redis.Redis, keys: Keys, redis_url: str
) -> None:
    """P:head and P:heads are anyone's to write: a version that is not UTF-8 is a change the watch looks
    at (the bytes are then refused), a history entry no publish wrote is skipped, a typo in a question's
    name is refused once the workers have said which questions their task asks."""
    classifier = AskingClassifier()
    watch = HeadWatch(r, keys, classifier)
    r.hset(keys.head, mapping={"version": b"\xff", "data": b"t1"})
    assert watch.check() is True and classifier.head == (b"t1", "\ufffd")
    client = Client(r, keys.prefix)
    assert client.current_head() == ("\ufffd", b"t1")
    r.rpush(
        keys.heads, b"5", b"[1]", b"{", json.dumps({"version": "2", "at": 1e400, "gate": {"candidate": "x"}})
    )
    (entry,) = client.head_versions()
    assert (entry.version, entry.at, entry.gate) == ("2", 0.0, None)
    code, out, _ = run_producer_cli(redis_url, keys, "heads")  # the table: no traceback
    assert code == 0 and out.splitlines()[1].split()[0] == "2"
    r.sadd(keys.questions, "intent")
    with pytest.raises(ValueError, match=r"asks no question 'intnet'; its questions: intent$"):
        client.publish_head(b"i1", question="intnet")
    assert not r.exists(keys.asking("intnet").head)
    assert client.publish_head(b"i1", question="intent") == "1"
    with pytest.raises(LabelError, match="ticket id: not valid Unicode"):
        client.label("T-\udcff", "billing")


def test_a_head_judged_against_one_version_does_not_replace_another_published_meanwhile(
    r: redis.Redis, keys: Keys
) -> None:
    """train --publish names the version its gate compared with: a head published while it trained is
    not replaced unjudged (the script compares and sets in one step)."""
    client = Client(r, keys.prefix)
    assert client.publish_head(b"a", replacing="") == "1"
    assert client.publish_head(b"b") == "2"  # meanwhile, by hand
    with pytest.raises(HeadChanged, match=r"version 2 is current now, not 1\)"):
        client.publish_head(b"c", replacing="1")
    assert client.current_head() == ("2", b"b") and len(client.head_versions()) == 2
    assert client.publish_head(b"c", replacing="2") == "3"
    with pytest.raises(HeadChanged, match=r"version 3 is current now, not none\)"):
        client.publish_head(b"d", replacing="")


def test_a_key_of_the_wrong_type_fails_label_and_publish_before_they_write(
    r: redis.Redis, keys: Keys
) -> None:
    """Audit: a script is not rolled back. label.lua wrote the correction and then failed on a P:review
    that was a string (exit 4 "Redis refused", the correction recorded all the same); publish_head.lua
    replaced P:head, which every worker loads, then failed on a P:heads that was a string (no history)."""
    client = Client(r, keys.prefix)
    seen(r, keys, "T-1", "locked out")
    r.set(keys.review, "by hand")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.label("T-1", "account")
    assert not r.exists(keys.labels)
    r.set(keys.heads, "by hand")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.publish_head(b"account")
    assert not r.exists(keys.head) and not r.exists(keys.head_seq)


def test_a_redis_error_while_keeping_the_head_is_retried_not_forgotten(r: redis.Redis, keys: Keys) -> None:
    """Review: the version was marked seen before the keep (or the fallback) ran, so a Redis error there,
    retried by the service, found nothing new and the last good head was never kept."""
    from worker.errors import TransientError

    watch, client = HeadWatch(r, keys, AskingClassifier()), Client(r, keys.prefix)
    keep, calls = watch._keep, []

    def flaky(**kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ConnectionError("reset by peer")
        return keep(**kw)

    watch._keep = flaky
    client.publish_head(b"t1")
    with pytest.raises(TransientError):
        watch.check()
    assert watch.check() is True and r.hget(keys.head_good, "version") == b"1"

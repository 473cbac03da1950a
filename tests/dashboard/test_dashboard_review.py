"""The "Needs review" page: the review queue least confident first, confirm or correct in one click (a
correction recorded, the ticket off the queue), and the queue's size and age on the overview."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import cast

import pytest
import redis
from dashboard_seed import TOKEN, XSS, Seeded
from starlette.testclient import TestClient

from producer.client import Client
from producer.dashboard.security import Auth
from producer.protocol import Keys, Result

pytestmark = pytest.mark.redis


def test_review_page_confirms_and_corrects_least_confident_first(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys, redis_url: str, prefix: str
) -> None:
    r.zadd(keys.review, {"T-XSS": 0.55, "T-3": 0.4, "T-2": 0.62})
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        client.post("/login", data={"token": TOKEN})
        page = client.get("/review")
        assert page.status_code == 200
        html = page.text
        assert "Needs review" in html and "(3; the oldest" in html
        order = [m for m in re.findall(r'<tr data-id="([^"]+)"', html)]
        assert order == ["T-3", "T-XSS", "T-2"]  # least confident first
        assert XSS not in html and "&lt;script" in html  # the ticket text is escaped
        assert "billing 40%" in html  # the top labels with their probabilities
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)  # type: ignore[union-attr]
        origin = {"origin": str(client.base_url)}
        confirm = client.post(
            "/actions/label",
            data={"id": "T-3", "label": "billing", "back": "review", "csrf": csrf},
            headers=origin,
            follow_redirects=False,
        )
        assert confirm.status_code == 303 and confirm.headers["location"] == "/review"
        correct = client.post(
            "/actions/label",
            data={"id": "T-2", "label": "account", "back": "review", "csrf": csrf},
            headers=origin,
            follow_redirects=False,
        )
        assert correct.status_code == 303
        assert [m.decode() for m in cast(list[bytes], r.zrange(keys.review, 0, -1))] == ["T-XSS"]
        stored = Client(redis.Redis.from_url(redis_url), prefix).correction_records()
        assert {(c.id, c.label, c.was) for c in stored} == {
            ("T-3", "billing", "billing"),
            ("T-2", "account", "technical"),
        }
        after = client.get("/review").text
        assert re.findall(r'<tr data-id="([^"]+)"', after) == ["T-XSS"]


def test_overview_shows_the_review_queue(make_app, seeded: Seeded, r: redis.Redis, keys: Keys) -> None:
    r.zadd(keys.review, {"T-3": 0.4})
    with TestClient(make_app()) as client:
        client.get("/")  # the sampler's first reading
        body = client.get("/api/overview").json()
        assert body["review"] == 1 and body["review_oldest_s"] is not None
        assert 'id="n-review">1<' in client.get("/").text
    with TestClient(make_app(Auth(token=TOKEN))) as client:  # the queue is read behind the sign-in
        assert client.get("/review").status_code == 401


def test_results_show_the_publish_gate_of_the_head_in_use(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    import json
    import struct

    side = {"accuracy": 0.963, "corrections_accuracy": 0.6, "recall": {}}
    gate = {
        "n": 1510,
        "corrections": 15,
        "candidate": side,
        "current_name": "the task's head (head_data)",
        "current": {**side, "accuracy": 0.958, "corrections_accuracy": 0.0},
        "forced": False,
    }
    meta = json.dumps({"format": "ticketq-head/1", "training": {"n": 1510, "gate": gate}})
    header = json.dumps({"__metadata__": {"ticketq": meta}}).encode()
    Client(r, keys.prefix).publish_head(struct.pack("<Q", len(header)) + header)
    with TestClient(make_app()) as client:
        html = client.get("/results").text
    assert "Publish gate, out of fold on 1510 tickets (15 corrections): accuracy 96% against 96%" in html
    assert "on the corrections 60% against 0%" in html


def test_a_further_questions_queue_has_a_tab_and_is_labelled_for_that_question(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    """Issue 22 item 2 on the page: a tab per question live workers ask (their heartbeats name them),
    with its queue's size; the intent tab lists the tickets whose intent answer is unsure, with that
    answer's label and probabilities, and Confirm/Correct record an intent correction and take the
    ticket off intent's queue only."""
    import json

    beat = {"id": "w1", "model": "fake", "host": "h", "at": 0, "questions": ["intent", "bad:name", 7]}
    r.set(keys.heartbeat("w1"), json.dumps(beat), ex=60)
    answer = {
        "label": "lost_card",
        "scores": {"lost_card": 0.55, "refund": 0.45},
        "confidence": 0.55,
        "review": True,
    }
    for tid in ("T-1", "T-2"):
        result = Result.from_json(cast(bytes, r.hget(keys.results, tid)))
        r.hset(keys.results, tid, replace(result, answers={"intent": answer}).to_json())
    r.zadd(keys.asking("intent").review, {"T-1": 0.1, "T-2": 0.3})
    r.zadd(keys.review, {"T-3": 0.4})
    # what every worker publishes at start: the questions and their labels, which label.lua checks
    r.sadd(keys.questions, "intent")
    r.sadd(keys.asking("intent").labelset, "lost_card", "refund")
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        client.post("/login", data={"token": TOKEN})
        client.get("/")  # the sampler's first reading: it names the questions
        primary = client.get("/review").text
        tabs = re.findall(r'data-question="([^"]*)"[^>]*>([^<]*)<span class="of">(\d+)</span>', primary)
        assert [(q, n) for q, _, n in tabs] == [("", "1"), ("intent", "2")]  # the odd names are left out
        assert re.findall(r'<tr data-id="([^"]+)"', primary) == ["T-3"]
        page = client.get("/review?question=intent")
        assert page.status_code == 200
        html = page.text
        assert re.findall(r'<tr data-id="([^"]+)"', html) == ["T-1", "T-2"]
        assert "lost_card 55%" in html and "Confirm lost_card" in html and '<option value="refund">' in html
        assert 'name="question" value="intent"' in html and "--question intent" in html
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)  # type: ignore[union-attr]
        fixed = client.post(
            "/actions/label",
            data={"id": "T-2", "label": "refund", "question": "intent", "back": "review", "csrf": csrf},
            headers={"origin": str(client.base_url)},
            follow_redirects=False,
        )
        assert fixed.status_code == 303 and fixed.headers["location"] == "/review?question=intent"
        assert r.zrange(keys.asking("intent").review, 0, -1) == [b"T-1"]
        assert r.zrange(keys.review, 0, -1) == [b"T-3"]  # the primary's queue is another matter
        stored = Client(r, keys.prefix).correction_records("intent")
        assert [(c.id, c.label, c.was) for c in stored] == [("T-2", "refund", "lost_card")]
        assert client.get("/review?question=a:b").status_code == 400
        assert client.get("/review?question=" + "x" * 65).status_code == 400
        bad = client.post(
            "/actions/label",
            data={"id": "T-1", "label": "refund", "question": "a:b", "back": "review", "csrf": csrf},
            headers={"origin": str(client.base_url)},
        )
        assert bad.status_code == 400 and r.zcard(keys.asking("intent").review) == 1


def test_results_with_their_top_labels_only_still_offer_every_published_label(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    """Workers run with ``--result-scores 2`` write each result's two most probable labels only: the right
    label for a correction is often not among them, so the review queue, the ticket page and the results
    page offer the label set the workers publish (``P:labelset``), not the result's scores."""
    every = ["account", "billing", "card_arrival", "refund", "technical"]
    r.sadd(keys.labelset, *every)
    result = Result.from_json(cast(bytes, r.hget(keys.results, "T-3")))
    trimmed = replace(result, label="billing", scores={"billing": 0.5, "technical": 0.3})
    r.hset(keys.results, "T-3", trimmed.to_json())
    r.zadd(keys.review, {"T-3": 0.2})
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        client.post("/login", data={"token": TOKEN})
        for page in ("/review", "/tickets/T-3", "/results"):
            html = client.get(page).text
            offered = set(re.findall(r'<option value="([^"]+)"', html))
            assert {"card_arrival", "refund", "account"} <= offered, page
        r.delete(keys.labelset)
        r.set(keys.labelset, "a string where the set belongs")  # WRONGTYPE for SMEMBERS: the scores' names
        html = client.get("/tickets/T-3").text
        assert set(re.findall(r'<option value="([^"]+)"', html)) == {"billing", "technical"}

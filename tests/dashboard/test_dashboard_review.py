"""The "Needs review" page: the review queue least confident first, confirm or correct in one click (a
correction recorded, the ticket off the queue), and the queue's size and age on the overview."""

from __future__ import annotations

import re
from typing import cast

import pytest
import redis
from dashboard_seed import TOKEN, XSS, Seeded
from starlette.testclient import TestClient

from producer.client import Client
from producer.dashboard.security import Auth
from producer.protocol import Keys

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

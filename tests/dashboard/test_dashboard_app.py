"""The dashboard through Starlette's TestClient: pages show what is in Redis, escaped; actions are refused
without credentials, without the CSRF token and from another site."""

from __future__ import annotations

import base64
import re

import pytest
import redis
from dashboard_seed import TOKEN, XSS, Seeded
from starlette.testclient import TestClient

from producer.client import Client
from producer.dashboard.security import Auth
from producer.protocol import Keys, Result

pytestmark = pytest.mark.redis


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def test_overview_shows_the_numbers_in_redis(make_app, seeded: Seeded) -> None:
    with TestClient(make_app()) as client:
        page = client.get("/")
        assert page.status_code == 200
        html = page.text
        assert f'id="n-waiting">{seeded.waiting}<' in html
        assert f'id="n-inflight">{seeded.inflight}<' in html
        assert f'id="n-dead">{seeded.dead}<' in html
        assert 'id="n-alive">1<' in html
        assert "42 s" in html or "41 s" in html  # oldest waiting, from its enqueued_at
        data = client.get("/api/overview").json()
        assert (data["waiting"], data["inflight"], data["dead"], data["alive"]) == (7, 4, 3, 1)
        beat = {w["id"]: w for w in data["workers"]}
        assert beat["w1"]["alive"] and 2 <= beat["w1"]["heartbeat_age_s"] < 10
        assert not beat["w2"]["alive"] and beat["w2"]["heartbeat_age_s"] is None
        assert set(client.get("/api/history").json()) == {"t", "rate", "waiting", "labels"}


def test_results_escape_ticket_text_and_filter(make_app, seeded: Seeded) -> None:
    with TestClient(make_app()) as client:
        html = client.get("/results").text
        assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "I was charged twice" in html
        for tid in seeded.results:
            assert f"<code>{tid}</code>" in html
        billing = client.get("/results", params={"label": "billing"}).text
        assert "<code>T-1</code>" in billing and "<code>T-2</code>" not in billing
        low = client.get("/results", params={"low": "1"}).text
        assert "<code>T-3</code>" in low and "<code>T-1</code>" not in low
        one = client.get("/results", params={"q": "T-2"}).text
        assert "<code>T-2</code>" in one and "<code>T-1</code>" not in one
        dead = client.get("/dead").text
        assert XSS not in dead and "&lt;script&gt;alert(1)&lt;/script&gt;" in dead
        assert "missing field: text" in dead


def test_the_search_finds_an_id_as_typed_then_without_a_paste_s_spaces(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    """The search stripped the query: an id that begins with a space (the protocol allows it) was never
    found by it. Now the id as typed, else stripped (a pasted id's trailing newline)."""
    spaced = Result(id=" T-2", label="billing", scores={"billing": 1.0}, model="fake", digest="d")
    r.hset(keys.results, " T-2", spaced.to_json())
    with TestClient(make_app()) as client:
        exact = client.get("/results", params={"q": " T-2"}).text
        assert "<code> T-2</code>" in exact and "<code>T-2</code>" not in exact
        pasted = client.get("/results", params={"q": "T-2\n"}).text
        assert "<code>T-2</code>" in pasted and "<code> T-2</code>" not in pasted
        spaces = client.get("/results", params={"q": "   "}).text  # no id: the list, not an empty page
        assert "<code>T-1</code>" in spaces and "<code>T-2</code>" in spaces
        long_id = client.get("/results", params={"q": "T-2" + " " * 300})  # a paste's spaces past the limit
        assert long_id.status_code == 200 and "<code>T-2</code>" in long_id.text


def test_pages_carry_a_content_security_policy(make_app, seeded: Seeded) -> None:
    with TestClient(make_app()) as client:
        headers = client.get("/").headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"


def test_read_only_without_credentials(make_app, seeded: Seeded) -> None:
    with TestClient(make_app()) as client:
        assert "Correct</button>" not in client.get("/results").text
        refused = client.post("/actions/label", data={"id": "T-1", "label": "technical"})
        assert refused.status_code == 403 and "read-only" in refused.text
        assert client.post("/actions/replay", data={"all": "1"}).status_code == 403
        assert client.post("/actions/unlabel", data={"id": "T-1"}).status_code == 403


def test_actions_need_sign_in_and_csrf(make_app, seeded: Seeded, redis_url: str, prefix: str) -> None:
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        assert client.post("/actions/label", data={"id": "T-1", "label": "technical"}).status_code == 401
        assert client.post("/login", data={"token": "wrong-token-xxxx"}).status_code == 401
        signed = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert signed.status_code == 303 and TOKEN not in signed.headers["set-cookie"]
        page = client.get("/results").text
        csrf = _csrf(page)
        no_csrf = client.post("/actions/label", data={"id": "T-1", "label": "technical"})
        assert no_csrf.status_code == 403
        done = client.post(
            "/actions/label",
            data={"id": "T-1", "label": "technical", "csrf": csrf},
            headers={"hx-request": "true", "origin": str(client.base_url)},
        )
        assert done.status_code == 200, done.text
        assert "→ technical" in done.text and "head version 1 will learn it" in done.text
        stored = Client(redis.Redis.from_url(redis_url), prefix).correction_records()
        assert {(c.id, c.label, c.was) for c in stored} == {("T-1", "technical", "billing")}
        unknown = client.post("/actions/label", data={"id": "T-1", "label": "nonsense", "csrf": csrf})
        assert unknown.status_code == 422 and "unknown label" in unknown.text
        cross = client.post(
            "/actions/label",
            data={"id": "T-1", "label": "technical", "csrf": csrf},
            headers={"origin": "https://evil.example"},
        )
        assert cross.status_code == 403 and "cross-site" in cross.text


def test_basic_auth_and_bearer(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(Auth(token=TOKEN, basic=("ops", "s3cret-pass")))) as client:
        good = "Basic " + base64.b64encode(b"ops:s3cret-pass").decode()
        bad = "Basic " + base64.b64encode(b"ops:nope").decode()
        assert "Correct</button>" in client.get("/results", headers={"authorization": good}).text
        assert client.get("/results", headers={"authorization": bad}).status_code == 401
        denied = client.post("/actions/label", data={"id": "T-1"}, headers={"authorization": good})
        assert denied.status_code == 403  # basic auth is sent by browsers on their own: CSRF still needed


def test_no_secret_in_pages(redis_url: str, prefix: str, seeded: Seeded) -> None:
    from producer.client import Client
    from producer.dashboard.app import create_app
    from producer.dashboard.web import Config

    url = redis_url.replace("redis://", "redis://user:hunter2-secret@", 1)
    app = create_app(Config(redis_url=url, prefix=prefix), Client.from_url(redis_url, prefix))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for path in ("/", "/results", "/dead", "/api/overview"):
            body = client.get(path).text
            assert "hunter2-secret" not in body
        assert "user:***@" in client.get("/").text


def test_replay_one_and_all(make_app, seeded: Seeded, r: redis.Redis, keys: Keys) -> None:
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        client.post("/login", data={"token": TOKEN})
        page = client.get("/dead").text
        csrf = _csrf(page)
        assert 'name="id" value="D-1"' in page  # the letters without an id can only go with "all"
        one = client.post("/actions/replay", data={"id": "D-1", "csrf": csrf})
        assert one.status_code == 200 and "1 dead letter of that ticket requeued" in one.text
        assert r.llen(keys.dead) == seeded.dead - 1
        assert r.lindex(keys.tickets, 0) == b'{"id": "D-1", "text": "charged again", "v": 1}'
        everything = client.post("/actions/replay", data={"all": "1", "csrf": csrf})
        assert everything.status_code == 200 and r.llen(keys.dead) == 0


def test_head_note_reads_the_published_heads_training_metadata(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    """A head file is safetensors: 8 bytes of header length, a JSON header whose __metadata__.ticketq is
    ticketq's JSON. The dashboard reads it with the standard library (no torch on the producer side)."""
    import json
    import struct

    training = {
        "n": 120,
        "cv_accuracy": 0.93,
        "corrections_accuracy_before": 0.1,
        "corrections_accuracy_after": 0.9,
    }
    header = json.dumps({"__metadata__": {"ticketq": json.dumps({"training": training})}}).encode()
    data = struct.pack("<Q", len(header)) + header
    r.hset(keys.head, mapping={"version": "3", "data": data, "at": "1700000000.5"})
    r.set(keys.head_seq, 3)
    with TestClient(make_app()) as client:
        note = client.get("/results").text
        assert "Published head: version 3" in note and "trained on 120 tickets" in note and "93%" in note
        assert "head version 4 will learn" in note
        assert "10% before, 90% after" in note


def test_results_show_the_answers_to_further_questions(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    from producer.protocol import Result

    answers = {"intent": {"label": "lost_or_stolen_card", "scores": {"lost_or_stolen_card": 1.0}}}
    result = Result("T-1", "billing", {"billing": 1.0}, "m", "d", answers=answers)
    r.hset(keys.results, "T-1", result.to_json())
    with TestClient(make_app()) as client:
        assert "intent: lost_or_stolen_card" in client.get("/results", params={"q": "T-1"}).text

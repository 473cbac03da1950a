"""Every refusal, over HTTP (Starlette's TestClient): reads behind sign-in, a foreign Host, sessions that
end, throttled guessing, and bad input answered 4xx (never 500, never echoed)."""

from __future__ import annotations

import base64
import json
import re
import time

import pytest
import redis
from dashboard_seed import TOKEN, XSS, Seeded
from starlette.testclient import TestClient

from producer.dashboard.security import FAILURES_ALLOWED, Auth, Sessions, Throttle
from producer.dashboard.web import MAX_FORM_BYTES, pct
from producer.protocol import Keys

pytestmark = pytest.mark.redis

BASIC = ("ops", "s3cret-pass")
DATA_ROUTES = (
    "/",
    "/fragments/overview",
    "/api/overview",
    "/api/history",
    "/results",
    "/tickets/T-1",
    "/dead",
)


def _signed_in(client: TestClient) -> str:
    """Sign in with the token; returns a CSRF token from a page."""
    assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/results").text)
    assert match
    return match.group(1)


def test_without_sign_in_no_data_route_answers(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(Auth(token=TOKEN, basic=BASIC))) as client:
        for path in DATA_ROUTES:
            page = client.get(path, headers={"accept": "text/html"}, follow_redirects=False)
            assert page.status_code == 303 and page.headers["location"] == "/login", path
            api = client.get(path, follow_redirects=False)
            assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Basic"), path
            fragment = client.get(path, headers={"accept": "text/html", "hx-request": "true"})
            assert fragment.status_code == 401, path
            for body in (page.text, api.text, fragment.text):
                assert all(text not in body for text in seeded.texts.values()), path
        for path in ("/healthz", "/login", "/static/dashboard.css"):
            assert client.get(path, follow_redirects=False).status_code in (200, 401), path
        assert client.get("/healthz").text == "ok"
        assert client.get("/static/dashboard.css").status_code == 200
        # With it, every route answers, ticket text escaped.
        _signed_in(client)
        for path in DATA_ROUTES:
            assert client.get(path).status_code == 200, path
        html = client.get("/results").text
        assert XSS not in html and "&lt;script&gt;" in html
        assert XSS not in client.get("/tickets/T-XSS").text
        good = "Basic " + base64.b64encode(b"ops:s3cret-pass").decode()
        assert TestClient(client.app).get("/results", headers={"authorization": good}).status_code == 200
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert TestClient(client.app).get("/api/overview", headers=bearer).status_code == 200


def test_a_foreign_host_is_refused(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(), base_url="http://127.0.0.1:8400") as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"host": "localhost:8400"}).status_code == 200
        for host in ("evil.example", "rebind.attacker.test:8400", "127.0.0.1.evil.example"):
            refused = client.get("/api/overview", headers={"host": host})
            assert refused.status_code == 400 and "waiting" not in refused.text, host


def test_allowed_host_is_answered(make_app, seeded: Seeded) -> None:
    app = make_app(allowed_hosts=("tickets.example",))
    with TestClient(app, base_url="http://tickets.example") as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"host": "127.0.0.1"}).status_code == 400


def test_logout_revokes_the_session_server_side(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(Auth(token=TOKEN))) as client:
        csrf = _signed_in(client)
        cookie = client.cookies.get("ticketq_session")
        assert cookie and TOKEN not in cookie
        out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert out.status_code == 303
        replayed = TestClient(client.app)
        replayed.cookies.set("ticketq_session", cookie)
        assert replayed.get("/api/overview").status_code == 401


def test_sessions_expire() -> None:
    sessions = Sessions()
    value = sessions.open(lifetime_s=60, now=1000.0)
    assert sessions.check(value, now=1059.0) is not None
    assert sessions.check(value, now=1060.0) is None
    assert sessions.check(value, now=1001.0) is None  # forgotten once expired
    assert sessions.check("forged", now=1001.0) is None


def test_an_expired_cookie_reads_nothing(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(Auth(token=TOKEN, session_s=0.001))) as client:
        client.post("/login", data={"token": TOKEN})
        assert client.get("/api/overview").status_code == 401


def test_cookies_are_secure_behind_https(make_app, seeded: Seeded) -> None:
    plain = TestClient(make_app(Auth(token=TOKEN)))
    cookie = plain.post("/login", data={"token": TOKEN}, follow_redirects=False).headers["set-cookie"]
    assert (
        "httponly" in cookie.lower()
        and "samesite=strict" in cookie.lower()
        and "secure" not in cookie.lower()
    )
    flagged = TestClient(make_app(Auth(token=TOKEN), secure_cookies=True))
    cookie = flagged.post("/login", data={"token": TOKEN}, follow_redirects=False).headers["set-cookie"]
    assert "secure" in cookie.lower()
    # The forwarded proto counts from the trusted proxy only.
    https = {"x-forwarded-proto": "https"}
    untrusted = TestClient(make_app(Auth(token=TOKEN)))
    reply = untrusted.post("/login", data={"token": TOKEN}, headers=https, follow_redirects=False)
    assert "secure" not in reply.headers["set-cookie"].lower()
    proxied = TestClient(make_app(Auth(token=TOKEN), trusted_proxy="testclient"))
    reply = proxied.post("/login", data={"token": TOKEN}, headers=https, follow_redirects=False)
    assert "secure" in reply.headers["set-cookie"].lower()


def test_failed_sign_ins_are_throttled_per_client(make_app, seeded: Seeded) -> None:
    app = make_app(Auth(token=TOKEN), trusted_proxy="testclient")
    with TestClient(app) as client:
        me = {"x-forwarded-for": "10.0.0.1"}
        for _ in range(FAILURES_ALLOWED):
            assert client.post("/login", data={"token": "wrong-token-xxxx"}, headers=me).status_code == 401
        blocked = client.post("/login", data={"token": TOKEN}, headers=me)  # even the right one, for now
        assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
        other = {"x-forwarded-for": "10.0.0.2"}
        assert (
            client.post("/login", data={"token": TOKEN}, headers=other, follow_redirects=False).status_code
            == 303
        )
        # Guessing the bearer token or basic password counts too.
        client = TestClient(app)  # no session cookie
        guess = {"x-forwarded-for": "10.0.0.3", "authorization": "Bearer wrong-token-xxxx"}
        codes = [client.get("/api/overview", headers=guess).status_code for _ in range(FAILURES_ALLOWED + 1)]
        assert codes == [401] * FAILURES_ALLOWED + [429]
        right = {"x-forwarded-for": "10.0.0.3", "authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/overview", headers=right).status_code == 429


def test_throttle_forgets_after_its_window() -> None:
    throttle = Throttle(allowed=2, window_s=10)
    throttle.failed("a", now=0)
    throttle.failed("a", now=1)
    assert throttle.wait_s("a", now=2) == pytest.approx(8)
    assert throttle.wait_s("b", now=2) == 0
    assert throttle.wait_s("a", now=10.5) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer tökén".encode("latin-1")},
        {"authorization": b"Basic " + "öps:paß".encode("latin-1")},
        {"authorization": b"Basic !!!not-base64"},
        {"authorization": "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode()},
        {"authorization": b"Bearer"},
        {"authorization": b"Digest username=x"},
        {"cookie": "ticketq_session=é\u00ff".encode("latin-1")},
        {"cookie": b'ticketq_session="unterminated; other=='},
    ],
)
def test_malformed_credentials_are_401_not_500(make_app, seeded: Seeded, headers: dict[str, bytes]) -> None:
    with TestClient(make_app(Auth(token=TOKEN, basic=BASIC)), raise_server_exceptions=False) as client:
        assert client.get("/api/overview", headers=headers).status_code == 401


def test_bad_forms_and_csrf_are_4xx_not_500(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(Auth(token=TOKEN)), raise_server_exceptions=False) as client:
        csrf = _signed_in(client)
        form = {"content-type": "application/x-www-form-urlencoded"}
        label = "/actions/label"
        assert client.post(label, content=b"id=T-1&csrf=%C3%A9t%C3%A9", headers=form).status_code == 403
        assert client.post(label, content=b"id=T-1&csrf=%ff%fe", headers=form).status_code == 400
        assert client.post(label, content="csrf=é".encode(), headers=form).status_code == 400
        huge = b"id=T-1&label=" + b"x" * (MAX_FORM_BYTES + 1)
        assert client.post(label, content=huge, headers=form).status_code == 413
        assert (
            client.post(label, content=b"x", headers={**form, "content-length": "99999999"}).status_code
            == 413
        )
        many = "&".join(f"f{n}=1" for n in range(100)).encode()
        assert client.post(label, content=many, headers=form).status_code == 400
        multipart = client.post(label, files={"id": ("a", b"T-1")}, data={"csrf": csrf})
        assert multipart.status_code == 415
        unknown = client.post(label, data={"id": "nope", "label": "billing", "csrf": csrf})
        assert unknown.status_code == 422
        assert client.post("/actions/replay", data={"csrf": csrf}).status_code == 422
        assert client.post("/login", content=b"token=%ff", headers=form).status_code == 400


def test_bad_queries_and_unknown_ids_are_4xx(make_app, seeded: Seeded) -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        assert client.get("/tickets/no-such-ticket").status_code == 404
        evil = client.get("/tickets/<b>EVIL</b>")
        assert evil.status_code == 404 and "EVIL" not in evil.text
        assert client.get("/tickets/" + "x" * 300).status_code == 400
        assert client.get("/results", params={"q": "x" * 300}).status_code == 400
        for before in ("nan:0", "inf:0", "1.5", "1.5:-1", "1.5:9999999", "1.5:10001", "abc:1", "1e400:0"):
            assert client.get("/results", params={"before": before}).status_code == 400, before
        assert client.get("/results", params={"corrected": "maybe"}).status_code == 400
        assert client.get("/results", params={"label": "l" * 200}).status_code == 400
        for page in ("-1", "x", "99999999999"):
            assert client.get("/dead", params={"page": page}).status_code == 400, page


def test_query_values_are_not_echoed_as_text(make_app, seeded: Seeded) -> None:
    with TestClient(make_app()) as client:
        page = client.get("/dead", params={"replayed": "2", "what": "Call 555-EVIL now: ", "one": "1"}).text
        assert "EVIL" not in page and "2 dead letters of that ticket requeued" in page
        assert "EVIL" not in client.get("/dead", params={"replayed": "<i>EVIL</i>"}).text
        assert "EVIL" not in client.get("/results", params={"label": "EVIL-label"}).text


HAND_WRITTEN = {  # results no worker wrote: each is skipped, never a 500 or a stalled overview
    "H-answers": '{"id": "H-answers", "label": "billing", "scores": {"billing": 1.0}, "answers": [1]}',
    "H-list": "[1, 2]",
    "H-deep": "[" * 5000 + "]" * 5000,
    "H-at": '{"id": "H-at", "label": "billing", "scores": {"billing": 1.0}, "at": "yesterday"}',
    "H-scores": '{"id": "H-scores", "label": "billing", "scores": ["a"]}',
    "H-score": '{"id": "H-score", "label": "billing", "scores": {"billing": "high"}}',
    "H-label": '{"id": "H-label", "label": 5, "scores": {"billing": 1.0}}',
    "H-queued": '{"id": "H-queued", "label": "billing", "scores": {"billing": 1.0}, "queued_s": "x"}',
}


def test_results_written_by_hand_are_skipped_and_no_page_fails(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    now = time.time()
    for tid, raw in HAND_WRITTEN.items():
        r.hset(keys.results, tid, raw)
        r.zadd(keys.done, {tid: now})
        r.zadd(keys.review, {tid: 0.1})
    with TestClient(make_app()) as client:
        deadline = time.monotonic() + 10
        while client.get("/api/overview").status_code != 200:  # the sampler reads them every poll
            assert time.monotonic() < deadline, client.get("/api/overview").text
            time.sleep(0.2)
        for path in ("/", "/results", "/review", *(f"/tickets/{tid}" for tid in HAND_WRITTEN)):
            assert client.get(path).status_code in (200, 404), path
        listed = client.get("/results").text
        assert "T-1" in listed and "H-label" not in listed  # the good ones listed, a bad one skipped


def test_a_ticket_link_is_one_path_segment_and_only_ascii_digits_are_numbers(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    tid = "x/../T-1"  # a valid id: as a raw path it would open T-1's page
    raw = json.dumps({"id": tid, "label": "billing", "scores": {"billing": 1.0}, "at": time.time()})
    r.hset(keys.results, tid, raw)
    r.zadd(keys.done, {tid: time.time()})
    with TestClient(make_app()) as client:
        assert 'href="/tickets/x%2F..%2FT-1"' in client.get("/results").text
        assert client.get("/dead?page=%C2%B2").status_code == 400  # "²".isdigit(), but not a number
        replayed = client.get("/dead?replayed=%C2%B2")
        assert replayed.status_code == 200 and "requeued" not in replayed.text
    with TestClient(make_app(Auth(token=TOKEN))) as client:  # nothing about the Redis before sign-in
        assert "redis://" not in client.get("/login").text


def test_a_share_that_is_not_a_number_shows_as_a_dash() -> None:
    assert (pct(0.934), pct("0.9"), pct(None), pct(True), pct(float("nan"))) == ("93%", "–", "–", "–", "–")
    assert pct(10**400) == "–"  # a head's cv_accuracy of 400 digits: math.isfinite raised, a 500 page


def test_a_publish_time_is_read_as_publish_head_lua_writes_it() -> None:
    from producer.dashboard.heads import _time

    assert (_time("1765000000.123"), _time("1765000000"), _time("12")) == (1765000000.123, 1765000000.0, 12.0)
    for bad in ("9" * 5000, "1e5", "inf", "nan", "-1", "1.2.3", "", ".5"):
        assert _time(bad) is None, bad

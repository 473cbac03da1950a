"""What the pages read and say: cursor pages over P:done, bounded bytes, clipped lists and whole tickets,
the overview's past read from Redis, exact label counts, and which head decided."""

from __future__ import annotations

import json
import re
import time
from typing import Any, cast

import pytest
import redis
from dashboard_seed import LABELS, Seeded
from starlette.testclient import TestClient

from producer.client import Client
from producer.dashboard import data, overview
from producer.protocol import Keys, Result

pytestmark = pytest.mark.redis


def _put(
    r: redis.Redis, keys: Keys, tid: str, at: float, *, label: str = "billing", text: str = "hello", **kw
) -> None:
    scores = {name: 0.1 for name in LABELS}
    scores[label] = 0.8
    result = Result(id=tid, label=label, scores=scores, model="m", digest="d", at=at, **kw)
    r.hset(keys.results, tid, result.to_json())
    r.zadd(keys.done, {tid: result.at})
    r.set(keys.text(tid), text, ex=600)


def test_cursor_pages_walk_every_result_once_in_order(r: redis.Redis, keys: Keys, prefix: str) -> None:
    now = time.time()
    expected = []
    for n in range(130):  # groups of 7 finish in the same millisecond, as one drain's results do
        tid = f"R-{n:03d}"
        _put(r, keys, tid, round(now - n // 7, 3))
        expected.append(tid)
    client = Client(r, prefix)
    ordered = [i.decode() for i in cast(list[bytes], r.zrevrange(keys.done, 0, -1))]
    seen, cursor, pages = [], None, 0
    while True:
        page = data.results_page(client, cursor=cursor, rows=20)
        seen += [row.result.id for row in page.rows]
        pages += 1
        if page.next is None:
            break
        cursor = page.next
    assert seen == ordered and sorted(seen) == sorted(expected)
    assert pages == 7  # 6 full pages of 20, and the last 10


def test_results_page_over_http_follows_older_links(make_app, r: redis.Redis, keys: Keys) -> None:
    now = time.time()
    for n in range(200):  # 67 technical: two pages
        _put(r, keys, f"H-{n:03d}", round(now - n // 5, 3), label=LABELS[n % 3])
    with TestClient(make_app()) as client:
        url, ids, pages = "/results?label=technical", [], 0
        while url:
            pages += 1
            html = client.get(url.replace("&amp;", "&")).text
            ids += re.findall(r"<code>(H-\d+)</code>", html)
            older = re.search(r'href="(/results\?[^"]+)" id="older"', html)
            url = older.group(1) if older else ""
        newest_first = [
            i.decode() for i in cast(list[bytes], r.zrevrange(keys.done, 0, -1))
        ]  # ties: reverse lexicographic
        assert ids == [i for i in newest_first if int(i[2:]) % 3 == 1] and len(ids) == 67 and pages == 2


def test_a_filtered_page_reads_a_bounded_number_of_entries(r: redis.Redis, keys: Keys, prefix: str) -> None:
    now = time.time()
    with r.pipeline() as pipe:
        for n in range(data.SCAN_ROWS + 200):
            pipe.hset(
                keys.results, f"F-{n}", Result(f"F-{n}", "billing", {"billing": 1.0}, "m", "d").to_json()
            )
            pipe.zadd(keys.done, {f"F-{n}": now - n})
        pipe.execute()
    page = data.results_page(Client(r, prefix), data.Filters(label="technical"))
    assert page.rows == [] and page.scanned == data.SCAN_ROWS and page.next is not None
    rest = data.results_page(Client(r, prefix), data.Filters(label="technical"), page.next)
    assert rest.scanned == 200 and rest.next is None


def test_large_results_are_capped_per_page_and_clipped_in_lists(
    make_app, r: redis.Redis, keys: Keys, prefix: str
) -> None:
    now = time.time()
    big = {"blob": "x" * 60_000}
    long_text = "My card was charged. " * 250  # 5,250 characters
    for n in range(40):
        _put(r, keys, f"B-{n:02d}", now - n, text=long_text, fields=big)
    page = data.results_page(Client(r, prefix))
    assert page.read_bytes <= data.PAGE_BYTES and 0 < len(page.rows) < 40 and page.next is not None
    with TestClient(make_app()) as client:
        html = client.get("/results").text
        assert "x" * 60_000 not in html and "x" * (data.LIST_FIELDS_CHARS - 20) + "…" in html
        assert long_text not in html and long_text[: data.LIST_TEXT_CHARS - 30] in html
        assert 'href="/tickets/B-00"' in html
        whole = client.get("/tickets/B-00").text
        assert long_text.strip() in whole and "x" * 60_000 in whole


def test_the_overview_reads_the_recent_past_from_redis(make_app, r: redis.Redis, keys: Keys) -> None:
    """Opened after a run: the results of the last minutes are counted, not 'no results since start'."""
    now = time.time()
    for n in range(30):
        _put(r, keys, f"P-{n}", now - 60 - 5 * n, label=LABELS[n % 3])
    with TestClient(make_app()) as client:
        html = client.get("/").text
        assert "No results" not in html
        assert client.get("/api/overview").json()["labels"] == {"account": 10, "billing": 10, "technical": 10}
        history = client.get("/api/history").json()
        assert sum(history["rate"]) * overview.BUCKET_S == pytest.approx(30)


@pytest.mark.parametrize(
    ("fetch", "budget", "samples"),
    [(3, overview.LABEL_BYTES, 4), (overview.LABEL_FETCH, 1, 10)],  # by count; by bytes: one result each
)
def test_labels_are_counted_exactly_once_across_fetch_boundaries(
    r: redis.Redis,
    keys: Keys,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    fetch: int,
    budget: int,
    samples: int,
) -> None:
    monkeypatch.setattr(overview, "LABEL_FETCH", fetch)
    monkeypatch.setattr(overview, "LABEL_BYTES", budget)
    now = time.time()
    for n in range(10):  # all in the same millisecond: ties across every fetch boundary
        _put(r, keys, f"E-{n}", round(now - 30, 3), label=LABELS[n % 3])
    history, client = overview.History(), Client(r, prefix)
    for _ in range(samples - 1):
        overview.sample(client, history, now)
    assert not history.caught_up and sum(history.label_totals().values()) < 10
    for _ in range(2):
        overview.sample(client, history, now)
    assert history.label_totals() == {"billing": 4, "account": 3, "technical": 3}
    assert history.caught_up


@pytest.mark.parametrize("score", ["+inf", 1e300])
def test_a_finish_time_written_by_hand_far_ahead_does_not_stop_the_label_chart(
    r: redis.Redis, keys: Keys, prefix: str, score: Any
) -> None:
    """A P:done member at +inf raised OverflowError in every sample; one at 1e300 moved the point samples
    resume from past every later result: the label chart froze, silently, until a restart."""
    now = time.time()
    _put(r, keys, "E-0", now - 5, label="billing")
    r.zadd(keys.done, {"HAND": score})
    history, client = overview.History(), Client(r, prefix)
    overview.sample(client, history, now)
    for n in range(1, 4):
        _put(r, keys, f"E-{n}", now + n, label="technical")
    overview.sample(client, history, now + 5)
    assert history.label_totals() == {"technical": 3, "billing": 1}


def test_numbers_of_5000_digits_from_a_url_or_a_key_are_refused_or_ignored(
    make_app, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    """int() of more than 4,300 digits raises ValueError: /dead?page=<5,000 digits> and every results and
    ticket page under a P:head:seq of 5,000 digits answered 500."""
    with TestClient(make_app()) as client:
        assert client.get("/dead", params={"page": "1" * 5000}).status_code == 400
        r.set(keys.head_seq, "1" * 5000)
        r.hset(keys.head, mapping={"version": "3", "at": "9" * 5000})
        assert client.get("/results").status_code == 200
        assert client.get("/tickets/T-1").status_code == 200


def test_pages_say_which_head_decided(make_app, r: redis.Redis, keys: Keys, prefix: str) -> None:
    now = time.time()
    _put(r, keys, "OWN", now, method="head", head="a1b2c3d4e5f6")
    _put(r, keys, "ZS", now - 1, method="zero-shot")
    with TestClient(make_app()) as client:
        html = client.get("/results").text
        assert "No head published through Redis yet" in html
        assert "own head a1b2c3d4e5f6 (from the worker" in html and "zero-shot scoring (no head)" in html
        assert "labels come from zero-shot scoring" not in html
    Client(r, prefix).publish_head(b"not-a-real-head", by="alice")
    _put(r, keys, "PUB", now - 2, method="head", head="1")
    with TestClient(make_app()) as client:
        ticket = client.get("/tickets/PUB").text
        assert "published head version 1" in ticket and "by alice" in ticket


def test_a_tickets_own_page(make_app, seeded: Seeded, r: redis.Redis, keys: Keys) -> None:
    from dashboard_seed import TOKEN

    from producer.dashboard.security import Auth

    with TestClient(make_app(Auth(token=TOKEN))) as client:
        client.post("/login", data={"token": TOKEN})
        page = client.get("/tickets/T-1").text
        assert "I was charged twice" in page and "Not corrected." in page and "80%" in page
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf
        fixed = client.post(
            "/actions/label",
            data={"id": "T-1", "label": "account", "csrf": csrf.group(1)},
            follow_redirects=False,
        )
        assert fixed.status_code == 303 and fixed.headers["location"] == "/tickets/T-1"
        page = client.get("/tickets/T-1").text
        assert re.search(r'billing →\s*<span class="corrected">account</span>, by dashboard:session:', page)
        assert json.loads(cast(bytes, r.hget(keys.labels, "T-1")))["was"] == "billing"
        assert 'action="/actions/unlabel"' in page
        withdrawn = client.post(
            "/actions/unlabel", data={"id": "T-1", "csrf": csrf.group(1)}, follow_redirects=False
        )
        assert withdrawn.status_code == 303 and withdrawn.headers["location"] == "/tickets/T-1"
        assert "Not corrected." in client.get("/tickets/T-1").text and not r.hexists(keys.labels, "T-1")
        again = client.post("/actions/unlabel", data={"id": "T-1", "csrf": csrf.group(1)})
        assert again.status_code == 422 and again.text == "no correction of ticket T-1"
        assert client.post("/actions/unlabel", data={"id": "T-1"}).status_code == 403  # no CSRF token
        for listing in ("/results", "/dead"):
            assert 'href="/tickets/' in client.get(listing).text


def test_the_dead_page_shows_entries_no_clock_or_decoder_reads(make_app, r: redis.Redis, keys: Keys) -> None:
    """Found by hand: a letter whose "at" is 1e308 made the whole dead page a 500 (localtime overflows);
    entries that are not letters at all show as unreadable."""
    r.lpush(
        keys.dead,
        '{"reason": "not JSON: x", "payload": "{", "at": 1e308}',
        "[]",
        '{"reason": "r", "at": -1e308}',
    )
    with TestClient(make_app()) as client:
        page = client.get("/dead")
        assert page.status_code == 200, page.text
        assert "not JSON: x" in page.text and "unreadable dead letter" in page.text


def test_a_text_key_of_another_type_reads_as_no_text_on_the_lists(
    make_app, r: redis.Redis, keys: Keys
) -> None:
    """Whoever else writes to this Redis may leave a P:text:<id> that is not a string: GETRANGE refuses it
    (WRONGTYPE), and the lists show the ticket without its text instead of failing the page."""
    now = time.time()
    _put(r, keys, "W-1", now, text="a fine text")
    _put(r, keys, "W-2", now - 1)
    r.delete(keys.text("W-2"))
    r.hset(keys.text("W-2"), "text", "a hash where a string belongs")
    r.zadd(keys.review, {"W-1": 0.1, "W-2": 0.2})
    with TestClient(make_app()) as client:
        for path in ("/results", "/review"):
            page = client.get(path)
            assert page.status_code == 200 and "a fine text" in page.text and 'data-id="W-2"' in page.text

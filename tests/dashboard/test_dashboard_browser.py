"""The dashboard in a real headless Chromium: what a person sees and clicks."""

from __future__ import annotations

import json

import pytest
import redis
from dashboard_seed import TOKEN, XSS, Seeded

from producer.protocol import Keys

pytestmark = [pytest.mark.redis, pytest.mark.browser]


def sign_in(page, base: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/")


def test_reading_needs_sign_in(page, live_server: str, seeded: Seeded) -> None:
    for path in ("/", "/results", "/dead"):
        page.goto(live_server + path)
        assert page.url == live_server + "/login"
        assert seeded.texts["T-1"] not in page.content()
    status = page.evaluate("async () => (await fetch('/api/overview')).status")
    assert status == 401


def test_overview_shows_the_numbers_in_redis(
    page, live_server: str, seeded: Seeded, r: redis.Redis, keys: Keys
):
    sign_in(page, live_server)
    page.goto(live_server + "/")
    # The page shows the sampler's last reading (every 0.5 s here), which may predate the seeding.
    page.wait_for_function(
        "n => document.getElementById('n-waiting').textContent.trim() === n", arg=str(seeded.waiting)
    )
    page.reload()  # the page itself, not only the polled fragment, says what Redis holds
    assert page.locator("#n-waiting").inner_text() == str(seeded.waiting)
    assert page.locator("#n-inflight").inner_text() == str(seeded.inflight)
    assert page.locator("#n-dead").inner_text() == str(seeded.dead)
    # Live: a ticket pushed now shows up without a reload (htmx polls the fragment).
    r.lpush(keys.tickets, b'{"id": "late", "text": "one more"}')
    page.wait_for_function(
        "n => document.getElementById('n-waiting').textContent.trim() === n", arg=str(seeded.waiting + 1)
    )
    # The chart is drawn from the JSON endpoint.
    page.wait_for_selector("#chart .uplot")


def test_ticket_text_renders_as_text(page, live_server: str, seeded: Seeded) -> None:
    alerts: list[str] = []
    page.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))
    sign_in(page, live_server)
    page.goto(live_server + "/dead")
    assert XSS in page.locator("#dead").inner_text()
    page.goto(live_server + "/results")
    assert page.locator("tr[data-id='T-XSS'] td.text").inner_text() == XSS
    assert alerts == []


def test_sign_in_and_out(page, live_server: str, seeded: Seeded) -> None:
    page.goto(live_server + "/login")
    page.fill("input[name=token]", "wrong-token-xxxx")
    page.click("button[type=submit]")
    assert page.locator("#error").inner_text() == "wrong token"
    sign_in(page, live_server)
    page.goto(live_server + "/results")
    assert page.locator("#mode").inner_text() == "can act"
    assert page.locator("tr[data-id='T-1'] button", has_text="Correct").count() == 1
    cookie = next(c for c in page.context.cookies() if c["name"] == "ticketq_session")
    page.click("text=sign out")
    page.wait_for_url(live_server + "/login")
    # The old cookie, put back by hand, no longer opens anything: the server forgot the session.
    page.context.add_cookies([cookie])
    page.goto(live_server + "/results")
    assert page.url == live_server + "/login"


def test_a_correction_made_by_clicking_lands_in_redis(
    page, live_server: str, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    sign_in(page, live_server)
    page.goto(live_server + "/results")
    row = page.locator("tr[data-id='T-3']")
    row.locator("select[name=label]").select_option("technical")
    row.locator("button", has_text="Correct").click()
    page.locator("tr[data-id='T-3'] .corrected").wait_for()
    assert "technical" in page.locator("tr[data-id='T-3'] .corrected").inner_text()
    stored = r.hget(keys.labels, "T-3")
    assert stored is not None and json.loads(stored)["label"] == "technical"
    assert json.loads(stored)["text"] == seeded.texts["T-3"]


def test_replaying_a_dead_letter_by_clicking(
    page, live_server: str, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    sign_in(page, live_server)
    page.goto(live_server + "/dead")
    page.locator("tr[data-id='D-1'] button", has_text="Replay").click()
    page.locator("#message").wait_for()
    assert page.locator("#message").inner_text() == "1 dead letter of that ticket requeued"
    assert r.llen(keys.dead) == seeded.dead - 1
    assert json.loads(r.lindex(keys.tickets, 0) or b"{}")["id"] == "D-1"
    page.click("#replay-all")
    page.locator("#message").wait_for()
    assert "2 dead letters requeued" in page.locator("#message").inner_text()
    assert r.llen(keys.dead) == 0


def test_a_tickets_page_is_linked_and_corrects(
    page, live_server: str, seeded: Seeded, r: redis.Redis, keys: Keys
) -> None:
    sign_in(page, live_server)
    page.goto(live_server + "/results")
    page.click("tr[data-id='T-2'] a[href='/tickets/T-2']")
    page.wait_for_url(live_server + "/tickets/T-2")
    assert page.locator("#text").inner_text() == seeded.texts["T-2"]
    assert page.locator("#correction").inner_text() == "Not corrected."
    page.locator("#correct select[name=label]").select_option("account")
    page.locator("#correct button").click()
    page.wait_for_url(live_server + "/tickets/T-2")
    assert "→ account" in page.locator("#correction").inner_text()
    stored = r.hget(keys.labels, "T-2")
    assert stored is not None and json.loads(stored)["label"] == "account"

"""``python -m tools.dashboard_screenshot``: docs/dashboard.png, the overview during a real run.

Real queue, real worker processes, real dashboard; only the classifier is the keyword fake
(``python -m tools.fakeworker``), so the picture takes a minute and no model. What it does:

1. finds a Redis (``TICKETQ_REDIS_URL``, 127.0.0.1:6379, else a throwaway ``redis-server``) and uses the
   prefix ``ticketq-screenshot``, cleared before and after;
2. starts the dashboard (uvicorn, in this process) and two fake workers, each batch slowed to look like a
   model's pace;
3. pushes the bundled sample tickets, a few a second with a burst every 25 s (so the queue grows and
   drains), plus now and then a malformed payload, which ends as a dead letter;
4. half-way, corrects (as a person would on the results page) tickets whose sample label the fake got wrong;
5. after ``--seconds``, while tickets still flow, takes the screenshot with Debian's Chromium
   (``/usr/bin/chromium``) through Playwright.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from producer.client import Client
from producer.dashboard.app import create_app
from producer.dashboard.security import Auth
from producer.dashboard.web import Config
from producer.options import DEFAULT_REDIS_URL
from producer.protocol import Keys
from tools.redis_server import free_port, local_redis

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "worker" / "data" / "sample_tickets.jsonl"
PREFIX = "ticketq-screenshot"
LABELS = "billing,technical,account"
CHROMIUM = os.environ.get("TICKETQ_CHROMIUM", "/usr/bin/chromium")
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dashboard_screenshot", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--results-out", type=Path, default=None, help="also shoot the results page here")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long tickets flow (default 90)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    tickets = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    given = os.environ.get("TICKETQ_REDIS_URL")
    with local_redis(given=given, try_urls=[DEFAULT_REDIS_URL]) as (url, how):
        if url is None:
            print(f"dashboard_screenshot: {how}", file=sys.stderr)
            return 3
        print(f"Redis: {how}", file=sys.stderr)
        conn = redis.Redis.from_url(url)
        _clear(conn)
        try:
            return _run(url, conn, tickets, args)
        finally:
            _clear(conn)


def _clear(conn: redis.Redis) -> None:
    stale = list(conn.scan_iter(match=f"{PREFIX}:*", count=1000))
    if stale:
        conn.unlink(*stale)  # freed in the background


def _run(url: str, conn: redis.Redis, tickets: list[dict], args: argparse.Namespace) -> int:
    import uvicorn

    client = Client(conn, PREFIX)
    port = free_port()
    token = "screenshot-" + os.urandom(8).hex()
    config = Config(redis_url=url, prefix=PREFIX, auth=Auth(token=token))
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tools.fakeworker", "--redis-url", url, "--prefix", PREFIX]
    cmd += ["--model", f"fake:{LABELS}?delay_ms=2000", "--log-format", "json", "--log-level", "warning"]
    # Small claims, so a burst waits in the queue, where the page can show it.
    cmd += ["--drain", "16", "--batch-size", "16"]
    workers = [
        subprocess.Popen([*cmd, "--worker-id", f"worker-{n + 1}"], env=env, stdout=subprocess.DEVNULL)
        for n in range(args.workers)
    ]
    time.sleep(2)
    if any(w.poll() is not None for w in workers):
        for w in workers:
            w.kill()
        server.should_exit = True
        print("dashboard_screenshot: a worker exited at start (see above)", file=sys.stderr)
        return 1
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(client, conn, tickets, stop), daemon=True)
    feeder.start()
    try:
        time.sleep(args.seconds / 2)
        _correct(client, tickets)
        time.sleep(args.seconds / 2)
        _shoot(f"http://127.0.0.1:{port}", token, args.out, args.results_out)  # while tickets still flow
    finally:
        stop.set()
        feeder.join(timeout=10)
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=30)
        server.should_exit = True
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _feed(client: Client, conn: redis.Redis, tickets: list[dict], stop: threading.Event) -> None:
    """A few tickets a second, and now and then a burst the workers take a while to drain."""
    rng = random.Random(7)
    keys = Keys(PREFIX)
    n = 0
    second = 0
    while not stop.wait(1.0):
        second += 1
        wave = 150 if second % 25 == 0 else rng.randint(2, 7)
        batch = []
        for _ in range(wave):
            t = dict(tickets[n % len(tickets)])
            if n >= len(tickets):
                t["id"] = f"{t['id']}-{n // len(tickets)}"
            batch.append(t)  # the client stamps enqueued_at
            n += 1
        client.push(batch)
        if rng.random() < 0.05:  # another service writes something that is not a ticket
            conn.lpush(keys.tickets, rng.choice([b'{"id": "x-1", "txt": "typo in the field"}', b"not json"]))


def _correct(client: Client, tickets: list[dict]) -> None:
    """Label the right answer for tickets the fake got wrong, as someone on the results page would."""
    wanted = {t["id"]: t["label"] for t in tickets if t.get("label") in LABELS.split(",")}
    got = client.get_many(list(wanted))
    wrong = [tid for tid, r in got.items() if r.label != wanted[tid]][:12]
    for tid in wrong:
        client.label(tid, wanted[tid], by="screenshot")


def _shoot(base: str, token: str, out: Path, results_out: Path | None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
        page.goto(base + "/login")  # reading needs sign-in when a token is set
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        page.wait_for_selector("#chart .uplot")
        time.sleep(3)  # two polls: the fragment and the chart are current
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        if results_out is not None:
            page.goto(base + "/results?corrected=yes")
            page.screenshot(path=str(results_out), full_page=True)
        browser.close()


if __name__ == "__main__":
    sys.exit(main())

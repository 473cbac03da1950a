"""Dashboard fixtures: a Redis holding a known state under the test's prefix, the app over it, and a
live server for the browser tests."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from producer.client import Client
from producer.dashboard.app import Config, create_app
from producer.dashboard.security import Auth
from producer.protocol import DeadLetter, Keys, Result

TOKEN = "test-token-0123456789"
LABELS = ("billing", "technical", "account")
XSS = "<script>alert(1)</script>"


@dataclass
class Seeded:
    """What :func:`seed` put in Redis, for the tests to look for on the pages."""

    waiting: int
    inflight: int
    dead: int
    results: dict[str, str]  # id -> label
    texts: dict[str, str]


def seed(r: redis.Redis, keys: Keys, now: float | None = None) -> Seeded:
    now = time.time() if now is None else now
    results = {"T-1": "billing", "T-2": "technical", "T-3": "billing", "T-XSS": "account"}
    texts = {
        "T-1": "I was charged twice",
        "T-2": "The app crashes",
        "T-3": "Refund please",
        "T-XSS": XSS,
    }
    for n, (tid, label) in enumerate(results.items()):
        scores = {name: 0.1 for name in LABELS}
        scores[label] = 0.8 if tid != "T-3" else 0.4
        result = Result(id=tid, label=label, scores=scores, model="fake", digest="d", worker="w1", at=now - n)
        r.hset(keys.results, tid, result.to_json())
    for n in range(7):
        payload = {"id": f"W-{n}", "text": f"waiting {n}", "v": 1, "enqueued_at": now - 42 + n}
        r.lpush(keys.tickets, json.dumps(payload))
    r.sadd(keys.workers, "w1", "w2")
    r.set(keys.heartbeat("w1"), json.dumps({"id": "w1", "model": "fake", "host": "h", "at": now - 3}), ex=60)
    r.rpush(keys.inflight("w1"), b"{}", b"{}", b"{}")
    r.rpush(keys.inflight("w2"), b"{}")  # w2's heartbeat expired: shown as not alive
    for reason in ("not JSON: Expecting value", "missing field: text"):
        r.rpush(keys.dead, DeadLetter(reason=reason, payload=b"oops " + XSS.encode(), worker="w1").to_json())
    return Seeded(waiting=7, inflight=4, dead=2, results=results, texts=texts)


@pytest.fixture
def seeded(r: redis.Redis, keys: Keys) -> Seeded:
    return seed(r, keys)


@pytest.fixture
def make_app(redis_url: str, prefix: str):  # type: ignore[no-untyped-def]
    def make(auth: Auth | None = None):  # type: ignore[no-untyped-def]
        config = Config(redis_url=redis_url, prefix=prefix, auth=auth or Auth(), sample_s=0.5)
        return create_app(config, Client.from_url(redis_url, prefix))

    return make


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def live_server(make_app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The app served by uvicorn on a free local port, with a token configured; yields its base URL."""
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(make_app(Auth(token=TOKEN)), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise AssertionError("dashboard server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    from .browser import launch

    yield from launch()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()

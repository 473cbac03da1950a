"""Dashboard fixtures: a Redis holding a known state under the test's prefix, the app over it, a live
server and Debian's Chromium for the browser tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from dashboard_seed import TOKEN, Seeded, seed

from producer.client import Client
from producer.dashboard.app import create_app
from producer.dashboard.security import Auth
from producer.dashboard.web import LOOPBACK_NAMES, Config
from producer.protocol import Keys


@pytest.fixture
def seeded(r: redis.Redis, keys: Keys) -> Seeded:
    return seed(r, keys)


@pytest.fixture
def make_app(redis_url: str, prefix: str):  # type: ignore[no-untyped-def]
    def make(auth: Auth | None = None, **settings):  # type: ignore[no-untyped-def]
        settings.setdefault("allowed_hosts", (*LOOPBACK_NAMES, "testserver"))  # TestClient's Host
        config = Config(redis_url=redis_url, prefix=prefix, auth=auth or Auth(), sample_s=0.5, **settings)
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
    from dashboard_browser import launch

    yield from launch()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()

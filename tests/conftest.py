"""Shared fixtures and the rules of the tiers.

Tiers, by directory (each test is marked by where it lives; markers are registered in pyproject.toml):

- ``tests/unit``: no torch, no Redis server (fakeredis is fine); ``pytest tests/unit`` runs in seconds.
- ``tests/redis`` (marker ``redis``): a real Redis server.
- ``tests/process`` (marker ``process``): real worker processes, and a real Redis.
- ``tests/engine`` (marker ``model``): torch and a model (a tiny random one, or the embedded SmolLM2).

Test modules need unique file names across the tiers (the tier folders are not packages; a folder named
``redis`` that was one would shadow redis-py).

A missing prerequisite (no Redis, no ``redis-server`` or ``redis-cli``) skips the test
that needs it, saying why; with ``CI=true`` it fails instead, because CI must run every tier: that one
rule is ``support.need``, used by every test with a prerequisite. (Optional data outside the checkout, the
Banking77 copy ``tests/unit/test_data.py`` rebuilds the bundled files from, only skips: a fresh clone in CI
has none.)

The real server is ``TICKETQ_TEST_REDIS_URL`` (``python -m tools.with_redis`` sets it), else found or
started the same way that tool does, once per session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
from support import FakeClassifier, Proxy, need

from producer.protocol import Keys
from tools.with_redis import find_test_redis

_TIERS = {"redis": ("redis",), "process": ("redis", "process"), "engine": ("model",)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier's markers, so ``-m "not model"`` and the like select by need."""
    root = Path(__file__).resolve().parent
    for item in items:
        try:
            tier = Path(str(item.path)).resolve().relative_to(root).parts[0]
        except ValueError:
            continue
        for marker in _TIERS.get(tier, ()):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    with find_test_redis() as (url, how):
        need(url, f"no Redis for the tests: {how}; set TICKETQ_TEST_REDIS_URL or start redis-server")
        assert url is not None
        try:
            redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            need(False, f"no Redis at {url} ({exc})")
        yield url


@pytest.fixture
def prefix() -> str:
    """Unique per test, hash-tagged like a Redis Cluster deployment would be."""
    return "{tq-test-" + uuid.uuid4().hex[:12] + "}"


@pytest.fixture
def keys(prefix: str) -> Keys:
    return Keys(prefix)


@pytest.fixture
def redis_url(redis_server_url: str, prefix: str) -> Iterator[str]:
    """The real server's URL; every key under this test's prefix is deleted afterwards."""
    yield redis_server_url
    client = redis.Redis.from_url(redis_server_url)
    stale = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def fake_redis() -> Iterator[fakeredis.FakeRedis]:
    """For fast tests of code that needs no Lua (fakeredis has no ``redis.sha1hex``)."""
    client = fakeredis.FakeRedis()
    yield client
    client.flushall()


@pytest.fixture
def fake_classifier() -> FakeClassifier:
    return FakeClassifier()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[Proxy]:
    parts = redis.connection.parse_url(redis_url)
    p = Proxy(parts.get("host", "127.0.0.1"), int(parts.get("port", 6379)))
    yield p
    p.close()


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Undo whatever logging set-up a test (or a CLI run in-process) made, so the next test starts from
    structlog's defaults and a root logger without ticketq's handler."""
    import logging

    import structlog

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    structlog.reset_defaults()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])

"""Shared fixtures: a real Redis (unique key prefix per test, cleaned up), fakeredis, a fake classifier,
and a TCP proxy that can cut the connection to Redis to simulate an outage.

The real server is ``TICKETQ_TEST_REDIS_URL`` (scripts/with-redis.sh sets it), else 127.0.0.1:6379.
Without one the Redis tests skip, saying why; with ``CI=true`` they fail instead, because CI must run them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from support import FakeClassifier, Proxy

from producer.protocol import Keys

SERVER_URL = os.environ.get("TICKETQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    try:
        redis.Redis.from_url(SERVER_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        message = f"no Redis at {SERVER_URL} ({exc}); set TICKETQ_TEST_REDIS_URL or start redis-server"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SERVER_URL


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

"""Shared fixtures: a real Redis (unique key prefix per test, cleaned up), fakeredis, a fake classifier,
and a TCP proxy that can cut the connection to Redis to simulate an outage.

The real server is ``TICKETQ_TEST_REDIS_URL`` (scripts/with-redis.sh sets it), else 127.0.0.1:6379.
Without one the Redis tests skip, saying why; with ``CI=true`` they fail instead, because CI must run them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import fakeredis
import pytest
import redis

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


class FakeClassifier:
    """Labels by keyword; raises on any drain with 'boom' in a text; records every call."""

    def __init__(self, labels: Sequence[str] = ("billing", "technical", "account")) -> None:
        from worker.fake import KeywordClassifier

        self._inner = KeywordClassifier(labels, batch_size=4)
        self.labels = list(labels)
        self.name = "fake-test"
        self.calls: list[list[str]] = []

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "dtype": "none", "device": "cpu"}

    def classify(self, texts: Sequence[str]) -> tuple[list[Any], list[Any]]:
        self.calls.append(list(texts))
        if any("boom" in t for t in texts):
            raise RuntimeError("boom in the engine")
        return self._inner.classify(texts)


@pytest.fixture
def fake_classifier() -> FakeClassifier:
    return FakeClassifier()


class Proxy:
    """A TCP forwarder to Redis whose plug can be pulled: ``cut()`` drops every connection and refuses
    new ones until ``restore()``. Lets a test take Redis away from one client without stopping Redis."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.up.clear()
        with self.lock:
            for s in self.conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.conns.clear()

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[Proxy]:
    parts = redis.connection.parse_url(redis_url)
    p = Proxy(parts.get("host", "127.0.0.1"), int(parts.get("port", 6379)))
    yield p
    p.close()


def proxied_url(redis_url: str, port: int) -> str:
    db = redis.connection.parse_url(redis_url).get("db", 0)
    return f"redis://127.0.0.1:{port}/{db}"

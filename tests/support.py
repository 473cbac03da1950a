"""Test helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis

from producer.protocol import Keys, Result, decode_ticket, payload_digest
from worker.contract import Finished


def need(condition: object, why: str) -> None:
    """The one rule for missing prerequisites: skip outside CI, fail in CI (where every tier must run)."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {why}")
    pytest.skip(why)


def need_binary(name: str) -> None:
    need(shutil.which(name), f"{name} is not installed")


def tickets(n: int, start: int = 0) -> list[bytes]:
    """Payloads ``t<start>``... whose topic words the fake classifier recognises."""
    topics = ["billing: refund please", "technical: it crashes", "account: locked out"]
    return [
        json.dumps({"id": f"t{i}", "text": f"{topics[i % 3]} ({i})"}).encode()
        for i in range(start, start + n)
    ]


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll a condition in a test (tests may poll; the code under test may not)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class FakeClassifier:
    """Labels by keyword; raises on any drain with 'boom' in a text; records every call."""

    def __init__(self, labels: Sequence[str] = ("billing", "technical", "account")) -> None:
        from tools.fake import KeywordClassifier

        self._inner = KeywordClassifier(labels, batch_size=4)
        self.labels = list(labels)
        self.name = "fake-test"
        self.calls: list[list[str]] = []

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "dtype": "none", "device": "cpu"}

    def classify(self, texts: Sequence[str], *, on_pass: Any = None) -> tuple[list[Any], list[Any]]:
        self.calls.append(list(texts))
        if any("boom" in t for t in texts):
            raise RuntimeError("boom in the engine")
        return self._inner.classify(texts, on_pass=on_pass)


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


def proxied_url(redis_url: str, port: int) -> str:
    db = redis.connection.parse_url(redis_url).get("db", 0)
    return f"redis://127.0.0.1:{port}/{db}"


def finished(raw: bytes, label: str = "billing") -> Finished:
    """A classified ticket for ``raw``, as the service would hand it to ack."""
    t = decode_ticket(raw)
    result = Result(
        id=t.id, label=label, scores={label: 1.0}, model="m", digest=payload_digest(raw), worker="w1"
    )
    return Finished(raw, t, result)


def run_producer_cli(redis_url: str, keys: Keys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """``ticketq-producer`` in process: (exit status, stdout, stderr)."""
    from producer import cli

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = (
        io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8", "surrogateescape"))),
        out,
        err,
    )
    try:
        code = cli.main(["--redis-url", redis_url, "--prefix", keys.prefix, *args])
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def narrow_redis(r: redis.Redis, redis_url: str, prefix: str, *denied: str) -> Iterator[redis.Redis]:
    """A connection as a fresh ACL user allowed every command but ``denied`` (e.g. ``"-hstrlen"``) on
    ``prefix``'s keys and every channel: an ACL line written before a command joined the worker's."""
    user, password = f"ticketq-test-{os.urandom(4).hex()}", os.urandom(8).hex()
    r.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=[f"{prefix}*"],
        channels=["*"],
        commands=["+@all", *denied],
    )
    conn = redis.Redis.from_url(redis_url.replace("redis://", f"redis://{user}:{password}@", 1))
    try:
        yield conn
    finally:
        conn.close()
        r.acl_deluser(user)

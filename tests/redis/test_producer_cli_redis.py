"""ticketq-producer against a real Redis, with a live worker in a thread so that waits end by events."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs
from support import FakeClassifier
from support import run_producer_cli as run_cli

from producer.client import Client
from producer.protocol import DeadLetter, Keys
from worker.connection import connect
from worker.queue import RedisQueue
from worker.service import Service
from worker.settings import Settings


@pytest.fixture
def worker(redis_url: str, keys: Keys) -> Iterator[Service]:
    """A live worker in a thread, so waits end by pub/sub events rather than by a timeout."""
    settings = Settings(redis_url=redis_url, prefix=keys.prefix, worker_id="w1", max_wait_ms=5)
    service = Service(settings, RedisQueue(connect(redis_url), keys, "w1"), FakeClassifier())
    with capture_logs():  # keep its log lines out of the stdout the CLI tests read
        thread = threading.Thread(target=service.run)
        thread.start()
        yield service
        service.stop()
        thread.join(5)


def test_push_csv_and_wait_prints_results_with_passthrough_fields(
    redis_url: str, keys: Keys, worker: Service, tmp_path: Path
) -> None:
    path = tmp_path / "t.csv"
    path.write_text('id,text,customer\nc1,"billing: refund, please",acme\nc2,technical: crash,beta\n')
    code, out, err = run_cli(redis_url, keys, "push", str(path), "--wait", "--timeout", "10")
    assert code == 0 and "pushing 2 tickets" in err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["label"], r["fields"]) for r in rows] == [
        ("c1", "billing", {"customer": "acme"}),
        ("c2", "technical", {"customer": "beta"}),
    ]


def test_push_jsonl_from_stdin_reports_dead_tickets(redis_url: str, keys: Keys, worker: Service) -> None:
    first = json.dumps({"id": "j1", "text": "account: locked"})
    code, out, _ = run_cli(redis_url, keys, "push", "-", "--wait", stdin=first + "\n\n")
    assert code == 0 and json.loads(out)["label"] == "account"
    clash = json.dumps({"id": "j1", "text": "something else"})  # a taken id: dead, and the waiter is told
    code, out, _ = run_cli(redis_url, keys, "push", "-", "--wait", "--timeout", "10", stdin=clash)
    assert code == 1 and json.loads(out) == {"id": "j1", "dead": "duplicate id"}


def test_a_bad_line_fails_with_its_number_and_pushes_nothing(
    redis_url: str, keys: Keys, r: redis.Redis
) -> None:
    lines = '{"id": "a", "text": "ok"}\n{"id": "b", "text": ""}\n'
    code, _, err = run_cli(redis_url, keys, "push", "-", stdin=lines)
    assert code == 2 and "line 2: empty field" in err and r.llen(keys.tickets) == 0
    code, _, err = run_cli(redis_url, keys, "push", "-", "--format", "csv", stdin="id,body\n1,x\n")
    assert code == 2 and "id and text" in err


def test_get_stats_and_dead(redis_url: str, keys: Keys, r: redis.Redis) -> None:
    queue = RedisQueue(r, keys, "w9")
    queue.beat({"model": "fake-test"}, ttl_s=30)
    Client(r, keys.prefix).push([{"id": "s1", "text": "hi"}, {"id": "s2", "text": "there"}])
    queue.claim(1, max_wait_s=0)
    r.lpush(keys.dead, DeadLetter("not JSON", b"junk").to_json())
    code, out, _ = run_cli(redis_url, keys, "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and (stats["waiting"], stats["inflight"], stats["dead"], stats["alive"]) == (1, 1, 1, 1)
    code, out, _ = run_cli(redis_url, keys, "stats")
    assert "w9" in out and "fake-test" in out and "waiting    1" in out
    code, out, _ = run_cli(redis_url, keys, "dead")
    assert code == 0 and json.loads(out)["reason"] == "not JSON"
    code, out, err = run_cli(redis_url, keys, "get", "s1")
    assert code == 1 and out == "" and "no result for s1" in err

"""The producer side: Client (on fakeredis where no worker is needed) and ticketq-producer."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
from structlog.testing import capture_logs
from support import FakeClassifier

from producer import cli
from producer.client import Client
from producer.protocol import BadTicket, DeadLetter, Keys, Ticket
from worker.queue import RedisQueue, connect
from worker.service import Service
from worker.settings import Settings


def test_importing_the_producer_never_imports_the_worker_or_torch() -> None:
    code = (
        "import sys, producer, producer.protocol, producer.client, producer.cli\n"
        "banned = {'torch', 'transformers', 'worker', 'rq'}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_push_validates_everything_before_pushing_anything(fake_redis: fakeredis.FakeRedis) -> None:
    client = Client(fake_redis, "p")
    with pytest.raises(BadTicket, match=r"ticket #1: missing field: text"):
        client.push([{"id": "a", "text": "fine"}, {"id": "b"}])
    assert fake_redis.llen("p:tickets") == 0


def test_push_lpushes_in_order_so_the_first_is_served_first(fake_redis: fakeredis.FakeRedis) -> None:
    client = Client(fake_redis, "p")
    ids = client.push([Ticket("a", "one"), {"id": "b", "text": "two", "customer": "acme"}])
    assert ids == ["a", "b"]
    oldest = json.loads(fake_redis.lindex("p:tickets", -1))  # type: ignore[arg-type]
    assert oldest["id"] == "a"
    assert json.loads(fake_redis.lindex("p:tickets", 0))["customer"] == "acme"  # type: ignore[arg-type]


def test_wait_times_out_with_the_pending_ids(fake_redis: fakeredis.FakeRedis) -> None:
    waited = Client(fake_redis, "p").wait(["nope"], timeout=0.2)
    assert waited.pending == {"nope"} and not waited.complete


def test_wait_finds_tickets_that_died_before_it_began(fake_redis: fakeredis.FakeRedis) -> None:
    fake_redis.lpush("p:dead", DeadLetter("duplicate id", b"{}", id="x").to_json())
    waited = Client(fake_redis, "p").wait(["x"], timeout=5)
    assert waited.dead == {"x": "duplicate id"} and waited.complete


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


def run_cli(redis_url: str, keys: Keys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = cli.main(["--redis-url", redis_url, "--prefix", keys.prefix, *args])
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


@pytest.mark.redis
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


@pytest.mark.redis
def test_push_jsonl_from_stdin_reports_dead_tickets(redis_url: str, keys: Keys, worker: Service) -> None:
    first = json.dumps({"id": "j1", "text": "account: locked"})
    code, out, _ = run_cli(redis_url, keys, "push", "-", "--wait", stdin=first + "\n\n")
    assert code == 0 and json.loads(out)["label"] == "account"
    clash = json.dumps({"id": "j1", "text": "something else"})  # a taken id: dead, and the waiter is told
    code, out, _ = run_cli(redis_url, keys, "push", "-", "--wait", "--timeout", "10", stdin=clash)
    assert code == 1 and json.loads(out) == {"id": "j1", "dead": "duplicate id"}


@pytest.mark.redis
def test_a_bad_line_fails_with_its_number_and_pushes_nothing(
    redis_url: str, keys: Keys, r: redis.Redis
) -> None:
    lines = '{"id": "a", "text": "ok"}\n{"id": "b", "text": ""}\n'
    code, _, err = run_cli(redis_url, keys, "push", "-", stdin=lines)
    assert code == 2 and "line 2: empty field" in err and r.llen(keys.tickets) == 0
    code, _, err = run_cli(redis_url, keys, "push", "-", "--format", "csv", stdin="id,body\n1,x\n")
    assert code == 2 and "id and text" in err


@pytest.mark.redis
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


def test_an_unreachable_redis_is_one_line_and_exit_3(keys: Keys) -> None:
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "stats")
    assert code == 3 and "cannot reach Redis" in err

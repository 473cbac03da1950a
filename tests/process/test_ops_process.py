"""Operations with real worker processes (fake classifier): a hung worker is ended by its watchdog and a
peer finishes its tickets; bad credentials, a wrong key type and an unreachable Redis end the worker
fast with their exit codes; /metrics is served; every line a worker writes is JSON with its id."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis
from support import wait_for

from producer.client import Client
from producer.protocol import Keys
from tools.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.redis, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]
FAKE = "fake:billing,technical,account"


def worker_cmd(*flags: str) -> list[str]:
    cmd = [sys.executable, "-m", "tools.fakeworker", "--log-format", "json", *flags]
    return cmd if "--model" in flags else [*cmd, "--model", FAKE]


class Worker:
    def __init__(self, log: Path, *flags: str) -> None:
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(worker_cmd(*flags), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def events(self) -> list[dict[str, object]]:
        lines = self.log.read_text().splitlines()
        assert all(line.startswith("{") for line in lines), lines  # JSON only, nothing else
        return [json.loads(line) for line in lines]


def check(redis_url: str, keys: Keys, worker_id: str) -> int:
    cmd = [sys.executable, "-m", "worker", "check", "--redis-url", redis_url, "--prefix", keys.prefix]
    return subprocess.run(
        [*cmd, "--worker-id", worker_id], cwd=ROOT, capture_output=True, timeout=30
    ).returncode


def tickets(n: int) -> list[dict[str, str]]:
    topics = ["billing: refund please", "technical: it crashes", "account: locked out"]
    return [{"id": f"t{i}", "text": f"{topics[i % 3]} ({i})"} for i in range(n)]


def test_a_hung_worker_is_ended_by_its_watchdog_and_a_peer_finishes_its_tickets(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    Client(r, keys.prefix).push(tickets(40))
    base = ("--redis-url", redis_url, "--prefix", keys.prefix, "--heartbeat-s", "1")
    hung = Worker(
        tmp_path / "a.log", *base, "--worker-id", "A", "--stall-timeout", "2",
        "--model", FAKE + "?delay_ms=60000", "--drain", "10", "--batch-size", "5",
    )  # fmt: skip
    wait_for(lambda: r.llen(keys.inflight("A")) == 10, what="A to claim a drain")
    assert check(redis_url, keys, "A") == 0  # alive: just claimed
    began = time.monotonic()
    assert hung.wait(20) == 6  # the batch hangs for a minute: the watchdog ends it
    assert time.monotonic() - began < 8
    (stalled,) = [e for e in hung.events() if e["event"] == "stalled"]
    assert stalled["worker_id"] == "A" and stalled["level"] == "error"
    assert check(redis_url, keys, "A") == 1
    assert r.llen(keys.inflight("A")) == 10  # the claims stay for peers; the heartbeat is gone
    peer = Worker(tmp_path / "b.log", *base, "--worker-id", "B", "--burst")
    assert peer.wait(30) == 0
    assert r.hlen(keys.results) == 40 and r.llen(keys.inflight("A")) == 0 and r.llen(keys.dead) == 0
    assert any(e["event"] == "requeued" and e["worker"] == "A" for e in peer.events())


def test_fatal_redis_errors_end_the_worker_fast_with_their_exit_code(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", password="right") as server:
        keys = Keys("{fatal}")
        url = server.url
        began = time.monotonic()
        wrong = Worker(
            tmp_path / "pw.log", "--redis-url", url.replace(":right@", ":wrong@"), "--prefix", "{fatal}"
        )
        assert wrong.wait(20) == 3
        assert time.monotonic() - began < 10
        (fatal,) = [e for e in wrong.events() if e["event"] == "fatal"]
        assert fatal["cause"] == "auth" and "right" not in json.dumps(wrong.events())  # password never logged

        admin = server.client()
        admin.lpush(keys.tickets, *[json.dumps(t) for t in tickets(3)])
        admin.set(keys.results, "a string where a hash belongs")
        typed = Worker(tmp_path / "type.log", "--redis-url", url, "--prefix", "{fatal}", "--worker-id", "W")
        assert typed.wait(20) == 4
        (fatal,) = [e for e in typed.events() if e["event"] == "fatal"]
        assert fatal["cause"] == "wrongtype"
        # the claimed drain could not be acked; it was handed back before the exit
        assert admin.llen(keys.tickets) == 3 and admin.llen(keys.inflight("W")) == 0

    gone = f"redis://127.0.0.1:{free_port()}/0"
    began = time.monotonic()
    burst = Worker(tmp_path / "gone.log", "--redis-url", gone, "--burst", "--burst-wait-s", "1")
    assert burst.wait(20) == 5
    assert time.monotonic() - began < 10
    assert "redis_gave_up" in [e["event"] for e in burst.events()]


def test_metrics_are_served_while_the_worker_runs(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    port = free_port()
    worker = Worker(
        tmp_path / "m.log", "--redis-url", redis_url, "--prefix", keys.prefix, "--metrics-port", str(port),
        "--worker-id", "M", "--drain", "8", "--batch-size", "4",
    )  # fmt: skip
    try:
        r.lpush(keys.tickets, b"not json")
        waited = Client(r, keys.prefix).push_and_wait(tickets(30), timeout=20)
        assert len(waited.results) == 30

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                return resp.read().decode()

        wait_for(lambda: 'ticketq_tickets_total{outcome="labelled"} 30.0' in scrape(), what="the counters")
        assert 'ticketq_tickets_total{outcome="dead"} 1.0' in scrape()
        wait_for(lambda: "ticketq_queue_depth 0.0" in scrape(), what="the depth gauge (read once a second)")
        text = scrape()
        (tmp_path / "metrics.txt").write_text(text)
        for name in (
            'ticketq_labels_total{label="billing"} 10.0',
            "ticketq_pass_seconds_bucket",
            "ticketq_drain_seconds_count",
            "ticketq_queue_wait_seconds_count 30.0",
            "ticketq_padding_ratio",
            "ticketq_tokens_per_second",
            "ticketq_queue_depth 0.0",
            "ticketq_inflight",
            "ticketq_oldest_ticket_age_seconds",
            'ticketq_worker_info{device="cpu"',
            'ticketq_head_info{id="",method="zero-shot"',
            "ticketq_last_progress_timestamp_seconds",
        ):
            assert name in text, name
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    events = worker.events()
    assert all(e.get("worker_id") == "M" for e in events)
    batches = [e for e in events if e["event"] == "batch"]
    assert batches and all(e["items"] <= 4 for e in batches)  # type: ignore[operator]


def test_permissions_revoked_mid_run_end_the_worker_and_hand_back_its_claims(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", password="admin") as server:
        keys = Keys("{acl}")
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", "w", "on", ">pw", "~*", "&*", "+@all")
        url = f"redis://w:pw@127.0.0.1:{server.port}/0"
        admin.lpush(keys.tickets, *[json.dumps(t) for t in tickets(200)])
        worker = Worker(
            tmp_path / "w.log", "--redis-url", url, "--prefix", keys.prefix, "--worker-id", "W",
            "--model", FAKE + "?delay_ms=50", "--drain", "10", "--batch-size", "5",
        )  # fmt: skip
        wait_for(lambda: admin.hlen(keys.results) >= 20, 20, what="some results")
        admin.execute_command("ACL", "SETUSER", "w", "-hset")  # the ack's HSET is refused from now on
        began = time.monotonic()
        assert worker.wait(20) == 3
        assert time.monotonic() - began < 10
        (fatal,) = [e for e in worker.events() if e["event"] == "fatal"]
        assert fatal["cause"] == "auth" and "NoPermissionError" in str(fatal["error"])
        # nothing lost: what it held went back (its script may still run), nothing stays in flight
        assert admin.hlen(keys.results) + admin.llen(keys.tickets) == 200
        assert admin.llen(keys.inflight("W")) == 0


def test_check_without_an_id_finds_this_hosts_workers(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "worker", "check", "--redis-url", redis_url, "--prefix", keys.prefix]
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=30).returncode == 1  # none yet
    worker = Worker(tmp_path / "w.log", "--redis-url", redis_url, "--prefix", keys.prefix)
    try:
        wait_for(lambda: r.scard(keys.workers) == 1, 20, what="the worker to register")
        # records no worker wrote (audit): a member that is not UTF-8 and a heartbeat that is no object
        # made check (the containers' health check) a traceback, exit 1: every container restarted
        r.sadd(keys.workers, b"\xff\xfeghost", "odd")
        r.set(keys.heartbeat("odd"), "[1]")
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.startswith("healthy: "), done.stdout + done.stderr
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0

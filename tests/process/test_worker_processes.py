"""Real worker processes (``python -m tools.fakeworker``: the service with the fake classifier), fed and
read with redis-cli.

They are killed with SIGKILL mid-batch, stopped with SIGTERM (once and twice) and fed a poison ticket,
and every test checks the one invariant that matters: every ticket ends with a result or a dead letter,
none is lost and none stays in flight.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis
from support import need_binary, tickets, wait_for

from producer.protocol import DeadLetter, Keys, Result
from worker.launch import WorkerProcess

pytestmark = [pytest.mark.redis, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]
FAKE = "fake:billing,technical,account"


def start(redis_url: str, keys: Keys, log: Path, *flags: str, worker_id: str | None = None) -> WorkerProcess:
    """``python -m tools.fakeworker`` (the fake model unless ``flags`` name another)."""
    model = [] if "--model" in flags else ["--model", FAKE]
    wid = worker_id or f"t-{uuid.uuid4().hex[:8]}"
    return WorkerProcess.start(
        redis_url=redis_url, prefix=keys.prefix, worker_id=wid, log=log, flags=[*model, *flags],
        module="tools.fakeworker", cwd=ROOT,
    )  # fmt: skip


def accounted(r: redis.Redis, keys: Keys, n: int) -> None:
    """Every ticket has a result; nothing is dead, waiting or in flight."""
    assert r.hlen(keys.results) == n
    assert r.llen(keys.dead) == 0 and r.llen(keys.tickets) == 0
    assert not list(r.scan_iter(match=f"{keys.prefix}:inflight:*"))


def test_a_burst_worker_reads_what_redis_cli_pushed(redis_url: str, keys: Keys, tmp_path: Path) -> None:
    need_binary("redis-cli")

    def cli(*args: str) -> str:
        return subprocess.run(
            ["redis-cli", "-u", redis_url, *args], check=True, capture_output=True, text=True
        ).stdout

    cli("LPUSH", keys.tickets, *tickets(30))
    cli(
        "LPUSH",
        keys.tickets,
        "not json",
        '{"id": "m1"}',
        '{"id": "m2", "text": ""}',
        '{"id": "t0", "text": "x"}',
    )
    worker = start(redis_url, keys, tmp_path / "w.log", "--burst")
    assert worker.wait(30) == 0
    result = Result.from_json(cli("HGET", keys.results, "t1"))
    assert result.label == "technical" and result.model == FAKE
    assert cli("HLEN", keys.results).strip() == "30"
    dead = [DeadLetter.from_json(line) for line in cli("LRANGE", keys.dead, "0", "-1").splitlines()]
    reasons = {d.id: d.reason for d in dead}
    assert reasons["m1"] == "missing field: text" and reasons["t0"] == "duplicate id"
    assert reasons["m2"].startswith("empty field") and reasons[None].startswith("not JSON")
    drains = [e for e in list(worker.events()) if e["event"] == "drain"]
    assert sum(int(str(d["claimed"])) for d in drains) == 34


def test_sigkill_mid_batch_then_a_second_worker_recovers_everything(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    r.lpush(keys.tickets, *tickets(200))
    slow = start(
        redis_url, keys, tmp_path / "a.log", "--heartbeat-s", "1",
        "--model", FAKE + "?delay_ms=100", "--drain", "20", "--batch-size", "5", worker_id="A",
    )  # fmt: skip
    wait_for(lambda: r.hlen(keys.results) >= 20 and r.llen(keys.inflight("A")) > 0, what="A mid-batch")
    slow.proc.send_signal(signal.SIGKILL)
    slow.wait(30)
    assert r.llen(keys.inflight("A")) > 0  # it died holding a drain
    wait_for(lambda: not r.exists(keys.heartbeat("A")), what="A's heartbeat to expire")
    rescuer = start(redis_url, keys, tmp_path / "b.log", "--burst", worker_id="B")
    assert rescuer.wait(30) == 0
    accounted(r, keys, 200)
    assert not r.sismember(keys.workers, "A")
    requeued = [e for e in list(rescuer.events()) if e["event"] == "requeued"]
    assert requeued and requeued[0]["worker"] == "A"


def test_sigterm_finishes_the_batch_and_exits_cleanly(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    r.lpush(keys.tickets, *tickets(200))
    worker = start(
        redis_url, keys, tmp_path / "w.log",
        "--model", FAKE + "?delay_ms=50", "--drain", "20", "--batch-size", "5", worker_id="W",
    )  # fmt: skip
    wait_for(lambda: r.hlen(keys.results) >= 20, what="some results")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert r.hlen(keys.results) + r.llen(keys.tickets) == 200  # nothing lost, nothing held
    assert r.llen(keys.inflight("W")) == 0 and not r.sismember(keys.workers, "W")
    assert "stopping" in [e["event"] for e in list(worker.events())]
    assert start(redis_url, keys, tmp_path / "w2.log", "--burst").wait(30) == 0
    accounted(r, keys, 200)


def test_sigterm_while_the_model_loads_exits_cleanly_and_claims_nothing(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    r.lpush(keys.tickets, *tickets(10))
    worker = start(redis_url, keys, tmp_path / "w.log", "--model", FAKE + "?load_ms=30000", worker_id="W")
    wait_for(lambda: "loading" in [e["event"] for e in list(worker.events())], 30, "the model to be loading")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(5) == 0  # not killed by the signal (143), nor waiting out the load
    stopping = [e for e in list(worker.events()) if e["event"] == "stopping"]
    assert stopping and stopping[0]["signal"] == "SIGTERM" and stopping[0]["served"] is False
    assert r.llen(keys.tickets) == 10 and r.llen(keys.inflight("W")) == 0 and r.hlen(keys.results) == 0


def test_a_second_signal_requeues_and_exits_at_once(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    r.lpush(keys.tickets, *tickets(10))
    worker = start(
        redis_url, keys, tmp_path / "w.log",
        "--model", FAKE + "?delay_ms=20000", "--drain", "10", "--batch-size", "10", worker_id="W",
    )  # fmt: skip
    wait_for(lambda: r.llen(keys.inflight("W")) == 10, what="the drain to be claimed")
    time.sleep(0.3)  # inside the (20 s) batch now
    worker.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    began = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(5) == 128 + signal.SIGTERM
    assert time.monotonic() - began < 3
    assert r.llen(keys.tickets) == 10 and r.llen(keys.inflight("W")) == 0 and r.hlen(keys.results) == 0


def test_a_poison_ticket_is_dead_lettered_after_killing_max_attempts_workers(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    r.lpush(keys.tickets, json.dumps({"id": "poison", "text": "__exit__"}), *tickets(5))
    codes = []
    for run in range(4):
        wait_for(
            lambda: not list(r.scan_iter(match=f"{keys.prefix}:heartbeat:*")), what="heartbeats to expire"
        )
        flags = ("--burst", "--heartbeat-s", "1", "--max-attempts", "2")
        codes.append(start(redis_url, keys, tmp_path / f"w{run}.log", *flags).wait(30))
        if codes[-1] == 0:
            break
    assert codes == [70, 70, 0]  # two workers died on it; the third dead-lettered it and did the rest
    (letter,) = [DeadLetter.from_json(d) for d in r.lrange(keys.dead, 0, -1)]
    assert letter.id == "poison" and letter.reason == "poison: killed 2 workers"
    assert r.hlen(keys.results) == 5 and r.llen(keys.tickets) == 0 and r.hlen(keys.attempts) == 0

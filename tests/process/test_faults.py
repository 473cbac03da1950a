"""Faults from outside, against real worker processes: bad inputs pushed with redis-cli, Redis down, killed
and restarted, an engine that raises (lost replies: tests/redis/test_lost_replies.py; passwords, TLS and
ACLs: test_credentials.py). Each test ends by checking where every ticket went.

Tests that stop or restart Redis get a throwaway redis-server of their own (free loopback port, AOF,
files in a temporary directory, always stopped); the rest use the suite's shared server.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import redis
from faultkit import FAKE, KEYS, MB, all_accounted, cli, events
from support import tickets, wait_for

from producer.protocol import MAX_PAYLOAD_BYTES, DeadLetter, Result, payload_digest
from tools.chaos.fleet import Fleet
from tools.redis_server import RedisServer
from worker.launch import WorkerProcess

pytestmark = [pytest.mark.redis, pytest.mark.process]


def started(r: redis.Redis, worker: WorkerProcess) -> WorkerProcess:
    wait_for(lambda: r.exists(KEYS.heartbeat(worker.id)), 15, f"{worker.id} to start")
    return worker


def proc_kb(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- bad inputs, pushed with redis-cli ---------------------------------------------------------------------

NOT_JSON_AT_26 = "not JSON: Invalid control character at: line 1 column 27 (char 26)"
BAD_INPUTS: list[tuple[bytes, str]] = [
    (b"hello", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b'{"id": "u1", "text": "caf\xe9 au lait"}', "not UTF-8: invalid continuation byte at byte 25"),
    (b'["u2", "a list"]', "not a JSON object: got list"),
    (b"42", "not a JSON object: got int"),
    (b'{"text": "who am I"}', "missing field: id"),
    (b'{"id": "m2"}', "missing field: text"),
    (b'{"id": 7, "text": "x"}', "wrong type: id must be a string, got int"),
    (b'{"id": "w2", "text": {"a": 1}}', "wrong type: text must be a string, got dict"),
    (b'{"id": "e1", "text": ""}', "empty field: text is empty or white space"),
    (b'{"id": "e2", "text": " \\t\\n "}', "empty field: text is empty or white space"),
    (b'{"id": "v1", "text": "x", "v": 2}', "unsupported version: 2 (this worker speaks v1)"),
    (  # a producer's value is quoted bounded, in the letter and in the log
        json.dumps({"id": "v2", "text": "x", "v": "A" * 60_000}).encode(),
        "unsupported version: '" + "A" * 38 + "\u2026 (this worker speaks v1)",
    ),
    (json.dumps({"id": "L" * 257, "text": "y"}).encode(), "id too long: 257 characters > 256"),
    (json.dumps({"id": "t1", "text": "y" * 16385}).encode(), "text too long: 16385 characters > 16384"),
    (b'{"id": "c1", "text": "ring \\u0007 bell"}', "control character U+0007 in text"),
    (b'{"id": "c2", "text": "ansi \\u001b[31m red"}', "control character U+001B in text"),
    (b'{"id": "c3", "text": "raw \x01 byte"}', NOT_JSON_AT_26),
    (b'{"id": "c4", "text": "nul \\u0000 escaped"}', "control character U+0000 in text"),
    (b'{"id": "c5", "text": "nul \x00 raw"}', NOT_JSON_AT_26),
    (b'{"id": "s1", "text": "half \\ud800 pair"}', "lone surrogate U+D800 in text"),
    (
        b'{"id": "n1", "text": "x", "deep": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        "nested too deeply: more than 32 levels",
    ),
]


def big(n: int) -> bytes:
    """Exactly 10 MiB, distinct in its first bytes (all a dead letter keeps)."""
    return b'{"id": "big%02d", "text": "' % n + b"a" * (10 * MB - 27) + b'"}'


ENGINE_ERROR = "engine error: FakeEngineError: fake engine refused a ticket containing __raise__"


def test_bad_inputs_each_end_dead_with_their_reason_and_the_worker_keeps_serving(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    server = servers()
    server.start()
    r = server.client()
    worker = started(r, fleets(server.url).spawn())
    rss_before = proc_kb(worker.proc.pid, "VmRSS")
    for payload, _ in BAD_INPUTS:
        if b"\x00" in payload or len(payload) > 60_000:  # NUL cannot be an argv byte; argv is bounded
            cli(server.url, "-x", "LPUSH", KEYS.tickets, stdin=payload)
        else:
            cli(server.url, "LPUSH", KEYS.tickets, payload)
    bigs = [big(n) for n in range(12)]  # 120 MiB in all, staged, then moved in at once: a backlog
    for payload in bigs:
        cli(server.url, "-x", "LPUSH", f"{KEYS.prefix}:staging", stdin=payload)
    with r.pipeline(transaction=True) as pipe:
        for _ in bigs:
            pipe.lmove(f"{KEYS.prefix}:staging", KEYS.tickets, "RIGHT", "LEFT")
        pipe.execute()
    twin = b'{"id": "twin", "text": "billing: the same bytes, twice"}'
    cli(server.url, "LPUSH", KEYS.tickets, twin, twin)
    mates = [b'{"id": "mate%d", "text": "account: mate %d"}' % (n, n) for n in range(4)]
    boom = b'{"id": "boom", "text": "technical: please __raise__ now"}'
    cli(server.url, "LPUSH", KEYS.tickets, mates[0], mates[1], boom, mates[2], mates[3])  # one drain
    first, rival = b'{"id": "d1", "text": "billing: first"}', b'{"id": "d1", "text": "billing: second"}'
    cli(server.url, "LPUSH", KEYS.tickets, first)
    wait_for(lambda: r.hexists(KEYS.results, "d1"), 15, "d1's result")
    cli(server.url, "LPUSH", KEYS.tickets, rival)
    expected_dead = len(BAD_INPUTS) + len(bigs) + 2  # the engine failure and the rival
    wait_for(lambda: r.llen(KEYS.dead) == expected_dead and r.hlen(KEYS.results) == 6, 30, "every outcome")

    letters = [DeadLetter.from_json(d) for d in r.lrange(KEYS.dead, 0, -1)]
    reasons = {payload_digest(d.payload): d.reason for d in letters}
    for payload, reason in BAD_INPUTS:
        assert reasons.pop(payload_digest(payload)) == reason, payload[:40]
    assert reasons.pop(payload_digest(boom)) == ENGINE_ERROR
    assert reasons.pop(payload_digest(rival)) == "duplicate id"
    for payload in bigs:
        assert (
            reasons.pop(payload_digest(payload[:MAX_PAYLOAD_BYTES]))
            == "payload too large: 10485760 bytes > 65536"
        )
    assert not reasons
    for raw in r.lrange(KEYS.dead, 0, -1):
        letter = json.loads(raw)
        if letter["reason"].startswith("payload too large"):  # kept bounded: its head and its size
            assert len(letter["payload"]) == MAX_PAYLOAD_BYTES and letter["payload_bytes"] == 10 * MB
    winner = r.hget(KEYS.results, "d1")
    assert winner is not None and Result.from_json(winner).digest == payload_digest(first)  # first wins
    assert r.hexists(KEYS.results, "twin") and all(r.hexists(KEYS.results, f"mate{n}") for n in range(4))

    peak = proc_kb(worker.proc.pid, "VmHWM")
    assert peak - rss_before < 200 * 1024, f"RSS grew by {(peak - rss_before) // 1024} MB"
    assert worker.alive  # still serving:
    cli(server.url, "LPUSH", KEYS.tickets, b'{"id": "after", "text": "billing: still there?"}')
    wait_for(lambda: r.hexists(KEYS.results, "after"), 10, "a ticket after the bad ones")
    assert len(events(worker, "dead_letter")) == expected_dead
    assert worker.log.stat().st_size < MB  # no payload is ever logged
    assert max(len(json.dumps(e)) for e in events(worker, "dead_letter")) < 1024
    assert events(worker, "engine_error")
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    all_accounted(r, 7, expected_dead)


# -- Redis down, killed, restarted -------------------------------------------------------------------------


def test_a_worker_started_before_redis_backs_off_quietly_then_serves(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    server = servers()  # its port is chosen, nothing listens on it yet
    worker = fleets(server.url).spawn("--log-level", "debug")  # each retry is a debug line
    time.sleep(1.0)
    cpu_before = cpu_s(worker.proc.pid)
    time.sleep(2.0)
    cpu_outage = cpu_s(worker.proc.pid) - cpu_before
    waits = events(worker, "redis_unavailable")
    assert [e["level"] for e in waits].count("warning") == 1  # logged once per spell, retries at debug
    assert 3 <= len(waits) <= 25, waits  # a bounded schedule, not a retry per millisecond
    assert [e["attempt"] for e in waits] == list(range(1, len(waits) + 1))
    assert all(0 < e["retry_in_s"] <= 5.0 for e in waits)  # capped back-off
    assert cpu_outage < 0.3, f"{cpu_outage:.2f} CPU seconds in 2 s of outage: a busy loop"
    assert worker.alive
    server.start()
    r = server.client()
    r.lpush(KEYS.tickets, *tickets(50))
    wait_for(lambda: r.hlen(KEYS.results) == 50, 15, "results once Redis is up")
    (restored,) = events(worker, "redis_restored")
    assert restored["after_attempts"] >= len(waits) and restored["waited_s"] >= 2.0  # the 3 s outage
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    all_accounted(r, 50, 0)


def test_redis_killed_mid_work_and_restarted_from_its_aof_loses_nothing(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    server = servers(fsync="always")  # every acknowledged write survives a SIGKILL
    server.start()
    r = server.client()
    worker = started(
        r, fleets(server.url, "--model", FAKE + "?delay_ms=30", "--drain", "16", "--batch-size", "4").spawn()
    )
    r.lpush(KEYS.tickets, *tickets(300))
    wait_for(lambda: r.hlen(KEYS.results) >= 40 and r.llen(KEYS.inflight(worker.id)) > 0, 15, "mid-batch")
    server.crash()
    time.sleep(1.0)
    server.start()
    wait_for(lambda: r.hlen(KEYS.results) == 300, 30, "every result after the restart")
    assert worker.alive and events(worker, "redis_unavailable") and events(worker, "redis_restored")
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    all_accounted(r, 300, 0)


def test_sigterm_during_a_redis_outage_exits_promptly_and_a_peer_recovers_the_claims(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    server = servers()
    server.start()
    r = server.client()
    fleet = fleets(server.url, "--heartbeat-s", "1", "--drain", "10", "--batch-size", "10")
    worker = started(r, fleet.spawn("--model", FAKE + "?delay_ms=1500"))
    r.lpush(KEYS.tickets, *tickets(10))
    wait_for(lambda: r.llen(KEYS.inflight(worker.id)) == 10, 10, "the drain to be claimed")
    server.stop()  # SHUTDOWN (the AOF is fsynced) while the worker classifies
    began = time.monotonic()
    fleet.signal(worker, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    assert time.monotonic() - began < 10
    assert events(worker, "exit_during_outage")
    server.start()
    assert r.llen(KEYS.inflight(worker.id)) == 10 and r.hlen(KEYS.results) == 0  # held in Redis, not lost
    wait_for(lambda: not r.exists(KEYS.heartbeat(worker.id)), 5, "the heartbeat to expire")
    peer = fleet.spawn("--burst")
    assert peer.proc.wait(30) == 0
    assert [e["worker"] for e in events(peer, "requeued")] == [worker.id]
    all_accounted(r, 10, 0)


def test_a_full_redis_makes_the_worker_wait_not_crash(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    """At maxmemory (noeviction) Redis refuses writes with OOM errors until memory is freed: a worker
    that exited on them would crash-loop and burn its claims' attempts, so it backs off instead."""
    server = servers()
    server.start()
    r = server.client()
    flags = ("--model", FAKE + "?delay_ms=100", "--drain", "10", "--batch-size", "10")
    worker = started(r, fleets(server.url, *flags).spawn())
    r.lpush(KEYS.tickets, *tickets(100))
    wait_for(lambda: r.hlen(KEYS.results) >= 10, 10, "some results")
    r.config_set("maxmemory", max(1, int(r.info("memory")["used_memory"]) // 2))  # full: writes refused
    wait_for(lambda: any("OutOfMemoryError" in e["error"] for e in events(worker, "redis_unavailable")), 10)
    time.sleep(1.0)
    assert worker.alive
    r.config_set("maxmemory", 0)
    wait_for(lambda: r.hlen(KEYS.results) == 100, 20, "every result once Redis has room")
    assert worker.alive and events(worker, "redis_restored")
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    all_accounted(r, 100, 0)


# -- issue 19: one payload must never stop the fleet --------------------------------------------------------

ISSUE_19 = r'{"id":"\ud800","text":"hello"}'  # valid JSON text; the escape is a lone UTF-16 surrogate


def test_regression_issue_19_a_lone_surrogate_id_pushed_with_redis_cli_cannot_stop_the_fleet(
    redis_url: str, prefix: str, fleets: Callable[..., Fleet]
) -> None:
    """The one-line outage: a worker died in the ack with UnicodeEncodeError, leaving the good tickets of
    the same drain in flight, and every worker that recovered them died the same way, at start-up too."""
    from producer.protocol import Keys

    keys = Keys(prefix)
    r = redis.Redis.from_url(redis_url)
    fleet = fleets(redis_url, "--drain", "8", "--batch-size", "8", "--heartbeat-s", "1", prefix=prefix)
    good = tickets(5)
    cli(redis_url, "LPUSH", keys.tickets, good[0], good[1], ISSUE_19, good[2], good[3], good[4])  # one drain
    # Also left behind in a dead worker's in-flight list, as the failed ack left it: recovery must cope.
    r.sadd(keys.workers, "gone")
    cli(redis_url, "LPUSH", keys.inflight("gone"), ISSUE_19.replace("hello", "hello again"), *tickets(2, 10))
    worker = fleet.spawn("--burst")
    assert worker.proc.wait(30) == 0, worker.tail()
    assert r.hlen(keys.results) == 7
    letters = [json.loads(d) for d in r.lrange(keys.dead, 0, -1)]
    assert sorted(d["reason"] for d in letters) == ["lone surrogate U+D800 in id"] * 2
    for raw in cast(list[bytes], [*r.hvals(keys.results), *r.lrange(keys.dead, 0, -1)]):
        json.loads(raw.decode("utf-8"))  # strict UTF-8, valid JSON
    assert r.llen(keys.tickets) == 0 and not r.exists(keys.inflight("gone"), keys.inflight(worker.id))
    r.close()

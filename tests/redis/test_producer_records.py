"""ticketq-producer and its client on records no ticketq command wrote (by hand, an older tool, a buggy
producer in another language) and on arguments it cannot honour: one line or a skipped record, never a
traceback, and no single command that holds the shared Redis (found by two audits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from support import run_producer_cli as run_cli

from producer import client as client_module
from producer.client import Client, _chunks
from producer.learning import HeadVersion
from producer.protocol import BadTicket, Keys, Result

pytestmark = pytest.mark.redis
ROOT = Path(__file__).resolve().parents[2]


def result(tid: str, label: str = "billing") -> str:
    return Result(tid, label, {label: 1.0}, "m", "d").to_json()


def test_get_reads_in_bounded_chunks_and_names_an_unreadable_result_without_stopping(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One HMGET of 100,000 ids held Redis for 90 ms; a junk result stopped the whole command (and a push
    --wait, after pushing) with a line that named no id; a lone surrogate in a result made it a crash."""
    monkeypatch.setattr(client_module, "_GET_CHUNK", 2)
    r.hset(keys.results, mapping={f"T-{i}": result(f"T-{i}") for i in range(5)})
    r.hset(keys.results, "T-2", "not json")
    r.hset(keys.results, "T-3", result("T-3").replace('"billing"', '"bill\\ud800ing"'))
    c = Client(r, keys.prefix)
    unreadable: dict[str, str] = {}
    found = c.get_many((f"T-{i}" for i in range(6)), unreadable=unreadable)
    assert sorted(found) == ["T-0", "T-1", "T-4"]
    assert sorted(unreadable) == ["T-2", "T-3"] and "lone surrogate" in unreadable["T-3"]
    assert c.get_many("T-0") == {"T-0": found["T-0"]}  # one id, not its characters
    code, out, err = run_cli(redis_url, keys, "get", "T-0", "T-2", "T-5")
    assert code == 1 and [json.loads(line)["id"] for line in out.splitlines()] == ["T-0"]
    assert "result for T-2 is unreadable: " in err and "no result for T-5" in err


def test_pushes_are_split_by_bytes_as_well_as_by_count() -> None:
    """1,000 tickets of 64 KB made one 64 MB LPUSH (230 ms of Redis)."""
    items = [b"x" * 400] * 5 + [b"y" * 2000, b"z"]
    assert [len(c) for c in _chunks(items, 3, 1000)] == [2, 2, 1, 1, 1]
    assert [b"".join(c) for c in _chunks(items, 3, 1000)][-2:] == [b"y" * 2000, b"z"]  # alone, in order
    assert list(_chunks([], 3, 1000)) == []


def test_a_wait_it_cannot_keep_and_an_empty_id_are_refused_before_anything_moves(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    """push --wait --timeout inf pushed, then crashed (OverflowError): a retry made duplicate-id letters;
    requeue-dead --id '' (an unset shell variable) replayed every letter."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "text": "hello"}\n')
    code, _, err = run_cli(redis_url, keys, "push", str(path), "--wait", "--timeout", "inf")
    assert code == 2 and "timeout" in err and r.llen(keys.tickets) == 0
    with pytest.raises(ValueError, match="timeout must be"):
        Client(r, keys.prefix).push_and_wait([{"id": "a", "text": "hello"}], timeout=float("nan"))
    assert r.llen(keys.tickets) == 0
    r.lpush(
        keys.dead, json.dumps({"reason": "engine error: x", "payload": '{"id":"d","text":"x"}', "id": "d"})
    )
    code, _, err = run_cli(redis_url, keys, "requeue-dead", "--id", "")
    assert code == 2 and "id: must be a ticket id" in err and r.llen(keys.dead) == 1


def test_a_head_entry_or_result_with_a_400_digit_number_is_skipped_not_a_traceback(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """float() of a 400-digit integer (JSON too) raises OverflowError: one such P:heads entry made ``heads``
    exit 1 with a traceback, one such score made ``get`` and ``review`` fail; the history is read to
    HEADS_KEPT entries only."""
    from producer.learning import HEADS_KEPT

    big = "1" * 400
    good = {"version": "2", "at": 1.0, "bytes": 3, "sha256": "ab"}
    r.rpush(keys.heads, json.dumps(good), json.dumps({**good, "version": "1", "at": "@"}).replace('"@"', big))
    r.rpush(keys.heads, json.dumps({**good, "gate": {"candidate": "@", "current": 0.5}}).replace('"@"', big))
    entries = Client(r, keys.prefix).head_versions()
    assert [(e.version, e.at, e.gate) for e in entries] == [
        ("2", 1.0, None),
        ("1", 0.0, None),
        ("2", 1.0, None),
    ]
    code, out, _ = run_cli(redis_url, keys, "heads")
    assert code == 0 and len(out.splitlines()) == 4
    r.rpush(keys.heads, *[json.dumps(good)] * HEADS_KEPT)
    assert len(Client(r, keys.prefix).head_versions()) == HEADS_KEPT
    r.hset(keys.results, mapping={"OK": result("OK"), "BAD": result("BAD").replace("1.0", big)})
    r.zadd(keys.review, {"BAD": 0.1, "OK": 0.2})
    code, out, err = run_cli(redis_url, keys, "get", "OK", "BAD")
    assert code == 1 and json.loads(out)["id"] == "OK" and "result for BAD is unreadable: " in err
    code, out, _ = run_cli(redis_url, keys, "review")
    assert code == 0 and [json.loads(line)["id"] for line in out.splitlines()] == ["BAD", "OK"]


def test_heads_stats_corrections_and_review_read_past_records_no_worker_wrote(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    r.lpush(
        keys.heads,
        json.dumps({"version": "1", "at": 1.0, "bytes": 1e999, "sha256": "ab", "gate": {"candidate": 0.5}}),
    )
    entry = HeadVersion.from_json(cast(bytes, r.lindex(keys.heads, 0)))
    assert (entry.size, entry.gate) == (0, None)  # 1e999 bytes read as none; a gate missing one side left out
    code, out, _ = run_cli(redis_url, keys, "heads")
    assert code == 0 and out.splitlines()[1].split()[0] == "1"
    r.sadd(keys.workers, "w1", "w2")
    r.set(keys.heartbeat("w1"), json.dumps({"model": json.loads("[" * 600 + "]" * 600), "host": "h"}))
    r.set(keys.heartbeat("w2"), deep)
    for flags in ((), ("--json",)):
        code, out, _ = run_cli(redis_url, keys, "stats", *flags)
        assert code == 0 and "2" in out
    r.hset(keys.labels, mapping={"T-1": deep, "T-2": json.dumps({"label": "a", "text": "t", "at": 1.0})})
    code, out, _ = run_cli(redis_url, keys, "corrections")
    assert code == 0 and [json.loads(line)["id"] for line in out.splitlines()] == ["T-2"]
    r.hset(keys.results, "R-1", result("R-1"))
    r.zadd(keys.review, {"R-1": float("inf")})
    code, out, _ = run_cli(redis_url, keys, "review")
    assert code == 0 and json.loads(out)["margin"] is None  # "Infinity" is not JSON


def test_a_heartbeat_made_by_hand_is_read_only_up_to_its_bound(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stats and the health probe read every worker's heartbeat: one of 100 MB, set by hand, was read whole
    by each of them. Now its first MAX_HEARTBEAT_BYTES: alive, its info unreadable (a part of it)."""
    from producer.protocol import MAX_HEARTBEAT_BYTES

    r.sadd(keys.workers, "w1", "big", "gone")
    r.set(keys.heartbeat("w1"), json.dumps({"host": "h1", "model": "m"}), ex=60)
    r.set(keys.heartbeat("big"), json.dumps({"host": "h2", "pad": "x" * (4 * MAX_HEARTBEAT_BYTES)}), ex=60)
    replied: list[int] = []
    execute = redis.client.Pipeline.execute

    def counted(self: redis.client.Pipeline, *args: Any, **kw: Any) -> Any:
        out = execute(self, *args, **kw)
        replied.extend(len(x) for x in out if isinstance(x, bytes))
        return out

    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    stats = Client(r, keys.prefix).stats()
    monkeypatch.undo()
    assert replied and max(replied) == MAX_HEARTBEAT_BYTES  # the big one's first 64 KiB, not 256 KiB
    by = {w.id: w for w in stats.workers}
    assert (by["w1"].alive, by["w1"].info["host"]) == (True, "h1")
    assert (by["big"].alive, by["big"].info) == (True, {}) and by["gone"].alive is False
    cmd = [sys.executable, "-m", "worker", "check", "--redis-url", redis_url, "--prefix", keys.prefix]
    for wid, healthy in (("big", 0), ("gone", 1)):
        done = subprocess.run([*cmd, "--worker-id", wid], cwd=ROOT, capture_output=True, timeout=60)
        assert done.returncode == healthy, done.stdout


def test_stats_and_the_health_probe_name_worker_keys_made_by_hand(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """A heartbeat key of another type failed ``stats`` (WRONGTYPE: no worker shown at all) and one that
    never expires counted as alive forever, in ``stats``, the dashboard and the health probe. Each is now
    named, not alive, and every other worker still shown."""
    r.sadd(keys.workers, "w1", "hashed", "persisted", "listed")
    r.set(keys.heartbeat("w1"), json.dumps({"host": "h1"}), ex=60)
    r.hset(keys.heartbeat("hashed"), "host", "h1")
    r.expire(keys.heartbeat("hashed"), 60)
    r.set(keys.heartbeat("persisted"), json.dumps({"host": "h1"}))
    r.set(keys.heartbeat("listed"), json.dumps({"host": "h1"}), ex=60)
    r.set(keys.inflight("listed"), "not a list")
    r.lpush(keys.inflight("w1"), "p")
    by = {w.id: w for w in Client(r, keys.prefix).stats().workers}
    assert [(w, by[w].alive, by[w].inflight) for w in sorted(by)] == [
        ("hashed", False, 0),
        ("listed", True, 0),
        ("persisted", False, 0),
        ("w1", True, 1),
    ]
    assert by["w1"].problem == "" and "is not a string" in by["hashed"].problem
    assert "never expires" in by["persisted"].problem and "is not a list" in by["listed"].problem
    code, out, err = run_cli(redis_url, keys, "stats")
    assert code == 0 and "2 alive of 4" in out
    assert f"worker persisted: {keys.heartbeat('persisted')} never expires" in err
    cmd = [sys.executable, "-m", "worker", "check", "--redis-url", redis_url, "--prefix", keys.prefix]
    for wid, healthy in (("w1", 0), ("hashed", 1), ("persisted", 1)):
        done = subprocess.run([*cmd, "--worker-id", wid], cwd=ROOT, capture_output=True, timeout=60)
        assert done.returncode == healthy, done.stdout


def test_a_refused_read_of_a_heartbeat_is_an_error_not_a_dead_worker(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    """Only WRONGTYPE means a heartbeat made by hand: a user refused GETRANGE or LLEN (ACL) saw every live
    worker as dead, "not a string" (review); it is the error stats raised before. A user refused PTTL
    (a line written before it) judges by EXISTS."""
    from support import narrow_redis

    r.sadd(keys.workers, "w1")
    r.set(keys.heartbeat("w1"), json.dumps({"host": "h1"}), ex=60)
    for denied in ("-getrange", "-llen"):
        with narrow_redis(r, redis_url, keys.prefix, denied) as narrow, pytest.raises(redis.ResponseError):
            Client(narrow, keys.prefix).stats()
    with narrow_redis(r, redis_url, keys.prefix, "-pttl") as narrow:
        (w1,) = Client(narrow, keys.prefix).stats().workers
    assert (w1.alive, w1.problem, w1.info) == (True, "", {"host": "h1"})


def test_a_lone_surrogate_in_a_record_is_printed_escaped_not_a_crash(
    redis_url: str, r: redis.Redis, keys: Keys
) -> None:
    r.lpush(
        keys.heads, json.dumps({"version": "1", "at": 1.0, "bytes": 3, "sha256": "ab", "by": "al\ud800ice"})
    )
    cmd = [sys.executable, "-m", "producer", "--redis-url", redis_url, "--prefix", keys.prefix, "heads"]
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, timeout=60, env={**os.environ, "PYTHONIOENCODING": "utf-8"}
    )
    assert done.returncode == 0 and b"al\\ud800ice" in done.stdout, done.stderr


def test_publish_head_reads_a_file_only_up_to_the_bound(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish-head /dev/zero read until memory ran out (MemoryError, a traceback)."""
    from producer import cli

    monkeypatch.setattr(cli, "MAX_HEAD_BYTES", 1000)
    monkeypatch.setattr(client_module, "MAX_HEAD_BYTES", 1000)
    code, _, err = run_cli(redis_url, keys, "publish-head", "/dev/zero")
    assert code == 2 and "head too large: 1001 bytes > 1000" in err and not r.exists(keys.head)


def test_a_head_with_an_mlp_is_not_published_through_redis(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    """A head with an MLP (format ticketq-head/2, tens of MB) held Redis for 385 ms while a worker copied
    it into P:head:good: publish-head refuses it, naming what to do instead; a linear head publishes."""
    import json

    def head_file(fmt: str) -> Path:
        meta = json.dumps({"format": fmt})
        header = json.dumps({"__metadata__": {"ticketq": meta}}).encode()
        path = tmp_path / f"{fmt.replace('/', '-')}.head"
        path.write_bytes(len(header).to_bytes(8, "little") + header)
        return path

    code, _, err = run_cli(redis_url, keys, "publish-head", str(head_file("ticketq-head/2")))
    assert code == 2 and "a head with an MLP" in err and "name its file in the task" in err
    assert not r.exists(keys.head)
    code, _, _ = run_cli(redis_url, keys, "publish-head", str(head_file("ticketq-head/1")))
    assert code == 0 and r.exists(keys.head)


def test_a_field_nested_thousands_deep_is_a_bad_ticket_not_a_recursion_error(
    r: redis.Redis, keys: Keys
) -> None:
    field: list = []
    for _ in range(5000):
        field = [field]
    with pytest.raises(BadTicket, match="nested too deeply"):
        Client(r, keys.prefix).push([{"id": "a", "text": "t"}, {"id": "b", "text": "t", "f": field}])
    assert r.llen(keys.tickets) == 0


def test_the_health_check_refuses_a_timeout_it_cannot_keep(capsys: pytest.CaptureFixture[str]) -> None:
    from worker import cli

    assert cli.main(["check", "--timeout", "inf", "--redis-url", "redis://127.0.0.1:6379/0"]) == 2
    assert "timeout: must be 0.1..3600" in capsys.readouterr().err


def test_stats_shows_the_head_version_each_worker_serves(redis_url: str, r: redis.Redis, keys: Keys) -> None:
    r.sadd(keys.workers, "w1", "w2")
    r.set(keys.heartbeat("w1"), json.dumps({"model": "m", "head_version": "3"}))
    r.set(keys.heartbeat("w2"), json.dumps({"model": "m"}))
    code, out, _ = run_cli(redis_url, keys, "stats")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  w")}
    assert code == 0 and out.splitlines()[5].split()[3] == "HEAD"
    assert rows["w1"][3:] == ["3", "m"] and rows["w2"][3:] == ["-", "m"]

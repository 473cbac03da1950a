"""What the process-tier fault tests share: the key prefix on throwaway servers, the fake model, and
helpers to read worker events, push with redis-cli and check that every ticket is accounted for.

The fixtures that make throwaway servers and worker fleets are in this folder's ``conftest.py``.
"""

from __future__ import annotations

import subprocess
from typing import Any

import redis
from support import need_binary

from producer.protocol import Keys
from worker.launch import WorkerProcess

FAKE = "fake:billing,technical,account"
FAKEWORKER = "tools.fakeworker"  # the real service with the fake classifier
KEYS = Keys("{faults}")  # on the throwaway servers; the shared one gets a fresh prefix per test
MB = 1024 * 1024


def events(worker: WorkerProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in worker.events() if e.get("event") == name]


def cli(url: str, *args: str | bytes, stdin: bytes | None = None, dropped_ok: bool = False) -> bytes:
    """redis-cli, the way an outside user would push; ``-x`` reads the last argument from ``stdin``.
    Returns what it printed: the reply, or the error (redis-cli exits 0 on a refused command).
    ``dropped_ok``: the server may also close the connection while the command is still being sent
    (its answer to an oversized bulk); then the error redis-cli printed is returned."""
    need_binary("redis-cli")
    argv = [b"redis-cli", b"-u", url.encode(), *(a.encode() if isinstance(a, str) else a for a in args)]
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=30)
    if dropped_ok and done.returncode != 0 and b"Connection reset" in done.stderr:
        return done.stderr
    assert done.returncode == 0, done.stderr
    return done.stdout


def all_accounted(r: redis.Redis, results: int, dead: int) -> None:
    assert r.hlen(KEYS.results) == results and r.llen(KEYS.dead) == dead
    assert r.llen(KEYS.tickets) == 0
    assert not any(r.llen(k) for k in r.scan_iter(match=KEYS.inflight("*")))

"""Redis Cluster, for real: 3 masters + 3 replicas started by :mod:`tools.redis_cluster` on ports of
their own. Claim, ack, orphan recovery and producer waits work through redis-py's cluster client, and
a master killed mid-run (its replica promoted) loses no ticket."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import finished, need_binary, wait_for

from producer.client import Client
from producer.protocol import Keys, cluster_prefix
from tools.redis_cluster import RedisCluster
from worker.connection import connect
from worker.queue import RedisQueue

pytestmark = [pytest.mark.redis, pytest.mark.process, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
FAKE = "fake:billing,technical,account"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    need_binary("redis-server")
    need_binary("redis-cli")
    with RedisCluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture
def ckeys() -> Keys:
    return Keys(cluster_prefix("t-ops-" + uuid.uuid4().hex[:8]))


def payloads(n: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"id": f"t{i}", "text": f"billing {i}"}).encode() for i in range(start, start + n)]


def test_claim_ack_recovery_and_waits_work_on_a_cluster(cluster: RedisCluster, ckeys: Keys) -> None:
    client = connect(cluster.url, cluster=True)
    producer = Client.from_url(cluster.url, ckeys.prefix, cluster=True)
    assert producer.keys == ckeys
    producer.push([{"id": f"t{i}", "text": f"billing {i}"} for i in range(6)])
    a = RedisQueue(client, ckeys, "A")
    a.beat({}, ttl_s=0.2)
    got = a.claim(4, block_s=0.1, max_wait_s=0, holds_nothing=True)
    assert len(got) == 4
    wait_for(lambda: not client.exists(ckeys.heartbeat("A")), what="A's heartbeat to lapse")
    b = RedisQueue(connect(cluster.url, cluster=True), ckeys, "B", keep_results_s=3600, max_dead=10)
    (rec,) = b.recover()
    assert (rec.worker, rec.requeued) == ("A", 4)
    done: list[bytes] = []
    while len(done) < 6:
        got = b.claim(10, block_s=0.2, max_wait_s=0, holds_nothing=True)
        b.ack([finished(p) for p in got], [])
        done += got
    waited = producer.wait([f"t{i}" for i in range(6)], timeout=5)
    assert waited.complete and len(waited.results) == 6
    assert producer.stats().done == 6 and b.trim() == 0
    # a wait for tickets acked after it began hears the event (published outside the transaction)
    producer.push([{"id": "late", "text": "billing late"}])
    late = b.claim(1, block_s=0.5, max_wait_s=0, holds_nothing=True)

    def ack_soon() -> None:
        time.sleep(0.3)
        b.ack([finished(late[0])], [])

    import threading

    threading.Thread(target=ack_soon, daemon=True).start()
    assert producer.wait(["late"], timeout=10).complete


def test_a_master_failover_mid_run_loses_no_ticket(tmp_path: Path, ckeys: Keys) -> None:
    need_binary("redis-server")
    need_binary("redis-cli")
    n = 300
    with RedisCluster(tmp_path / "c") as c:
        producer = Client.from_url(c.url, ckeys.prefix, cluster=True)
        producer.push([{"id": f"t{i}", "text": f"billing {i}"} for i in range(n)])
        time.sleep(1)  # replication on loopback takes microseconds; pushed tickets reach the replica
        base = [
            sys.executable,
            "-m",
            "tools.fakeworker",
            "--cluster",
            "--redis-url",
            c.url,
            "--prefix",
            ckeys.prefix,
        ]
        base += [
            "--log-format",
            "json",
            "--model",
            FAKE + "?delay_ms=40",
            "--drain",
            "10",
            "--batch-size",
            "5",
        ]
        base += ["--heartbeat-s", "2"]
        logs = [tmp_path / f"w{k}.log" for k in range(2)]
        procs = [
            subprocess.Popen(
                [*base, "--worker-id", f"W{k}"], cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT
            )
            for k, log in enumerate(logs)
        ]
        try:
            wait_for(lambda: producer.stats().done >= 60, 30, "a fifth of the results")
            old, new = c.kill_master_of(ckeys.tickets)
            assert old != new
            survivor = connect(c.url, cluster=True)

            def settled() -> bool:
                try:
                    done = int(survivor.hlen(ckeys.results))
                    return done + int(survivor.llen(ckeys.dead)) >= n
                except Exception:
                    return False

            wait_for(settled, 60, "every ticket to be accounted for after the failover")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(20)
        survivor = connect(c.url, cluster=True)
        results = survivor.hgetall(ckeys.results)
        assert len(results) == n and survivor.llen(ckeys.dead) == 0  # 0 lost, 0 dead
        assert survivor.llen(ckeys.tickets) == 0
        assert all(survivor.llen(ckeys.inflight(f"W{k}")) == 0 for k in range(2))
        events = [
            json.loads(line) for log in logs for line in log.read_text().splitlines() if line.startswith("{")
        ]
        assert any(e["event"] == "redis_unavailable" for e in events)  # the failover was felt, and ridden out
        (tmp_path / "failover.json").write_text(json.dumps({"old": old, "new": new, "results": len(results)}))


def test_the_last_good_head_is_kept_on_a_cluster(cluster: RedisCluster, ckeys: Keys) -> None:
    """keep_head.lua's COPY between P:head and P:head:good: one hash slot (the prefix's hash tag)."""
    from support import FakeClassifier

    from worker.headwatch import HeadWatch

    class Heads(FakeClassifier):
        head: tuple[bytes, str] | None = None

        def load_head(self, data: bytes, version: str, question: str | None = None) -> None:
            self.head = (data, version)

    client = connect(cluster.url, cluster=True)
    Client.from_url(cluster.url, ckeys.prefix, cluster=True).publish_head(b"t1")
    heads = Heads()
    assert HeadWatch(client, ckeys, heads).check() is True and heads.head == (b"t1", "1")
    # COPY's whole hash (the fallback through Lua would keep version and data alone)
    assert client.hgetall(ckeys.head_good) == client.hgetall(ckeys.head)

"""A throwaway Redis Cluster for tests: 3 masters + 3 replicas on loopback ports of its own.

Each node is a ``redis-server --cluster-enabled yes`` with its files in a directory of its own (no
persistence: a test cluster starts empty); ``redis-cli --cluster create`` joins them and assigns the
slots. A short ``cluster-node-timeout`` makes a failover take a couple of seconds, so a test can kill
a master mid-run and watch its replica take over::

    with RedisCluster(tmp_path) as cluster:
        url = cluster.url  # any node; the cluster client discovers the rest
        cluster.kill_master_of("{my-prefix}")  # SIGKILL, then wait for the replica's promotion
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

HOST = "127.0.0.1"


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports nothing listens on, with their cluster bus ports (+10000) free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535 or port in ports:
            continue
        with socket.socket() as bus:
            try:
                bus.bind((HOST, port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


class RedisCluster:
    def __init__(
        self, root: Path, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        self.root = root
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.binary = shutil.which("redis-server") or "redis-server"
        self.cli = shutil.which("redis-cli") or "redis-cli"

    @property
    def url(self) -> str:
        live = [p for p in self.ports if self.procs[p].poll() is None]
        return f"redis://{HOST}:{live[0]}/0"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host=HOST, port=port, socket_timeout=5, socket_connect_timeout=2)

    # -- life cycle ----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        n = self.masters * (1 + self.replicas)
        self.ports = _free_ports(n)
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            self._wait(lambda p=port: self._ping(p), timeout, f"node {port} to answer")
        addrs = [f"{HOST}:{p}" for p in self.ports]
        subprocess.run(
            [
                self.cli,
                "--cluster",
                "create",
                *addrs,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self._wait(self._healthy, timeout, "the cluster to be ok with every replica in sync")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def __enter__(self) -> RedisCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------------------

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now."""
        slot = int(self.node(self._any_live()).execute_command("CLUSTER", "KEYSLOT", key))
        for start, end, master, *_ in self.node(self._any_live()).execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise LookupError(f"no master serves slot {slot}")

    def kill_master_of(self, key: str, timeout: float = 30.0) -> tuple[int, int]:
        """SIGKILL the master serving ``key``, wait until a replica took over; (old port, new port)."""
        old = self.master_of(key)
        self.procs[old].kill()
        self.procs[old].wait(5)

        def promoted() -> bool:
            with contextlib.suppress(redis.RedisError, LookupError):
                new = self.master_of(key)
                return new != old and self.node(new).info("replication")["role"] == "master"
            return False

        self._wait(promoted, timeout, f"a replica to take over from {old}")
        return old, self.master_of(key)

    # -- internals -----------------------------------------------------------------------------------

    def _start_node(self, port: int) -> None:
        home = self.root / str(port)
        home.mkdir(parents=True, exist_ok=True)
        argv = [self.binary, "--bind", HOST, "--port", str(port), "--dir", str(home)]
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        argv += ["--cluster-node-timeout", str(self.node_timeout_ms)]
        argv += ["--save", "", "--appendonly", "no", "--logfile", "redis.log", "--daemonize", "no"]
        self.procs[port] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _any_live(self) -> int:
        for port in self.ports:
            if self.procs[port].poll() is None and self._ping(port):
                return port
        raise LookupError("no live node")

    def _ping(self, port: int) -> bool:
        client = self.node(port)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _healthy(self) -> bool:
        try:
            for port in self.ports:
                info = self.node(port).execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                repl = self.node(port).info("replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
            return True
        except redis.RedisError:
            return False

    @staticmethod
    def _wait(condition: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

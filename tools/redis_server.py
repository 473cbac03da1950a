"""A throwaway redis-server on a free loopback port, with its files in a directory of its own.

AOF is on, so a restart keeps the data: :meth:`RedisServer.restart` is a plain ``SHUTDOWN`` (which
fsyncs the AOF; ``SHUTDOWN NOSAVE`` would be wrong to rely on here) and a start on the same port and
directory. :meth:`RedisServer.crash` is a SIGKILL; with ``fsync="always"`` every acknowledged write
survives even that. With ``tls`` (a directory holding a self-signed ``cert.pem`` and ``key.pem``) it
listens for TLS only, and :attr:`RedisServer.url` is a ``rediss://`` URL that trusts that certificate.
Used by the chaos harness, the fault tests, and :func:`local_redis`: the one way the tools find a Redis
(``python -m tools.with_redis`` for the test suite, ``make demo``).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

HOST = "127.0.0.1"  # loopback only: nothing here is meant to be reachable from elsewhere


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick). Racy by nature; start() retries."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(
        self,
        root: Path,
        *,
        port: int | None = None,
        password: str | None = None,
        fsync: str = "everysec",
        tls: Path | None = None,
        binary: str = "redis-server",
        aof: bool = True,
    ) -> None:
        self.dir = root
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.password = password
        self.fsync = fsync
        self.tls = tls
        self.aof = aof
        self.binary = shutil.which(binary) or binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- addresses -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{auth}{HOST}:{self.port}/0?ssl_ca_certs={self.tls / 'cert.pem'}"
        return f"redis://{auth}{HOST}:{self.port}/0"

    def client(self, name: str = "chaos-harness", timeout: float = 5.0) -> redis.Redis:
        """A client that names itself, so the harness can tell its own connections from workers'."""
        return redis.Redis(
            host=HOST,
            port=self.port,
            password=self.password,
            client_name=name,
            socket_timeout=timeout,
            socket_connect_timeout=min(timeout, 2.0),
            ssl=self.tls is not None,
            ssl_ca_certs=str(self.tls / "cert.pem") if self.tls is not None else None,
        )

    # -- life cycle ----------------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> None:
        """Start (or start again) and wait until it answers PING. A first start retries other ports
        when its port was taken meanwhile; a restart keeps the port, which clients hold."""
        for attempt in range(5):
            self.proc = subprocess.Popen(self._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready(timeout):
                self.starts += 1
                return
            self._reap()
            if self.starts or attempt == 4:
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.dir / 'redis.log'}")

    def stop(self, timeout: float = 10.0) -> None:
        """SHUTDOWN: the AOF is flushed and fsynced before the process exits."""
        if not self.running:
            return
        client = self.client("chaos-shutdown")
        try:
            client.shutdown()
        except redis.RedisError:
            pass  # already going away
        finally:
            client.close()
        self._reap(timeout)

    def crash(self) -> None:
        """SIGKILL: only fsynced writes survive (all acknowledged ones with ``fsync="always"``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._reap()

    def restart(self, *, down_s: float = 0.0, hard: bool = False) -> None:
        self.crash() if hard else self.stop()
        time.sleep(down_s)
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.crash()

    # -- internals -----------------------------------------------------------------------------------

    def _argv(self) -> list[str]:
        argv = [self.binary, "--bind", HOST, "--dir", str(self.dir)]
        if self.tls is None:
            argv += ["--port", str(self.port)]
        else:  # TLS only: the plain port is off
            cert, key = str(self.tls / "cert.pem"), str(self.tls / "key.pem")
            argv += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", cert]
            argv += ["--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no"]
        argv += ["--daemonize", "no", "--logfile", "redis.log", "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", self.fsync] if self.aof else ["--appendonly", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        return argv

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        client = self.client("chaos-probe", timeout=0.5)
        try:
            while time.monotonic() < deadline and self.running:
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    if client.ping():
                        return True
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def _reap(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def answers(url: str) -> bool:
    """PING succeeds. A Redis that wants a password we do not have does not count."""
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


@contextlib.contextmanager
def local_redis(
    *, given: str | None = None, try_urls: Sequence[str] = (), embedded: bool = False
) -> Iterator[tuple[str | None, str]]:
    """``(url, how it was found)`` for the ``with`` block; ``url`` is None when there is no Redis.

    First match wins: ``given`` (a URL the user set), as it is; the first of ``try_urls`` that answers; a
    throwaway ``redis-server`` (free loopback port, no persistence, files in a temporary directory,
    stopped afterwards, however the block ends); with ``embedded``, fakeredis's TCP server in a thread.
    """
    if given:
        yield given, "given"
        return
    for url in try_urls:
        if answers(url):
            yield url, "answering"
            return
    if shutil.which("redis-server"):
        with tempfile.TemporaryDirectory(prefix="ticketq-redis-") as tmp:
            server = RedisServer(Path(tmp), aof=False)
            server.start()
            try:
                yield server.url, f"a throwaway redis-server on port {server.port}"
            finally:
                server.crash()  # nothing in it is worth a SHUTDOWN's save
        return
    if embedded:
        from fakeredis import TcpFakeServer

        teach_fakeredis_sha1hex()
        port = free_port()
        fake = TcpFakeServer((HOST, port), server_type="redis")
        threading.Thread(target=fake.serve_forever, daemon=True).start()
        try:
            yield f"redis://{HOST}:{port}/0", f"embedded fakeredis on port {port}"
        finally:
            fake.shutdown()
        return
    yield None, "no Redis answers and there is no redis-server on PATH"


def teach_fakeredis_sha1hex() -> None:
    """fakeredis's Lua lacks ``redis.sha1hex``, which the claim script uses to single out suspects; give it
    one (the same SHA-1 as Redis's), here in the tools rather than a fakeredis branch in the runtime's Lua."""
    from fakeredis.commands_mixins import scripting_mixin

    mixin: Any = scripting_mixin.ScriptingCommandsMixin
    if getattr(mixin, "_ticketq_sha1hex", False):
        return
    runtime_of = mixin._get_server_runtime  # private: fakeredis is pinned below 3 in pyproject.toml

    def with_sha1hex(self: Any, server: Any) -> Any:
        runtime = runtime_of(self, server)
        redis_table = runtime.globals().redis
        if redis_table.sha1hex is None:
            redis_table.sha1hex = lambda data: hashlib.sha1(bytes(data)).hexdigest().encode()
        return runtime

    mixin._get_server_runtime = with_sha1hex
    mixin._ticketq_sha1hex = True

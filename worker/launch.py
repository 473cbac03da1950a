"""Starting worker processes: ``python -m worker`` (or a module that takes the same flags, such as
``tools.fakeworker``) with its own id and a JSON log file, watched and stopped cleanly.

The one launcher of the bench's end-to-end mode, the chaos harness and the process tests. Every exit is
checked against what the caller did to the process: SIGKILL may end it any way, SIGTERM must end it with 0
(a graceful stop) once it serves (before, the signal's default action may end it), and a worker nobody
signalled must not exit at all (:attr:`WorkerProcess.unexpected_exit`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class WorkerProcess:
    id: str
    proc: subprocess.Popen[bytes]
    log: Path
    signalled: str | None = None  # "SIGKILL" / "SIGTERM" once the caller sent one
    exit_code: int | None = None

    @classmethod
    def start(
        cls,
        *,
        redis_url: str,
        prefix: str,
        worker_id: str,
        log: Path,
        flags: Sequence[str] = (),
        module: str = "worker",
        python: str = sys.executable,
        cwd: Path | None = None,
    ) -> WorkerProcess:
        """Start ``python -m module`` logging JSON to ``log``; ``flags`` come last. ``cwd``: where ``module``
        can be imported from (the checkout, for ``tools.fakeworker``)."""
        cmd = [python, "-m", module, "--redis-url", redis_url, "--prefix", prefix]
        cmd += ["--worker-id", worker_id, "--log-format", "json", *flags]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        return cls(worker_id, proc, log)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def signal(self, sig: signal.Signals) -> None:
        self.signalled = sig.name
        if self.alive:
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (finish the drain, then exit), and SIGKILL if it has not gone within ``timeout``."""
        if self.alive:
            self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reap()

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait()
        self.reap()

    def reap(self) -> bool:
        """Record the exit code once the process has ended; True when it ended unexpectedly just now."""
        if self.exit_code is None and not self.alive:
            self.exit_code = self.proc.returncode
            return self.unexpected_exit
        return False

    @property
    def unexpected_exit(self) -> bool:
        """An exit the caller did not cause: a crash, or a SIGTERM that did not end in a clean stop. A
        SIGTERM that came before the worker served (no ``worker_start`` logged: Python was still starting,
        nothing was claimed) may end it by the signal's default action: the worker's own handlers are
        installed once ``serve`` begins (exit 0 while the model loads; the drain finished once serving)."""
        if self.exit_code is None or self.signalled == "SIGKILL":
            return False
        if self.signalled == "SIGTERM" and self.exit_code == -signal.SIGTERM and not self.served:
            return False
        return self.signalled is None or self.exit_code != 0

    @property
    def served(self) -> bool:
        """Whether the worker logged ``worker_start``: its stop handler was in place."""
        return any(event.get("event") == "worker_start" for event in self.events())

    def lines_after(self, offset: int = 0) -> list[str]:
        if not self.log.exists():
            return []
        with self.log.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace").splitlines()

    def events(self, offset: int = 0) -> Iterator[dict[str, Any]]:
        """The JSON log lines; a line cut short by SIGKILL is skipped."""
        for line in self.lines_after(offset):
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.lines_after()[-n:])

"""Real worker processes (``python -m worker``, or ``python -m tools.fakeworker`` for the fake model), each
with its own id, Redis client name and log file.

The client name (``?client_name=`` in the URL, which redis-py passes on) is the worker id, so the
harness can find one worker's connections in ``CLIENT LIST`` and kill exactly those. Every exit is
checked against what the harness did to the process: SIGKILL may end it any way, SIGTERM must end it
with 0 (a graceful stop), and a worker nobody signalled must not exit at all.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: `python -m tools.fakeworker` runs from there


def with_client_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode({"client_name": name})) if q)
    return urlunsplit(parts._replace(query=query))


@dataclass
class WorkerProc:
    id: str
    proc: subprocess.Popen[bytes]
    log: Path
    signalled: str | None = None  # "SIGKILL" / "SIGTERM" once the harness sent one
    exit_code: int | None = None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> Iterator[dict[str, Any]]:
        """The JSON log lines; a line cut short by SIGKILL is skipped."""
        if not self.log.exists():
            return
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    @property
    def unexpected_exit(self) -> bool:
        """An exit the harness did not cause: a crash, or a SIGTERM that did not end in a clean stop."""
        if self.exit_code is None or self.signalled == "SIGKILL":
            return False
        return self.signalled is None or self.exit_code != 0


@dataclass
class Fleet:
    url: str
    prefix: str
    log_dir: Path
    flags: Sequence[str]
    python: str = sys.executable
    module: str = "worker"  # what ``python -m`` runs: "worker", or "tools.fakeworker" for the fake model
    name_clients: bool = True  # CLIENT SETNAME each connection to the worker id (needs that command)
    workers: list[WorkerProc] = field(default_factory=list)

    def spawn(self, *extra: str) -> WorkerProc:
        """Start one more worker; ``extra`` flags add to (and, coming last, override) the fleet's."""
        wid = f"chaos-w{len(self.workers) + 1:03d}"
        url = with_client_name(self.url, wid) if self.name_clients else self.url
        cmd = [self.python, "-m", self.module, "--redis-url", url]
        cmd += ["--prefix", self.prefix, "--worker-id", wid, "--log-format", "json", *self.flags, *extra]
        log = self.log_dir / f"{wid}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=_ROOT, stdout=out, stderr=subprocess.STDOUT)
        worker = WorkerProc(wid, proc, log)
        self.workers.append(worker)
        return worker

    def serving(self) -> list[WorkerProc]:
        """Running and not yet told to stop."""
        return [w for w in self.workers if w.signalled is None and w.alive]

    def signal(self, worker: WorkerProc, sig: signal.Signals) -> None:
        worker.signalled = sig.name
        if worker.alive:
            worker.proc.send_signal(sig)

    def reap(self) -> list[WorkerProc]:
        """Record the exit codes of processes that ended; returns the ones that ended unexpectedly."""
        bad = []
        for w in self.workers:
            if w.exit_code is None and not w.alive:
                w.exit_code = w.proc.returncode
                if w.unexpected_exit:
                    bad.append(w)
        return bad

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM every worker still running, wait for them, SIGKILL any that hang (and say so)."""
        for w in self.serving():
            self.signal(w, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for w in self.workers:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
        self.reap()

    def kill_all(self) -> None:
        """Last resort on the way out (an error or Ctrl-C in the harness): leave no process behind."""
        for w in self.workers:
            if w.alive:
                w.proc.kill()
                w.proc.wait()
        self.reap()

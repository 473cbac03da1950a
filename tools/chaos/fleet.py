"""A fleet of worker processes (``python -m worker``, or ``python -m tools.fakeworker`` for the fake model),
started by :mod:`worker.launch`, each with its own id, Redis client name and log file.

The client name (``?client_name=`` in the URL, which redis-py passes on) is the worker id, so the
harness can find one worker's connections in ``CLIENT LIST`` and kill exactly those. Every exit is
checked against what the harness did to the process (:attr:`WorkerProcess.unexpected_exit`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

from worker.launch import WorkerProcess

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: `python -m tools.fakeworker` runs from there


def with_client_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode({"client_name": name})) if q)
    return urlunsplit(parts._replace(query=query))


@dataclass
class Fleet:
    url: str
    prefix: str
    log_dir: Path
    flags: Sequence[str]
    python: str = sys.executable
    module: str = "worker"  # what ``python -m`` runs: "worker", or "tools.fakeworker" for the fake model
    name_clients: bool = True  # CLIENT SETNAME each connection to the worker id (needs that command)
    workers: list[WorkerProcess] = field(default_factory=list)

    def spawn(self, *extra: str) -> WorkerProcess:
        """Start one more worker; ``extra`` flags add to (and, coming last, override) the fleet's."""
        wid = f"chaos-w{len(self.workers) + 1:03d}"
        url = with_client_name(self.url, wid) if self.name_clients else self.url
        worker = WorkerProcess.start(
            redis_url=url,
            prefix=self.prefix,
            worker_id=wid,
            log=self.log_dir / f"{wid}.log",
            flags=[*self.flags, *extra],
            module=self.module,
            python=self.python,
            cwd=_ROOT,
        )
        self.workers.append(worker)
        return worker

    def serving(self) -> list[WorkerProcess]:
        """Running and not yet told to stop."""
        return [w for w in self.workers if w.signalled is None and w.alive]

    def signal(self, worker: WorkerProcess, sig: signal.Signals) -> None:
        worker.signal(sig)

    def reap(self) -> list[WorkerProcess]:
        """Record the exit codes of processes that ended; returns the ones that ended unexpectedly."""
        return [w for w in self.workers if w.reap()]

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM every worker still running, wait for them, SIGKILL any that hang (and say so)."""
        for w in self.serving():
            w.signal(signal.SIGTERM)
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
            w.kill()

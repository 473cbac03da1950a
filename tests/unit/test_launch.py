"""How the launcher judges a worker process's exit against what was done to it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from worker.launch import WorkerProcess


def _ended(
    tmp_path: Path, code: str, logged: list[dict[str, str]], sig: signal.Signals | None
) -> WorkerProcess:
    """A stand-in process running ``code`` whose log holds ``logged``, signalled with ``sig`` and reaped."""
    log = tmp_path / "w.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in logged))
    proc = subprocess.Popen([sys.executable, "-c", code])
    worker = WorkerProcess("w", proc, log)
    if sig is not None:
        worker.signal(sig)
    proc.wait(30)
    worker.reap()
    return worker


SLEEP = "import time; time.sleep(30)"  # the default action of SIGTERM ends it: exit -15
STARTED = [{"event": "worker_start"}]


def test_a_sigterm_before_the_worker_served_may_end_it_by_the_default_action(tmp_path: Path) -> None:
    early = _ended(tmp_path, SLEEP, [], signal.SIGTERM)
    assert early.exit_code == -signal.SIGTERM and not early.served and not early.unexpected_exit


def test_once_it_served_a_sigterm_must_end_it_with_0(tmp_path: Path) -> None:
    killed = _ended(tmp_path, SLEEP, STARTED, signal.SIGTERM)
    assert killed.served and killed.unexpected_exit
    clean = _ended(tmp_path, "pass", STARTED, None)
    clean.signalled = "SIGTERM"  # as if its handler had stopped it cleanly
    assert clean.exit_code == 0 and not clean.unexpected_exit


def test_an_exit_nobody_asked_for_or_a_crash_is_unexpected_and_sigkill_never_is(tmp_path: Path) -> None:
    assert _ended(tmp_path, "raise SystemExit(3)", [], None).unexpected_exit
    assert _ended(tmp_path, "raise SystemExit(0)", STARTED, None).unexpected_exit
    assert not _ended(tmp_path, SLEEP, STARTED, signal.SIGKILL).unexpected_exit

"""The heartbeat thread, which is also the watchdog: ``P:heartbeat:<worker>`` stays alive only while the
worker loop makes progress.

It runs on its own connection, so a blocked claim or a Redis command on the main thread never delays a
beat. But a beat is not proof of life on its own: a loop stuck in a hung forward pass (a wedged GPU, a
deadlocked tokenizer) would keep the key fresh forever and hold its claims hostage. So the loop calls
:meth:`Heartbeat.progress` at every step (each claim, each forward pass, each retry while Redis is
away), and when nothing moved for ``stall_timeout`` seconds the thread stops beating, logs ``stalled``,
deletes the key so peers recover the claims at once (counting an attempt, so a ticket that hangs every
worker ends as a dead letter), and ends the process with exit code 6 for the supervisor to restart it.
If the process dies or freezes whole (the GIL held in C code), the beats stop too and the key expires.

The thread cannot die quietly: an unexpected exception is logged (``heartbeat_died``, with the
traceback) and kept in :attr:`Heartbeat.failure`; the loop checks the thread before every claim and
stops claiming when it is gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from producer.exitcodes import Exit
from worker.errors import FatalError, TransientError
from worker.logs import get_logger
from worker.queue import RedisQueue


def _exit_stalled(_: float) -> None:
    sys.stderr.flush()
    os._exit(Exit.STALLED)  # the main thread is stuck: no cleanup can run there, so none is attempted


class Heartbeat(threading.Thread):
    def __init__(
        self,
        queue: RedisQueue,
        ttl_s: float,
        every_s: float,
        info: dict[str, Any],
        *,
        stall_timeout_s: float | None = None,
        on_stall: Callable[[float], None] = _exit_stalled,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(name="ticketq-heartbeat", daemon=True)
        self.queue = queue
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.stall_timeout_s = stall_timeout_s
        self.on_stall = on_stall
        self.on_progress = on_progress
        self.info = {"id": queue.worker_id, "host": socket.gethostname(), "pid": os.getpid(), **info}
        self.info["started"] = round(time.time(), 3)
        self._last_progress = time.monotonic()
        self._stop_event = threading.Event()
        self.failure = ""  # why the thread died, when it did (read by the loop)
        self._log = get_logger("worker.heartbeat")

    def progress(self) -> None:
        """The loop moved: called from the main thread at every step. One float store, no lock needed."""
        self._last_progress = time.monotonic()
        if self.on_progress is not None:
            self.on_progress(time.time())

    def idle_s(self) -> float:
        return time.monotonic() - self._last_progress

    def beat(self) -> None:
        """One beat; raises :class:`TransientError` when Redis is down."""
        self.queue.beat(
            {**self.info, "at": round(time.time(), 3), "progress_age_s": round(self.idle_s(), 3)}, self.ttl_s
        )

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"[:500]
            self._log.error("heartbeat_died", error=self.failure, exc_info=True)

    def _run(self) -> None:
        failing = False
        while not self._stop_event.wait(self.every_s):
            if self.stall_timeout_s is not None and self.idle_s() > self.stall_timeout_s:
                self._stalled()
                return
            try:
                self.beat()
            except (TransientError, FatalError) as exc:  # the loop meets a fatal error too, and exits
                if not failing:  # once per outage, not every few seconds
                    self._log.warning("heartbeat_failed", error=str(exc))
                failing = True
            else:
                if failing:
                    self._log.info("heartbeat_restored")
                failing = False

    def _stalled(self) -> None:
        idle = self.idle_s()
        self._log.error(
            "stalled",
            idle_s=round(idle, 1),
            stall_timeout_s=self.stall_timeout_s,
            note="no progress: exiting so peers recover this worker's claims",
        )
        with contextlib.suppress(TransientError, FatalError):
            self.queue.drop_heartbeat()
        self.on_stall(idle)

    def stop(self) -> None:
        self._stop_event.set()
        # not started yet (a failure before the service's loop began): nothing to join
        if self is not threading.current_thread() and self.ident is not None:
            self.join(timeout=self.every_s + 1)

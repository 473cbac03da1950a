"""The heartbeat thread: keeps ``P:heartbeat:<worker>`` alive while the process is alive.

It runs on its own connection, so a long engine batch on the main thread (or a main thread blocked in
BLMOVE) never delays it; if the process dies, the key expires and a peer's recovery requeues what it held.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from worker.errors import TransientError
from worker.logs import get_logger
from worker.queue import RedisQueue


class Heartbeat(threading.Thread):
    def __init__(self, queue: RedisQueue, ttl_s: float, every_s: float, info: dict[str, Any]) -> None:
        super().__init__(name="ticketq-heartbeat", daemon=True)
        self.queue = queue
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.info = {"id": queue.worker_id, "host": socket.gethostname(), "pid": os.getpid(), **info}
        self.info["started"] = round(time.time(), 3)
        self._stop_event = threading.Event()
        self._log = get_logger("worker.heartbeat")

    def beat(self) -> None:
        """One beat; raises :class:`TransientError` when Redis is down."""
        self.queue.beat({**self.info, "at": round(time.time(), 3)}, self.ttl_s)

    def run(self) -> None:
        failing = False
        while not self._stop_event.wait(self.every_s):
            try:
                self.beat()
            except TransientError as exc:
                if not failing:  # once per outage, not every few seconds
                    self._log.warning("heartbeat_failed", error=str(exc))
                failing = True
            else:
                if failing:
                    self._log.info("heartbeat_restored")
                failing = False

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.every_s + 1)

"""Follow the published head (``P:head``): a running worker switches heads without a restart.

Before every claim the service asks :meth:`HeadWatch.check`, which costs one ``HGET P:head version``; only
when the version changed does it read the head's bytes and hand them to the classifier's ``load_head``.
A head the classifier refuses (corrupt, or made for another model, prompt or label set) is logged as
``head_rejected`` and remembered, so it is neither retried every claim nor ever a crash: the worker keeps
the head it has. Loading happens between drains, so every result of a drain comes from one head.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from producer.protocol import Keys
from worker.connection import transient
from worker.contract import TakesHeads
from worker.logs import get_logger


class HeadWatch:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        classifier: Any,
        *,
        on_loaded: Callable[[str], None] | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.classifier = classifier
        self.on_loaded = on_loaded
        self.seen: str | None = None  # the last version acted on, loaded or rejected
        self._log = get_logger("worker.heads")

    @transient
    def _changed(self) -> tuple[str, bytes] | None:
        version = self.redis.hget(self.keys.head, "version")
        if not isinstance(version, bytes) or version.decode() == self.seen:
            return None
        # Both fields in one read: a publish between two reads could pair a version with other bytes.
        version, data = self.redis.hmget(self.keys.head, ["version", "data"])
        if not isinstance(version, bytes) or not isinstance(data, bytes):
            return None
        return version.decode(), data

    def check(self) -> bool:
        """Load the published head if it changed since the last check; True when one was loaded.

        Raises :class:`~worker.errors.TransientError` only (Redis down); the caller retries it.
        """
        changed = self._changed()
        if changed is None:
            return False
        version, data = changed
        self.seen = version
        if not isinstance(self.classifier, TakesHeads):
            self._log.warning("head_rejected", version=version, reason="this classifier takes no head")
            return False
        try:
            self.classifier.load_head(data, version)
        except Exception as exc:  # HeadError, or anything a corrupt file provokes: keep the current head
            reason = str(exc) if type(exc).__name__ == "HeadError" else f"{type(exc).__name__}: {exc}"
            self._log.warning("head_rejected", version=version, reason=reason[:500], bytes=len(data))
            return False
        head = self.classifier.head
        self._log.info("head_loaded", version=version, id=getattr(head, "id", None), bytes=len(data))
        if self.on_loaded is not None:
            self.on_loaded(version)
        return True

"""Follow the published head (``P:head``): a running worker switches heads without a restart.

Before every claim the service asks :meth:`HeadWatch.check`, which costs one ``HGET P:head version``; only
when the version changed does it read the head's bytes and hand them to the classifier's ``load_head``.
A head the classifier refuses (corrupt, or made for another model, prompt or label set) is logged as
``head_rejected`` and remembered, so it is neither retried every claim nor ever a crash: the worker keeps
the head it has. Loading happens between drains, so every result of a drain comes from one head.

A task's further questions (``[questions.NAME]``) have published heads of their own (``P:q:NAME:head``,
:meth:`producer.protocol.Keys.asking`): their versions are read in the same round trip as the primary's.

The fleet serves one head. A worker that loads a published head keeps it as the last good one
(``P:head:good``, ``keep_head.lua``: one copy per publish); a worker that refuses the current head falls
back to that one when it is not already serving it, so one started after a bad publish serves what the
workers running since before it serve (they kept the head they had), not its task's own head.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from producer import scripts
from producer.learning import read_head
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
        # the classifier's further questions (an engine's task's; a test double may have none)
        self.questions: tuple[str, ...] = tuple(getattr(classifier, "questions", ()) or ())
        self.seen_q: dict[str, str] = {}
        # the version each question's head came from (None: the primary), published or last good
        self.serving: dict[str | None, str] = {}
        self._keep = scripts.load(client, "worker", "keep_head.lua")
        self._log = get_logger("worker.heads")

    @transient
    def _changed(self) -> list[tuple[str | None, str, bytes]]:
        """(question, version, bytes) of each head published since it was last seen (None: primary)."""
        asked: list[str | None] = [None, *self.questions]
        if len(asked) == 1:
            versions = [self.redis.hget(self.keys.head, "version")]
        else:  # one round trip for every question's version
            pipe = self.redis.pipeline(transaction=False)
            for q in asked:
                pipe.hget(self.keys.asking(q).head, "version")
            versions = pipe.execute()
        out = []
        for q, version in zip(asked, versions, strict=True):
            seen = self.seen if q is None else self.seen_q.get(q)
            # a version no publish wrote (not UTF-8, by hand) is still a change to look at, never a crash
            if not isinstance(version, bytes) or version.decode("utf-8", "replace") == seen:
                continue
            # Both fields in one read: a publish between two reads could pair a version with other bytes.
            version, data = self.redis.hmget(self.keys.asking(q).head, ["version", "data"])
            if isinstance(version, bytes) and isinstance(data, bytes):
                out.append((q, version.decode("utf-8", "replace"), data))
        return out

    def check(self) -> bool:
        """Load the published head if it changed since the last check; True when one was loaded.

        Raises :class:`~worker.errors.TransientError` only (Redis down); the caller retries it.
        """
        loaded = False
        for question, version, data in self._changed():
            if self._load(question, version, data):
                loaded = True
                self._kept(question, version)
            else:
                loaded |= self._fall_back(question, version)
            # seen once the whole step is done: a Redis error in the keep or the fallback (retried by the
            # caller) finds the version still new, and does it again
            if question is None:
                self.seen = version
            else:
                self.seen_q[question] = version
        return loaded

    @transient
    def _kept(self, question: str | None, version: str) -> None:
        k = self.keys.asking(question)
        self._keep(keys=[k.head, k.head_good], args=[version])

    @transient
    def _last_good(self, question: str | None) -> tuple[str, bytes] | None:
        return read_head(self.redis, self.keys.asking(question).head_good)

    def _fall_back(self, question: str | None, refused: str) -> bool:
        """After ``refused`` (the current version) was refused: load the last good head, unless it is the
        refused one or the one being served already. True when loaded."""
        if not isinstance(self.classifier, TakesHeads):  # refused for that already: said once
            return False
        good = self._last_good(question)
        if good is None or good[0] in (refused, self.serving.get(question)):
            return False
        asked = {} if question is None else {"question": question}
        self._log.warning("head_fallback", refused=refused, version=good[0], **asked)
        return self._load(question, *good)

    def _load(self, question: str | None, version: str, data: bytes) -> bool:
        asked = {} if question is None else {"question": question}
        if not isinstance(self.classifier, TakesHeads):
            reason = "this classifier takes no head"
            self._log.warning("head_rejected", version=version, reason=reason, **asked)
            return False
        try:
            if question is None:
                self.classifier.load_head(data, version)
            else:
                self.classifier.load_head(data, version, question)  # type: ignore[call-arg]
        except Exception as exc:  # HeadError, or anything a corrupt file provokes: keep the current head
            reason = str(exc) if type(exc).__name__ == "HeadError" else f"{type(exc).__name__}: {exc}"
            self._log.warning("head_rejected", version=version, reason=reason[:500], bytes=len(data), **asked)
            return False
        self.serving[question] = version
        head = self.classifier.head if question is None else self.classifier.answer_heads.get(question)  # type: ignore[attr-defined]
        self._log.info("head_loaded", version=version, id=getattr(head, "id", None), bytes=len(data), **asked)
        if self.on_loaded is not None and question is None:
            self.on_loaded(version)
        return True

"""The review queue (``P:review``), read: the tickets that need a person, smallest margin first.

Workers add a result's id when its confidence is below the review threshold (worker/review.py), scored
by its margin (top probability minus the runner-up's: the order that taught a head most in
docs/active-learning.md); labelling
the ticket (confirmed or corrected, :meth:`producer.client.Client.label`) takes it off. The dashboard's
"Needs review" page and ``ticketq-producer review`` read it through here. No torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from producer.client import Client
from producer.protocol import Result


@dataclass(frozen=True)
class ReviewItem:
    """One ticket of ``P:review``: its id, the margin it is queued by, its result and its kept text
    (None when trimmed or expired: it can then no longer be labelled)."""

    id: str
    margin: float
    result: Result | None
    text: str | None

    @property
    def confidence(self) -> float | None:
        """The probability of its label, as the result says (None: the result is gone)."""
        return self.result.confidence if self.result else None

    def top(self, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` most probable labels and their probabilities."""
        scores = self.result.scores if self.result else {}
        return sorted(scores.items(), key=lambda kv: -kv[1])[:n]

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "id": self.id,
            "margin": round(self.margin, 4),
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "label": r.label if r else None,
            "top": [{"label": k, "p": round(v, 4)} for k, v in self.top()],
            "text": self.text,
            "at": r.at if r else None,
            "head": r.head if r else None,
        }


def queue(client: Client, limit: int = 100, offset: int = 0) -> list[ReviewItem]:
    """Tickets that need a person, smallest margin first, with their result and text."""
    r, keys = client.redis, client.keys
    ids = [_str(i) for i in r.zrange(keys.review, offset, offset + max(limit, 1) - 1)]  # type: ignore[arg-type]
    if not ids:
        return []
    with r.pipeline(transaction=False) as pipe:
        pipe.zmscore(keys.review, ids)
        pipe.hmget(keys.results, ids)
        pipe.mget([keys.text(i) for i in ids])
        scores, results, texts = pipe.execute()
    out = []
    for tid, score, raw, text in zip(ids, scores, results, texts, strict=True):
        try:
            result = None if raw is None else Result.from_json(raw)
        except (ValueError, KeyError, TypeError):
            result = None
        out.append(ReviewItem(tid, float(score or 0.0), result, None if text is None else _str(text)))
    return out


def summary(client: Client, now: float | None = None) -> tuple[int, float | None]:
    """(tickets waiting for review, age in seconds of the oldest result among them, or None)."""
    r, keys = client.redis, client.keys
    ids = [_str(i) for i in r.zrange(keys.review, 0, -1)]  # type: ignore[arg-type]
    if not ids:
        return 0, None
    times = [t for t in r.zmscore(keys.done, ids) if t is not None]
    return len(ids), (max(0.0, (now or time.time()) - min(times)) if times else None)


def _str(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

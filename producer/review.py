"""The review queues, read: the tickets that need a person, smallest margin first.

Workers add a result's id to ``P:review`` when its confidence is below the review threshold
(worker/review.py), scored by its margin (top probability minus the runner-up's: the order that taught
a head most in docs/active-learning.md); labelling the ticket (confirmed or corrected,
:meth:`producer.client.Client.label`) takes it off. A further question NAME has its own queue,
``P:q:NAME:review``, of the tickets whose answer to it needs review; labelling the ticket for that
question takes it off. The dashboard's "Needs review" page and ``ticketq-producer review [--question
NAME]`` read them through here. No torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from producer.client import Client, as_text
from producer.protocol import MAX_REVIEW, Result
from producer.strictjson import finite_number

SUMMARY_CHUNK = 250  # ids per command when a queue is summed up (a full one holds MAX_REVIEW)
READ_PAGE = 100  # tickets per round trip when a queue is read whole (ticketq-producer review)
READ_PAGE_BYTES = 1 << 20  # ... and at most this many result bytes (one result always fits)


@dataclass(frozen=True)
class ReviewItem:
    """One ticket of a review queue: its id, the margin it is queued by, its result and its kept text
    (None when trimmed or expired: it can then no longer be labelled). ``question``: the further question
    whose queue it is in (None: the primary's, ``P:review``); label, scores and confidence are then that
    question's answer's."""

    id: str
    margin: float
    result: Result | None
    text: str | None
    question: str | None = None

    @property
    def answer(self) -> dict[str, Any] | None:
        """What the result says of the question: the primary's label and scores, or ``answers.NAME``
        (None: the result is gone, or it has no answer to the question)."""
        r = self.result
        if r is None:
            return None
        if self.question is None:
            return {"label": r.label, "scores": r.scores, "confidence": r.confidence, "head": r.head}
        return r.answers.get(self.question)

    @property
    def label(self) -> str | None:
        a = self.answer
        return None if a is None else str(a.get("label"))

    @property
    def confidence(self) -> float | None:
        """The probability of its label, as the result says (None: the result is gone)."""
        a = self.answer
        value = None if a is None else a.get("confidence")
        return finite_number(value)

    def top(self, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` most probable labels and their probabilities."""
        a = self.answer
        scores = (a.get("scores") if a else None) or {}
        return sorted(scores.items(), key=lambda kv: -kv[1])[:n]

    def labels(self) -> list[str]:
        """The labels its scores name: every label its question offers, unless the workers keep only the
        most probable (``--result-scores``; the dashboard then offers the published label set,
        :meth:`Client.labels_of`)."""
        a = self.answer
        return sorted((a.get("scores") if a else None) or {})

    def to_dict(self) -> dict[str, Any]:
        r, a = self.result, self.answer
        return {
            "id": self.id,
            **({"question": self.question} if self.question is not None else {}),
            "margin": _rounded(self.margin),
            "confidence": _rounded(self.confidence),
            "label": self.label,
            "top": [{"label": k, "p": _rounded(v)} for k, v in self.top()],
            "text": self.text,
            "at": r.at if r else None,
            "head": a.get("head") if a else None,
        }


def queue(
    client: Client,
    limit: int = 100,
    offset: int = 0,
    question: str | None = None,
    *,
    text_chars: int | None = None,
    result_bytes: int | None = None,
) -> list[ReviewItem]:
    """Tickets that need a person on ``question`` (None: the primary), smallest margin first, with their
    result and text. For a page (the dashboard's): ``text_chars`` reads only each text's first characters
    (:meth:`Client.clipped_texts`; a longer one is clipped with "…"), and ``result_bytes`` stops before the
    result that would take the bytes read past it (the first is always read): a queue of large texts and
    results is then not read whole at every GET. None: whole texts, every result (``ticketq-producer
    review``)."""
    r, keys = client.redis, client.keys
    key = keys.asking(question).review
    ids = [as_text(i) for i in r.zrange(key, offset, offset + max(limit, 1) - 1)]  # type: ignore[arg-type]
    if result_bytes is not None:
        ids = ids[: client.results_within(ids, result_bytes)]
    if not ids:
        return []
    with r.pipeline(transaction=False) as pipe:
        pipe.zmscore(key, ids)
        pipe.hmget(keys.results, ids)
        if text_chars is None:
            pipe.mget([keys.text(i) for i in ids])  # nil for a key of another type
        scores, results, *whole = pipe.execute()
    if text_chars is None:
        texts = whole[0]
    else:
        clipped = client.clipped_texts(ids, text_chars)
        texts = [clipped[i][0] for i in ids]
    out = []
    for tid, score, raw, text in zip(ids, scores, results, texts, strict=True):
        try:
            result = None if raw is None else Result.from_json(raw)
        except (ValueError, KeyError, TypeError):
            result = None
        kept = None if text is None else as_text(text)
        out.append(ReviewItem(tid, float(score or 0.0), result, kept, question))
    return out


def read_all(client: Client, limit: int, question: str | None = None) -> Iterator[ReviewItem]:
    """Up to ``limit`` tickets of the queue, smallest margin first, whole texts and results (what
    ``ticketq-producer review`` prints), read a page at a time: at most :data:`READ_PAGE` tickets and
    :data:`READ_PAGE_BYTES` of results a round trip, so ``--limit 10000`` of large results is not one
    command holding the Redis every client shares (10,000 results of ~70 KiB would be 700 MB). Workers
    add and people label meanwhile: a ticket the queue moves past is not repeated, one may be missed."""
    seen: set[str] = set()
    offset = 0
    while len(seen) < limit:
        page = queue(
            client, min(READ_PAGE, limit - len(seen)), offset, question, result_bytes=READ_PAGE_BYTES
        )
        if not page:
            return
        offset += len(page)
        for item in page:
            if item.id not in seen:
                seen.add(item.id)
                yield item


def summary(
    client: Client, now: float | None = None, question: str | None = None
) -> tuple[int, float | None]:
    """(tickets waiting for review on ``question``, age in seconds of the oldest result among them, or
    None). The age is read in slices while workers may add and trim: a ticket may be missed or read
    twice then, which moves the age by as much."""
    r, keys = client.redis, client.keys
    key = keys.asking(question).review
    size = int(r.zcard(key))
    if not size:
        return 0, None
    # a full queue holds MAX_REVIEW ids: read in slices of SUMMARY_CHUNK, so no one command holds the
    # Redis every client shares (the dashboard samples this every few seconds); two round trips in all
    with r.pipeline(transaction=False) as pipe:
        for start in range(0, min(size, MAX_REVIEW), SUMMARY_CHUNK):  # a queue is trimmed to that
            pipe.zrange(key, start, start + SUMMARY_CHUNK - 1)
        chunks = [c for c in pipe.execute() if c]
    with r.pipeline(transaction=False) as pipe:
        for ids in chunks:
            pipe.zmscore(keys.done, ids)
        scores = pipe.execute()
    times = [t for chunk in scores for t in chunk if t is not None]
    return size, (max(0.0, (now or time.time()) - min(times)) if times else None)


def _rounded(value: float | None) -> float | None:
    """Four places; None for no value or one no worker writes (a score of +inf set by hand would print
    as ``Infinity``, which is not JSON)."""
    return round(value, 4) if value is not None and math.isfinite(value) else None

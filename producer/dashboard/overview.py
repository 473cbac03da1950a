"""The overview and the chart: what the background sampler reads from Redis; the only writer of it.

Per sample: counts from ``LLEN``/``HLEN`` and the heartbeats, one ``ZCOUNT`` over ``P:done`` per
:data:`BUCKET_S` of the last :data:`WINDOW_S`, and the labels of at most :data:`LABEL_FETCH` newly finished
results. Pages show :meth:`History.latest`; they never sample themselves.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeGuard

from producer import review
from producer.client import Client, as_text
from producer.protocol import Result
from producer.strictjson import finite_number

MAX_QUESTION_CHARS = 64  # a question name's longest (worker/engine/task.py's QUESTION_NAME)
LABEL_FETCH = 2000  # newly finished results whose labels one sample reads; the rest at the next samples
LABEL_BYTES = 1 << 20  # ... and the most result bytes it reads for them (the first result always)
LABEL_SLICE = 200  # results per HMGET
WINDOW_S = 600.0  # the chart's and the label mix's window
BUCKET_S = 10.0  # the chart's resolution


@dataclass(frozen=True)
class WorkerRow:
    id: str
    alive: bool
    inflight: int
    heartbeat_age_s: float | None  # since its last beat; None when its heartbeat has expired
    model: str
    host: str


@dataclass(frozen=True)
class Overview:
    at: float
    waiting: int
    inflight: int
    done: int
    dead: int
    workers: list[WorkerRow]
    oldest_wait_s: float | None  # age of the oldest waiting ticket, when it carries enqueued_at
    rate: float  # tickets/s over the last minute
    labels: dict[str, int]  # label -> results, over the last WINDOW_S, most frequent first
    labels_complete: bool = True  # False while the sampler is still reading the window's past labels
    review: int = 0  # tickets waiting for a person (P:review)
    review_oldest_s: float | None = None  # age of the oldest result among them (bounded: MAX_REVIEW ids)
    questions: tuple[str, ...] = ()  # the task's further questions, as live workers' heartbeats name them

    @property
    def alive(self) -> int:
        return sum(w.alive for w in self.workers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": round(self.at, 3),
            "waiting": self.waiting,
            "inflight": self.inflight,
            "done": self.done,
            "dead": self.dead,
            "alive": self.alive,
            "workers": [w.__dict__ for w in self.workers],
            "oldest_wait_s": self.oldest_wait_s,
            "rate": self.rate,
            "labels": self.labels,
            "labels_complete": self.labels_complete,
            "review": self.review,
            "review_oldest_s": self.review_oldest_s,
            "questions": list(self.questions),
        }


def sample(client: Client, history: History, now: float | None = None) -> Overview:
    """Read the overview from Redis and record it in ``history``: the background sampler's job, and only
    its (one writer, so no result is counted twice). Pages show :meth:`History.latest`."""
    now = time.time() if now is None else now
    stats = client.stats()
    workers = []
    for w in stats.workers:
        beat = w.info.get("at")
        age = max(0.0, now - float(beat)) if w.alive and _is_number(beat) else None
        workers.append(
            WorkerRow(
                id=w.id,
                alive=w.alive,
                inflight=w.inflight,
                heartbeat_age_s=age,
                model=str(w.info.get("model", "")),
                host=str(w.info.get("host", "")),
            )
        )
    history.update(client, stats.waiting, now)
    unsure, unsure_age = review.summary(client, now)
    out = Overview(
        at=now,
        waiting=stats.waiting,
        inflight=stats.inflight,
        done=stats.done,
        dead=stats.dead,
        workers=workers,
        oldest_wait_s=oldest_wait(client, now),
        rate=client.redis.zcount(client.keys.done, now - 60.0, now) / 60.0,
        labels=history.label_totals(),
        labels_complete=history.caught_up,
        review=unsure,
        review_oldest_s=unsure_age,
        questions=tuple(
            sorted({q for w in stats.workers if w.alive for q in _names(w.info.get("questions"))})
        ),
    )
    history.keep(out)
    return out


def oldest_wait(client: Client, now: float) -> float | None:
    """How long the oldest waiting ticket (the right end of the input list) has waited, when it says
    when it was enqueued (``enqueued_at``)."""
    raw = client.redis.lindex(client.keys.tickets, -1)
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    stamp = obj.get("enqueued_at") if isinstance(obj, dict) else None
    return max(0.0, now - float(stamp)) if _is_number(stamp) else None


def _names(value: Any) -> list[str]:
    """A heartbeat's ``questions``, read defensively (another version, or a stranger, may write it)."""
    if not isinstance(value, list):
        return []
    return [q for q in value if isinstance(q, str) and 0 < len(q) <= MAX_QUESTION_CHARS and ":" not in q]


def _is_number(value: Any) -> TypeGuard[float]:
    """A finite JSON number (an integer too large for a float is not one: ``float`` of it would raise)."""
    return finite_number(value) is not None


CLOCK_AHEAD_S = 60.0  # how far ahead of this process's clock a worker's finish time is still believed


class History:
    """The chart: tickets/s per :data:`BUCKET_S` from ``P:done`` (exact), the labels of results as they
    finish, and the queue depth as this process sampled it, over the last :data:`WINDOW_S`. The rate and
    the labels are read from Redis, so they include the minutes before this process started; the depth
    exists only from the first sample on. :func:`sample` is the one writer."""

    def __init__(self, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._lock = threading.Lock()
        self._labels: dict[float, Counter[str]] = {}  # bucket start -> label counts
        self._waiting: dict[float, int] = {}  # bucket start -> last depth seen in it
        self._done: dict[float, int] = {}  # bucket start -> results finished in it
        self._seen: float | None = None  # finish time of the newest result whose label is counted
        self._seen_ids: set[str] = set()  # the ids counted with exactly that finish time
        self._latest: Overview | None = None
        self.caught_up = False  # whether every result in the window has had its label counted

    def _bucket(self, t: float) -> float:
        return math.floor(t / self.bucket_s) * self.bucket_s

    def keep(self, overview: Overview) -> None:
        with self._lock:
            self._latest = overview

    def latest(self) -> Overview | None:
        """The overview the sampler collected last; None before its first sample."""
        with self._lock:
            return self._latest

    def update(self, client: Client, waiting: int, now: float) -> None:
        start = self._bucket(now - self.window_s) + self.bucket_s
        buckets = [start + n * self.bucket_s for n in range(round((now - start) / self.bucket_s) + 1)]
        keys = client.keys
        # Labels from where the last sample stopped: inclusive of its finish time, skipping the results
        # counted at exactly that time (ties come in one order), so none is lost or counted twice at a
        # LABEL_FETCH boundary.
        resume = self._seen is not None and self._seen >= start
        lo = self._seen if resume and self._seen is not None else start
        skip = len(self._seen_ids) if resume else 0
        with client.redis.pipeline(transaction=False) as pipe:
            for b in buckets:
                pipe.zcount(keys.done, b, f"({b + self.bucket_s}")
            # to now (and a minute of a worker's clock ahead of this one's): a finish time of +inf or the
            # year 9999, written by hand, moved the resume point past every later result for good
            pipe.zrangebyscore(
                keys.done, lo, now + CLOCK_AHEAD_S, start=skip, num=LABEL_FETCH, withscores=True
            )
            *counts, fresh = pipe.execute()
        new = [(as_text(i), float(at)) for i, at in fresh]
        labels = _labels_of(client, [i for i, _ in new])
        new = new[: len(labels)]  # within the sample's bytes: the rest at the next samples
        with self._lock:
            self._done = dict(zip(buckets, (int(c) for c in counts), strict=True))
            self._waiting[self._bucket(now)] = waiting
            for (tid, at), label in zip(new, labels, strict=True):
                if self._seen is None or at > self._seen:
                    self._seen, self._seen_ids = at, set()
                self._seen_ids.add(tid)
                if label is not None:
                    self._labels.setdefault(self._bucket(at), Counter())[label] += 1
            self.caught_up = len(fresh) < LABEL_FETCH and len(new) == len(fresh)
            for table in (self._labels, self._waiting):
                for b in [b for b in table if b < start]:
                    del table[b]

    def label_totals(self) -> dict[str, int]:
        with self._lock:
            total: Counter[str] = Counter()
            for counts in self._labels.values():
                total.update(counts)
        return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))

    def series(self) -> dict[str, Any]:
        """Columns for the chart: bucket ends, tickets/s, waiting, and each label's results/s."""
        with self._lock:
            # The bucket still filling would show as a dip: the chart ends at the last whole one.
            # Buckets with no results are zero, not gaps; the depth is a gap before this process began.
            buckets = sorted(self._done)[:-1]
            names = sorted({n for c in self._labels.values() for n in c})
            return {
                "t": [b + self.bucket_s for b in buckets],
                "rate": [round(self._done[b] / self.bucket_s, 3) for b in buckets],
                "waiting": [self._waiting.get(b) for b in buckets],
                "labels": {
                    n: [round(self._labels.get(b, Counter())[n] / self.bucket_s, 3) for b in buckets]
                    for n in names
                },
            }


def _labels_of(client: Client, ids: list[str]) -> list[str | None]:
    """The labels of the first of ``ids`` whose results add up to at most :data:`LABEL_BYTES` (the first is
    always read), in slices of :data:`LABEL_SLICE`: a label is read from its whole result, and results
    carry what producers attach, so 2,000 of them at once could be a hundred megabytes."""
    if not ids:
        return []
    take = client.results_within(ids, LABEL_BYTES)
    out: list[str | None] = []
    for start in range(0, take, LABEL_SLICE):
        for raw in client.redis.hmget(client.keys.results, ids[start : min(take, start + LABEL_SLICE)]):
            try:
                out.append(Result.from_json(raw).label if raw is not None else None)
            except (ValueError, KeyError, TypeError):
                out.append(None)
    return out

"""What the dashboard shows, read from Redis through the producer client and the protocol's key names.

Every read is bounded, however large the queue grows: recent results come from the ``P:done`` index
(newest first), the throughput from ``ZCOUNT`` over it, and the label mix from the labels of at most
:data:`LABEL_FETCH` new results per update. The functions are plain and synchronous; the web layer runs
them in a thread.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeGuard

from producer.client import Client
from producer.learning import Correction, head_metadata
from producer.protocol import DeadLetter, Result

RECENT_LIMIT = 200  # results listed on the results page
SCAN_LIMIT = 2000  # newest results looked through to fill a filtered page
LABEL_FETCH = 5000  # most new results whose labels one update reads; beyond that the label mix is a sample
EXCERPT_CHARS = 300  # of a dead letter's payload
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
        }


def overview(client: Client, history: History, now: float | None = None) -> Overview:
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
    return Overview(
        at=now,
        waiting=stats.waiting,
        inflight=stats.inflight,
        done=stats.done,
        dead=stats.dead,
        workers=workers,
        oldest_wait_s=oldest_wait(client, now),
        rate=client.redis.zcount(client.keys.done, now - 60.0, now) / 60.0,
        labels=history.label_totals(),
    )


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


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class History:
    """The chart: tickets/s per :data:`BUCKET_S` from ``P:done`` (exact), the labels of results as they
    finish, and the queue depth as this process sampled it; from shortly before this process started, up
    to :data:`WINDOW_S` back."""

    def __init__(self, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._lock = threading.Lock()
        self._labels: dict[float, Counter[str]] = {}  # bucket start -> label counts
        self._waiting: dict[float, int] = {}  # bucket start -> last depth seen in it
        self._done: dict[float, int] = {}  # bucket start -> results finished in it
        self._seen = 0.0  # finish time of the newest result whose label is counted
        self._since: float | None = None  # the first update's bucket: the chart starts there

    def _bucket(self, t: float) -> float:
        return math.floor(t / self.bucket_s) * self.bucket_s

    def update(self, client: Client, waiting: int, now: float) -> None:
        if self._since is None:
            self._since = self._bucket(now) - 2 * self.bucket_s  # a little of the past, from P:done
        start = max(self._bucket(now - self.window_s) + self.bucket_s, self._since)
        buckets = [start + n * self.bucket_s for n in range(round((now - start) / self.bucket_s) + 1)]
        keys = client.keys
        with client.redis.pipeline(transaction=False) as pipe:
            for b in buckets:
                pipe.zcount(keys.done, b, f"({b + self.bucket_s}")
            lo = f"({self._seen}" if self._seen else start
            pipe.zrangebyscore(keys.done, lo, "+inf", start=0, num=LABEL_FETCH, withscores=True)
            *counts, fresh = pipe.execute()
        labels = _labels_of(client, [_text(i) for i, _ in fresh])
        with self._lock:
            self._done = dict(zip(buckets, (int(c) for c in counts), strict=True))
            self._waiting[self._bucket(now)] = waiting
            for (_, at), label in zip(fresh, labels, strict=True):
                self._seen = max(self._seen, float(at))
                if label is not None:
                    self._labels.setdefault(self._bucket(float(at)), Counter())[label] += 1
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


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _labels_of(client: Client, ids: list[str]) -> list[str | None]:
    if not ids:
        return []
    out: list[str | None] = []
    for raw in client.redis.hmget(client.keys.results, ids):
        try:
            out.append(Result.from_json(raw).label if raw is not None else None)
        except (ValueError, KeyError, TypeError):
            out.append(None)
    return out


@dataclass(frozen=True)
class ResultRow:
    result: Result
    text: str | None  # None when the text store no longer holds it
    correction: Correction | None

    @property
    def confidence(self) -> float:
        return float(self.result.scores.get(self.result.label, 0.0))


def recent_results(client: Client, limit: int = RECENT_LIMIT) -> list[Result]:
    """The newest results first (by ``P:done``); ids whose result was trimmed meanwhile are skipped."""
    newest = client.redis.zrevrange(client.keys.done, 0, max(limit, 1) - 1)
    ids = [_text(i) for i in newest if isinstance(i, (bytes, str))]
    found = client.get_many(ids)
    return [found[i] for i in ids if i in found]


def results_page(
    client: Client,
    *,
    label: str | None = None,
    low: float | None = None,
    corrected: bool | None = None,
    q: str | None = None,
    limit: int = RECENT_LIMIT,
) -> list[ResultRow]:
    """Recent results, newest first, filtered; ``q`` looks an id up exactly (however old the result)."""
    if q:
        found = client.get(q)
        candidates = [found] if found is not None else []
    else:
        candidates = recent_results(client, SCAN_LIMIT if (label or low or corrected is not None) else limit)
    if label:
        candidates = [r for r in candidates if r.label == label]
    if low is not None:
        candidates = [r for r in candidates if r.scores.get(r.label, 0.0) < low]
    fixed = corrections(client, [r.id for r in candidates])
    if corrected is not None:
        candidates = [r for r in candidates if (r.id in fixed) == corrected]
    candidates = candidates[:limit]
    text = texts(client, [r.id for r in candidates])
    return [ResultRow(result=r, text=text.get(r.id), correction=fixed.get(r.id)) for r in candidates]


def row(client: Client, ticket_id: str) -> ResultRow | None:
    rows = results_page(client, q=ticket_id)
    return rows[0] if rows else None


def texts(client: Client, ids: list[str]) -> dict[str, str]:
    """Ticket texts from the bounded text store (``P:text:<id>``), for the ids it still holds."""
    if not ids:
        return {}
    raw = client.redis.mget([client.keys.text(i) for i in ids])
    return {i: _text(t) for i, t in zip(ids, raw, strict=True) if t is not None}


def corrections(client: Client, ids: list[str]) -> dict[str, Correction]:
    if not ids:
        return {}
    out = {}
    for i, raw in zip(ids, client.redis.hmget(client.keys.labels, ids), strict=True):
        if raw is None:
            continue
        try:
            out[i] = Correction.from_json(i, raw)
        except (ValueError, TypeError):
            continue
    return out


def known_labels(rows: list[ResultRow]) -> list[str]:
    """Every label a result was scored against: the task's label set, as the workers see it."""
    return sorted({name for r in rows for name in r.result.scores})


@dataclass(frozen=True)
class HeadInfo:
    """The published head, as far as the producer side can read it without the worker's code."""

    version: str | None  # None: no head published yet
    next_version: str  # the version the next ``train --from-redis --publish`` will get
    at: float | None
    training: dict[str, Any]  # the head file's training metadata (n, cv_accuracy, corrections ...)
    corrections: int  # recorded in P:labels

    @property
    def correction_accuracy(self) -> tuple[Any, Any] | None:
        """Accuracy on the corrections before and after training, when the trainer recorded them."""
        t = self.training  # written by worker/engine/training.py (_on_corrections)
        if "corrections_accuracy_before" in t and "corrections_accuracy_after" in t:
            return t["corrections_accuracy_before"], t["corrections_accuracy_after"]
        return None


_HEAD_META: dict[tuple[str, str], dict[str, Any]] = {}  # (prefix, version) -> training metadata


def head_info(client: Client) -> HeadInfo:
    keys = client.keys
    with client.redis.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.head, ["version", "at"])
        pipe.get(keys.head_seq)
        pipe.hlen(keys.labels)
        (version_raw, at_raw), seq_raw, n_corrections = pipe.execute()
    version = _text(version_raw) if version_raw is not None else None
    last = int(seq_raw) if seq_raw is not None and _text(seq_raw).isdigit() else 0
    training: dict[str, Any] = {}
    if version is not None:
        cache_key = (keys.prefix, version)
        if cache_key not in _HEAD_META:
            _HEAD_META[cache_key] = _training_metadata(client.redis.hget(keys.head, "data"))
        training = _HEAD_META[cache_key]
    at = float(at_raw) if at_raw is not None and _text(at_raw).replace(".", "", 1).isdigit() else None
    return HeadInfo(
        version=version, next_version=str(last + 1), at=at, training=training, corrections=int(n_corrections)
    )


def _training_metadata(data: bytes | str | None) -> dict[str, Any]:
    """The ``training`` entry of a published head's metadata; anything unexpected reads as none."""
    try:
        training = head_metadata(data).get("training") if isinstance(data, bytes) else None
    except ValueError:
        return {}
    return dict(training) if isinstance(training, dict) else {}


@dataclass(frozen=True)
class DeadRow:
    letter: DeadLetter

    @property
    def excerpt(self) -> str:
        text = self.letter.payload.decode("utf-8", "replace")
        return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def dead_page(client: Client, limit: int = 100) -> list[DeadRow]:
    rows = []
    for raw in client.redis.lrange(client.keys.dead, 0, max(limit, 1) - 1):
        raw_bytes = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")
        try:
            letter = DeadLetter.from_json(raw_bytes)
        except (ValueError, TypeError):
            letter = DeadLetter(reason="unreadable dead letter", payload=raw_bytes)
        rows.append(DeadRow(letter=letter))
    return rows

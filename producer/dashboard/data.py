"""What the dashboard shows, read from Redis through the producer client and the protocol's key names.

Every read here is bounded: a page never walks a whole hash or list, however large the queue grows. The
functions are plain and synchronous; the web layer runs them in a thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from producer.client import Client
from producer.protocol import DeadLetter, Result

RECENT_LIMIT = 200  # results listed on the results page
SCAN_LIMIT = 2000  # newest results looked at to fill a filtered page
EXCERPT_CHARS = 300  # of a dead letter's payload
HISTORY_S = 600.0  # the chart's window


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
    rate: float | None  # tickets/s over the last minute; None until the dashboard has watched that long
    labels: dict[str, int]  # label -> results, over the chart's window

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


@dataclass(frozen=True)
class ResultRow:
    result: Result
    text: str | None  # None when the text store no longer holds it
    corrected: str | None  # the label a person gave, if any

    @property
    def confidence(self) -> float:
        return float(self.result.scores.get(self.result.label, 0.0))

    @property
    def method(self) -> str:
        return str(self.result.fields.get("method", "") or _extra(self.result, "method"))

    @property
    def head(self) -> str:
        return str(_extra(self.result, "head"))


def _extra(result: Result, name: str) -> Any:
    return getattr(result, name, "") or ""


@dataclass(frozen=True)
class DeadRow:
    index: int  # position in the dead list, newest first, when it was read
    letter: DeadLetter

    @property
    def excerpt(self) -> str:
        text = self.letter.payload.decode("utf-8", "replace")
        return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def overview(client: Client, history: History, now: float | None = None) -> Overview:
    now = time.time() if now is None else now
    stats = client.stats()
    workers = []
    for w in stats.workers:
        beat = w.info.get("at")
        age = max(0.0, now - float(beat)) if w.alive and isinstance(beat, (int, float)) else None
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
    sample = history.record(client, stats.done, stats.waiting, stats.inflight, now)
    return Overview(
        at=now,
        waiting=stats.waiting,
        inflight=stats.inflight,
        done=stats.done,
        dead=stats.dead,
        workers=workers,
        oldest_wait_s=oldest_wait(client, now),
        rate=history.rate(60.0, now),
        labels=dict(sorted(history.label_totals().items(), key=lambda kv: (-kv[1], kv[0]))) or sample.labels,
    )


def oldest_wait(client: Client, now: float) -> float | None:
    """How long the oldest waiting ticket (the right end of the input list) has waited, if it says when
    it was enqueued."""
    raw = client.redis.lindex(client.keys.tickets, -1)
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    stamp = obj.get("enqueued_at") if isinstance(obj, dict) else None
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        return max(0.0, now - float(stamp))
    return None


@dataclass
class Sample:
    t: float
    done: int
    waiting: int
    inflight: int
    labels: dict[str, int] = field(default_factory=dict)  # labels of results finished since the last sample


class History:
    """The chart's memory: a sample every few seconds, kept for :data:`HISTORY_S`, in this process only
    (like Flower's); a restarted dashboard starts a new chart."""

    def __init__(self, window_s: float = HISTORY_S) -> None:
        self.window_s = window_s
        self.samples: deque[Sample] = deque()
        self._lock = threading.Lock()
        self._seen_at = 0.0  # newest result time already counted into a sample

    def record(self, client: Client, done: int, waiting: int, inflight: int, now: float) -> Sample:
        labels = self._new_labels(client)
        sample = Sample(t=now, done=done, waiting=waiting, inflight=inflight, labels=labels)
        with self._lock:
            if self.samples and now - self.samples[-1].t < 0.5:
                last = self.samples[-1]  # two pages polling at once: merge rather than make a 0 s step
                for k, v in labels.items():
                    last.labels[k] = last.labels.get(k, 0) + v
                return last
            self.samples.append(sample)
            while self.samples and now - self.samples[0].t > self.window_s:
                self.samples.popleft()
        return sample

    def _new_labels(self, client: Client) -> dict[str, int]:
        newest = self._seen_at
        counts: Counter[str] = Counter()
        for result in recent_results(client, SCAN_LIMIT):
            if result.at <= self._seen_at:
                continue
            counts[result.label] += 1
            newest = max(newest, result.at)
        first = self._seen_at == 0.0
        self._seen_at = newest
        # The first look has no "since": count nothing rather than the whole backlog at once.
        return {} if first else dict(counts)

    def rate(self, over_s: float, now: float) -> float | None:
        with self._lock:
            recent = [s for s in self.samples if now - s.t <= over_s]
        if len(recent) < 2 or recent[-1].t - recent[0].t <= 0:
            return None
        return max(0, recent[-1].done - recent[0].done) / (recent[-1].t - recent[0].t)

    def label_totals(self) -> Counter[str]:
        with self._lock:
            total: Counter[str] = Counter()
            for s in self.samples:
                total.update(s.labels)
        return total

    def series(self) -> dict[str, Any]:
        """Columns for the chart: time, tickets/s between samples, waiting, and each label's results/s."""
        with self._lock:
            samples = list(self.samples)
        names = sorted({k for s in samples for k in s.labels})
        t: list[float] = []
        rate: list[float | None] = []
        waiting: list[int] = []
        labels: dict[str, list[float | None]] = {n: [] for n in names}
        for prev, cur in zip([None, *samples[:-1]], samples, strict=True):
            t.append(round(cur.t, 3))
            waiting.append(cur.waiting)
            dt = cur.t - prev.t if prev is not None else 0.0
            rate.append(round(max(0, cur.done - prev.done) / dt, 3) if prev is not None and dt > 0 else None)
            for n in names:
                labels[n].append(round(cur.labels.get(n, 0) / dt, 3) if dt > 0 else None)
        return {"t": t, "rate": rate, "waiting": waiting, "labels": labels}


def recent_results(client: Client, limit: int = RECENT_LIMIT) -> list[Result]:
    """The newest results first, among at most ``limit`` of the results hash."""
    out = []
    for n, (_, raw) in enumerate(client.redis.hscan_iter(client.keys.results, count=500)):
        if n >= limit:
            break
        try:
            out.append(Result.from_json(raw))
        except (ValueError, KeyError, TypeError):
            continue
    out.sort(key=lambda r: r.at, reverse=True)
    return out


def texts(client: Client, ids: list[str]) -> dict[str, str]:
    """Ticket texts from the bounded text store, for those it still holds."""
    return {}


def corrections(client: Client, ids: list[str]) -> dict[str, str]:
    return {}


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
        candidates = recent_results(client, SCAN_LIMIT)
    if label:
        candidates = [r for r in candidates if r.label == label]
    if low is not None:
        candidates = [r for r in candidates if r.scores.get(r.label, 0.0) < low]
    ids = [r.id for r in candidates]
    fixed = corrections(client, ids)
    if corrected is not None:
        candidates = [r for r in candidates if (r.id in fixed) == corrected]
    candidates = candidates[:limit]
    text = texts(client, [r.id for r in candidates])
    return [ResultRow(result=r, text=text.get(r.id), corrected=fixed.get(r.id)) for r in candidates]


def known_labels(rows: list[ResultRow], extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every label a result was scored against: the task's label set, as the workers see it."""
    names = set(extra)
    for row in rows:
        names.update(row.result.scores)
    return sorted(names)


def dead_page(client: Client, limit: int = 100) -> list[DeadRow]:
    rows = []
    for n, raw in enumerate(client.redis.lrange(client.keys.dead, 0, max(limit, 1) - 1)):
        try:
            rows.append(DeadRow(index=n, letter=DeadLetter.from_json(raw)))
        except (ValueError, TypeError):
            rows.append(
                DeadRow(index=n, letter=DeadLetter(reason="unreadable dead letter", payload=_bytes(raw)))
            )
    return rows


def _bytes(raw: bytes | str) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")

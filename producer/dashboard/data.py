"""What the dashboard shows, read from Redis through the producer client and the protocol's key names.

Every read is bounded, however large the queue grows. The overview is what the background sampler last
collected (:class:`History`, its one writer): counts from ``LLEN``/``HLEN``, the throughput from ``ZCOUNT``
over the ``P:done`` index, the label mix from at most :data:`LABEL_FETCH` newly finished results per sample.
The results list walks ``P:done`` newest first with a cursor (:class:`Cursor`), reads at most
:data:`SCAN_ROWS` index entries and :data:`PAGE_BYTES` of results per page, and only the first
:data:`LIST_TEXT_CHARS` characters of each text. A ticket's own page reads that one ticket whole. The
functions are plain and synchronous; the web layer runs them in a thread.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeGuard, cast

from producer.client import Client
from producer.learning import Correction, head_metadata
from producer.protocol import DeadLetter, Result

PAGE_ROWS = 50  # results listed per page
SCAN_ROWS = 1000  # index entries a filtered page looks through at most; "older" continues from there
PAGE_BYTES = 1 << 20  # result bytes a page reads at most (a result is under ~70 KiB: one always fits)
LIST_TEXT_CHARS = 300  # of a ticket's text in a list; whole on its own page
LIST_FIELDS_CHARS = 200  # of a result's ``fields`` (as JSON) in a list; whole on the ticket's page
LABEL_FETCH = 2000  # newly finished results whose labels one sample reads; the rest at the next samples
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
    labels_complete: bool = True  # False while the sampler is still reading the window's past labels

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


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
            pipe.zrangebyscore(keys.done, lo, "+inf", start=skip, num=LABEL_FETCH, withscores=True)
            *counts, fresh = pipe.execute()
        new = [(_text(i), float(at)) for i, at in fresh]
        labels = _labels_of(client, [i for i, _ in new])
        with self._lock:
            self._done = dict(zip(buckets, (int(c) for c in counts), strict=True))
            self._waiting[self._bucket(now)] = waiting
            for (tid, at), label in zip(new, labels, strict=True):
                if self._seen is None or at > self._seen:
                    self._seen, self._seen_ids = at, set()
                self._seen_ids.add(tid)
                if label is not None:
                    self._labels.setdefault(self._bucket(at), Counter())[label] += 1
            self.caught_up = len(fresh) < LABEL_FETCH
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
    text: str | None  # None when the text store no longer holds it; clipped in lists (see ``clipped``)
    correction: Correction | None
    clipped: bool = False  # the text is the first LIST_TEXT_CHARS of a longer one

    @property
    def confidence(self) -> float:
        return float(self.result.scores.get(self.result.label, 0.0))

    @property
    def fields_excerpt(self) -> str:
        """The producer's ``fields`` as JSON, clipped for a list."""
        if not self.result.fields:
            return ""
        raw = json.dumps(self.result.fields, ensure_ascii=False, sort_keys=True)
        return raw if len(raw) <= LIST_FIELDS_CHARS else raw[:LIST_FIELDS_CHARS] + "…"


@dataclass(frozen=True)
class Cursor:
    """A place in ``P:done``, newest first: results finished at or before ``at``, skipping the first
    ``skip`` of those finished exactly at ``at`` (they were on earlier pages). Written ``<at>:<skip>``."""

    at: float
    skip: int = 0

    def __str__(self) -> str:
        return f"{self.at!r}:{self.skip}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """Raises ``ValueError`` on anything but ``<finite number>:<count under a million>``."""
        at_text, sep, skip_text = text.partition(":")
        at = float(at_text)
        if not sep or not math.isfinite(at) or not skip_text.isdigit() or len(skip_text) > 6:
            raise ValueError("not a cursor")
        return cls(at, int(skip_text))


@dataclass(frozen=True)
class Page:
    rows: list[ResultRow]
    next: Cursor | None  # where the next (older) page starts; None at the oldest result
    scanned: int  # index entries looked through
    read_bytes: int  # result bytes read


@dataclass(frozen=True)
class Filters:
    label: str | None = None
    low: float | None = None  # confidence below this
    corrected: bool | None = None

    @property
    def any(self) -> bool:
        return bool(self.label or self.low is not None or self.corrected is not None)

    def keep(self, result: Result, corrected: bool) -> bool:
        if self.label and result.label != self.label:
            return False
        if self.low is not None and result.scores.get(result.label, 0.0) >= self.low:
            return False
        return self.corrected is None or corrected == self.corrected


def results_page(
    client: Client, filters: Filters = Filters(), cursor: Cursor | None = None, rows: int = PAGE_ROWS
) -> Page:
    """One page of results, newest first, from ``cursor`` on. Reads at most :data:`SCAN_ROWS` index
    entries (``rows`` without filters) and :data:`PAGE_BYTES` of results (always at least one result),
    whatever the filters match."""
    keys = client.keys
    top = repr(cursor.at) if cursor else "+inf"
    offset = cursor.skip if cursor else 0
    want = SCAN_ROWS if filters.any else rows
    entries = cast(
        list[tuple[bytes, float]],
        client.redis.zrevrangebyscore(keys.done, top, "-inf", start=offset, num=want, withscores=True),
    )
    found: list[Result] = []
    consumed, spent = 0, 0
    for start in range(0, len(entries), 100):
        chunk = [(_text(i), float(at)) for i, at in entries[start : start + 100]]
        by_correction = filters.corrected is not None  # only then is "corrected?" asked per entry
        with client.redis.pipeline(transaction=False) as pipe:
            for tid, _ in chunk:
                pipe.hstrlen(keys.results, tid)
                if by_correction:
                    pipe.hexists(keys.labels, tid)
            replies = pipe.execute()
        step = 2 if by_correction else 1
        take: list[tuple[str, bool]] = []
        for n, (tid, _) in enumerate(chunk):
            size = int(replies[step * n])
            if spent and spent + size > PAGE_BYTES:
                break
            spent += size
            take.append((tid, bool(replies[step * n + 1]) if by_correction else False))
        raw = client.redis.hmget(keys.results, [t for t, _ in take]) if take else []
        for (_, fixed), blob in zip(take, raw, strict=True):
            consumed += 1
            result = _result(blob)
            if result is not None and filters.keep(result, fixed):
                found.append(result)
                if len(found) == rows:
                    break
        if len(found) == rows or len(take) < len(chunk):
            break
    more = len(entries) == want  # the index may hold older entries than those read
    return Page(
        rows=_rows(client, found),
        next=_next_cursor(entries[:consumed], cursor) if consumed < len(entries) or more else None,
        scanned=consumed,
        read_bytes=spent,
    )


def _next_cursor(consumed: list[tuple[Any, float]], cursor: Cursor | None) -> Cursor | None:
    if not consumed:
        return cursor
    last = float(consumed[-1][1])
    ties = sum(1 for _, at in consumed if float(at) == last)
    if cursor is not None and cursor.at == last:
        ties += cursor.skip
    return Cursor(last, ties)


def _result(blob: bytes | str | None) -> Result | None:
    if blob is None:
        return None
    try:
        return Result.from_json(blob)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _rows(client: Client, found: list[Result]) -> list[ResultRow]:
    """Rows for a list: texts clipped to LIST_TEXT_CHARS (read with GETRANGE, never whole)."""
    ids = [r.id for r in found]
    texts = clipped_texts(client, ids)
    fixed = corrections(client, ids)
    return [
        ResultRow(result=r, text=texts[r.id][0], clipped=texts[r.id][1], correction=fixed.get(r.id))
        for r in found
    ]


def clipped_texts(client: Client, ids: list[str]) -> dict[str, tuple[str | None, bool]]:
    """id -> (the first LIST_TEXT_CHARS of its text or None when not kept, whether there was more)."""
    limit = LIST_TEXT_CHARS * 4  # bytes: UTF-8 is at most 4 per character
    with client.redis.pipeline(transaction=False) as pipe:
        for i in ids:
            pipe.getrange(client.keys.text(i), 0, limit - 1)
            pipe.strlen(client.keys.text(i))
        replies = pipe.execute()
    out: dict[str, tuple[str | None, bool]] = {}
    for n, i in enumerate(ids):
        head, size = replies[2 * n], int(replies[2 * n + 1])
        if not size:
            out[i] = (None, False)
            continue
        text = head.decode("utf-8", "ignore") if isinstance(head, bytes) else str(head)
        clipped = size > len(head) or len(text) > LIST_TEXT_CHARS
        out[i] = (text[:LIST_TEXT_CHARS].rstrip() + "…" if clipped else text, clipped)
    return out


def row(client: Client, ticket_id: str) -> ResultRow | None:
    """One ticket's row for a list (text clipped), or None when it has no readable result."""
    result = _result(client.redis.hget(client.keys.results, ticket_id))
    if result is None:
        return None
    return _rows(client, [result])[0]


@dataclass(frozen=True)
class Ticket:
    """A ticket's own page: everything, whole."""

    id: str
    result: Result | None
    text: str | None
    correction: Correction | None
    decided_by: Decider | None

    @property
    def fields_json(self) -> str:
        fields = self.result.fields if self.result else {}
        return json.dumps(fields, ensure_ascii=False, sort_keys=True, indent=2) if fields else ""


def ticket(client: Client, ticket_id: str) -> Ticket | None:
    """None when Redis knows nothing of this id (no result, no text, no correction)."""
    keys = client.keys
    with client.redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.results, ticket_id)
        pipe.get(keys.text(ticket_id))
        pipe.hget(keys.labels, ticket_id)
        blob, text, fixed = pipe.execute()
    if blob is None and text is None and fixed is None:
        return None
    result = _result(blob)
    found = corrections(client, [ticket_id]) if fixed is not None else {}
    return Ticket(
        id=ticket_id,
        result=result,
        text=_text(text) if text is not None else None,
        correction=found.get(ticket_id),
        decided_by=deciders(client, [result])[0] if result else None,
    )


@dataclass(frozen=True)
class Decider:
    """What decided a result's label, in words a reader can check."""

    kind: str  # "published" | "own" | "zero-shot" | "unknown"
    head: str | None  # the published version, or the task's own head's id
    published_at: float | None = None
    published_by: str | None = None

    def __str__(self) -> str:
        if self.kind == "published":
            return f"published head version {self.head}"
        if self.kind == "own":
            return f"the task's own head {self.head} (from the worker's task file, not published)"
        if self.kind == "zero-shot":
            return "zero-shot scoring (no head)"
        return "not recorded (a worker older than method/head)"


def deciders(client: Client, results: list[Result]) -> list[Decider]:
    """For each result, what decided it: a head published through Redis (``P:heads``, the last
    ``HEADS_KEPT``), the task's own head (a head id no publish names), or zero-shot."""
    published = {v.version: v for v in client.head_versions()} if any(r.head for r in results) else {}
    out = []
    for r in results:
        if r.method == "zero-shot":
            out.append(Decider("zero-shot", None))
        elif r.method == "head" and r.head and r.head in published:
            v = published[r.head]
            out.append(Decider("published", r.head, v.at, v.by))
        elif r.method == "head" and r.head and r.head.isdigit():
            out.append(Decider("published", r.head))  # older than the publish history kept
        elif r.method == "head":
            out.append(Decider("own", r.head))
        else:
            out.append(Decider("unknown", None))
    return out


def decider_summary(client: Client, rows: list[ResultRow]) -> list[tuple[str, int]]:
    """What decided the rows shown, most first: (description, rows)."""
    counts = Counter(str(d) for d in deciders(client, [r.result for r in rows]))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


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


DEAD_ROWS = 50  # dead letters per page (each at most ~90 KiB: a 64 KiB payload kept, as JSON)


def dead_page(client: Client, start: int = 0, limit: int = DEAD_ROWS) -> list[DeadRow]:
    """Dead letters ``start`` .. ``start + limit - 1``, newest first."""
    rows = []
    for raw in client.redis.lrange(client.keys.dead, start, start + max(limit, 1) - 1):
        raw_bytes = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")
        try:
            letter = DeadLetter.from_json(raw_bytes)
        except (ValueError, TypeError):
            letter = DeadLetter(reason="unreadable dead letter", payload=raw_bytes)
        rows.append(DeadRow(letter=letter))
    return rows

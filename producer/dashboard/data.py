"""The lists and a ticket's own page, read from Redis through the producer client and the protocol's keys.

Every read is bounded, however large the queue grows. The results list walks ``P:done`` newest first with
a cursor (:class:`Cursor`), reads at most :data:`SCAN_ROWS` index entries and :data:`PAGE_BYTES` of
results per page, and only the first :data:`LIST_TEXT_CHARS` characters of each text; a ticket's own page
reads that one ticket whole; dead letters come :data:`DEAD_ROWS` a page. (The overview is
:mod:`producer.dashboard.overview`; what decided a label, :mod:`producer.dashboard.heads`.) The functions
are plain and synchronous; the web layer runs them in a thread.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, cast

from producer.client import Client, as_text
from producer.learning import Correction
from producer.protocol import DeadLetter, Result
from producer.strictjson import digits

PAGE_ROWS = 50  # results listed per page
SCAN_ROWS = 1000  # index entries a filtered page looks through at most; "older" continues from there
PAGE_BYTES = 1 << 20  # result bytes a page reads at most (a result is under ~70 KiB: one always fits)
LIST_TEXT_CHARS = 300  # of a ticket's text in a list; whole on its own page
LIST_FIELDS_CHARS = 200  # of a result's ``fields`` (as JSON) in a list; whole on the ticket's page
EXCERPT_CHARS = 300  # of a dead letter's payload


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


MAX_SKIP = 10_000  # results finished at one time a cursor may skip: a drain's (--drain is at most 2,000)


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
        """Raises ``ValueError`` on anything but ``<finite number>:<count up to MAX_SKIP>``: the pages' own
        links skip at most the results of one drain (they share a finish time), and a skip of a million
        cost Redis 35 ms in one ZREVRANGEBYSCORE."""
        at_text, sep, skip_text = text.partition(":")
        at = float(at_text)
        if not sep or not math.isfinite(at) or not digits(skip_text) or len(skip_text) > 6:
            raise ValueError("not a cursor")
        if int(skip_text) > MAX_SKIP:
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
        chunk = [(as_text(i), float(at)) for i, at in entries[start : start + 100]]
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
    texts = client.clipped_texts(ids, LIST_TEXT_CHARS)
    fixed = corrections(client, ids)
    return [
        ResultRow(result=r, text=texts[r.id][0], clipped=texts[r.id][1], correction=fixed.get(r.id))
        for r in found
    ]


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
        text=as_text(text) if text is not None else None,
        correction=found.get(ticket_id),
    )


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
    """Every label these results name in their scores: the task's label set as the workers see it, or with
    ``--result-scores`` their most probable labels only (pages add :meth:`Client.labels_of`)."""
    return sorted({name for r in rows for name in r.result.scores})


@dataclass(frozen=True)
class DeadRow:
    letter: DeadLetter

    @property
    def excerpt(self) -> str:
        text = self.letter.payload.decode("utf-8", "replace")
        return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


DEAD_ROWS = 50  # dead letters per page (each at most MAX_LETTER_BYTES, 96 KiB: ~4.7 MiB a page at most)


def dead_page(client: Client, start: int = 0, limit: int = DEAD_ROWS) -> list[DeadRow]:
    """Dead letters ``start`` .. ``start + limit - 1``, newest first."""
    entries = client.redis.lrange(client.keys.dead, start, start + max(limit, 1) - 1)
    return [DeadRow(letter=DeadLetter.read(raw)) for raw in entries]

"""Tickets for ``bench`` and ``eval``: a JSONL / CSV file, and the length-stratified subset the slow
baselines run on. Standard library only. (Synthetic tickets come from ``python -m tools.synthetic``, which
``make bench`` runs first: data generators are tools, not part of the runtime package.)"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_tickets.jsonl"  # the bundled stream


class DataError(ValueError):
    """A tickets file that cannot be used, with the file, line and reason."""


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    label: str | None = None  # the expected class, when the file has one


def read_items(path: str | Path) -> list[Item]:
    """JSONL (one ``{"id", "text"[, "label"]}`` object per line) or CSV (header ``id,text[,label]``).

    The format is told by the first character, not the suffix, so ``tickets.txt`` works either way."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8-sig")  # -sig: spreadsheets write a BOM before the header
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: cannot read: {exc}") from None
    rows = _jsonl(p, raw) if raw.lstrip().startswith("{") else _csv(p, raw)
    items = [_item(p, where, row) for where, row in rows]
    if not items:
        raise DataError(f"{p}: no tickets")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:  # results are keyed by id: a repeat would be dead-lettered end to end
            raise DataError(f"{p}: duplicate id {it.id!r}")
        seen.add(it.id)
    return items


def _jsonl(p: Path, raw: str) -> Iterable[tuple[str, dict[str, object]]]:
    for n, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{p}:{n}: not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise DataError(f"{p}:{n}: not a JSON object")
        yield f"line {n}", obj


def _csv(p: Path, raw: str) -> Iterable[tuple[str, dict[str, object]]]:
    reader = csv.DictReader(raw.splitlines())
    missing = {"id", "text"} - set(reader.fieldnames or [])
    if missing:
        raise DataError(f"{p}: the CSV header needs id and text columns; missing {sorted(missing)}")
    for n, row in enumerate(reader, start=2):
        yield f"line {n}", dict(row)


def _item(p: Path, where: str, row: dict[str, object]) -> Item:
    tid, text, label = row.get("id"), row.get("text"), row.get("label")
    if not isinstance(tid, str) or not tid.strip():
        raise DataError(f"{p}: {where}: missing or empty id")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{p}: {where}: missing or empty text")
    if label is not None and not isinstance(label, str):
        raise DataError(f"{p}: {where}: label must be a string")
    return Item(tid.strip(), text.strip(), label.strip() if label else None)


def length_sample(lengths: Sequence[int], n: int, seed: int = 0) -> list[int]:
    """Indices of ``n`` items whose length mix matches the whole: one item drawn from each of ``n``
    equal-count length strata. Returned in input order.

    Item-by-item throughput depends on ticket length, so a subset must keep the long tail to give an
    items/s comparable with the modes that ran on everything."""
    if n >= len(lengths):
        return list(range(len(lengths)))
    rng = random.Random(seed)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    picked = [rng.choice(order[k * len(order) // n : (k + 1) * len(order) // n]) for k in range(n)]
    return sorted(picked)

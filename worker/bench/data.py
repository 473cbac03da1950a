"""Tickets for ``bench``, ``eval`` and ``verify``: a JSONL / CSV file, and the length-stratified subset the
slow baselines run on. Standard library only. (Synthetic tickets come from ``python -m tools.synthetic``,
which ``make bench`` runs first: data generators are tools, not part of the runtime package.)"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from producer.files import FileError, read_file

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_tickets.jsonl"  # the bundled stream
DataError = FileError  # a tickets file that cannot be used, with the file, line and reason


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    label: str | None = None  # the expected class, when the file has one


def read_items(path: str | Path) -> list[Item]:
    """The tickets of a JSONL or CSV file (read by :mod:`producer.files`) with their ``label`` when they
    have one: texts non-empty, ids non-empty where given (surrounding space dropped) and unique. A row
    with no ``id`` at all (a CSV of ``text,label`` as spreadsheets export it) is named by its line
    (``"line 7"``): these files are for training, scoring and timing, where nothing is looked up by id."""
    items = [
        _item(f"{path}: line {line}", row, f"line {line}") for line, row in read_file(path, columns=("text",))
    ]
    if not items:
        raise DataError(f"{path}: no tickets")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:  # results are keyed by id: a repeat would be dead-lettered end to end
            raise DataError(f"{path}: duplicate id {it.id!r}")
        seen.add(it.id)
    return items


def _item(where: str, row: dict[str, object], line: str) -> Item:
    tid, text, label = row.get("id", line), row.get("text"), row.get("label")
    if not isinstance(tid, str) or not tid.strip():
        raise DataError(f"{where}: missing or empty id")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: missing or empty text")
    if label is not None and not isinstance(label, str):
        raise DataError(f"{where}: label must be a string")
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

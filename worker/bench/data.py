"""Tickets for ``bench``, ``eval`` and ``verify``: a JSONL / CSV file, and the length-stratified subset the
slow baselines run on. Standard library only. (Synthetic tickets come from ``python -m tools.synthetic``,
which ``make bench`` runs first: data generators are tools, not part of the runtime package.)"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from producer.files import ITEM_COLUMNS, FileError, Item, items_of, read_file

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_tickets.jsonl"  # the bundled stream
DataError = FileError  # a tickets file that cannot be used, with the file, line and reason


def read_items(path: str | Path) -> list[Item]:
    """The tickets of a JSONL or CSV file (read by :mod:`producer.files`) with their ``label`` when they
    have one: texts non-empty, ids non-empty where given (surrounding space dropped) and unique. A row
    with no ``id`` at all (a CSV of ``text,label`` as spreadsheets export it) is named by its line
    (``"line 7"``): these files are for training, scoring and timing, where nothing is looked up by id."""
    return items_of(read_file(path, columns=ITEM_COLUMNS), path)


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

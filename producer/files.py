"""The one reader of ticket files: JSON Lines or CSV, for ``ticketq-producer push`` and for the worker's
``bench``, ``eval`` and ``verify``. Standard library only.

- Format: the one asked for; else the file's suffix (``.csv``; ``.jsonl``, ``.ndjson``, ``.json``); else the
  first character (``{``: JSON Lines, anything else: CSV).
- Encoding: UTF-8; a byte-order mark before the first line (spreadsheets write one before a CSV header) is
  dropped.
- JSON Lines: one object per line, lines split on ``\n`` only (a U+2028 or a form feed inside a text is
  valid JSON Lines, which ``str.splitlines`` would cut); a ``\r`` before it is dropped; blank lines are
  skipped; an object nested deeper than the wire protocol allows is an error with its line.
- CSV: a header row naming at least the columns the reader needs (``id`` and ``text`` for tickets to push; the
  worker's labelled and unlabelled files need only ``text``); other columns are kept. A row with more values
  than the header has columns is an error; quoted fields may span lines; parsed strictly: a field over csv's
  limit (131,072 characters), a quote never closed (lenient csv would read every later row into that field)
  or text after a closing quote is an error with the line its row starts on.

Errors are :class:`FileError`, naming the file (when there is one) and the line. What a row must hold to be
a ticket is the protocol's business (:func:`producer.client.encode`), not this module's.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

FORMATS = ("auto", "jsonl", "csv")
Row = tuple[int, dict[str, Any]]  # (line number, the row's fields)


class FileError(ValueError):
    """A ticket file that cannot be read, with the file, the line and the reason."""


TICKET_COLUMNS = ("id", "text")  # what a CSV of tickets to push must name


MAX_FILE_BYTES = 256 * 2**20  # a file is read whole (a push is all or nothing): `/dev/zero` was read until
# the machine ran out of memory. 256 MiB is a million tickets of 250 bytes; a larger file is split.


def read_file(path: str | Path, fmt: str = "auto", *, columns: tuple[str, ...] = TICKET_COLUMNS) -> list[Row]:
    return parse(read_text(path), fmt, str(path), columns=columns)


def read_text(path: str | Path | BinaryIO, name: str = "") -> str:
    """A whole file (or an open binary stream: stdin) as text, read up to :data:`MAX_FILE_BYTES`;
    :class:`FileError` for one larger, unreadable or not UTF-8 (naming the line)."""
    name = name or str(getattr(path, "name", path))
    try:
        if isinstance(path, str | Path):
            with open(path, "rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        else:
            raw = path.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise FileError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        mib = MAX_FILE_BYTES // 2**20
        raise FileError(f"{name}: larger than {mib} MiB: split it (split -l 100000 FILE part-) and push each")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise FileError(f"{name}: line {line}: not UTF-8 (byte {exc.start})") from None


def parse(
    text: str, fmt: str = "auto", name: str = "", *, columns: tuple[str, ...] = TICKET_COLUMNS
) -> list[Row]:
    """Every row of ``text`` with its line number; ``name`` is for messages and the suffix rule; a CSV's
    header must name ``columns``."""
    text = text.removeprefix("\ufeff")
    if fmt not in FORMATS:
        raise FileError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "auto":
        fmt = _sniff(text, name)
    where = f"{name}: " if name else ""
    return _jsonl(text, where) if fmt == "jsonl" else _csv(text, where, columns)


def _sniff(text: str, name: str) -> str:
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    return "jsonl" if text.lstrip().startswith("{") else "csv"


def _jsonl(text: str, where: str) -> list[Row]:
    rows = []
    for line, raw in enumerate(text.split("\n"), 1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw, object_pairs_hook=_no_repeats)
        except RecursionError:
            raise FileError(f"{where}line {line}: nested too deeply") from None
        except ValueError as exc:
            raise FileError(f"{where}line {line}: not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise FileError(f"{where}line {line}: not a JSON object")
        rows.append((line, obj))
    return rows


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: ``{"text": "a", "text": "b"}`` is refused, not read as
    its last value (the wire protocol refuses it too)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise ValueError(f"duplicate key {twice!r}")
    return obj


def _clip(header: Sequence[str], most: int = 200) -> str:
    shown = repr(list(header))
    return shown if len(shown) <= most else shown[: most - 1] + "…"


def _csv(text: str, where: str, columns: tuple[str, ...]) -> list[Row]:
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise FileError(f"{where}line {reader.line_num + 1}: {exc}") from None
    if twice := sorted({c for c in header if header.count(c) > 1}):
        raise FileError(f"{where}the CSV header names {twice} more than once (it has {_clip(header)})")
    if missing := [c for c in columns if c not in header]:
        needs = " and ".join(columns) + (" columns" if len(columns) > 1 else " column")
        raise FileError(f"{where}the CSV header needs {needs}; missing {missing} (it has {_clip(header)})")
    rows = []
    start = reader.line_num + 1  # the line the next record starts on (a quoted field may span lines)
    try:
        for row in reader:
            if None in row:
                raise FileError(f"{where}line {reader.line_num}: more values than header columns")
            rows.append((reader.line_num, {k: v for k, v in row.items() if v is not None}))
            start = reader.line_num + 1
    except csv.Error as exc:  # a field past csv's field_size_limit, a quote never closed, text after one
        if "unexpected end of data" in str(exc):  # strict: not every later row read into one field
            raise FileError(f"{where}line {start}: a quote opened in this row is never closed") from None
        raise FileError(f"{where}line {start}: {exc}") from None
    return rows


@dataclass(frozen=True)
class Item:
    """A ticket of a file to train, score or time on (``worker.bench.data.read_items``, a task's
    ``head_data``): its ``label`` when the file has one."""

    id: str
    text: str
    label: str | None = None  # the expected class, when the file has one
    named: bool = True  # False: the file gave no id, ``id`` is the row's line ("line 7")


ITEM_COLUMNS = ("text",)  # what a CSV of tickets to train, score or time on must name (id optional)


def items_of(rows: Sequence[tuple[int, dict[str, object]]], path: str | Path) -> list[Item]:
    """The items of rows read by :func:`parse` with :data:`ITEM_COLUMNS`: texts non-empty, ids non-empty
    where given (surrounding space dropped) and unique; a row with no ``id`` is named by its line."""
    items = [_item(f"{path}: line {line}", row, f"line {line}") for line, row in rows]
    if not items:
        raise FileError(f"{path}: no tickets")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:  # results are keyed by id: a repeat would be dead-lettered end to end
            raise FileError(f"{path}: duplicate id {it.id!r}")
        seen.add(it.id)
    return items


def _item(where: str, row: dict[str, object], line: str) -> Item:
    tid, text, label = row.get("id", line), row.get("text"), row.get("label")
    for name, value in (("id", tid), ("text", text)):
        if value is not None and not isinstance(value, str):
            raise FileError(f"{where}: {name} must be a string, got {type(value).__name__}")
    if not isinstance(tid, str) or not tid.strip():
        raise FileError(f"{where}: missing or empty id")
    if not isinstance(text, str) or not text.strip():
        raise FileError(f"{where}: missing or empty text")
    if label is not None and not isinstance(label, str):
        raise FileError(f"{where}: label must be a string")
    return Item(tid.strip(), text.strip(), label.strip() if label else None, named="id" in row)

"""The bundled data files: valid on the wire, balanced, and reproducible from their builder."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from producer.protocol import decode_ticket
from tools.synthetic import LABELS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "worker" / "data"
BANKING77 = Path(os.environ.get("TICKETQ_BANKING77_DIR", ROOT.parent / "shared" / "data" / "banking77"))


def _sample() -> list[dict[str, str]]:
    lines = (DATA / "sample_tickets.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _eval_rows() -> list[dict[str, str]]:
    with (DATA / "banking77_eval.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_sample_tickets_decode_and_are_balanced() -> None:
    rows = _sample()
    assert 250 <= len(rows) <= 350
    for row in rows:
        ticket = decode_ticket(json.dumps(row, ensure_ascii=False))
        assert ticket.fields["label"] in LABELS
    assert len({r["id"] for r in rows}) == len(rows)
    by_source = Counter(r["source"] for r in rows)
    assert by_source.keys() == {"synthetic", "banking77"}
    assert 40 <= by_source["banking77"] <= 80
    labels = Counter(r["label"] for r in rows)
    assert max(labels.values()) - min(labels.values()) <= 0.1 * len(rows)


def test_eval_rows_are_stratified_and_apart_from_the_demo() -> None:
    rows = _eval_rows()
    assert list(rows[0]) == ["id", "text", "label"]
    assert 350 <= len(rows) <= 450
    counts = Counter(r["label"] for r in rows)
    assert set(counts) == set(LABELS)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert all(r["text"].strip() for r in rows)
    ids = {r["id"] for r in rows}
    assert len(ids) == len(rows)
    assert not ids & {r["id"] for r in _sample()}


@pytest.mark.skipif(not (BANKING77 / "test.csv").is_file(), reason=f"Banking77 not found at {BANKING77}")
def test_builder_reproduces_the_committed_files(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tools.build_sample", "--banking77", str(BANKING77), "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    for name in ("sample_tickets.jsonl", "banking77_eval.csv"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), f"{name} differs: rebuild it"

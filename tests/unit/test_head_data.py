"""The built-in head's training data: never the rows it is judged on, and reproducible from its builder."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "worker" / "data"
BANKING77 = Path(os.environ.get("TICKETQ_BANKING77_DIR", ROOT.parent / "shared" / "data" / "banking77"))


def _csv(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def test_head_training_rows_are_disjoint_from_eval_and_demo_rows() -> None:
    train = _csv("head_train.csv")
    judged = _csv("banking77_eval.csv") + [
        json.loads(line) for line in (DATA / "sample_tickets.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert not {r["id"] for r in train} & {r["id"] for r in judged}
    assert not {_norm(r["text"]) for r in train} & {_norm(r["text"]) for r in judged}


def test_head_training_rows_are_labelled_and_balanced() -> None:
    rows = _csv("head_train.csv")
    assert list(rows[0]) == ["id", "text", "label"] and 1000 <= len(rows) <= 2000
    counts = Counter(r["label"] for r in rows)
    assert set(counts) == {"billing", "technical", "account"}
    assert max(counts.values()) - min(counts.values()) <= 0.05 * len(rows)
    sources = Counter(r["id"].split("-")[0] for r in rows)
    assert sources.keys() == {"b77", "syn"} and sources["b77"] >= 1000  # real queries, from the train split
    assert all(r["id"].startswith(("b77-train-", "syn-11-")) for r in rows)


@pytest.mark.skipif(not (BANKING77 / "train.csv").is_file(), reason=f"Banking77 not found at {BANKING77}")
def test_builder_reproduces_head_train(tmp_path: Path) -> None:
    out = tmp_path / "head_train.csv"
    cmd = [sys.executable, "-m", "tools.build_head_data", "--banking77", str(BANKING77), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    assert out.read_bytes() == (DATA / "head_train.csv").read_bytes(), "head_train.csv differs: rebuild it"

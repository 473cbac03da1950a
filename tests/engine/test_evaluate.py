"""``ticketq-worker eval``: scores computed by hand, and the command end to end on a tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker import cli
from worker.engine.engine import Engine
from worker.engine.model import load_model
from worker.engine.task import load_task
from worker.evaluate import confused_pairs, score

LABELS = ["billing", "technical", "account"]
ROWS = [
    ("t1", "I was charged twice for my subscription", "billing"),
    ("t2", "Refund my last payment please", "billing"),
    ("t3", "Why is there a fee on my statement?", "billing"),
    ("t4", "The app crashes when I open settings", "technical"),
    ("t5", "Error 503 on upload", "technical"),
    ("t6", "Sync is broken since the update", "technical"),
    ("t7", "I forgot my password", "account"),
    ("t8", "Please change the email on my profile", "account"),
    ("t9", "My account is locked", "account"),
    ("t10", 'Delete my account, "now"', "account"),
]


def _csv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    lines = ["id,text,label"] + [f'{i},"{t.replace(chr(34), chr(34) * 2)}",{lab}' for i, t, lab in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_score_by_hand() -> None:
    truth = ["billing", "billing", "technical", "account", "account"]
    predicted = ["billing", "account", "technical", "account", "billing"]
    s = score(LABELS, truth, predicted)
    assert s.confusion == [[1, 0, 1], [0, 1, 0], [1, 0, 1]]
    assert s.n == 5 and s.correct == 3 and s.accuracy == pytest.approx(0.6)
    billing = s.per_class["billing"]
    assert billing.precision == pytest.approx(0.5) and billing.recall == pytest.approx(0.5)
    assert s.per_class["technical"].f1 == pytest.approx(1.0)
    never = score(LABELS, ["billing"], ["billing"]).per_class["account"]
    assert never.precision is None and never.recall is None and never.support == 0
    # each label shown counts once: billing 1/2, technical 1/1, account 1/2 (accuracy: 3/5)
    assert s.mean_recall == pytest.approx(2 / 3)
    assert score(LABELS, ["billing"], ["billing"]).mean_recall == 1.0  # labels not shown do not count
    assert score(LABELS, [], []).mean_recall is None


def test_confused_pairs_are_the_largest_off_diagonal_cells() -> None:
    labels = ["a", "b", "c"]
    matrix = [[9, 1, 4], [4, 7, 0], [0, 2, 5]]  # the diagonal never counts, however large
    assert confused_pairs(labels, matrix) == [("a", "c", 4), ("b", "a", 4), ("c", "b", 2), ("a", "b", 1)]
    assert confused_pairs(labels, matrix, top=1) == [("a", "c", 4)]
    assert confused_pairs(labels, [[3, 0, 0], [0, 3, 0], [0, 0, 3]]) == []


def test_eval_on_a_tiny_labelled_csv(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    data, out = _csv(tmp_path / "labelled.csv", ROWS), tmp_path / "eval.json"
    flags = ["--tickets", str(data), "--model", str(tiny_dir), "--dtype", "float32", "--json", str(out)]
    assert cli.main(["eval", *flags, "--head", "none"]) == 0  # zero-shot (test_head.py: with a head)
    report = json.loads(out.read_text())
    assert report["labels"] == LABELS and report["n"] == len(ROWS)
    assert sum(map(sum, report["confusion"])) == len(ROWS)
    # Hand count: the same engine, asked directly, ticket by ticket.
    engine = Engine(load_model(str(tiny_dir), dtype="float32"), load_task())
    correct = sum(engine.classify([text])[0][0].label == label for _, text, label in ROWS)
    assert report["correct"] == correct == sum(report["confusion"][i][i] for i in range(3))
    assert report["accuracy"] == pytest.approx(correct / len(ROWS), abs=1e-4)
    assert report["items_per_s"] > 0
    assert set(report["per_class"]) == set(LABELS)
    recalls = [c["recall"] for c in report["per_class"].values() if c["recall"] is not None]
    assert report["mean_recall"] == pytest.approx(sum(recalls) / len(recalls), abs=1e-3)
    printed = capsys.readouterr().out
    assert "confusion matrix" in printed and f"mean recall per label {report['mean_recall']:.1%}" in printed


def test_labels_outside_the_task_are_a_clear_error(tmp_path: Path, capsys) -> None:
    data = _csv(tmp_path / "bad.csv", [*ROWS[:2], ("x1", "where is my parcel", "shipping")])
    assert cli.main(["eval", "--tickets", str(data)]) == 2
    err = capsys.readouterr().err
    assert "'shipping' (1)" in err and "billing, technical, account" in err


def test_unlabelled_rows_are_an_error(tmp_path: Path, capsys) -> None:
    data = tmp_path / "plain.jsonl"
    data.write_text('{"id": "a", "text": "hello"}\n')
    assert cli.main(["eval", "--tickets", str(data)]) == 2
    assert "no label" in capsys.readouterr().err

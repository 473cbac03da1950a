"""Corrections without Redis: the wire records and the training set they make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producer.client import LabelError
from producer.learning import Correction, HeadVersion, label_problem
from producer.protocol import Keys, Result
from worker.corrections import CorrectionsError, training_set


def test_new_keys_share_the_prefix_so_a_hash_tag_keeps_them_in_one_slot() -> None:
    k = Keys("{tq}")
    assert [k.text("T:1"), k.labels, k.head, k.heads, k.head_seq] == [
        "{tq}:text:T:1",
        "{tq}:labels",
        "{tq}:head",
        "{tq}:heads",
        "{tq}:head:seq",
    ]


def test_result_method_and_head_are_optional_on_the_wire() -> None:
    plain = Result("a", "billing", {"billing": 1.0}, "m", "d")
    assert not {"method", "head"} & set(json.loads(plain.to_json()))
    assert Result.from_json(plain.to_json()).method is None  # results of older workers read as before
    headed = Result("a", "billing", {"billing": 1.0}, "m", "d", method="head", head="4")
    back = Result.from_json(headed.to_json())
    assert (back.method, back.head) == ("head", "4")


def test_correction_and_head_version_records_round_trip() -> None:
    c = Correction("T-1", "account", "locked out", at=12.5, by="alice", was="billing")
    assert Correction.from_json("T-1", c.to_json()) == c
    with pytest.raises(ValueError, match="no label or no text"):
        Correction.from_json("T-1", '{"label": "account"}')
    h = HeadVersion("3", 1.5, 1024, "ab" * 32, by="ci")
    assert HeadVersion.from_json(h.to_json()) == h and json.loads(h.to_json())["bytes"] == 1024


@pytest.mark.parametrize(
    ("label", "by", "problem"),
    [
        ("", None, "empty label"),
        ("a\tb", None, "control character in label"),
        ("é" * 65, None, "label too long: over 128 bytes"),
        ("ok", "x\n", "control character in by"),
        ("\ud800", None, "label: not valid Unicode"),
    ],
)
def test_label_problems_are_found_before_redis_is_asked(label: str, by: str | None, problem: str) -> None:
    assert label_problem("T-1", label, by).startswith(problem)
    assert issubclass(LabelError, ValueError)


def test_training_set_needs_data_and_lets_corrections_replace_file_rows() -> None:
    with pytest.raises(CorrectionsError, match="no training data"):
        training_set([], [])
    rows = [("f1", "text", "refunds"), ("f2", "text", "billing")]
    data = training_set([Correction("f1", "billing", "new text")], rows)
    assert data.texts == ["new text", "text"] and data.counts() == {"billing": 2}
    assert (data.from_redis, data.from_file) == (1, 1)


def test_a_correction_never_replaces_a_row_its_file_named_by_line(tmp_path: Path) -> None:
    """Noticed before: rows of a base file without ids are named ``line N``; a correction for a ticket whose
    id is literally ``line 2`` replaced that unrelated row. It joins beside it now."""
    from producer.files import ITEM_COLUMNS, items_of, parse

    path = tmp_path / "base.csv"
    path.write_text("text,label\nmy card is lost,lost_card\nrefund please,refunds\n", encoding="utf-8")
    items = items_of(parse(path.read_text(), name=str(path), columns=ITEM_COLUMNS), path)
    assert [(it.id, it.named) for it in items] == [("line 2", False), ("line 3", False)]
    rows = [(it.id, it.text, it.label or "") for it in items]
    unnamed = {it.id for it in items if not it.named}
    data = training_set([Correction("line 2", "billing", "charged twice")], rows, unnamed)
    assert data.texts == ["my card is lost", "refund please", "charged twice"]
    assert data.corrected == {2: None} and (data.from_redis, data.from_file) == (1, 2)
    named = training_set([Correction("line 2", "billing", "charged twice")], rows)  # ids from the file
    assert named.texts == ["charged twice", "refund please"]


def test_corrections_are_added_to_the_tasks_base_data_unless_asked_otherwise() -> None:
    from worker.corrections import base_source

    assert base_source(None, "/task/head_train.csv", False) == "/task/head_train.csv"
    assert base_source("mine.csv", "/task/head_train.csv", False) == "mine.csv"  # --tickets wins
    assert base_source(None, None, False) is None  # a task without head_data: the corrections alone
    # --corrections-only: the head learns the corrections alone; the base data is still the gate's evidence
    assert base_source(None, "/task/head_train.csv", True) == "/task/head_train.csv"
    with pytest.raises(CorrectionsError, match="drop --tickets"):
        base_source("mine.csv", None, True)

"""The bench's data: the ticket-file reader and the length-stratified sample the slow baselines run on."""

from __future__ import annotations

import random

import pytest

from worker.bench.data import DataError, length_sample, read_items


def test_length_sample_keeps_the_length_mix() -> None:
    rng = random.Random(0)
    lengths = [int(rng.lognormvariate(3.5, 0.8)) for _ in range(600)]
    picked = length_sample(lengths, 120, seed=1)
    assert len(picked) == len(set(picked)) == 120 and picked == sorted(picked)
    whole, part = sorted(lengths), sorted(lengths[i] for i in picked)
    for q in (0.1, 0.5, 0.9):  # each decile of the subset sits in the same place as in the whole
        assert abs(part[int(q * 120)] - whole[int(q * 600)]) <= 0.15 * whole[int(q * 600)] + 2
    assert max(part) >= whole[-6]  # the long tail is represented
    assert length_sample(lengths[:10], 50) == list(range(10))


def test_read_items_jsonl_and_csv(tmp_path) -> None:
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"id": "a", "text": " hi "}\n\n{"id": "b", "text": "yo", "label": "billing"}\n')
    assert [(i.id, i.text, i.label) for i in read_items(jl)] == [("a", "hi", None), ("b", "yo", "billing")]
    csv = tmp_path / "t.csv"
    csv.write_text('\ufeffid,text,label\nx,"one, two",account\n')
    assert [(i.id, i.text, i.label) for i in read_items(csv)] == [("x", "one, two", "account")]
    csv.write_text("id,text\nx,a\nx,b\n")
    with pytest.raises(DataError, match="duplicate id"):
        read_items(csv)
    jl.write_text('{"id": "a"}\n')
    with pytest.raises(DataError, match="line 1: missing or empty text"):
        read_items(jl)

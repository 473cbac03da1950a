"""The batch planner is a pure function: every item exactly once, within every bound."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine.options import EngineOptions
from worker.engine.planner import PACK, PAD
from worker.engine.planner import plan_batches as _plan_batches

_O = EngineOptions()


def plan_batches(lengths: list[int], **kw: Any) -> list[Any]:
    """The planner with the engine's default budgets, unless a test sets its own."""
    budgets = {"max_items": _O.batch_size, "max_tokens": _O.max_batch_tokens, "max_row_len": _O.max_row_len}
    return _plan_batches(lengths, **{**budgets, **kw})


def _check(lengths: list[int], plans, max_items: int, max_tokens: int) -> None:
    seen = sorted(i for p in plans for row in p.rows for i in row)
    assert seen == list(range(len(lengths))), "every item must be planned exactly once"
    for p in plans:
        assert p.items <= max_items
        assert p.real_tokens == sum(lengths[i] for row in p.rows for i in row)
        for row in p.rows:
            assert sum(lengths[i] for i in row) <= p.row_len
        if p.items > 1:  # a lone oversized item may exceed the budget; nothing else may
            assert p.padded_tokens <= max_tokens


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 600), max_size=300),
    max_items=st.integers(1, 64),
    max_tokens=st.integers(1, 8192),
    mode=st.sampled_from([PAD, PACK]),
)
def test_plans_cover_every_item_within_bounds(lengths, max_items, max_tokens, mode) -> None:
    plans = plan_batches(lengths, max_items=max_items, max_tokens=max_tokens, mode=mode)
    _check(lengths, plans, max_items, max_tokens)


def test_pad_mode_sorts_so_each_batch_pads_to_its_own_longest() -> None:
    lengths = [5, 100, 7, 98, 6, 99]
    plans = plan_batches(lengths, max_items=3, mode=PAD)
    assert [sorted(i for row in p.rows for i in row) for p in plans] == [[1, 3, 5], [0, 2, 4]]
    assert [p.row_len for p in plans] == [100, 7]


def test_one_long_ticket_does_not_make_a_huge_batch() -> None:
    lengths = [4000] + [20] * 50
    plans = plan_batches(lengths, max_items=32, max_tokens=4096, mode=PAD)
    assert plans[0].rows == ((0,),)
    assert all(p.row_len == 20 for p in plans[1:])


def test_packing_removes_nearly_all_padding_on_long_tailed_lengths() -> None:
    rng = random.Random(0)
    lengths = [min(400, max(8, int(rng.lognormvariate(3.9, 0.6)))) for _ in range(600)]
    padded = plan_batches(lengths, max_items=32, mode=PAD)
    packed = plan_batches(lengths, max_items=32, mode=PACK)
    overhead = lambda plans: 1 - sum(p.real_tokens for p in plans) / sum(p.padded_tokens for p in plans)  # noqa: E731
    assert overhead(packed) < 0.02
    assert overhead(packed) < overhead(padded)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        plan_batches([1, 2], max_items=0)
    with pytest.raises(ValueError):
        plan_batches([1, 2], mode="zigzag")

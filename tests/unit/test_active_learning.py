"""The labelling orders of tools/active_learning.py pick what they claim (numpy only, no torch, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from tools.active_learning import STRATEGIES, SelectionError, initial_set, select, uncertainty


def _probs(rows: list[list[float]]) -> np.ndarray:
    p = np.array(rows, dtype=np.float64)
    return p / p.sum(1, keepdims=True)


# row 0: sure; row 1: unsure between two (small margin, top 0.45); row 2: flat over three (lowest top,
# highest entropy); row 3: fairly sure
P = _probs([[0.97, 0.02, 0.01], [0.45, 0.44, 0.11], [0.34, 0.33, 0.33], [0.80, 0.15, 0.05]])


def test_least_confident_picks_the_lowest_top_probabilities_first() -> None:
    got = select(P, "least_confident", 2, np.random.default_rng(0)).tolist()
    assert got == [2, 1]
    assert sorted(P.max(1)[got]) == sorted(P.max(1))[:2]


def test_margin_picks_the_smallest_gap_between_the_top_two() -> None:
    gaps = np.sort(P, 1)[:, -1] - np.sort(P, 1)[:, -2]
    got = select(P, "margin", 4, np.random.default_rng(0))
    assert np.all(np.diff(gaps[got]) >= 0)
    assert got[-1] == 0


def test_entropy_picks_the_flattest_rows_first() -> None:
    got = select(P, "entropy", 4, np.random.default_rng(0)).tolist()
    assert got == [2, 1, 3, 0]
    assert uncertainty(P, "entropy")[2] == pytest.approx(np.log(3), abs=1e-3)


def test_margin_and_least_confident_disagree_where_they_should() -> None:
    # top 0.5 with a close second (0.49) vs top 0.4 with a distant second (0.2): margin wants the first,
    # least-confident the second
    p = np.array([[0.5, 0.49, 0.01, 0.0], [0.4, 0.2, 0.2, 0.2]])
    assert select(p, "margin", 1, np.random.default_rng(0)).tolist() == [0]
    assert select(p, "least_confident", 1, np.random.default_rng(0)).tolist() == [1]


def test_diverse_caps_picks_per_predicted_label_then_fills_with_the_least_confident() -> None:
    # five unsure rows all predicted label 0, one sure row predicted label 1
    p = np.array([[0.40, 0.30, 0.30]] * 5 + [[0.10, 0.85, 0.05]])
    p[:5, 0] += np.arange(5) * 0.01  # row 0 least confident, then 1, 2, ...
    p /= p.sum(1, keepdims=True)
    got = select(p, "diverse", 3, np.random.default_rng(0), per_label_cap=2).tolist()
    assert got == [0, 1, 5]  # two of label 0, then the cap sends the third pick to label 1
    assert select(p, "diverse", 6, np.random.default_rng(0), per_label_cap=2).tolist() == [0, 1, 5, 2, 3, 4]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_order_picks_distinct_rows_of_the_pool(strategy: str) -> None:
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(5), size=50)
    got = select(p, strategy, 20, np.random.default_rng(1))
    assert len(got) == 20 and len(set(got.tolist())) == 20
    assert got.min() >= 0 and got.max() < 50


def test_random_is_reproduced_by_its_seed_and_changes_with_it() -> None:
    p = np.random.default_rng(3).dirichlet(np.ones(4), size=100)
    a = select(p, "random", 10, np.random.default_rng(5)).tolist()
    assert a == select(p, "random", 10, np.random.default_rng(5)).tolist()
    assert a != select(p, "random", 10, np.random.default_rng(6)).tolist()


def test_initial_set_takes_per_label_rows_of_every_label_reproducibly() -> None:
    y = np.repeat(np.arange(4), 10)
    first = initial_set(y, 3, np.random.default_rng(0))
    assert np.bincount(y[first]).tolist() == [3, 3, 3, 3]
    assert first.tolist() == initial_set(y, 3, np.random.default_rng(0)).tolist()
    with pytest.raises(SelectionError, match="fewer than 11"):
        initial_set(y, 11, np.random.default_rng(0))


def test_bad_requests_are_refused() -> None:
    with pytest.raises(SelectionError, match="cannot pick 5 of a pool of 4"):
        select(P, "least_confident", 5, np.random.default_rng(0))
    with pytest.raises(SelectionError, match="no uncertainty score"):
        select(P, "loudest", 1, np.random.default_rng(0))
    with pytest.raises(SelectionError, match="rows, labels"):
        uncertainty(np.ones(3), "entropy")

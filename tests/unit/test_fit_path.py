"""fit's judging fits: float32, each penalty warm-started from the next stronger one's solution, must reach
what a cold float64 fit at that penalty reaches (the head that ships is still fitted cold, in float64)."""

from __future__ import annotations

import pytest
import torch

from worker.engine.fit import (
    L2_GRID,
    _path,
    _standardize,
    _train,
    balanced,
    fit,
    fold_count,
    stratified_folds,
)
from worker.gate import folds_for


def overlapping(n: int = 40, classes: int = 6, d: int = 24, seed: int = 0) -> tuple[torch.Tensor, list[int]]:
    """Classes whose clusters overlap (so the penalty matters), in features of very different scales."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d, generator=gen, dtype=torch.float64) * 1.2
    scale = torch.logspace(-2, 2, d, dtype=torch.float64)
    x = torch.cat([(c + torch.randn(n, d, generator=gen, dtype=torch.float64)) * scale for c in centres])
    return x, [c for c in range(classes) for _ in range(n)]


def objective(x: torch.Tensor, y: torch.Tensor, l2: float, w: torch.Tensor, b: torch.Tensor) -> float:
    """What _fit minimises, for raw-feature weights: the penalty is on the standardized weights."""
    _, std = _standardize(x)
    nll = torch.nn.functional.cross_entropy(x @ w.T + b, y)
    return float(nll + l2 * ((w * std) ** 2).sum())


def test_each_warm_started_float32_fit_reaches_the_cold_float64_optimum() -> None:
    x, labels = overlapping()
    y = torch.tensor(labels)
    held_x, _ = overlapping(seed=1)
    path = _path(x, y, 6, L2_GRID, None, torch.float32)
    assert sorted(path) == sorted(L2_GRID)
    for l2 in L2_GRID:
        w, b = path[l2]
        w64, b64 = _train(x, y, 6, l2)
        assert w.dtype == torch.float64
        cold, warm = objective(x, y, l2, w64, b64), objective(x, y, l2, w, b)
        assert abs(warm - cold) <= 1e-4 * cold + 1e-6, (l2, warm, cold)
        agree = ((held_x @ w.T + b).argmax(1) == (held_x @ w64.T + b64).argmax(1)).double().mean()
        assert float(agree) >= 0.99, (l2, float(agree))


def test_cross_validation_chooses_as_cold_float64_fits_would() -> None:
    x, labels = overlapping(n=30)
    y = torch.tensor(labels)
    got = fit(x, labels, 6, seed=3)
    fold = torch.tensor(stratified_folds(labels, 5, 3))
    for l2 in L2_GRID:
        right = 0
        for f in range(5):
            w, b = _train(x[fold != f], y[fold != f], 6, l2)
            right += int(((x[fold == f] @ w.T + b).argmax(1) == y[fold == f]).sum())
        assert abs(got.cv_by_l2[l2] - right / len(labels)) <= 2 / len(labels), l2
    assert got.cv_logits is not None and got.cv_logits.shape == (len(labels), 6)
    assert got.weight.shape == (6, x.shape[1])


def test_progress_counts_every_fit() -> None:
    x, labels = overlapping(n=20)
    seen: list[tuple[int, int]] = []
    fit(x, labels, 6, progress=lambda done, total: seen.append((done, total)))
    total = len(L2_GRID) * 5 + 1
    assert [d for d, _ in seen] == list(range(1, total + 1))
    assert {t for _, t in seen} == {total}


def test_a_fit_started_from_a_nearby_problems_solution_reaches_the_same_optimum_in_fewer_steps() -> None:
    """Self-training's rounds (beyond.refit) start from the last round's head: weights for raw features,
    re-expressed in the new rows' standardization (a constant feature included). The optimum is the cold
    fit's; only the steps to it are fewer."""
    x, labels = overlapping()
    x[:, 5] = 3.0  # constant: its spread is infinite, its weight zero
    extra, more = overlapping(n=10, seed=2)
    extra[:, 5] = 3.0
    rows, y = torch.cat([x, extra]), torch.tensor(labels + more)
    near = _train(x, torch.tensor(labels), 6, 1e-2)
    steps = {"n": 0}
    real = torch.nn.functional.cross_entropy

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        steps["n"] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    torch.nn.functional.cross_entropy = counted
    try:
        cold = _train(rows, y, 6, 1e-2)
        cold_steps, steps["n"] = steps["n"], 0
        warm = _train(rows, y, 6, 1e-2, start=near)
    finally:
        torch.nn.functional.cross_entropy = real
    assert steps["n"] < cold_steps
    assert bool(torch.isfinite(warm[0]).all()) and float(warm[0][:, 5].abs().max()) == 0.0
    live = [j for j in range(rows.shape[1]) if j != 5]  # the objective, without the weightless feature

    def reached(w: torch.Tensor, b: torch.Tensor) -> float:
        return objective(rows[:, live], y, 1e-2, w[:, live], b)

    assert abs(reached(*warm) - reached(*cold)) < 1e-6
    torch.testing.assert_close(warm[0], cold[0], atol=1e-3, rtol=1e-3)


def test_a_rare_label_does_not_turn_cross_validation_off_for_every_other_label() -> None:
    """Folds are as many as the most frequent label fills: a label with one or two tickets sits in one or
    two folds (judged there by heads that saw fewer of its tickets), and the others keep five."""
    assert fold_count([0] * 10 + [1] * 10 + [2]) == 5
    assert fold_count([0] * 3 + [1]) == 3 and fold_count([0, 0, 1]) == 2
    assert fold_count([0, 1, 2]) == 0 and fold_count([]) == 0  # no label has two tickets: nothing to judge
    x, labels = overlapping(n=20, classes=4)
    x, labels = torch.cat([x, x[:1] + 0.5]), [*labels, 4]  # a fifth label with a single ticket
    f = fit(x, labels, 5)
    assert f.folds == 5 and f.cv_accuracy is not None and f.cv_predicted is not None
    assert len(f.cv_by_l2) == len(L2_GRID)  # the penalty is chosen, not the fallback
    folds = stratified_folds(labels, f.folds, 0)
    for c in range(4):
        assert sorted(folds[i] for i, v in enumerate(labels) if v == c) == sorted([0, 1, 2, 3, 4] * 4)
    # held out, the single ticket is judged by a head that never saw its label: it cannot be right
    assert f.cv_predicted[-1] != 4
    assert f.cv_accuracy >= 0.5 and int((x.float() @ f.weight.T + f.bias).argmax(1)[-1]) == 4  # learnt


def test_the_gate_deals_the_folds_the_candidates_cross_validation_dealt() -> None:
    y = [0] * 12 + [1] * 12 + [2]  # a label with a single ticket no longer makes heads incomparable
    assert folds_for(y, 7) == stratified_folds(y, fold_count(y), 7) and len(set(folds_for(y, 7))) == 5
    with pytest.raises(ValueError, match="no label has two tickets"):
        folds_for([0, 1, 2], 0)


def test_balanced_weights_give_every_label_the_same_total_and_keep_each_rows_share_within_its_label() -> None:
    y = [0] * 20 + [1] * 20 + [2] * 2
    w = balanced(y)
    totals = [sum(v for v, c in zip(w, y, strict=True) if c == k) for k in range(3)]
    assert totals == pytest.approx([14.0] * 3) and sum(w) == pytest.approx(len(y))
    assert w[0] == pytest.approx(0.7) and w[-1] == pytest.approx(7.0)
    corrected = [2.0 if i in (0, 40) else 1.0 for i in range(len(y))]  # a correction counts two rows
    cw = balanced(y, corrected)
    assert cw[0] == pytest.approx(2 * cw[1]) and cw[40] == pytest.approx(2 * cw[41])
    assert sum(cw) == pytest.approx(sum(corrected))
    assert balanced([0, 0, 1, 1, 2, 2]) == [1.0] * 6  # even labels: nothing changes
    with pytest.raises(ValueError, match="3 row weights for 2 rows"):
        balanced([0, 1], [1.0, 1.0, 1.0])


def test_balanced_weights_make_a_rare_label_chosen_where_counting_tickets_buries_it() -> None:
    """Overlapping classes, one of them with a tenth of the others' tickets: fitted on counts the head
    learns it is unlikely and seldom picks it; balanced, it recalls it more, judged on even test rows."""
    x, y = overlapping(n=60, classes=4, d=8, seed=3)
    keep = [i for i, c in enumerate(y) if c != 3 or i % 60 < 6]  # label 3: 6 tickets, the others 60
    xt, yt = overlapping(n=200, classes=4, d=8, seed=3)  # the same centres (drawn first), new rows
    target = torch.tensor(yt)

    def recall(weights: list[float] | None) -> float:
        f = fit(x[keep], [y[i] for i in keep], 4, row_weight=weights)
        predicted = (xt @ f.weight.double().T + f.bias.double()).argmax(1)
        return float((predicted[target == 3] == 3).double().mean())

    plain, even = recall(None), recall(balanced([y[i] for i in keep]))
    assert even > plain + 0.1, (plain, even)

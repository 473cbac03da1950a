"""Row weights in the head's fit: none changes nothing, an integer weight is that many copies of the row."""

from __future__ import annotations

import pytest
import torch

from worker.engine.beyond import cross_refit
from worker.engine.fit import fit, stratified_folds

pytestmark = pytest.mark.model


def overlapping(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, list[int]]:
    """Three overlapping clusters in 5 dimensions: a fit that is not perfect, so weights can move it."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[1.5, 0, 0, 0, 0], [0, 1.5, 0, 0, 0], [0, 0, 1.5, 0, 0]], dtype=torch.float32)
    x = torch.cat([c + torch.randn(n, 5, generator=gen) for c in centres])
    return x, [c for c in range(3) for _ in range(n)]


def test_all_ones_and_none_fit_the_same_head() -> None:
    x, y = overlapping()
    plain = fit(x, y, 3, seed=1)
    ones = fit(x, y, 3, seed=1, row_weight=[1.0] * len(y))
    assert ones.l2 == plain.l2 and ones.cv_by_l2 == plain.cv_by_l2
    assert torch.allclose(ones.weight, plain.weight, atol=1e-5)
    assert torch.allclose(ones.bias, plain.bias, atol=1e-5)


def test_an_integer_weight_is_the_row_repeated() -> None:
    x, y = overlapping()
    weight = [3.0 if i % 7 == 0 else 1.0 for i in range(len(y))]
    rows = [i for i in range(len(y)) for _ in range(int(weight[i]))]
    repeated = fit(x[rows], [y[i] for i in rows], 3, grid=(1e-2,), folds=1)
    weighted = fit(x, y, 3, grid=(1e-2,), folds=1, row_weight=weight)
    assert torch.allclose(weighted.weight, repeated.weight, atol=1e-4)
    assert torch.allclose(weighted.bias, repeated.bias, atol=1e-4)


def test_heavy_rows_pull_the_head_towards_their_labels() -> None:
    x, y = overlapping()
    # relabel ten class-0 rows as class 1: weighted heavily, the head follows them on those rows
    y2 = list(y)
    moved = list(range(10))
    for i in moved:
        y2[i] = 1
    weight = [50.0 if i in moved else 1.0 for i in range(len(y2))]
    light = fit(x, y2, 3, grid=(1e-2,), folds=1)
    heavy = fit(x, y2, 3, grid=(1e-2,), folds=1, row_weight=weight)

    def right(f: object) -> int:
        logits = x[moved] @ f.weight.T + f.bias  # type: ignore[attr-defined]
        return int((logits.argmax(1) == 1).sum())

    assert right(heavy) > right(light)
    assert right(heavy) >= 8


def test_cross_validated_accuracy_counts_rows_not_weights() -> None:
    x, y = overlapping()
    weight = [5.0 if i % 3 == 0 else 1.0 for i in range(len(y))]
    f = fit(x, y, 3, seed=2, row_weight=weight)
    assert f.cv_predicted is not None and f.cv_accuracy is not None
    on_rows = sum(p == t for p, t in zip(f.cv_predicted, y, strict=True)) / len(y)
    assert f.cv_accuracy == pytest.approx(on_rows)
    fold = stratified_folds(y, 5, seed=2)
    same = cross_refit(x, y, 3, f.l2, fold=fold, row_weight=weight).argmax(1).tolist()
    assert same == f.cv_predicted  # the gate's refits and the fit's own CV agree, weights included


def test_bad_weights_are_refused() -> None:
    x, y = overlapping(5)
    for bad in ([1.0] * 3, [0.0] * len(y), [float("nan")] * len(y)):
        with pytest.raises(ValueError, match="row weights"):
            fit(x, y, 3, row_weight=bad)

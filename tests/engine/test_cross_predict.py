"""fit.cross_predict: out-of-fold predictions on given folds, from a chosen subset of training rows."""

from __future__ import annotations

import pytest
import torch

from worker.engine.fit import cross_predict, stratified_folds

pytestmark = pytest.mark.model


def clusters(n: int = 30) -> tuple[torch.Tensor, list[int]]:
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    x = torch.cat([c + torch.randn(n, 3, generator=gen) for c in centres])
    return x, [c for c in range(3) for _ in range(n)]


def test_out_of_fold_predictions_of_separable_classes_are_right() -> None:
    x, y = clusters()
    fold = stratified_folds(y, 5, seed=0)
    predicted = cross_predict(x, y, 3, l2=1e-3, fold=fold)
    assert len(predicted) == len(y)
    assert sum(p == t for p, t in zip(predicted, y, strict=True)) >= 0.95 * len(y)


def test_rows_left_out_of_training_are_never_learnt() -> None:
    x, y = clusters()
    fold = stratified_folds(y, 5, seed=0)
    train = [t != 2 for t in y]  # a head that never saw class 2: it cannot predict it
    predicted = cross_predict(x, y, 3, l2=1e-3, fold=fold, train=train)
    assert 2 not in predicted
    assert sum(p == t for p, t in zip(predicted, y, strict=True) if t != 2) >= 0.95 * 60
    with pytest.raises(ValueError, match="no training rows"):
        cross_predict(x, y, 3, l2=1e-3, fold=[0] * 45 + [1] * 45, train=[i < 45 for i in range(90)])

"""Multinomial logistic regression in torch, full batch (L-BFGS): deterministic for given inputs.

Features are standardized on the training set, the L2 penalty is chosen by stratified k-fold
cross-validation, and the standardization is folded into the returned weights, so applying the model
is one ``features @ weight.T + bias``. The model is small (labels x hidden size) and convex to fit:
a few hundred L-BFGS steps over a couple of thousand tickets take well under a second per fit.

The head that ships is fitted in float64. The fits that only judge (cross-validation's folds, and the
out-of-fold checks of :mod:`.beyond` and the publish gate) run in :data:`JUDGE_DTYPE`, float32, and
within a fold each penalty starts from the solution of the next stronger one: on Banking77's full
training split (8,000 rows x 2,304 features x 77 labels, 2-core AMD EPYC) one fold's seven penalties took
34 s instead of 132 s, with the same held-out accuracy at every penalty (to 0.01%). Self-training's rounds
(:func:`.beyond.refit`) likewise start each fit from the last round's head (``fit_at(start=...)``), shipped
heads included: the problem is convex, so the start changes the steps, not the optimum.

Rows may carry weights (``row_weight``): a row of weight ``w`` counts as ``w`` copies of it, in the loss
(weighted mean cross-entropy) and in the standardization, so integer weights fit exactly what repeating the
rows would. Accuracy is always counted on rows, unweighted: that is what a ticket stream sees. Without
weights (None) every number is what it was before weights existed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

L2_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
FOLDS = 5
NOISE = 1e-4  # a feature's spread at most this much of its size (+1) is rounding noise: no weight
JUDGE_DTYPE = torch.float32  # fits whose weights are only judged, never shipped (see above)


@dataclass(frozen=True)
class Fit:
    weight: torch.Tensor  # (classes, d) float32, applies to raw features
    bias: torch.Tensor  # (classes,) float32
    l2: float
    cv_accuracy: float | None  # out-of-fold accuracy at the chosen l2 (None: no label has two tickets)
    cv_confusion: list[list[int]] | None  # [true][predicted] out-of-fold, at the chosen l2
    folds: int
    cv_by_l2: dict[float, float]
    cv_predicted: list[int] | None = None  # each row's out-of-fold prediction, at the chosen l2
    cv_logits: torch.Tensor | None = None  # (rows, classes) out-of-fold logits at the chosen l2


def _fit(
    x: torch.Tensor,
    y: torch.Tensor,
    classes: int,
    l2: float,
    row_weight: torch.Tensor | None = None,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights for standardized ``x`` (computed in its dtype): mean cross-entropy (``row_weight``-weighted)
    + l2 * |W|^2, starting from ``start`` (weight, bias; None: zeros)."""
    share = None if row_weight is None else (row_weight / row_weight.sum()).to(x.dtype)
    if start is None:
        w = torch.zeros(classes, x.shape[1], dtype=x.dtype, requires_grad=True)
        b = torch.zeros(classes, dtype=x.dtype, requires_grad=True)
    else:
        w = start[0].to(x.dtype).clone().requires_grad_(True)
        b = start[1].to(x.dtype).clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=200,
        tolerance_grad=1e-6,
        tolerance_change=1e-9,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = x @ w.T + b
        if share is None:
            nll = torch.nn.functional.cross_entropy(logits, y)
        else:
            nll = (torch.nn.functional.cross_entropy(logits, y, reduction="none") * share).sum()
        loss = nll + l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return w.detach(), b.detach()


def _standardize(
    x: torch.Tensor, row_weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and spread (weighted by ``row_weight`` when given). A feature whose spread is
    rounding noise on its size (a ``max`` pooling that every ticket takes at a token they all share) is
    constant: scaled to unit spread, its noise would get a weight of up to 1/std, and the head's scores
    would turn on float32 rounding (the packed pass and the reference differ there). Its spread is
    infinite, so it gets no weight."""
    if row_weight is None:
        mean = x.mean(0)
        std = x.std(0, unbiased=False)
    else:
        share = (row_weight / row_weight.sum())[:, None]
        mean = (share * x).sum(0)
        std = (share * (x - mean) ** 2).sum(0).sqrt()
    return mean, std.masked_fill(std <= NOISE * (mean.abs() + 1), float("inf"))


def _train(
    x: torch.Tensor,
    y: torch.Tensor,
    classes: int,
    l2: float,
    row_weight: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit on raw float64 features (in ``dtype``), from ``start`` (weights for raw features; None:
    zeros); return float64 weights that apply to raw features."""
    return _path(x, y, classes, [l2], row_weight, dtype, start=start)[l2]


def _path(
    x: torch.Tensor,
    y: torch.Tensor,
    classes: int,
    penalties: Sequence[float],
    row_weight: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    each: Callable[[], None] | None = None,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[float, tuple[torch.Tensor, torch.Tensor]]:
    """One fit per penalty on the same rows (standardized once), strongest first, each starting from the
    previous one's solution, the first from ``start`` (weights for raw features, as these return; None:
    zeros) (``each()`` after each); float64 weights that apply to raw features, by penalty."""
    mean, std = _standardize(x, row_weight)
    xs = ((x - mean) / std).to(dtype)
    out: dict[float, tuple[torch.Tensor, torch.Tensor]] = {}
    if start is not None:  # the same scores on these rows, in their standardized coordinates
        w_raw, b_raw = start[0].to(torch.float64), start[1].to(torch.float64)
        start = torch.where(torch.isfinite(std), w_raw * std, 0.0), b_raw + w_raw @ mean
    for l2 in sorted(set(penalties), reverse=True):
        start = _fit(xs, y, classes, l2, row_weight, start)
        w_raw = start[0].to(torch.float64) / std
        out[l2] = w_raw, start[1].to(torch.float64) - w_raw @ mean
        if each:
            each()
    return out


def fit_at(
    features: torch.Tensor,
    y: Sequence[int],
    classes: int,
    l2: float,
    row_weight: Sequence[float] | None = None,
    dtype: torch.dtype = torch.float64,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One fit at a given penalty, no cross-validation: (weight, bias) as float32, for raw features;
    computed in ``dtype`` (:data:`JUDGE_DTYPE` for a fit that is only judged), starting from ``start``
    (a fit of these features, as this returns: a nearby problem's solution; None: zeros)."""
    x = features.to(torch.float64).cpu()
    target = torch.tensor(list(y), dtype=torch.long)
    w, b = _train(x, target, classes, l2, row_weights(row_weight, len(target)), dtype, start)
    return w.float(), b.float()


def confusion(y: Sequence[int], predicted: Sequence[int], classes: int) -> list[list[int]]:
    """[true][predicted] counts."""
    m = torch.zeros(classes, classes, dtype=torch.long)
    target = torch.tensor(list(y), dtype=torch.long)
    m.index_put_(
        (target, torch.tensor(list(predicted), dtype=torch.long)), torch.ones_like(target), accumulate=True
    )
    return m.tolist()


def stratified_folds(y: Sequence[int], k: int, seed: int) -> list[int]:
    """Fold number per row: each class shuffled (seeded) and dealt round-robin across ``k`` folds."""
    gen = torch.Generator().manual_seed(seed)
    fold = [0] * len(y)
    start = 0
    for c in sorted(set(y)):
        rows = [i for i, v in enumerate(y) if v == c]
        for j, p in enumerate(torch.randperm(len(rows), generator=gen).tolist()):
            fold[rows[p]] = (start + j) % k
        start += len(rows)  # continue dealing where the last class stopped: folds stay even in size
    return fold


def fold_count(y: Sequence[int], folds: int = FOLDS) -> int:
    """How many stratified folds cross-validation deals ``y`` into: ``folds``, fewer only when even the
    most frequent label has fewer tickets, 0 when no label has two (nothing to cross-validate). A label
    with fewer tickets than folds sits in only some of them; held out, its tickets are judged by heads that
    saw fewer or none of them, which is all a label that rare can show out of fold. Before, the rarest
    label set the count: one label with a single ticket turned cross-validation off for the whole head (no
    chosen penalty, no calibration, extras unchecked, the publish gate refusing), two made it two folds
    of half the data each (docs/head.md, "Labels with one or two tickets")."""
    most = max(Counter(y).values(), default=0)
    k = min(folds, most)
    return k if k >= 2 else 0


def row_weights(weight: Sequence[float] | None, n: int) -> torch.Tensor | None:
    """``weight`` as a float64 tensor, checked: one positive finite number per row (None stays None)."""
    if weight is None:
        return None
    out = torch.tensor(list(weight), dtype=torch.float64)
    if out.shape != (n,):
        raise ValueError(f"{len(out)} row weights for {n} rows")
    if not bool(torch.isfinite(out).all()) or bool((out <= 0).any()):
        raise ValueError("row weights must be positive and finite")
    return out


ABSENT = -1e4  # bias of a label without training tickets: it is never chosen


def placed(
    weight: torch.Tensor, bias: torch.Tensor, rows: Sequence[int], labels: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A fit's output rows (one per class learnt) placed at ``rows`` of ``labels`` outputs (the task's
    labels): the others get no weight and the bias :data:`ABSENT`, so they are never chosen."""
    out_w = torch.zeros(labels, weight.shape[1])
    out_b = torch.full((labels,), ABSENT)
    index = torch.tensor(list(rows), dtype=torch.long)
    out_w[index], out_b[index] = weight, bias
    return out_w, out_b


def balanced(y: Sequence[int], weight: Sequence[float] | None = None) -> list[float]:
    """Row weights under which every label present carries the same total weight, the mean label's: each
    row's weight (``weight``; None: 1) times that mean over its label's total. Within a label the rows
    keep their relative weights (a correction still counts ``--correction-weight`` base rows), and the
    rows' total is unchanged, so a penalty means what it meant. A label with 2 tickets among labels with
    20 then counts as much as each of them: the head stops treating a rare label as unlikely, and chooses
    it (docs/head.md, "Long-tailed label sets"). Labels of equal totals keep their weights."""
    rows = [1.0] * len(y) if weight is None else [float(w) for w in weight]
    if len(rows) != len(y):
        raise ValueError(f"{len(rows)} row weights for {len(y)} rows")
    total: dict[int, float] = {}
    for label, w in zip(y, rows, strict=True):
        total[label] = total.get(label, 0.0) + w
    mean = sum(total.values()) / max(len(total), 1)
    return [w * mean / total[label] for label, w in zip(y, rows, strict=True)]


def fit(
    features: torch.Tensor,
    y: Sequence[int],
    classes: int,
    *,
    seed: int = 0,
    grid: Sequence[float] = L2_GRID,
    folds: int = FOLDS,
    progress: Callable[[int, int], None] | None = None,
    row_weight: Sequence[float] | None = None,
) -> Fit:
    """Choose L2 by stratified ``folds``-fold CV (out-of-fold accuracy on rows, unweighted; ties go to the
    stronger penalty), then fit on everything. ``row_weight``: one weight per row, used by every fit
    (None: all 1). ``progress(done, total)`` is called after each fit."""
    x = features.to(torch.float64).cpu()
    target = torch.tensor(list(y), dtype=torch.long)
    rw = row_weights(row_weight, len(target))
    k = fold_count(target.tolist(), folds)
    total, done = len(grid) * k + 1, 0  # k: 0 (no cross-validation) or at least 2 folds
    cv: dict[float, float] = {}
    confusions: dict[float, list[list[int]]] = {}
    out_of_fold: dict[float, list[int]] = {}
    oof_logits: dict[float, torch.Tensor] = {}
    if k:
        fold = torch.tensor(stratified_folds(target.tolist(), k, seed))
        logits_at = {l2: torch.empty(len(target), classes, dtype=torch.float64) for l2 in grid}

        def step() -> None:
            nonlocal done
            done += 1
            if progress:
                progress(done, total)

        for f in range(k):
            train, test = fold != f, fold == f
            fitted = _path(
                x[train], target[train], classes, grid, None if rw is None else rw[train], JUDGE_DTYPE, step
            )
            for l2, (w, b) in fitted.items():
                logits_at[l2][test] = x[test] @ w.T + b
        for l2 in grid:
            logits = logits_at[l2]
            predicted = logits.argmax(1)
            cv[l2] = float((predicted == target).double().mean())
            oof_logits[l2] = logits.float()
            out_of_fold[l2] = predicted.tolist()
            confusions[l2] = confusion(target.tolist(), predicted.tolist(), classes)
        best = max(grid, key=lambda l2: (cv[l2], l2))
    else:
        best = 1e-2  # no label has two tickets: nothing to cross-validate; a middle-of-the-grid penalty
    w, b = _train(x, target, classes, best, rw)
    if progress:
        progress(total, total)
    return Fit(
        weight=w.float(),
        bias=b.float(),
        l2=best,
        cv_accuracy=cv.get(best),
        cv_confusion=confusions.get(best),
        folds=k,
        cv_by_l2=cv,
        cv_predicted=out_of_fold.get(best),
        cv_logits=oof_logits.get(best),
    )

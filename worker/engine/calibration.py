"""How far to trust a score: temperature scaling, calibration error and risk-coverage. Pure maths, no model.

- :func:`fit_temperature`: the one scalar ``T`` that makes ``softmax(logits / T)`` the best probabilities
  (least negative log-likelihood) for labelled logits; fitted on out-of-fold logits, so the head's
  confidence is judged on tickets it did not train on. Dividing by ``T`` never changes a decision.
- :func:`ece`: expected calibration error, equal-width confidence bins (15 by default): the
  ticket-weighted mean gap between each bin's accuracy and its mean confidence.
- :func:`risk_coverage`: accuracy when only the most confident fraction is kept, and the coverage (and
  confidence threshold) at which the kept tickets reach a target accuracy.
- :func:`threshold_for_accuracy`: the lowest confidence threshold whose auto-routed tickets (confidence
  at or above it) are at least the target accuracy: what ``auto_accuracy`` stores as ``review_below``.
- :func:`check_temperature`: a temperature fitted on labelled logits, with the ECE before, after (in
  sample) and cross-fitted (each fold scored at a temperature fitted on the others): what ``eval`` prints
  for zero-shot scores, whose temperature is a task key rather than part of a trained head.

Everything takes plain sequences (confidence of the chosen label, whether it was right) so ``eval``,
``train`` and a test recomputing them from results' own probabilities share one definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BINS = 15
KEEP = (1.0, 0.9, 0.8, 0.7)  # fractions kept, most confident first
TARGETS = (0.95, 0.98, 0.99)  # accuracies the coverage table asks for
T_RANGE = (0.05, 20.0)  # where fit_temperature searches; at the top, the scores carry little information


def fit_temperature(logits: torch.Tensor, y: Sequence[int] | torch.Tensor) -> float:
    """The temperature minimising the mean negative log-likelihood of ``softmax(logits / T)``.

    A one-dimensional convex problem in ``log T``: solved by golden-section search over T in
    :data:`T_RANGE`, deterministic. Returns 1.0 for no rows."""
    import torch  # only here: the rest of the module is plain Python

    x = logits.detach().to(torch.float64)
    target = torch.as_tensor(y, dtype=torch.long)
    if x.ndim != 2 or x.shape[0] != target.shape[0]:
        raise ValueError(f"logits of shape {tuple(x.shape)} do not fit {target.shape[0]} labels")
    if x.shape[0] == 0:
        return 1.0

    def nll(log_t: float) -> float:
        return float(torch.nn.functional.cross_entropy(x / math.exp(log_t), target))

    lo, hi = math.log(T_RANGE[0]), math.log(T_RANGE[1])
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(a), nll(b)
    for _ in range(60):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(b)
    return round(math.exp((lo + hi) / 2), 4)


def _check(confidence: Sequence[float], correct: Sequence[bool]) -> None:
    if len(confidence) != len(correct):
        raise ValueError(f"{len(confidence)} confidences but {len(correct)} outcomes")
    bad = [c for c in confidence if not 0.0 <= c <= 1.0 or c != c]
    if bad:
        raise ValueError(f"confidence must lie in [0, 1]; got {bad[0]!r}")


def ece(confidence: Sequence[float], correct: Sequence[bool], bins: int = BINS) -> float:
    """Expected calibration error over ``bins`` equal-width bins of (0, 1]; 0.0 for no tickets.

    A ticket of confidence c falls in bin ceil(c * bins) - 1 (confidence 0 in the first bin), so a bin
    holds (k/bins, (k+1)/bins]."""
    _check(confidence, correct)
    n = len(confidence)
    if n == 0:
        return 0.0
    total = [0] * bins
    conf_sum = [0.0] * bins
    right = [0] * bins
    for c, ok in zip(confidence, correct, strict=True):
        k = min(bins - 1, max(0, math.ceil(c * bins) - 1))
        total[k] += 1
        conf_sum[k] += c
        right[k] += bool(ok)
    return sum(abs(right[k] - conf_sum[k]) for k in range(bins) if total[k]) / n


def _ranked(confidence: Sequence[float], correct: Sequence[bool]) -> list[tuple[float, bool]]:
    """Most confident first; ties keep input order (a stable sort), so the table is deterministic."""
    return sorted(zip(confidence, (bool(c) for c in correct), strict=True), key=lambda p: -p[0])


@dataclass(frozen=True)
class Coverage:
    target: float  # the accuracy asked for
    coverage: float | None  # largest fraction auto-routed at that accuracy (None: not reachable)
    threshold: float | None  # the confidence at or above which those tickets are kept


@dataclass(frozen=True)
class RiskCoverage:
    n: int
    accuracy_at: dict[float, float | None]  # fraction kept -> accuracy of the kept (None: nothing kept)
    coverage_for: list[Coverage]


def risk_coverage(
    confidence: Sequence[float],
    correct: Sequence[bool],
    keep: Sequence[float] = KEEP,
    targets: Sequence[float] = TARGETS,
) -> RiskCoverage:
    """Accuracy of the ``round(f * n)`` most confident tickets for each ``f`` in ``keep``, and for each
    target accuracy the largest coverage a threshold reaches it at (:func:`threshold_for_accuracy`)."""
    _check(confidence, correct)
    ranked = _ranked(confidence, correct)
    n = len(ranked)
    prefix = [0]
    for _, ok in ranked:
        prefix.append(prefix[-1] + ok)
    accuracy_at: dict[float, float | None] = {}
    for f in keep:
        k = round(f * n)
        accuracy_at[f] = prefix[k] / k if k else None
    coverage_for = []
    for t in targets:
        threshold, coverage = threshold_for_accuracy(confidence, correct, t)
        coverage_for.append(Coverage(t, coverage, threshold))
    return RiskCoverage(n, accuracy_at, coverage_for)


def threshold_for_accuracy(
    confidence: Sequence[float], correct: Sequence[bool], target: float
) -> tuple[float | None, float | None]:
    """(threshold, coverage): the lowest confidence threshold such that the tickets at or above it are
    right at least ``target`` of the time, and the fraction of tickets it keeps. Thresholds are the
    tickets' own confidences, so tickets tied at the threshold are kept or sent to review together.
    (None, None) when no threshold reaches the target."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target accuracy must lie in (0, 1]; got {target!r}")
    _check(confidence, correct)
    ranked = _ranked(confidence, correct)
    n = len(ranked)
    best: tuple[float | None, float | None] = (None, None)
    right = 0
    for i, (c, ok) in enumerate(ranked):
        right += ok
        at_group_end = i + 1 == n or ranked[i + 1][0] != c
        if at_group_end and right / (i + 1) >= target:
            best = (c, (i + 1) / n)
    return best


def format_report(confidence: Sequence[float], correct: Sequence[bool], what: str) -> list[str]:
    """Lines for a terminal: ECE and the risk-coverage table, as ``eval`` and ``train`` print them."""
    rc = risk_coverage(confidence, correct)
    lines = [f"calibration ({what}, {rc.n} tickets): ECE {ece(confidence, correct):.2%} ({BINS} bins)"]
    kept = ", ".join(f"{f:.0%} {'-' if a is None else f'{a:.1%}'}" for f, a in rc.accuracy_at.items())
    lines.append(f"accuracy of the most confident: {kept}")
    reach = ", ".join(
        f"{c.target:.0%} at coverage "
        + ("unreachable" if c.coverage is None else f"{c.coverage:.1%} (confidence >= {c.threshold:.3f})")
        for c in rc.coverage_for
    )
    lines.append(f"coverage for accuracy: {reach}")
    return lines


@dataclass(frozen=True)
class TemperatureCheck:
    temperature: float  # fitted on every ticket
    current: float  # the temperature the scores had
    ece_current: float  # ECE at ``current``
    ece_fitted: float  # ECE at ``temperature``, on the tickets it was fitted on
    ece_cross: float  # ECE when each fold's tickets are scored at a temperature fitted on the other folds
    folds: int


def confidences(logits: torch.Tensor, temperature: float) -> list[float]:
    """Each row's top probability under ``softmax(logits / temperature)``."""
    import torch

    return torch.softmax(logits.detach().to(torch.float64) / temperature, -1).max(1).values.tolist()


def check_temperature(
    logits: torch.Tensor, y: Sequence[int], current: float = 1.0, folds: int = 5
) -> TemperatureCheck:
    """Fit the temperature of labelled ``logits`` and say how much it helps, honestly: a single scalar
    hardly over-fits, but the cross-fitted ECE (folds by row index modulo ``folds``, so a file sorted by
    label is still spread over every fold) shows what a fresh ticket would see."""
    import torch

    x = logits.detach().to(torch.float64)
    target = torch.as_tensor(list(y), dtype=torch.long)
    correct = (x.argmax(1) == target).tolist()
    fitted = fit_temperature(x, target)
    k = max(1, min(folds, x.shape[0]))
    crossed = [0.0] * x.shape[0]
    for f in range(k):
        held = [i for i in range(x.shape[0]) if i % k == f]
        rest = [i for i in range(x.shape[0]) if i % k != f]
        t = fit_temperature(x[rest], target[rest]) if rest else fitted
        for i, c in zip(held, confidences(x[held], t), strict=True):
            crossed[i] = c
    return TemperatureCheck(
        temperature=fitted,
        current=current,
        ece_current=ece(confidences(x, current), correct),
        ece_fitted=ece(confidences(x, fitted), correct),
        ece_cross=ece(crossed, correct),
        folds=k,
    )

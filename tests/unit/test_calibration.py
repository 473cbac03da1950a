"""ECE, risk-coverage, the auto_accuracy threshold and temperature fitting, on numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from worker.engine.calibration import ece, fit_temperature, risk_coverage, threshold_for_accuracy


def test_ece_by_hand() -> None:
    # bin (0.8667, 0.9333]: 0.9, 0.9 with one right -> |1 - 1.8| = 0.8; bin (0.2667, 0.3333]: 0.3 right -> 0.7
    assert ece([0.9, 0.9, 0.3], [True, False, True]) == pytest.approx((0.8 + 0.7) / 3)
    assert ece([1.0, 1.0], [True, True]) == 0.0  # confidence 1 falls in the last bin, not off the end
    assert ece([0.0], [False]) == 0.0 and ece([], []) == 0.0
    # one bin boundary: 1/15 belongs to the first bin (k/15, (k+1)/15], 1/15 + tiny to the second
    assert ece([1 / 15, 1 / 15 + 1e-9], [False, False]) == pytest.approx((1 / 15 + 1 / 15 + 1e-9) / 2)


def test_perfectly_calibrated_confidence_has_small_ece() -> None:
    gen = torch.Generator().manual_seed(0)
    conf = torch.rand(20000, generator=gen) * 0.5 + 0.5
    right = (torch.rand(20000, generator=gen) < conf).tolist()
    assert ece(conf.tolist(), right) < 0.01
    assert ece([0.99] * 100, [False] * 100) == pytest.approx(0.99)


def test_risk_coverage_by_hand() -> None:
    conf = [0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
    right = [True, True, True, True, True, True, True, False, True, False]
    rc = risk_coverage(conf, right, keep=(1.0, 0.7, 0.5), targets=(0.8, 0.9, 1.0))
    assert rc.n == 10
    assert rc.accuracy_at == {1.0: 0.8, 0.7: 1.0, 0.5: 1.0}
    by_target = {c.target: (c.threshold, c.coverage) for c in rc.coverage_for}
    assert by_target[1.0] == (0.4, 0.7)  # the top 7 are all right
    assert by_target[0.9] == (0.4, 0.7)  # top 8: 7/8, top 9: 8/9, both under 0.9
    assert by_target[0.8] == (0.1, 1.0)


def test_threshold_keeps_ties_together_and_can_be_unreachable() -> None:
    # two tickets tied at 0.9, one wrong: the threshold cannot split them
    assert threshold_for_accuracy([0.9, 0.9, 0.5], [True, False, True], 0.99) == (None, None)
    assert threshold_for_accuracy([0.9, 0.9, 0.5], [True, False, True], 0.5) == (0.5, 1.0)
    assert threshold_for_accuracy([0.9, 0.8], [False, False], 0.5) == (None, None)
    with pytest.raises(ValueError, match="target"):
        threshold_for_accuracy([0.9], [True], 0.0)
    with pytest.raises(ValueError, match="confidence"):
        threshold_for_accuracy([1.2], [True], 0.9)
    with pytest.raises(ValueError, match="outcomes"):
        ece([0.5], [])


def test_fit_temperature_recovers_the_temperature_that_made_the_labels() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(20000, 5, generator=gen) * 3
    y = torch.multinomial(torch.softmax(logits / 2.0, -1), 1, generator=gen).squeeze(1)
    assert fit_temperature(logits, y) == pytest.approx(2.0, rel=0.05)
    # overconfident-by-construction logits get T > 1; a scaled copy gets the scaled T
    assert fit_temperature(logits * 3, y) == pytest.approx(6.0, rel=0.05)
    assert fit_temperature(torch.empty(0, 3), []) == 1.0
    with pytest.raises(ValueError, match="do not fit"):
        fit_temperature(torch.zeros(3, 2), [0, 1])
    assert not math.isnan(fit_temperature(torch.zeros(4, 2), [0, 1, 0, 1]))


def test_check_temperature_reports_the_ece_before_after_and_cross_fitted() -> None:
    """What ``eval`` prints for zero-shot scores: labels drawn at T = 2 from logits scored at T = 1 are
    over-confident; the fitted T repairs it in sample and on folds it was not fitted on."""
    from worker.engine.calibration import check_temperature, confidences

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3000, 4, generator=gen) * 3
    y = torch.multinomial(torch.softmax(logits / 2.0, -1), 1, generator=gen).squeeze(1).tolist()
    check = check_temperature(logits, y, current=1.0)
    assert check.temperature == pytest.approx(2.0, rel=0.1) and check.folds == 5
    assert check.ece_current > 0.1 and check.ece_fitted < 0.03 and check.ece_cross < 0.03
    correct = (logits.argmax(1) == torch.tensor(y)).tolist()
    assert check.ece_current == pytest.approx(ece(confidences(logits, 1.0), correct))
    assert check_temperature(logits, y, current=check.temperature).ece_current == pytest.approx(
        check.ece_fitted
    )
    tiny = check_temperature(logits[:3], y[:3])  # fewer rows than folds: one fold per row
    assert tiny.folds == 3 and 0.0 <= tiny.ece_cross <= 1.0

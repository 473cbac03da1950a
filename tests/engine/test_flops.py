"""The bench's FLOP model: which mode needs how much work, and the bound it puts on a speed-up."""

from __future__ import annotations

from worker.bench.modes import ModeResult
from worker.bench.peak import FlopModel, method_of
from worker.bench.report import Report

# SmolLM2-135M's shape, the built-in task's 304-token prefix and three one-token labels (+ end of turn).
FM = FlopModel(
    params=106_200_000,
    layers=30,
    d_attn=576,
    hidden=576,
    vocab=49152,
    prefix=304,
    tree=3,
    label_lens=(2, 2, 2),
)


def test_the_cached_method_skips_the_prefix() -> None:
    cached, uncached = FM.per_ticket("cached", 70), FM.per_ticket("uncached", 70)
    assert uncached == FM.tokens(377, past=0)
    assert cached == FM.tokens(73, past=304)
    assert 4.5 < uncached / cached < 377 / 73  # weights: 377 / 73; the prefix's attention is paid by both


def test_naive_scores_every_label_separately_with_the_full_vocabulary() -> None:
    one = FM.tokens(375, 0) + 2 * 576 * 49152 * 375
    assert FM.per_ticket("naive", 70) == 3 * one


def test_modes_map_to_methods() -> None:
    assert method_of("per-item") == method_of("bucketed") == "uncached"
    assert method_of("engine") == method_of("end-to-end-2p") == method_of("per-item-cached") == "cached"
    assert method_of("llamacpp") == "llamacpp"


def test_report_bound_and_closeness() -> None:
    base = ModeResult("per-item", ["a"], ["x"], [1.0], seconds=10.0)
    eng = ModeResult("engine", ["a"], ["x"], [1.0], seconds=2.5)
    report = Report(
        machine={}, model="m", dtype="float32", data={}, baseline="per-item", modes=[base, eng],
        agreements={}, matmul_peak_gflops=100.0, flops={"per-item": (5e11, 5e11), "engine": (1e11, 5e11)},
    )  # fmt: skip
    assert report.bound(eng) == 5.0 and report.speedup(eng) == 4.0
    assert report.of_bound(eng) == 0.8
    assert report.gflops(eng) == 40.0 and report.peak_fraction(eng) == 0.4
    assert report.bound(base) == 1.0

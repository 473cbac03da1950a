"""tools/corrections_sim.py: the held-out pool is held out, and the methods, weights and statistics are what
the docs' table says (plain Python, no torch, no model)."""

from __future__ import annotations

import math

import pytest

from tools.corrections_sim import (
    BANKING77,
    Method,
    SimError,
    Split,
    base_rows,
    correction_weight,
    kind_rows,
    mean_ci,
    normalized,
    pool_rows,
    scenario_rows,
    t95,
)

needs_banking77 = pytest.mark.skipif(
    not (BANKING77 / "test.csv").exists(), reason=f"Banking77 not at {BANKING77}"
)


def test_methods_parse_their_penalty_and_weight() -> None:
    assert Method.parse("cv") == Method("cv", "cv", "1")
    assert Method.parse("keep-w5") == Method("keep-w5", "keep", "w5")
    assert Method.parse("cv-auto10") == Method("cv-auto10", "cv", "auto10")
    assert Method.parse("keep+confirmed") == Method("keep+confirmed", "keep", "1", confirmed=True)
    for bad in ("fixed", "keep-w0", "keep-x5", "cv-auto", "keep-wfive", "keep+all"):
        with pytest.raises(SimError, match="unknown method"):
            Method.parse(bad)


def test_correction_weights() -> None:
    assert correction_weight("1", 1500, 7) == 1.0
    assert correction_weight("w5", 1500, 7) == 5.0
    # auto5: the corrections together weigh 5% of the base rows: 75 / 7 each
    assert correction_weight("auto5", 1500, 7) == pytest.approx(75 / 7)
    assert correction_weight("auto5", 1500, 300) == 1.0  # never lighter than a base row
    assert correction_weight("w5", 1500, 0) == 1.0


def test_t_quantiles_and_intervals() -> None:
    assert t95(30) == pytest.approx(2.0452, abs=2e-3)
    assert t95(5) == pytest.approx(2.776, abs=1e-3)
    assert t95(12) == pytest.approx(2.201, abs=4e-3)
    assert t95(2) == pytest.approx(12.706)
    assert math.isnan(t95(1))
    mean, half = mean_ci([1.0, 2.0, 3.0, 4.0])
    # sd 1.291, n 4: 3.182 * 1.291 / 2
    assert mean == 2.5 and half == pytest.approx(3.182 * 1.2910 / 2, rel=2e-3)
    assert math.isnan(mean_ci([1.0])[1])


def test_kind_rows_split_the_fresh_set_by_the_corrected_kinds() -> None:
    kinds = ["a", "b", "a", "c", "b"]
    assert kind_rows(kinds, {"a", "c"}, [0, 1, 3, 4]) == ([0, 3], [1, 4])


def test_scenarios_leave_out_what_they_say() -> None:
    kinds = [k for k in ("card", "fee", "pin", "synthetic:billing") for _ in range(10)]
    y = [i % 3 for i in range(40)]
    base = Split(None, y, kinds, "float32")
    assert scenario_rows(base, "full", 0, 2) == (list(range(40)), [])
    half, _ = scenario_rows(base, "half", 3, 2)
    assert len(half) == sum(y.count(c) // 2 for c in range(3))
    kept, dropped = scenario_rows(base, "missing", 1, 2)
    assert len(dropped) == 2 and not any(d.startswith("synthetic:") for d in dropped)
    assert {kinds[i] for i in kept} == set(kinds) - set(dropped)
    assert scenario_rows(base, "missing", 1, 2) == (kept, dropped)  # seeded
    real, _ = scenario_rows(base, "no-synthetic", 0, 2)
    assert len(real) == 30 and not any(kinds[i].startswith("synthetic:") for i in real)
    with pytest.raises(SimError):
        scenario_rows(base, "most", 0, 2)


@needs_banking77
def test_the_pool_is_held_out_from_the_base_data_and_the_bundled_eval() -> None:
    import csv

    from tools.corrections_sim import DATA

    with (DATA / "banking77_eval.csv").open(newline="", encoding="utf-8") as f:
        evaluated = {normalized(r["text"]) for r in csv.DictReader(f)}
    base, pool = base_rows(), pool_rows()
    assert len(base) == 1495
    assert not {normalized(r.text) for r in base} & {normalized(r.text) for r in pool}
    assert not evaluated & {normalized(r.text) for r in pool}
    assert len({normalized(r.text) for r in pool}) == len(pool)
    assert {r.label for r in pool} == {"billing", "technical", "account"}
    real = [r for r in pool if r.id.startswith("b77-test-")]
    assert len(real) > 1000 and all(not r.kind.startswith("synthetic:") for r in real)
    synthetic = [r for r in pool if r.kind.startswith("synthetic:")]
    assert synthetic and not any(r.id.startswith(("syn-11-", "syn-7-")) for r in synthetic)
    # a base row's kind is its Banking77 intent, found through its id
    assert {r.kind for r in base if r.id.startswith("b77-train-")} <= {r.kind for r in real}

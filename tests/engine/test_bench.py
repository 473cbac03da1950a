"""``ticketq-worker bench`` on a tiny random model: every mode end to end (through the real Redis), the JSON
schema, the plot, and the one property a benchmark must not break: in float32 every mode decides every
ticket exactly as the item-by-item baseline does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools.synthetic import generate
from worker import cli
from worker.bench.config import BenchOptions
from worker.bench.modes import ModeResult, naive_scorer
from worker.bench.report import agreement
from worker.engine.decide import decide
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import EngineOptions
from worker.engine.reference import ReferenceScorer
from worker.engine.task import load_task

MODES = ["naive", "per-item", "bucketed", "per-item-cached", "engine", "end-to-end"]
PNG = b"\x89PNG\r\n\x1a\n"


def _bench(tiny_dir: Path, redis_url: str, prefix: str, *flags: str) -> int:
    base = [
        "bench",
        "--model",
        str(tiny_dir),
        "--dtype",
        "float32",
        "--redis-url",
        redis_url,
        "--prefix",
        prefix,
        "--retries",  # a test measures nothing: never wait for a quiet machine
        "0",
    ]
    return cli.main([*base, *flags])


@pytest.mark.redis
def test_quick_bench_runs_every_mode_and_they_agree(tiny_dir, redis_url, prefix, tmp_path, capsys) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    flags = ["--quick", "--baseline-n", "8", "--json", str(out), "--plot", str(png), "--head", "none"]
    assert _bench(tiny_dir, redis_url, prefix, *flags) == 0
    report = json.loads(out.read_text())
    assert {"machine", "model", "dtype", "modes", "engine_peak_fraction"} <= set(report)
    assert report["dtype"] == "float32"
    assert {"cpu", "cores", "amx_bf16", "avx512_bf16", "torch_threads", "torch"} <= set(report["machine"])
    assert [m["name"] for m in report["modes"]] == MODES
    for m in report["modes"]:
        assert {"name", "seconds", "items_per_s", "speedup", "padding_overhead", "agreement"} <= set(m)
        assert m["seconds"] > 0 and m["items_per_s"] > 0
        assert m["agreement"] == 1.0, (m["name"], m["flips"])  # float32: a flip is an engine bug
        assert 0.0 <= m["padding_overhead"] < 1.0
    by = {m["name"]: m for m in report["modes"]}
    assert by["per-item"]["speedup"] == 1.0 and by["per-item"]["tickets"] == 8
    assert by["naive"]["tickets"] == 8 and by["engine"]["tickets"] == 48
    assert by["end-to-end"]["compared"] == 8  # agreement on the tickets both modes ran
    assert by["per-item"]["padding_overhead"] == 0.0  # one ticket per pass pads nothing
    assert by["engine"]["padding_overhead"] < by["bucketed"]["padding_overhead"]
    assert 0 < report["engine_peak_fraction"] < 1
    assert by["per-item"]["flop_bound"] == 1.0 and by["bucketed"]["flop_bound"] == 1.0
    assert by["engine"]["flop_bound"] > 1 and by["naive"]["flop_bound"] < 1  # prefix cached; every label
    assert by["engine"]["of_bound"] > 0 and by["engine"]["gflops"] > 0 and by["engine"]["peak_fraction"] > 0
    assert png.read_bytes().startswith(PNG)
    table = capsys.readouterr().out
    assert "end-to-end" in table and "items/s" in table and "length-stratified sample of 8" in table


@pytest.mark.redis
@pytest.mark.process
def test_worker_processes_end_to_end(tiny_dir, redis_url, prefix, tmp_path) -> None:
    out = tmp_path / "bench.json"
    flags = ["--quick", "--modes", "engine,end-to-end", "--workers", "0,1", "--json", str(out)]
    assert _bench(tiny_dir, redis_url, prefix, *flags) == 0
    modes = {m["name"]: m for m in json.loads(out.read_text())["modes"]}
    assert set(modes) == {"engine", "end-to-end", "end-to-end-1p"}
    assert modes["end-to-end-1p"]["agreement"] == 1.0 and modes["end-to-end-1p"]["tickets"] == 48
    assert modes["end-to-end-1p"]["notes"][0].startswith("1 worker process")


@pytest.mark.redis
def test_a_prefix_in_use_is_refused_and_left_alone(tiny_dir, redis_url, prefix, r, capsys) -> None:
    r.lpush(f"{prefix}-e2e0:tickets", b"someone else's ticket")
    assert _bench(tiny_dir, redis_url, prefix, "--quick", "--modes", "end-to-end") == 1
    assert "already exist" in capsys.readouterr().err
    assert r.llen(f"{prefix}-e2e0:tickets") == 1


def test_the_flop_bound_is_against_the_baseline_that_ran(tiny_dir, tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert (
        _bench(tiny_dir, "redis://unused", "unused", "--quick", "--modes", "engine", "--json", str(out)) == 0
    )
    [engine] = json.loads(out.read_text())["modes"]
    assert engine["speedup"] == 1.0 and engine["flop_bound"] == 1.0 and engine["of_bound"] == 1.0


def test_the_peer_reports_itself_not_installed(tiny_dir, tmp_path, capsys) -> None:
    from worker.bench import peer

    if peer.available():
        pytest.skip("llama-cpp-python is installed here")
    out = tmp_path / "bench.json"
    flags = ["--quick", "--baseline-n", "4", "--modes", "per-item,llamacpp", "--json", str(out)]
    assert _bench(tiny_dir, "redis://unused", "unused", *flags) == 0
    report = json.loads(out.read_text())
    assert [m["name"] for m in report["modes"]] == ["per-item"]
    assert any(n.startswith("llamacpp: not installed") and "GGML_NATIVE=OFF" in n for n in report["notes"])
    assert "llamacpp: not installed" in capsys.readouterr().out


def test_the_peer_names_its_build_features() -> None:
    """An AMX build of llama.cpp gets a warning in the report (its Q4 kernels give wrong logits)."""
    from worker.bench.peer import features_of

    info = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 0 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    assert features_of(info) == ["SSE3", "AVX2", "AVX512", "AMX_INT8"]
    assert features_of("") == []


def test_naive_scorer_equals_the_reference(tiny: LoadedModel) -> None:
    engine = Engine(tiny, load_task())
    reference = ReferenceScorer(tiny.model, tiny.tokenizer, engine.task, engine.prompt)
    naive = naive_scorer(engine)  # the reference without its shortcut: every position, whole vocabulary
    for t in generate(4, seed=3):
        assert (
            torch.tensor(naive.score_one(t.text)) - torch.tensor(reference.score_one(t.text))
        ).abs().max() < 1e-4
    prior, expected = naive.prior(), reference.prior()
    assert prior is not None and expected is not None and (prior - expected).abs().max() < 1e-4


def test_bad_flags_and_files_exit_2(tmp_path, capsys) -> None:
    assert cli.main(["bench", "--modes", "engine,warp"]) == 2
    assert "warp" in capsys.readouterr().err
    assert cli.main(["bench", "--workers", "-1"]) == 2
    bad = tmp_path / "t.csv"
    bad.write_text("id,body\n1,hello\n")
    assert cli.main(["bench", "--tickets", str(bad)]) == 2
    assert "missing ['text']" in capsys.readouterr().err


def test_agreement_lists_flips_on_common_tickets_only() -> None:
    base = ModeResult("per-item", ["a", "b", "c"], ["x", "y", "x"], [1.0, 0.01, 2.0], 1.0)
    mode = ModeResult("engine", ["b", "c", "d"], ["x", "x", "y"], [0.02, 2.1, 3.0], 0.5)
    agree = agreement(base, mode)
    assert agree.compared == 2 and agree.agreed == 1 and agree.fraction == 0.5
    assert [(f.id, f.baseline, f.label) for f in agree.flips] == [("b", "y", "x")]


def test_a_disturbed_mode_is_run_again_and_the_quietest_run_kept(monkeypatch) -> None:
    from worker.bench import runner

    monkeypatch.setattr(runner, "_wait_quiet", lambda *a: None)
    noise = iter([0.5, 0.3, 0.4])
    opts = BenchOptions(
        modes=["engine"], workers=[0], baseline_n=8, seed=0, engine=EngineOptions(), drain=256,
        redis_url="redis://x", prefix=None, noise_limit=0.1, retries=2, quiet_wait_s=0,
    )  # fmt: skip

    def run() -> ModeResult:
        return ModeResult("engine", ["a"], ["x"], [1.0], 1.0, others_cpu=next(noise))

    best = runner._quietest(run, opts)
    assert best.others_cpu == 0.3 and best.notes == ["quietest of 3 runs: others took 30% of the CPU"]
    assert runner._quietest(lambda: ModeResult("engine", [], [], [], 1.0, others_cpu=0.02), opts).notes == []


def test_decide_uses_the_calibration_prior() -> None:
    logp = torch.tensor([[-1.0, -1.2, -3.0]])
    assert decide(logp).labels(["a", "b", "c"]) == ["a"]
    decision = decide(logp, torch.tensor([0.0, -0.5, 0.0]))
    assert decision.labels(["a", "b", "c"]) == ["b"] and decision.margins[0] == pytest.approx(0.3)
    assert decide(torch.tensor([[0.5, 0.5]])).best == [0]  # a tie goes to the first label

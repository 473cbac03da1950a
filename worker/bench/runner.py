"""Running the modes over one loaded model: warm-ups, progress bars, re-runs of modes that other processes
disturbed, and the numbers the report needs."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

import redis
import torch

from worker.bench import peer
from worker.bench.config import MODES, BenchOptions
from worker.bench.data import Item, length_sample
from worker.bench.e2e import WorkerSpec, run_in_process, run_processes
from worker.bench.modes import (
    ModeResult,
    Progress,
    asking_three,
    head_engine,
    make_engines,
    run_asking,
    run_engine,
    run_naive,
)
from worker.bench.peak import CpuMeter, FlopModel, machine_info, matmul_peak_gflops, method_of
from worker.bench.report import Report, agreement
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import NO_HEAD
from worker.engine.task import Task

SUBSET_MODES = ("naive", "per-item", "llamacpp")  # slow enough to run on a sample only
BASELINE = "per-item"
HEAD_3Q = "head-3q"  # reported beside head: the same head engine asking three questions per ticket


def bench(
    opts: BenchOptions,
    loaded: LoadedModel,
    task: Task,
    items: list[Item],
    source: str,
    notes: list[str] | None = None,
) -> Report:
    machine = machine_info()
    notes = list(notes or [])
    engines = make_engines(loaded, task, opts.engine)
    engine = engines["engine"]
    lengths = [len(s) for s in engine.tokenize([it.text for it in items])]
    subset = [items[i] for i in length_sample(lengths, opts.baseline_n, opts.seed)]
    peak = matmul_peak_gflops(loaded.dtype)
    results: list[ModeResult] = []
    modes = [m for m in MODES if m in opts.modes]
    if "head" in modes:
        with_head, why = head_engine(loaded, task, opts.engine)
        if with_head is None:
            print(f"bench: mode head skipped: {why}", file=sys.stderr)
            modes.remove("head")
        else:
            engines["head"] = with_head
    for name in modes:
        mine = subset if name in SUBSET_MODES else items
        if name == "end-to-end":
            results += [_quietest(partial(_end_to_end, opts, engine, mine, k), opts) for k in opts.workers]
            continue
        if name == peer.NAME:
            missing = peer.missing_reason(opts.engine.model)
            if missing:
                notes.append(f"{name}: {missing}")
                continue
            results.append(_quietest(partial(_peer, engine, mine, opts.engine.model), opts))
        else:
            results.append(_quietest(partial(_in_process, name, engines, mine, opts.drain), opts))
        if name == "head":
            engines[HEAD_3Q] = asking_three(engines["head"])
            results.append(_quietest(partial(_in_process, HEAD_3Q, engines, mine, opts.drain), opts))
            ratio = results[-1].items_per_s / results[-2].items_per_s
            results[-1].notes.append(
                f"three questions from one pass (the head and two copies): {ratio:.2f}x head's items/s "
                "with one, same run"
            )
        if len(mine) < len(items):
            results[-1].notes.append(
                f"ran on a length-stratified sample of {len(mine)} of {len(items)} tickets"
            )
    machine["loadavg_end"] = round(os.getloadavg()[0], 2)
    # Best of both ends of the run: a busy moment must not inflate the fraction.
    peak = max(peak, matmul_peak_gflops(loaded.dtype))
    if loaded.quantized:
        notes.append(f"{loaded.quantized}: peak fractions are against the float32 matmul peak")
    names = [r.name for r in results]
    if "head" in names:
        _compare_head(results[names.index("head")], results, items)
    baseline = results[names.index(BASELINE) if BASELINE in names else 0]
    by_id = dict(zip((it.id for it in items), lengths, strict=True))
    flops = _flops(engine, loaded, results, by_id, method_of(baseline.name))
    report = Report(
        machine=machine,
        model=loaded.name,
        dtype=loaded.dtype_name,
        data={"source": source, "tickets": len(items), "baseline_sample": len(subset), "seed": opts.seed},
        baseline=baseline.name,
        modes=results,
        # The head is another classifier: it is meant to disagree with zero-shot scoring (and be right).
        agreements={r.name: agreement(baseline, r) for r in results if r.name not in ("head", HEAD_3Q)},
        matmul_peak_gflops=peak,
        flops=flops,
        notes=notes,
    )
    if "engine" in names:
        report.engine_gflops = report.gflops(results[names.index("engine")])
    return report


def _flops(
    engine: Engine,
    loaded: LoadedModel,
    results: list[ModeResult],
    lengths: dict[str, int],
    baseline: str,
) -> dict[str, tuple[float, float]]:
    """Per mode: the FLOPs its method needed for its tickets, and the baseline's method for the same ones."""
    fm = FlopModel.of(
        loaded.model,
        len(engine.prompt.prefix_ids),
        engine.scorer.tree.size,
        [len(ids) for ids in engine.prompt.label_ids],
    )
    out = {}
    for r in results:
        if r.name in ("head", HEAD_3Q):  # not a method the FLOP model describes (fewer layers, no label tree)
            continue
        mine = [lengths[i] for i in r.ids if i in lengths]
        out[r.name] = (fm.total(method_of(r.name), mine), fm.total(baseline, mine))
    return out


def _compare_head(head: ModeResult, results: list[ModeResult], items: list[Item]) -> None:
    """Notes on the head mode: its speed against zero-shot scoring (same run), and both accuracies when
    the tickets are labelled."""
    by = {r.name: r for r in results}
    if "engine" in by:
        ratio = head.items_per_s / by["engine"].items_per_s
        head.notes.append(f"{ratio:.2f}x the engine's zero-shot speed, same run")
    truth = {it.id: it.label for it in items if it.label}
    if truth and "engine" in by:

        def acc(r: ModeResult) -> float:
            pairs = [(lab, truth[i]) for i, lab in zip(r.ids, r.labels, strict=True) if i in truth]
            return sum(a == b for a, b in pairs) / len(pairs)

        head.notes.append(
            f"accuracy against the tickets' labels: head {acc(head):.1%}, zero-shot {acc(by['engine']):.1%}"
        )


def _quietest(run: Callable[[], ModeResult], opts: BenchOptions) -> ModeResult:
    """Run a mode; while other processes took more than ``noise_limit`` of the CPU during it, wait for a
    quiet machine and run it again, up to ``retries`` times. On two cores a neighbour costs far more than
    its share: a descheduled OpenMP thread stalls every parallel region until it comes back."""
    best, tries = run(), 1
    while _noisy(best, opts.noise_limit) and tries <= opts.retries:
        _wait_quiet(opts.noise_limit, opts.quiet_wait_s)
        again = run()
        tries += 1
        if (again.others_cpu or 0.0) < (best.others_cpu or 0.0):
            best = again
    if tries > 1:
        best.notes.append(f"quietest of {tries} runs: others took {best.others_cpu:.0%} of the CPU")
    return best


def _noisy(result: ModeResult, limit: float) -> bool:
    return result.others_cpu is not None and result.others_cpu > limit


def _wait_quiet(limit: float, max_wait_s: float, probe_s: float = 2.0) -> None:
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        meter = CpuMeter()
        time.sleep(probe_s)
        others = meter.others()
        if others is None or others <= limit:
            return


def _in_process(name: str, engines: dict[str, Engine], items: list[Item], drain: int) -> ModeResult:
    """One in-process mode, after an untimed warm-up on a ticket or two (first calls build kernels)."""
    if name == "naive":
        run_naive(engines["engine"], items[:1], _ignore)
        with _bar(name, len(items)) as tick:
            return run_naive(engines["engine"], items, tick)
    engine = engines[name]
    chunk = 1 if engine.options.batch_size == 1 else drain  # item by item, or the service's drain
    run = run_asking if name == HEAD_3Q else run_engine
    run(name, engine, items[:2], chunk, _ignore)
    with _bar(name, len(items)) as tick:
        return run(name, engine, items, chunk, tick)


def _peer(engine: Engine, items: list[Item], model: str) -> ModeResult:
    with _bar(peer.NAME, len(items)) as tick:
        return peer.run_peer(engine, items, model, torch.get_num_threads(), tick)


def _end_to_end(opts: BenchOptions, engine: Engine, items: list[Item], k: int) -> ModeResult:
    prefix = f"{opts.prefix or 'ticketq-bench-' + uuid.uuid4().hex[:8]}-e2e{k}"
    name = "end-to-end" if k == 0 else f"end-to-end-{k}p"
    with _clean_keys(opts.redis_url, prefix), _bar(name, len(items)) as tick:
        if k == 0:
            engine.logprobs([it.text for it in items[:8]])  # warm, like the other modes
            return run_in_process(
                engine, items, redis_url=opts.redis_url, prefix=prefix, drain=opts.drain, progress=tick
            )
        dtype = engine.loaded.dtype_name  # as measured or chosen here: the workers need not measure again
        # Zero-shot like the in-process engine, so that agreement stays a check of the fast path.
        spec = WorkerSpec(
            engine=replace(opts.engine, dtype=dtype, threads=None, head=NO_HEAD), drain=opts.drain
        )
        with tempfile.TemporaryDirectory(prefix="ticketq-bench-") as tmp:
            return run_processes(
                k, items, spec, redis_url=opts.redis_url, prefix=prefix, workdir=Path(tmp), progress=tick
            )


@contextmanager
def _clean_keys(url: str, prefix: str) -> Iterator[None]:
    """Refuse a prefix that holds keys (someone's live queue), and delete this run's keys afterwards."""
    client = redis.Redis.from_url(url)
    if next(client.scan_iter(match=f"{prefix}:*", count=1000), None) is not None:
        client.close()
        raise ValueError(f"keys under {prefix}: already exist; pick another --prefix")
    try:
        yield
    finally:
        stale = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if stale:
            client.unlink(*stale)  # freed in the background: a big results hash does not block Redis
        client.close()


@contextmanager
def _bar(desc: str, total: int) -> Iterator[Progress]:
    """A tqdm bar on a terminal; nothing when output goes to a file or a pipe."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="ticket", disable=not sys.stderr.isatty(), leave=False) as bar:
        yield bar.update


def _ignore(_: int) -> None:
    pass

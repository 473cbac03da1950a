"""``ticketq-worker bench``: flags, then every requested mode over one loaded model (see the package doc)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from worker.bench.data import DataError, Item, length_sample, read_items, synthetic
from worker.bench.modes import CONFIGS, ModeResult, Progress, run_engine, run_naive
from worker.bench.peak import machine_info, matmul_peak_gflops, useful_flops
from worker.bench.report import Report, agreement, write_json, write_plot
from worker.errors import ConfigError
from worker.settings import DEFAULT_REDIS_URL

if TYPE_CHECKING:  # torch and transformers load only once the flags are known to be good
    from worker.engine.engine import Engine
    from worker.engine.model import LoadedModel
    from worker.engine.task import Task

MODES = ("naive", "per-item", "bucketed", "per-item-cached", "engine", "end-to-end")
SUBSET_MODES = ("naive", "per-item")  # slow enough to run on a sample only
BASELINE = "per-item"
DEFAULT_N, DEFAULT_BASELINE_N = 600, 120
QUICK_N, QUICK_BASELINE_N = 48, 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--synthetic", type=int, metavar="N", help=f"N seeded synthetic tickets (default {DEFAULT_N})"
    )
    src.add_argument("--tickets", metavar="FILE", help="JSONL or CSV with id,text[,label]")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"smoke test: {QUICK_N} tickets, baselines on {QUICK_BASELINE_N}"
    )
    parser.add_argument(
        "--baseline-n",
        type=int,
        help=f"tickets naive and per-item run on, a length-stratified sample (default {DEFAULT_BASELINE_N})",
    )
    parser.add_argument("--model", default="smollm2", help="embedded model name, .gguf, directory or HF id")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 (default auto)")
    parser.add_argument("--task", help="task TOML (default: the built-in support-ticket task)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--batch-size", type=int, default=32, help="engine: tickets per pass (default 32)")
    parser.add_argument(
        "--max-batch-tokens", type=int, default=8192, help="engine: tokens per pass (default 8192)"
    )
    parser.add_argument(
        "--drain", type=int, default=256, help="tickets handed to the engine at once (default 256)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="synthetic tickets and the baseline sample (default 0)"
    )
    parser.add_argument(
        "--workers",
        default="0",
        help="end-to-end: 0 runs the service in process; K runs K worker processes with cores//K threads "
        "each; a list such as 1,2 runs each, side by side (default 0)",
    )
    parser.add_argument("--redis-url", default=os.environ.get("TICKETQ_REDIS_URL") or DEFAULT_REDIS_URL)
    parser.add_argument(
        "--prefix", help="end-to-end key prefix (default: a fresh random one; deleted afterwards)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG bar chart (needs matplotlib)")


def run(args: argparse.Namespace) -> int:
    try:
        modes, workers = _parse_modes(args.modes), _parse_workers(args.workers)
        items, source = _load(args)
        if "end-to-end" in modes:
            redis.Redis.from_url(args.redis_url, socket_connect_timeout=3).ping()  # fail before the slow part
    except (ValueError, DataError, redis.RedisError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return 2
    import torch

    from worker.bench.e2e import EndToEndError
    from worker.engine.model import ModelError, load_model
    from worker.engine.task import TaskError, load_task

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = load_model(args.model, dtype=args.dtype)
        task = load_task(args.task)
    except (ModelError, TaskError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return 1
    try:
        report = _bench(args, loaded, task, items, source, modes, workers)
    except (EndToEndError, ConfigError, ValueError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return 1
    print(report.table())
    if args.json:
        write_json(report, args.json)
    if args.plot:
        write_plot(report, args.plot)
    if report.dtype == "float32" and any(a.flips for a in report.agreements.values()):
        print("ticketq-worker bench: label flips in float32: the modes should agree exactly", file=sys.stderr)
    return 0


def _bench(
    args: argparse.Namespace,
    loaded: LoadedModel,
    task: Task,
    items: list[Item],
    source: str,
    modes: list[str],
    workers: list[int],
) -> Report:
    from worker.engine.engine import Engine, EngineConfig

    machine = machine_info()
    _warn_if_busy(machine)
    cfg = EngineConfig(batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens)
    engines = {name: Engine(loaded, task, make(cfg)) for name, make in CONFIGS.items()}
    engine = engines["engine"]
    lengths = [len(s) for s in engine.tokenize([it.text for it in items])]
    baseline_n = args.baseline_n or (QUICK_BASELINE_N if args.quick else DEFAULT_BASELINE_N)
    subset = [items[i] for i in length_sample(lengths, baseline_n, args.seed)]
    peak = matmul_peak_gflops(engine.loaded.dtype) if "engine" in modes else None
    results: list[ModeResult] = []
    for name in [m for m in MODES if m in modes]:
        mine = subset if name in SUBSET_MODES else items
        if name == "end-to-end":
            results += _end_to_end(args, engine, mine, workers)
            continue
        results.append(_in_process(name, engines, mine, args.drain))
        if len(mine) < len(items):
            results[-1].notes.append(
                f"ran on a length-stratified sample of {len(mine)} of {len(items)} tickets"
            )
    machine["loadavg_end"] = round(os.getloadavg()[0], 2)
    if peak is not None:  # best of both ends of the run: a busy moment must not inflate the fraction
        peak = max(peak, matmul_peak_gflops(engine.loaded.dtype))
    names = [r.name for r in results]
    baseline = BASELINE if BASELINE in names else names[0]
    base = results[names.index(baseline)]
    gflops = None
    if "engine" in names:
        segments = [engine.scorer.segment_len(n) for n in lengths]
        flops = useful_flops(engine.loaded.model, len(engine.prompt.prefix_ids), segments)
        gflops = flops / results[names.index("engine")].seconds / 1e9
    return Report(
        machine=machine,
        model=engine.loaded.name,
        dtype=str(engine.loaded.dtype).removeprefix("torch."),
        data={"source": source, "tickets": len(items), "baseline_sample": len(subset), "seed": args.seed},
        baseline=baseline,
        modes=results,
        agreements={r.name: agreement(base, r) for r in results},
        matmul_peak_gflops=peak,
        engine_gflops=gflops,
    )


def _in_process(name: str, engines: dict[str, Engine], items: list[Item], drain: int) -> ModeResult:
    """One in-process mode, after an untimed warm-up on a ticket or two (first calls build kernels)."""
    if name == "naive":
        run_naive(engines["engine"], items[:1], _quiet)
        with _bar(name, len(items)) as tick:
            return run_naive(engines["engine"], items, tick)
    engine = engines[name]
    chunk = 1 if engine.config.batch_size == 1 else drain  # item by item, or the service's drain
    run_engine(name, engine, items[:2], chunk, _quiet)
    with _bar(name, len(items)) as tick:
        return run_engine(name, engine, items, chunk, tick)


def _end_to_end(
    args: argparse.Namespace, engine: Engine, items: list[Item], workers: list[int]
) -> list[ModeResult]:
    from worker.bench.e2e import WorkerSpec, run_in_process, run_processes

    out = []
    root = args.prefix or f"ticketq-bench-{uuid.uuid4().hex[:8]}"
    for k in workers:
        prefix = f"{root}-e2e{k}"
        with _clean_keys(args.redis_url, prefix), tempfile.TemporaryDirectory(prefix="ticketq-bench-") as tmp:
            if k == 0:
                engine.logprobs([it.text for it in items[:8]])  # warm, like the other modes
                with _bar("end-to-end", len(items)) as tick:
                    out.append(
                        run_in_process(
                            engine,
                            items,
                            redis_url=args.redis_url,
                            prefix=prefix,
                            drain=args.drain,
                            progress=tick,
                        )
                    )
                continue
            spec = WorkerSpec(
                model=args.model,
                dtype=str(engine.loaded.dtype).removeprefix("torch."),
                task=args.task,
                batch_size=args.batch_size,
                max_batch_tokens=args.max_batch_tokens,
                drain=args.drain,
            )
            with _bar(f"end-to-end-{k}p", len(items)) as tick:
                out.append(
                    run_processes(
                        k,
                        items,
                        spec,
                        redis_url=args.redis_url,
                        prefix=prefix,
                        workdir=Path(tmp),
                        progress=tick,
                    )
                )
    return out


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
            client.delete(*stale)
        client.close()


@contextmanager
def _bar(desc: str, total: int) -> Iterator[Progress]:
    """A tqdm bar on a terminal; nothing when output goes to a file or a pipe."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="ticket", disable=not sys.stderr.isatty(), leave=False) as bar:
        yield bar.update


def _quiet(_: int) -> None:
    pass


def _warn_if_busy(machine: dict[str, Any]) -> None:
    load = float(machine["loadavg_start"])
    if load > 0.5 * int(machine["cores"]):
        print(
            f"ticketq-worker bench: load average {load} on {machine['cores']} cores: something else is "
            "running; ratios still hold (every mode shares the noise), absolute numbers do not",
            file=sys.stderr,
        )


def _parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise ValueError(f"unknown modes {unknown}; choose from {','.join(MODES)}")
    return modes


def _parse_workers(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise ValueError(f"--workers: expected K or a list like 0,1,2, got {text!r}") from None
    if not ks or any(k < 0 for k in ks):
        raise ValueError(f"--workers: expected K >= 0, got {text!r}")
    return list(dict.fromkeys(ks))


def _load(args: argparse.Namespace) -> tuple[list[Item], str]:
    if args.tickets:
        items = read_items(args.tickets)
        source = str(args.tickets)
    else:
        n = args.synthetic if args.synthetic is not None else (QUICK_N if args.quick else DEFAULT_N)
        if n < 2:
            raise ValueError("--synthetic: need at least 2 tickets")
        items = synthetic(n, args.seed)
        source = f"synthetic (worker.synthetic, seed {args.seed})"
    if args.quick:
        items = items[:QUICK_N]
    return items, source

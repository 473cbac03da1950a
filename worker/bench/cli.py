"""``ticketq-worker bench``: flags, then every requested mode over one loaded model (see the package doc)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

import redis

from worker.bench.data import DataError, Item, read_items, synthetic
from worker.bench.peak import cores as peak_cores
from worker.bench.report import write_json, write_plot
from worker.errors import ConfigError
from worker.settings import DEFAULT_REDIS_URL

if TYPE_CHECKING:  # torch and transformers load only once the flags are known to be good
    from worker.bench.runner import Options

# In the order they run. Here, not in runner.py, so that checking the flags needs no torch.
MODES = ("naive", "per-item", "bucketed", "per-item-cached", "engine", "end-to-end")
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
    parser.add_argument(
        "--noise-limit",
        type=float,
        default=0.10,
        help="re-run a mode during which other processes used more than this share of the CPU (default 0.10)",
    )
    parser.add_argument(
        "--retries", type=int, default=2, help="re-runs of a disturbed mode (default 2; 0: none)"
    )
    parser.add_argument(
        "--quiet-wait", type=float, default=300, help="seconds to wait for a quiet machine before a re-run"
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
    from worker.bench.runner import Options, bench
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
    opts = Options(
        modes=modes,
        workers=workers,
        baseline_n=args.baseline_n or (QUICK_BASELINE_N if args.quick else DEFAULT_BASELINE_N),
        seed=args.seed,
        batch_size=args.batch_size,
        max_batch_tokens=args.max_batch_tokens,
        drain=args.drain,
        model=args.model,
        task=args.task,
        redis_url=args.redis_url,
        prefix=args.prefix,
        noise_limit=args.noise_limit,
        retries=args.retries,
        quiet_wait_s=args.quiet_wait,
    )
    _warn_if_busy(opts)
    try:
        report = bench(opts, loaded, task, items, source)
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


def _warn_if_busy(opts: Options) -> None:
    load, cores = os.getloadavg()[0], peak_cores()
    if load > 0.5 * cores:
        print(
            f"ticketq-worker bench: load average {load:.2f} on {cores} cores: other processes are running. "
            f"Modes they overlap run slower (see the others column) and are re-run up to {opts.retries} "
            "times once the machine is quiet.",
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

"""Benchmark the engine against its baselines and end to end through Redis, all in one run.

Modes, in the order they run (``--modes`` picks a subset):

=================  ===========================================================================
naive              item by item, the whole prompt once per label, full-vocabulary logits
per-item           item by item, constrained label scoring, no prefix cache (published baseline)
bucketed           length-sorted batches of 32, padded, no prefix cache (published method)
per-item-cached    item by item with the prefix cache
engine             the default engine: packed rows, prefix cache, label tree
head               the engine with the task's trained head (or --head FILE): the same packed, cached
                   pass without the label tree, stopped at the head's layer; not agreement-checked
                   (another classifier), its speed and accuracy are set against ``engine``'s
end-to-end         the real worker service through Redis, from first push to last result
=================  ===========================================================================

All modes share one loaded model, dtype and thread count. The machine may be shared: for every mode the
bench measures the share of CPU other processes took meanwhile (``others``), and a mode they disturbed
is run again once the machine is quiet (``--noise-limit``, ``--retries``), keeping the quietest run.
``naive`` and ``per-item`` run on a length-stratified subset (``--baseline-n``); items/s stays comparable
and agreement is computed on the tickets both modes ran.

    make bench   # 600 synthetic tickets from tools/synthetic.py, then the command below on them
    ticketq-worker bench --tickets t.jsonl --json docs/bench.json --plot docs/bench.png
    ticketq-worker bench --modes engine,end-to-end --workers 1,2
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import redis

from producer import config
from producer.config import at_least, between, group, option, setting
from producer.exitcodes import Exit
from producer.options import DEFAULT_REDIS_URL
from worker.bench.config import DEFAULT_MODES, MODES, BenchOptions
from worker.bench.data import SAMPLE, DataError, Item, read_items
from worker.bench.peak import cores as peak_cores
from worker.bench.report import write_json, write_plot
from worker.engine.options import EngineOptions
from worker.errors import ConfigError

DEFAULT_BASELINE_N = 120
QUICK_N, QUICK_BASELINE_N = 48, 16


def _parse_modes(text: str) -> tuple[str, ...]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise ValueError(f"unknown modes {unknown}; choose from {','.join(MODES)}")
    return tuple(modes)


def _parse_workers(text: str) -> tuple[int, ...]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise ValueError(f"expected K or a list like 0,1,2, got {text!r}") from None
    if not ks or any(k < 0 for k in ks):
        raise ValueError(f"expected K >= 0, got {text!r}")
    return tuple(dict.fromkeys(ks))


@dataclass(frozen=True)
class BenchCommand:
    tickets: str = option(
        str(SAMPLE),
        help="JSONL or CSV with text[,label], an id optional (`make bench` generates 600 synthetic "
        "tickets with `python -m tools.synthetic` and passes them here)",
        shown="the bundled sample",
        metavar="FILE",
    )
    modes: tuple[str, ...] = option(
        DEFAULT_MODES,
        help=f"comma-separated subset of {','.join(MODES)}",
        shown="all but llamacpp, the optional peer",
        parse=_parse_modes,
    )
    quick: bool = option(False, help=f"smoke test: {QUICK_N} tickets, baselines on {QUICK_BASELINE_N}")
    baseline_n: int | None = option(
        None,
        help="tickets naive and per-item run on, a length-stratified sample",
        shown=f"{DEFAULT_BASELINE_N}; {QUICK_BASELINE_N} with --quick",
        check=at_least(1),
    )
    drain: int = option(
        256,
        help="tickets handed to the engine at once (a worker's --drain: 1..2000)",
        check=between(1, 2_000),
    )
    seed: int = option(0, help="the baseline sample")
    workers: tuple[int, ...] = option(
        (0,),
        help="end-to-end: 0 runs the service in process; K runs K worker processes with cores//K threads "
        "each; a list such as 1,2 runs each, side by side",
        shown="0",
        parse=_parse_workers,
    )
    redis_url: str = setting(DEFAULT_REDIS_URL, help="end-to-end: Redis URL")
    prefix: str | None = option(
        None, help="end-to-end key prefix", shown="a fresh random one, deleted afterwards"
    )
    noise_limit: float = option(
        0.10, help="re-run a mode during which other processes used more than this share of the CPU"
    )
    retries: int = option(2, help="re-runs of a disturbed mode (0: none)", check=at_least(0))
    quiet_wait: float = option(300.0, help="seconds to wait for a quiet machine before a re-run")
    json: str | None = option(None, help="write the results as JSON to this file", metavar="PATH")
    plot: str | None = option(None, help="write a PNG bar chart (needs matplotlib)", metavar="PATH")
    engine: EngineOptions = group(EngineOptions, "engine", env=False)

    def __post_init__(self) -> None:
        found = config.problems(self)
        if found:
            raise ValueError("; ".join(found))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, BenchCommand)


def run(ns: argparse.Namespace) -> int:
    try:
        args = config.resolve(BenchCommand, ns, os.environ)
        modes, workers, engine_opts = list(args.modes), list(args.workers), args.engine
        items, source = _load(args)
        if "end-to-end" in modes:
            redis.Redis.from_url(args.redis_url, socket_connect_timeout=3).ping()  # fail before the slow part
    except (ValueError, DataError, redis.RedisError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return Exit.CONFIG
    from worker.bench.e2e import EndToEndError
    from worker.bench.runner import bench
    from worker.engine import autodtype, threads
    from worker.engine.engine import Engine
    from worker.engine.model import ModelError
    from worker.engine.task import TaskError, load_task

    chosen = threads.apply(engine_opts.threads)
    notes = [f"threads: {chosen.threads} ({chosen.reason})"]
    try:
        task = load_task(engine_opts.task)
        loaded, decision = autodtype.load(
            engine_opts.model,
            task,
            lambda m: Engine(m, task, engine_opts),
            dtype=engine_opts.dtype,
            device=engine_opts.device,
        )
    except (ModelError, TaskError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return Exit.CONFIG if isinstance(exc, TaskError) else Exit.FAILED  # as the other commands
    if decision is not None:
        how = "read from the cache" if decision.cached else f"measured in {decision.seconds:.1f} s"
        notes.append(f"dtype auto chose {decision.chosen} ({how}): {decision.reason}")
    opts = BenchOptions(
        modes=modes,
        workers=workers,
        baseline_n=args.baseline_n or (QUICK_BASELINE_N if args.quick else DEFAULT_BASELINE_N),
        seed=args.seed,
        engine=engine_opts,
        drain=args.drain,
        redis_url=args.redis_url,
        prefix=args.prefix,
        noise_limit=args.noise_limit,
        retries=args.retries,
        quiet_wait_s=args.quiet_wait,
    )
    _warn_if_busy(opts)
    try:
        report = bench(opts, loaded, task, items, source, notes)
    except (EndToEndError, ConfigError, ValueError) as exc:
        print(f"ticketq-worker bench: {exc}", file=sys.stderr)
        return Exit.FAILED
    print(report.table())
    if args.json:
        write_json(report, args.json)
    if args.plot:
        write_plot(report, args.plot)
    if report.dtype == "float32" and any(a.flips for a in report.agreements.values()):
        print("ticketq-worker bench: label flips in float32: the modes should agree exactly", file=sys.stderr)
    return 0


def _warn_if_busy(opts: BenchOptions) -> None:
    load, cores = os.getloadavg()[0], peak_cores()
    if load > 0.5 * cores:
        print(
            f"ticketq-worker bench: load average {load:.2f} on {cores} cores: other processes are running. "
            f"Modes they overlap run slower (see the others column) and are re-run up to {opts.retries} "
            "times once the machine is quiet.",
            file=sys.stderr,
        )


def _load(args: BenchCommand) -> tuple[list[Item], str]:
    items = read_items(args.tickets)
    if args.quick:
        items = items[:QUICK_N]
    if len(items) < 2:
        raise ValueError(f"{args.tickets}: need at least 2 tickets")
    return items, str(args.tickets)

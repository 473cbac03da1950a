"""``python -m tools.chaos``: flags, the run, the printed summary, the exit code.

Exit 0 when the promise held; 1 when anything was lost or ended wrongly, something stayed behind, the
run did not settle, the canaries were not served, or a worker exited unasked; 2 on bad flags.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.chaos.run import FAKE, Config, Summary, run

_D = Config()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.chaos",
        description="Kill workers, their connections and Redis while tickets flow; prove none is lost.",
    )
    add = p.add_argument
    add("--tickets", type=int, default=_D.tickets, help=f"tickets to push (default {_D.tickets})")
    add("--workers", type=int, default=_D.workers, help=f"workers kept running (default {_D.workers})")
    add("--producers", type=int, default=_D.producers, help=f"producer threads (default {_D.producers})")
    add("--kills", type=int, default=_D.kills, help=f"worker SIGKILLs + SIGTERMs (default {_D.kills})")
    add("--client-kills", type=int, default=_D.client_kills, help="CLIENT KILLs of one worker's connections")
    add("--redis-restarts", type=int, default=_D.redis_restarts, help="Redis restarts (AOF kept)")
    add("--redis-full", type=int, default=_D.redis_full, help="spells of Redis refusing writes (maxmemory)")
    add("--hard-restarts", action="store_true", help="SIGKILL Redis instead of SHUTDOWN (AOF fsync always)")
    add(
        "--duration",
        type=float,
        default=_D.duration_s,
        help=f"chaos phase, seconds (default {_D.duration_s})",
    )
    add("--seed", type=int, default=_D.seed, help="seed of the tickets and of the fault schedule")
    add("--model", default=_D.model, help=f"worker --model (default {FAKE})")
    add("--delay-ms", type=int, default=_D.delay_ms, help="fake model: added ms per batch (default 20)")
    add("--worker-args", default="", help='extra worker flags, e.g. "--device cpu --threads 2"')
    add("--heartbeat-s", type=float, default=_D.heartbeat_s, help="worker heartbeat TTL (default 2)")
    add("--max-attempts", type=int, default=_D.max_attempts, help="worker --max-attempts (default 10)")
    add("--drain", type=int, default=_D.drain, help=f"worker --drain (default {_D.drain})")
    add(
        "--batch-size", type=int, default=_D.batch_size, help=f"worker --batch-size (default {_D.batch_size})"
    )
    add("--sigterm-share", type=float, default=_D.sigterm_share, help="share of kills that are SIGTERM")
    add("--bad-rate", type=float, default=_D.bad_rate, help="share of malformed payloads (default 0.02)")
    add("--startup", type=float, default=_D.startup_s, help="seconds allowed for workers to start")
    add("--settle", type=float, default=_D.settle_s, help="seconds allowed to drain after the chaos")
    add("--keep", type=Path, default=None, help="keep logs and the AOF in this directory")
    add("--json", type=Path, default=None, help="also write the summary as JSON here")
    add("--verbose", action="store_true", help="print every fault as it happens")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("redis-server") is None:
        print("chaos: redis-server is not on PATH", file=sys.stderr)
        return 2
    if min(args.tickets, args.workers, args.producers) < 1 or args.duration <= 0:
        print("chaos: --tickets, --workers, --producers and --duration must be positive", file=sys.stderr)
        return 2
    cfg = Config(
        tickets=args.tickets, workers=args.workers, producers=args.producers, kills=args.kills,
        client_kills=args.client_kills, redis_restarts=args.redis_restarts, redis_full=args.redis_full,
        duration_s=args.duration, seed=args.seed, model=args.model, delay_ms=args.delay_ms,
        worker_args=args.worker_args,
        heartbeat_s=args.heartbeat_s, max_attempts=args.max_attempts, drain=args.drain,
        batch_size=args.batch_size, sigterm_share=args.sigterm_share, bad_rate=args.bad_rate,
        hard_restarts=args.hard_restarts, startup_s=args.startup, settle_s=args.settle, keep=args.keep,
    )  # fmt: skip
    summary = run(cfg, say=lambda line: print(f"chaos: {line}", file=sys.stderr))
    if args.verbose:
        print("\n".join(summary.chaos.log), file=sys.stderr)
    print(render(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.ok else 1


def render(s: Summary) -> str:
    """The summary a person reads (docs/chaos.md quotes one)."""
    v, c = s.verdict, s.chaos
    faults = c.sigkill + c.sigterm + c.client_kills + c.redis_restarts + c.redis_full
    requeued = [
        f"{k.removeprefix('requeued ')} {n}" for k, n in s.workers.items() if k.startswith("requeued")
    ]
    rows = [
        ("verdict", "OK: nothing lost" if s.ok else "FAILED: " + "; ".join(s.problems)),
        ("tickets pushed", f"{s.pushed} payloads ({v.good} to classify, {v.malformed} malformed)"),
        ("results", f"{v.results}"),
        ("dead", f"{v.dead} (the malformed, one of each rival pair, {v.poisoned} poisoned)"),
        ("lost", f"{v.lost}"),
        ("ended wrongly", f"{v.wrong}"),
        ("duplicates", f"{v.duplicates} (payloads with more than one outcome)"),
        ("redelivered", f"{s.workers.get('redelivered', 0)} (classified again after a fault; one result)"),
        ("requeued", ", ".join(requeued) or "0"),
        ("left behind", f"{v.left_in_input} waiting, {v.left_in_flight} in flight"),
        ("kills survived", f"SIGKILL {c.sigkill}, SIGTERM {c.sigterm}, client kills {c.client_kills} "
                           f"({c.connections_killed} connections), redis restarts {c.redis_restarts}, "
                           f"redis full {c.redis_full}"),
        ("mid-batch", f"{c.mid_batch} of {faults} faults hit while a worker held a claim"),
        ("workers", f"{c.workers_started} started, {len(s.unexpected_exits)} exited unasked"),
        ("outages seen", f"{s.workers.get('redis_unavailable', 0)} redis_unavailable log lines"),
        ("producers", f"{s.producer_retries} pushes retried"),
        ("canaries", "served after the chaos" if s.canaries_served else "NOT served"),
        ("time", f"{s.seconds} s"),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {val}" for k, val in rows]
    for problem, examples in s.verdict.examples.items():
        lines.append(f"{problem}: {'; '.join(examples)}")
    return "\n".join(lines)

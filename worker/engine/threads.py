"""How many torch threads one worker process uses, and how many processes a machine should run.

The rule (``plan``), for the cores this process may use (CPU affinity, a cgroup CPU quota, and one
core per pair of SMT siblings: two hyper-threads share one core's vector units)::

    cores <= 4        1 process  x all cores     a pass's matmuls use every core; nothing to split
    5 .. 16 cores     cores // 4 processes x 4   ~9,000 small operators per pass each pay an OpenMP
    17 .. 64 cores    cores // 8 processes x 8   fork/join; past 4-8 threads they stop scaling, while
                                                 processes share nothing and scale ~linearly
    and never more processes than memory holds (``per_process_bytes`` each: weights + activations).

Why processes rather than threads past a few cores: a scoring pass of SmolLM2-135M is ~1,000 matmuls
of (1-4k tokens) x 576 x 576..1536 plus ~8,000 element-wise and attention operators. The matmuls scale
with threads; the element-wise operators, memory-bound and short, do not, and every parallel region
waits for its slowest thread. Inference servers on CPUs do the same: several single-socket, few-core
instances (Intel's ``torch.backends.xeon.run_cpu`` launcher, TorchServe's CPU guidance), each with
its own pinned cores. Each ticketq worker claims its own tickets from Redis, so K processes need no
coordination. Measured on 2 cores only (docs/bench.md): 1x2 and 2x1 are equal within noise; the rule
above 4 cores is the design, not a measurement.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
PER_PROCESS_BYTES = 2 * GIB  # SmolLM2-135M float32: ~0.6 GB of weights + ~1 GB of a pass's activations


@dataclass(frozen=True)
class ThreadPlan:
    cores: int  # usable physical cores
    processes: int  # worker processes this machine should run
    threads: int  # torch intra-op threads per process
    reason: str

    def log_fields(self) -> dict[str, object]:
        return {
            "threads": self.threads,
            "cores": self.cores,
            "processes_suggested": self.processes,
            "threads_rule": self.reason,
        }


def plan(
    cores: int | None = None,
    *,
    memory_bytes: int | None = None,
    per_process_bytes: int = PER_PROCESS_BYTES,
) -> ThreadPlan:
    """The module docstring's rule for ``cores`` (default: this process's usable physical cores)."""
    n = max(1, cores if cores is not None else usable_cores())
    if n <= 4:
        threads, why = n, f"{n} cores <= 4: one process uses them all"
    elif n <= 16:
        threads, why = 4, f"{n} cores: processes of 4 threads"
    else:
        threads, why = 8, f"{n} cores: processes of 8 threads"
    processes = max(1, n // threads)
    mem = memory_bytes if memory_bytes is not None else available_memory()
    if mem and processes > 1 and processes * per_process_bytes > mem:
        fit = max(1, mem // per_process_bytes)
        processes, threads = fit, max(1, n // fit)
        why += f"; memory holds {fit} processes of {per_process_bytes / GIB:.1f} GiB: {threads} threads each"
    return ThreadPlan(n, processes, threads, why)


def usable_cores() -> int:
    """Physical cores this process may run on: affinity, then SMT siblings folded, then a cgroup quota."""
    cpus = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    cores = _physical(cpus)
    quota = cgroup_cpu_limit()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def _physical(cpus: list[int]) -> int:
    seen: set[str] = set()
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            seen.add(path.read_text().strip())
        except OSError:
            return len(cpus)  # no topology (not Linux, or hidden): count logical CPUs
    return len(seen) or len(cpus)


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs a container may use (cgroup v2 ``cpu.max``, else v1 quota/period); None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        q = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        p = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return q / p if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def apply(threads: int | None) -> ThreadPlan:
    """Set torch's intra-op threads: ``threads`` when given (an operator's choice), else the rule's."""
    import torch

    chosen = plan()
    if threads:
        chosen = ThreadPlan(chosen.cores, chosen.processes, threads, f"set by the operator ({threads})")
    torch.set_num_threads(chosen.threads)
    return chosen

"""The threads/processes rule for 2..64 cores, and how usable cores are counted. No torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine import threads
from worker.engine.threads import GIB, plan

BIG = 1 << 50  # memory is no limit


@pytest.mark.parametrize(
    ("cores", "processes", "per_process"),
    [(1, 1, 1), (2, 1, 2), (4, 1, 4), (6, 1, 4), (8, 2, 4), (16, 4, 4), (24, 3, 8), (32, 4, 8), (64, 8, 8)],
)
def test_the_rule(cores: int, processes: int, per_process: int) -> None:
    p = plan(cores, memory_bytes=BIG)
    assert (p.processes, p.threads) == (processes, per_process)
    assert p.processes * p.threads <= cores
    assert p.reason


def test_memory_caps_the_processes() -> None:
    p = plan(64, memory_bytes=5 * GIB, per_process_bytes=2 * GIB)
    assert (p.processes, p.threads) == (2, 32)
    assert "memory" in p.reason


def test_cgroup_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert threads.cgroup_cpu_limit(tmp_path) == 2.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_limit(tmp_path) is None
    assert threads.cgroup_cpu_limit(tmp_path / "absent") is None


def test_usable_cores_is_at_least_one_and_at_most_the_cpus() -> None:
    import os

    n = threads.usable_cores()
    assert 1 <= n <= (os.cpu_count() or 1)

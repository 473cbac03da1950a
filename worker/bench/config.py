"""What a bench run is asked to do: the modes, in the order they run, and the options. No torch, so that
the flags can be checked before the model loads; :mod:`worker.bench.cli` fills these in and
:mod:`worker.bench.runner` runs them (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.options import EngineOptions

MODES = ("naive", "per-item", "bucketed", "per-item-cached", "llamacpp", "engine", "head", "end-to-end")
OPTIONAL = ("llamacpp",)  # run only when asked for: the llama.cpp peer (the optional extra ``peer``)
DEFAULT_MODES = tuple(m for m in MODES if m not in OPTIONAL)


@dataclass(frozen=True)
class BenchOptions:
    modes: list[str]
    workers: list[int]  # end-to-end: 0 = in process, K = K worker processes
    baseline_n: int
    seed: int
    engine: EngineOptions  # the engine mode and the end-to-end workers run these
    drain: int
    redis_url: str
    prefix: str | None
    noise_limit: float  # a mode during which others took more of the CPU than this is run again...
    retries: int  # ...at most this many times, once the machine is quiet, keeping the quietest run
    quiet_wait_s: float

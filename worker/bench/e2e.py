"""End to end: tickets pushed through Redis with the producer client, classified by the real worker
service, results read back. Timed from the first push to the last result.

In process, the service runs the very Engine object the other modes used. With worker processes,
``python -m worker`` is started K times by :mod:`worker.launch` (each with cores // K threads) and
allowed to load its model and score a few warm-up tickets before the clock starts, so the time is
throughput, not start-up. They are started without ``--burst``: a burst worker exits as soon as it sees
an empty queue, which is the state a ready worker is in before the push. They are stopped with SIGTERM
(finish the drain, then exit).
"""

from __future__ import annotations

import io
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import structlog

from producer.client import Client
from producer.protocol import Result
from worker.bench.data import Item
from worker.bench.modes import ModeResult, Progress
from worker.bench.peak import CpuMeter, cores
from worker.engine.engine import Engine
from worker.engine.options import EngineOptions
from worker.launch import WorkerProcess
from worker.settings import Settings
from worker.wiring import Loaded, build_service

WARMUP_TICKETS = 8
READY_TIMEOUT_S = 300.0


class EndToEndError(RuntimeError):
    """The queue path did not deliver every result (a worker died, tickets were dead-lettered...)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What each worker process is told, so that it runs what the in-process modes ran."""

    engine: EngineOptions
    drain: int


def run_in_process(
    engine: Engine, items: Sequence[Item], *, redis_url: str, prefix: str, drain: int, progress: Progress
) -> ModeResult:
    from worker import logs

    # The real worker logs one JSON event per pass at info; keep that cost, and read padding from it.
    log = io.StringIO()
    saved = structlog.get_config()
    logs.configure("json", "info", stream=log)
    try:
        return _in_process(engine, items, redis_url, prefix, drain, progress, log)
    finally:
        structlog.configure(**saved)  # the caller's logging, as it was


def _in_process(
    engine: Engine,
    items: Sequence[Item],
    redis_url: str,
    prefix: str,
    drain: int,
    progress: Progress,
    log: io.StringIO,
) -> ModeResult:
    settings = Settings(
        redis_url=redis_url,
        prefix=prefix,
        burst=True,
        drain=drain,
        engine=engine.options,
        worker_id=f"bench-{uuid.uuid4().hex[:8]}",
    )
    service = build_service(settings, Loaded(engine))
    client = Client(redis.Redis.from_url(redis_url), prefix)
    ids = [it.id for it in items]
    served = threading.Event()
    got: dict[str, Any] = {}

    def collect() -> None:
        # The service keeps the main thread, as in a real worker: here the same engine call runs
        # 15-20% slower from any other thread (measured), so it is the waiting that moves aside.
        try:
            got["results"] = wait_all(client, ids, alive=lambda: not served.is_set(), progress=progress)
            got["seconds"], got["others"] = time.perf_counter() - start, meter.others()
        except EndToEndError as exc:
            got["error"] = exc

    meter, start = CpuMeter(), time.perf_counter()
    client.push([{"id": it.id, "text": it.text} for it in items])
    waiter = threading.Thread(target=collect, name="bench-waiter", daemon=True)
    waiter.start()
    try:
        service.run()  # burst: returns once the queue is empty and nothing is held
    finally:
        served.set()
        waiter.join(timeout=60)
    if "error" in got or "results" not in got:
        raise got.get("error") or EndToEndError("the results were not all collected")
    results, seconds, others = got["results"], got["seconds"], got["others"]
    out = _result("end-to-end", ids, results, seconds, log.getvalue().splitlines())
    out.others_cpu = others
    return out


def run_processes(
    k: int,
    items: Sequence[Item],
    spec: WorkerSpec,
    *,
    redis_url: str,
    prefix: str,
    workdir: Path,
    progress: Progress,
) -> ModeResult:
    threads = max(1, cores() // k)
    client = Client(redis.Redis.from_url(redis_url), prefix)
    # All at once, as a deployment scales out (which is how a model-cache race showed up; fixed in 358d17e).
    workers = [_start(i, spec, threads, redis_url, prefix, workdir) for i in range(k)]
    try:
        _wait_ready(client, workers)
        warm = [{"id": f"warmup-{i}", "text": it.text} for i, it in enumerate(items[:WARMUP_TICKETS])]
        wait_all(client, client.push(warm), alive=lambda: all(w.alive for w in workers))
        offsets = [w.log.stat().st_size for w in workers]  # padding: count the timed passes only
        meter, start = CpuMeter(), time.perf_counter()
        ids = client.push([{"id": it.id, "text": it.text} for it in items])
        results = wait_all(client, ids, alive=lambda: all(w.alive for w in workers), progress=progress)
        seconds, others = time.perf_counter() - start, meter.others()  # before the workers exit
    finally:
        for w in workers:
            w.stop(timeout=60)
    lines = [line for w, off in zip(workers, offsets, strict=True) for line in w.lines_after(off)]
    out = _result(f"end-to-end-{k}p", ids, results, seconds, lines)
    out.others_cpu = others
    out.notes.append(f"{k} worker process(es), {threads} thread(s) each")
    return out


def wait_all(
    client: Client,
    ids: Sequence[str],
    *,
    alive: Callable[[], bool],
    progress: Progress | None = None,
    timeout: float | None = None,
) -> dict[str, Result]:
    """Every result for ``ids``, waiting on the events channel in short rounds so that a dead worker is
    noticed, and progress shown, long before the overall timeout."""
    deadline = time.monotonic() + (timeout or 120 + 5 * len(ids))
    pending, results = list(ids), {}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EndToEndError(f"{len(pending)} of {len(ids)} results missing after the timeout")
        waited = client.wait(pending, timeout=min(2.0, left))
        if waited.dead:
            raise EndToEndError(f"dead-lettered: {dict(list(waited.dead.items())[:3])}")
        got = dict(waited.results)
        pending = sorted(waited.pending)
        if pending and not alive():  # a burst service exits right after its last ack: look once more
            got.update(client.get_many(pending))
            pending = [tid for tid in pending if tid not in got]
            if pending:
                raise EndToEndError(f"the worker stopped with {len(pending)} results missing")
        results.update(got)
        if progress is not None and got:
            progress(len(got))
    return results


def _result(
    name: str, ids: Sequence[str], results: dict[str, Result], seconds: float, log: list[str]
) -> ModeResult:
    out = ModeResult(name, list(ids), [], [], seconds)
    for tid in ids:
        probs = sorted(results[tid].scores.values(), reverse=True)
        out.labels.append(results[tid].label)
        # Scores are softmax probabilities rounded to 6 places: the margin is approximate.
        out.margins.append(math.log(max(probs[0], 1e-12)) - math.log(max(probs[1], 1e-12)))
    for line in log:
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "batch":
            out.real_tokens += int(event["real_tokens"])
            out.padded_tokens += int(event["padded_tokens"])
    return out


def _start(
    i: int, spec: WorkerSpec, threads: int, redis_url: str, prefix: str, workdir: Path
) -> WorkerProcess:
    wid = f"bench-{i}-{uuid.uuid4().hex[:6]}"
    flags = ["--threads", str(threads), "--drain", str(spec.drain), *spec.engine.to_flags()]
    log = workdir / f"{wid}.log"
    return WorkerProcess.start(redis_url=redis_url, prefix=prefix, worker_id=wid, log=log, flags=flags)


def _wait_ready(client: Client, workers: Sequence[WorkerProcess]) -> None:
    """A worker beats its heartbeat only once its model is loaded: wait for every one of them."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(client.redis.exists(client.keys.heartbeat(w.id)) for w in workers):
        for w in workers:
            if not w.alive:
                raise EndToEndError(f"worker {w.id} exited with {w.proc.returncode}:\n{w.tail()}")
        if time.monotonic() > deadline:
            raise EndToEndError(f"workers not ready after {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.1)  # start-up is seconds long; a coarse poll costs nothing here

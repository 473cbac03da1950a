"""One chaos run: start Redis and the workers, push while breaking things, settle, stop, audit.

Every fault is aimed at a worker that holds a claim when one does (``mid_batch`` counts those), because a
worker killed while idle proves little. Each killed worker is replaced at once, the way an orchestrator
would. After the chaos, a few *canary* tickets must still be served: the fleet keeps working.
"""

from __future__ import annotations

import functools
import random
import shlex
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import redis

from producer.protocol import Keys
from tools.chaos.audit import Verdict, audit, log_totals
from tools.chaos.feed import GOOD, Planned, Producer, plan, wire
from tools.chaos.fleet import Fleet
from tools.fake import PREFIX as FAKE_PREFIX
from tools.fakeworker import DEFAULT_MODEL as FAKE
from tools.redis_server import RedisServer
from worker.launch import WorkerProcess

PREFIX = "chaos"


@dataclass(frozen=True)
class Config:
    tickets: int = 5000
    workers: int = 4
    producers: int = 2
    kills: int = 24  # SIGKILL or SIGTERM (sigterm_share of them) of a worker, each replaced at once
    client_kills: int = 4  # CLIENT KILL of every connection of one worker
    redis_restarts: int = 2
    redis_full: int = 0  # spells of maxmemory below use: Redis refuses every write for about a second
    duration_s: float = 30.0  # the chaos phase; pushing is spread over most of it
    seed: int = 0
    model: str = FAKE  # the keyword double, run by tools.fakeworker
    delay_ms: int = 20  # added to the fake model's batches, so kills land mid-batch
    worker_args: str = ""  # extra worker flags, e.g. "--device cpu --threads 2"
    heartbeat_s: float = 2.0  # short, so dead workers are recovered quickly; above a restart's outage
    max_attempts: int = 10  # high: random kills should not turn good tickets into poison
    drain: int = 32
    batch_size: int = 8
    sigterm_share: float = 0.4
    bad_rate: float = 0.02
    hard_restarts: bool = False  # SIGKILL Redis instead of SHUTDOWN (AOF fsync=always then)
    canaries: int = 20
    startup_s: float = 60.0  # a real model takes a while to load
    settle_s: float = 120.0
    keep: Path | None = None  # keep the logs and the AOF here instead of a temporary directory


@dataclass
class Tally:
    sigkill: int = 0
    sigterm: int = 0
    client_kills: int = 0
    connections_killed: int = 0
    redis_restarts: int = 0
    redis_full: int = 0
    mid_batch: int = 0  # faults that hit while a worker held a claim
    workers_started: int = 0
    log: list[str] = field(default_factory=list)


@dataclass
class Summary:
    ok: bool
    seconds: float
    pushed: int  # LPUSHed payloads: twins twice, canaries included, producer retries not
    verdict: Verdict
    chaos: Tally
    workers: dict[str, int]  # totals from the workers' own logs
    unexpected_exits: list[str]
    producer_retries: int
    settled: bool
    canaries_served: bool
    problems: list[str]
    config: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run(cfg: Config, say: Callable[[str], None] = print) -> Summary:
    if cfg.keep is not None:
        cfg.keep.mkdir(parents=True, exist_ok=True)
        return _run_in(cfg, cfg.keep, say)
    with tempfile.TemporaryDirectory(prefix="ticketq-chaos-") as tmp:
        return _run_in(cfg, Path(tmp), say)


def _run_in(cfg: Config, root: Path, say: Callable[[str], None]) -> Summary:
    began = time.monotonic()
    keys = Keys(PREFIX)
    server = RedisServer(root / "redis", fsync="always" if cfg.hard_restarts else "everysec")
    (root / "logs").mkdir(exist_ok=True)
    module = "tools.fakeworker" if cfg.model.startswith(FAKE_PREFIX) else "worker"
    fleet = Fleet(server.url, PREFIX, root / "logs", _worker_flags(cfg), module=module)
    problems: list[str] = []
    try:
        server.start()
        r = server.client()
        say(f"redis-server on port {server.port} (AOF), {cfg.workers} workers, model {cfg.model}")
        for _ in range(cfg.workers):
            fleet.spawn()
        _wait(lambda: all(r.exists(keys.heartbeat(w.id)) for w in fleet.workers), cfg.startup_s)
        planned = plan(cfg.tickets, cfg.seed, bad_rate=cfg.bad_rate, fake=cfg.model.startswith(FAKE_PREFIX))
        payloads = wire(planned)
        producers = [
            Producer(
                functools.partial(server.client, f"chaos-producer-{n}"),
                keys.tickets,
                payloads[n :: cfg.producers],
                spread_s=cfg.duration_s * 0.8,
                seed=cfg.seed * 1000 + n,
            )
            for n in range(cfg.producers)
        ]
        for p in producers:
            p.thread.start()
        chaos = Chaos(cfg, server, fleet, keys, say)
        chaos.run(began)
        for p in producers:
            p.thread.join(120)
            if p.error or p.thread.is_alive():
                problems.append(f"producer stopped early: {p.error or 'still pushing'}")
        canaries = [Planned(_canary(cfg.seed, n), GOOD, f"canary-{n}") for n in range(cfg.canaries)]
        if canaries:
            r.lpush(keys.tickets, *[c.payload for c in canaries])
        say(f"chaos over after {time.monotonic() - began:.1f} s; settling")
        settled = _wait(lambda: _settled(r, keys), cfg.settle_s, twice=True)
        served = all(v is not None for v in r.hmget(keys.results, [c.id or "" for c in canaries]))
        fleet.stop_all()
        verdict = audit(r, keys, [*planned, *canaries])
        r.close()
    finally:
        fleet.kill_all()
        server.crash()
    chaos.tally.workers_started = len(fleet.workers)
    unexpected = [
        f"{w.id}: exit {w.exit_code} (signalled: {w.signalled})" for w in fleet.workers if w.unexpected_exit
    ]
    problems += _problems(verdict, settled, served, unexpected)
    return Summary(
        ok=not problems,
        seconds=round(time.monotonic() - began, 1),
        pushed=len(payloads) + len(canaries),
        verdict=verdict,
        chaos=chaos.tally,
        workers=log_totals(e for w in fleet.workers for e in w.events()),
        unexpected_exits=unexpected,
        producer_retries=sum(p.retries for p in producers),
        settled=settled,
        canaries_served=served,
        problems=problems,
        config={k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
    )


class Chaos:
    """The fault schedule: one event per kill, client kill, restart and full spell, at seeded random times."""

    def __init__(
        self, cfg: Config, server: RedisServer, fleet: Fleet, keys: Keys, say: Callable[[str], None]
    ) -> None:
        self.cfg = cfg
        self.server = server
        self.fleet = fleet
        self.keys = keys
        self.say = say
        self.rng = random.Random(cfg.seed)
        self.tally = Tally()
        self.r = server.client("chaos-monkey")
        self._last = ""  # what the latest fault did, for the log
        self._busy = False  # whether the latest target held a claim

    def schedule(self) -> list[tuple[float, str]]:
        kinds = ["kill"] * self.cfg.kills + ["client_kill"] * self.cfg.client_kills
        kinds += ["redis_restart"] * self.cfg.redis_restarts + ["redis_full"] * self.cfg.redis_full
        times = sorted(self.rng.uniform(0.05, 0.9) * self.cfg.duration_s for _ in kinds)
        self.rng.shuffle(kinds)
        return list(zip(times, kinds, strict=True))

    def run(self, began: float) -> None:
        start = time.monotonic()
        for at, kind in self.schedule():
            time.sleep(max(0.0, start + at - time.monotonic()))
            getattr(self, f"_{kind}")()
            self.tally.log.append(f"{time.monotonic() - began:7.2f}s {kind}: {self._last}")
        time.sleep(max(0.0, start + self.cfg.duration_s - time.monotonic()))
        self.r.close()

    # -- the faults ------------------------------------------------------------------------------------

    def _kill(self) -> None:
        sig = signal.SIGTERM if self.rng.random() < self.cfg.sigterm_share else signal.SIGKILL
        target = self._target()
        if target is None:
            self._last = "no worker to kill"
            return
        self.fleet.signal(target, sig)
        self.fleet.spawn()  # the replacement, as an orchestrator would start one
        self.tally.mid_batch += self._busy
        if sig == signal.SIGKILL:
            self.tally.sigkill += 1
        else:
            self.tally.sigterm += 1
        self._last = f"{sig.name} {target.id}"

    def _client_kill(self) -> None:
        # Right after a restart a worker may not have reconnected yet: look again rather than count a
        # kill that cut nothing.
        deadline = time.monotonic() + 2.0
        while True:
            target = self._target()
            if target is None:
                self._last = "no worker to cut off"
                return
            ids = [c["id"] for c in self.r.client_list(_type="normal") if c.get("name") == target.id]
            if ids or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for cid in ids:
            self.r.client_kill_filter(_id=cid)
        self.tally.client_kills += 1
        self.tally.mid_batch += self._busy
        self.tally.connections_killed += len(ids)
        self._last = f"{len(ids)} connections of {target.id}"

    def _redis_restart(self) -> None:
        self._target()  # wait (briefly) until some worker holds a claim: the restart lands mid-batch
        down = self.rng.uniform(0.1, 0.5)
        self.server.restart(down_s=down, hard=self.cfg.hard_restarts)
        self.tally.redis_restarts += 1
        self.tally.mid_batch += self._busy
        self._last = f"{'SIGKILL' if self.cfg.hard_restarts else 'SHUTDOWN'}, down {down:.2f} s"

    def _redis_full(self) -> None:
        """maxmemory below what is used (noeviction): every write is refused until it is lifted."""
        self._target()
        spell = self.rng.uniform(0.5, 1.5)
        self.r.config_set("maxmemory", 1)
        time.sleep(spell)
        self.r.config_set("maxmemory", 0)
        self.tally.redis_full += 1
        self.tally.mid_batch += self._busy
        self._last = f"full for {spell:.2f} s"

    def _target(self, look_s: float = 1.0) -> WorkerProcess | None:
        """A started worker, preferably one holding a claim (looked for up to ``look_s``)."""
        deadline = time.monotonic() + look_s
        while True:
            started = [w for w in self.fleet.serving() if _safe(functools.partial(self._beating, w))]
            busy = [w for w in started if _safe(functools.partial(self._holding, w))]
            self._busy = bool(busy)
            if busy:
                return self.rng.choice(busy)
            if time.monotonic() > deadline:
                return self.rng.choice(started) if started else None
            time.sleep(0.005)

    def _beating(self, w: WorkerProcess) -> bool:
        return bool(self.r.exists(self.keys.heartbeat(w.id)))

    def _holding(self, w: WorkerProcess) -> bool:
        return bool(self.r.llen(self.keys.inflight(w.id)))


def _worker_flags(cfg: Config) -> list[str]:
    model = cfg.model
    if model.startswith(FAKE_PREFIX) and "?" not in model and cfg.delay_ms:
        model += f"?delay_ms={cfg.delay_ms}"
    flags = ["--model", model, "--heartbeat-s", str(cfg.heartbeat_s), "--max-attempts", str(cfg.max_attempts)]
    flags += ["--drain", str(cfg.drain), "--batch-size", str(cfg.batch_size), "--max-wait-ms", "20"]
    return flags + shlex.split(cfg.worker_args)


def _canary(seed: int, n: int) -> bytes:
    return f'{{"id": "canary-{n}", "text": "after the chaos: my invoice {seed}-{n} is wrong"}}'.encode()


# One atomic look at the input and every in-flight list. Read one key after another, a recovery that
# moves a dead worker's claim back to the input between the two reads would look like "all done".
# KEYS inside a script: fine for the harness's own standalone server, never used by workers.
_UNSETTLED = """
local n = redis.call('LLEN', KEYS[1])
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('LLEN', k) end
return n
"""


def unsettled(r: redis.Redis, keys: Keys) -> int:
    """Payloads waiting or in flight, counted in one atomic step (0: everything pushed has ended)."""
    return int(cast(int, r.eval(_UNSETTLED, 1, keys.tickets, keys.inflight("*"))))


def _settled(r: redis.Redis, keys: Keys) -> bool:
    """Nothing waiting and nothing in flight: dead workers' claims are recovered only after their TTL."""
    return unsettled(r, keys) == 0


def _wait(condition: Callable[[], object], timeout: float, *, twice: bool = False) -> bool:
    """Poll (the harness may; workers may not) until ``condition`` holds, ``twice`` in a row 0.3 s apart."""
    deadline = time.monotonic() + timeout
    streak = 0
    while time.monotonic() < deadline:
        streak = streak + 1 if _safe(condition) else 0
        if streak >= (2 if twice else 1):
            return True
        time.sleep(0.3 if twice else 0.05)
    return False


def _safe(fn: Callable[[], Any]) -> Any:
    """A harness probe that meets a restarting Redis counts as 'not yet', not as a crash."""
    try:
        return fn()
    except (redis.ConnectionError, redis.TimeoutError):
        return None


def _problems(v: Verdict, settled: bool, served: bool, unexpected: list[str]) -> list[str]:
    checks = [
        (v.lost, f"{v.lost} lost"),
        (v.wrong, f"{v.wrong} ended wrongly"),
        (v.stray, f"{v.stray} stray results or dead letters"),
        (v.left_in_input + v.left_in_flight, f"{v.left_in_input} waiting, {v.left_in_flight} in flight"),
        (not settled, "did not settle in time"),
        (not served, "canaries not served after the chaos"),
        (unexpected, f"unexpected worker exits: {unexpected}"),
    ]
    return [text for failed, text in checks if failed]

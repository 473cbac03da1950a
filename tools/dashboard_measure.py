"""p95 latency of the dashboard's pages, and the Redis time each costs, over a large Redis.

Starts a private ``redis-server`` (so ``INFO commandstats`` counts only the dashboard), seeds it with
pipelines (default 100,000 results with their texts, 10,000 dead letters, a review queue at its bound of
``MAX_REVIEW`` ids), serves the dashboard with uvicorn on a free local port and GETs each page ``--n``
times, one at a time; then runs the background sampler's work (:func:`producer.dashboard.overview.sample`,
every ``--poll`` whether or not anyone looks) ``--n`` times. Redis time per request is the ``usec`` delta
of ``INFO commandstats`` over those requests (the sampler is paused meanwhile); "one command" is
SLOWLOG's 99th percentile and longest duration over the dashboard's commands (every command logged): how
long one command held the Redis every client shares; bytes are the ``total_net_output_bytes`` delta.
Everything goes when it ends.

    python -m tools.dashboard_measure [--results 100000] [--dead 10000] [--review 10000] [--n 50]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import httpx
import redis

LABELS = ("billing", "technical", "account", "refund", "fraud")
PREFIX = "measure"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed(r: redis.Redis, results: int, dead: int, review: int = 0) -> None:
    from producer.protocol import DeadLetter, Keys, Result

    keys, rng, now = Keys(PREFIX), random.Random(7), time.time()
    words = [
        "my",
        "card",
        "was",
        "charged",
        "twice",
        "and",
        "the",
        "refund",
        "never",
        "arrived",
        "please",
        "help",
    ]
    with r.pipeline(transaction=False) as pipe:
        for n in range(results):
            label = LABELS[n % len(LABELS)]
            scores = {name: 0.05 for name in LABELS} | {label: 0.8}
            at = round(now - n * 0.05, 3)  # 100,000 results over the last ~83 minutes, newest first
            fields = {"customer": f"C-{n}", "channel": "email"}
            if n % 100 == 0:
                fields["attachment"] = "x" * 20_000  # a few producers attach large fields
            result = Result(f"T-{n}", label, scores, "m", "d", fields=fields, at=at, method="head", head="1")
            pipe.hset(keys.results, result.id, result.to_json())
            pipe.zadd(keys.done, {result.id: at})
            text = " ".join(rng.choices(words, k=rng.choice((10, 40, 120, 800))))  # 800 words: ~5,000 chars
            pipe.set(keys.text(result.id), text, ex=3600)
            if n % 1000 == 999:
                pipe.execute()
        for n in range(dead):
            payload = json.dumps({"id": f"D-{n}", "text": "x" * rng.choice((20, 2000)), "v": 1}).encode()
            pipe.lpush(
                keys.dead, DeadLetter(reason="engine error: boom", payload=payload, id=f"D-{n}").to_json()
            )
            if n % 1000 == 999:
                pipe.execute()
        for n in range(0, review, 1000):  # the review queue: margins in no order of time, as workers write it
            pipe.zadd(
                keys.review, {f"T-{i}": (i * 7919 % review) / review for i in range(n, min(n + 1000, review))}
            )
        pipe.execute()


def _commandstats(r: redis.Redis) -> tuple[int, int]:
    """(total usec, total calls) over every command, and the output bytes."""
    stats = r.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values()), sum(int(v["calls"]) for v in stats.values())


def measure(base: str, r: redis.Redis, path: str, n: int) -> dict[str, Any]:
    times = []
    usec0, calls0 = _commandstats(r)
    out0 = int(r.info("stats")["total_net_output_bytes"])
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(n):
            t0 = time.perf_counter()
            resp = http.get(path)
            times.append(time.perf_counter() - t0)
            assert resp.status_code == 200, (path, resp.status_code)
    usec1, calls1 = _commandstats(r)
    out1 = int(r.info("stats")["total_net_output_bytes"])
    return _row(path, times, n, usec1 - usec0, calls1 - calls0, out1 - out0, r, len(resp.content))


def _row(
    path: str, times: list[float], n: int, usec: int, calls: int, out: int, r: redis.Redis, page: int
) -> dict[str, Any]:
    times.sort()
    ours = sorted(  # the dashboard's commands, not this tool's INFO and SLOWLOG
        (int(e["duration"]), bytes(e["command"]).split()[0].decode().upper())
        for e in r.slowlog_get(1_000_000)
        if not bytes(e["command"]).upper().startswith((b"INFO", b"SLOWLOG"))
    )
    p99 = ours[min(len(ours) - 1, int(0.99 * len(ours)))][0] if ours else 0
    longest, name = ours[-1] if ours else (0, "")
    r.slowlog_reset()
    return {
        "path": path,
        "p50_ms": round(1000 * statistics.median(times), 1),
        "p95_ms": round(1000 * times[max(0, round(0.95 * n) - 1)], 1),
        "redis_ms": round(usec / n / 1000, 2),  # the two INFO calls in between: microseconds
        "commands": round((calls - 2) / n, 1),
        # SLOWLOG (every command logged): how long one command held the Redis every client shares. The
        # longest is noisy where the machine is shared (a preempted Redis); the 99th percentile less so
        "command_ms_p99_max": f"{p99 / 1000:.2f} / {longest / 1000:.2f} {name}",
        "redis_kib": round(out / n / 1024, 1),
        "page_kib": round(page / 1024, 1),
    }


def measure_sampler(client: Any, r: redis.Redis, n: int) -> dict[str, Any]:
    """What the dashboard's background sampler costs each ``--poll`` (not a page: it runs whether or not
    anyone looks)."""
    from producer.dashboard import overview

    history, times = overview.History(), []
    r.slowlog_reset()
    usec0, calls0 = _commandstats(r)
    out0 = int(r.info("stats")["total_net_output_bytes"])
    for _ in range(n):
        t0 = time.perf_counter()
        overview.sample(client, history)
        times.append(time.perf_counter() - t0)
    usec1, calls1 = _commandstats(r)
    out1 = int(r.info("stats")["total_net_output_bytes"])
    return _row("(the sampler, each poll)", times, n, usec1 - usec0, calls1 - calls0, out1 - out0, r, 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=int, default=100_000)
    p.add_argument("--dead", type=int, default=10_000)
    p.add_argument("--review", type=int, default=None, help="ids in the review queue (default MAX_REVIEW)")
    p.add_argument("--n", type=int, default=50)
    p.add_argument(
        "--paths", default="/,/results,/results?label=fraud&low=1,/dead,/dead?page=150,/tickets/T-500,/review"
    )
    args = p.parse_args(argv)
    import uvicorn

    from producer.client import Client

    try:  # this checkout's dashboard; the older layout (Config in app) for side-by-side runs
        from producer.dashboard.web import Config
    except ImportError:
        from producer.dashboard.app import Config  # type: ignore[attr-defined,no-redef,unused-ignore]
    from producer.dashboard.app import create_app

    workdir = tempfile.mkdtemp(prefix="tq-measure-")
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        r = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        t0 = time.perf_counter()
        from producer.protocol import MAX_REVIEW

        review = MAX_REVIEW if args.review is None else args.review
        seed(r, args.results, args.dead, min(review, args.results))
        r.config_set("slowlog-log-slower-than", 0)  # every command's duration, for the longest one
        r.config_set("slowlog-max-len", 1_000_000)
        print(
            f"seeded {args.results} results, {args.dead} dead letters, {review} ids to review in "
            f"{time.perf_counter() - t0:.1f} s; "
            f"Redis uses {r.info('memory')['used_memory_human']}",
            file=sys.stderr,
        )
        config = Config(redis_url=url, prefix=PREFIX, sample_s=3600.0)  # one sample at start, then quiet
        app = create_app(config, Client.from_url(url, PREFIX))
        web_port = _free_port()
        web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=web_port, log_level="warning"))
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        while not web.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{web_port}"
        with httpx.Client(base_url=base) as http:  # warm up: templates compiled, first sample taken
            for path in args.paths.split(","):
                http.get(path)
        r.slowlog_reset()
        rows = [measure(base, r, path, args.n) for path in args.paths.split(",")]
        rows.append(measure_sampler(Client.from_url(url, PREFIX), r, args.n))
        web.should_exit = True
        thread.join(timeout=10)
        print(
            "| page | p50 ms | p95 ms | Redis ms/request | commands/request | one command ms: p99 / max "
            "| KiB from Redis | page KiB |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for row in rows:
            cells = [f"`{row['path']}`", *(str(row[k]) for k in list(row)[1:])]
            print("| " + " | ".join(cells) + " |")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

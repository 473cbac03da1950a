"""``make demo`` / ``python -m tools.demo``: the whole system on the embedded defaults, in one command.

1. Find a Redis: ``TICKETQ_REDIS_URL``, else 127.0.0.1:6379 when it answers, else a throwaway
   ``redis-server`` on a free port when the binary is installed, else fakeredis's embedded TCP server.
2. Push the bundled sample (worker/data/sample_tickets.jsonl: synthetic tickets and an attributed
   Banking77 sample) under the prefix ``ticketq-demo``, cleared first so a second run starts clean.
3. Run the real worker service (embedded SmolLM2, default dtype) in burst mode, with a progress bar.
4. Print a short results table and the throughput, and the accuracy against the sample's labels.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from producer.client import Client
from producer.options import DEFAULT_REDIS_URL
from producer.protocol import Keys, Result
from tools.redis_server import local_redis

SAMPLE = Path(__file__).resolve().parents[1] / "worker" / "data" / "sample_tickets.jsonl"
PREFIX = "ticketq-demo"


@contextmanager
def find_redis() -> Iterator[tuple[str, str]]:
    """(url, where it came from), for the demo's lifetime."""
    url = os.environ.get("TICKETQ_REDIS_URL", DEFAULT_REDIS_URL)
    with local_redis(try_urls=[url], embedded=True) as (found, how):
        assert found is not None  # embedded: fakeredis is the last resort
        if how == "answering":
            how = "configured" if "TICKETQ_REDIS_URL" in os.environ else "local"
        yield found, how


def load_sample() -> list[dict[str, Any]]:
    with SAMPLE.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main() -> int:
    from worker import logs
    from worker.settings import Settings
    from worker.wiring import build_service, load_classifier

    logs.configure("console", "warning")  # the demo prints its own summary; warnings still show
    tickets = load_sample()
    with find_redis() as (url, where):
        print(f"Redis: {url} ({where})")
        conn = redis.Redis.from_url(url)
        keys = Keys(PREFIX)
        stale = list(conn.scan_iter(match=f"{PREFIX}:*", count=1000))
        if stale:
            conn.unlink(*stale)  # freed in the background: a big results hash does not block Redis
        # A smaller drain than the service's default, so the progress bar moves in visible steps.
        settings = Settings(redis_url=url, prefix=PREFIX, burst=True, log_format="console", drain=64)
        print(
            "Loading the embedded model and its head (the first run converts the model, ~15 s, and trains "
            "the built-in head from worker/data/head_train.csv, about a minute; both are cached)...",
            flush=True,
        )
        start = time.perf_counter()
        loaded = load_classifier(settings)
        info = loaded.classifier.describe()
        print(
            f"Model: {info['model']} ({info['dtype']}, {info['device']}, {info.get('threads')} threads), "
            f"ready in {time.perf_counter() - start:.1f} s"
        )
        head = info.get("head")
        method = (
            f"trained head {head['id']} (cross-validated {head['cv_accuracy']:.1%})" if head else "zero-shot"
        )
        print(f"Labels by: {method}")
        client = Client(conn, PREFIX)
        # Pushed one by one in the order a stream would arrive; the worker drains them in bulk.
        ids = client.push([{k: v for k, v in t.items() if k != "label"} for t in tickets])
        print(f"Pushed {len(ids)} tickets onto {keys.tickets}")
        service = build_service(settings, loaded)
        # The service keeps the main thread, as in a real worker (torch runs slower from a side thread);
        # the progress bar watches Redis from a side thread.
        finished = threading.Event()
        bar = threading.Thread(target=_progress, args=(url, keys, len(ids), finished), daemon=True)
        began = time.perf_counter()
        bar.start()
        service.run()
        seconds = time.perf_counter() - began
        finished.set()
        bar.join()
        results = client.get_many(ids)
        dead = conn.llen(keys.dead)
    _report(tickets, results, seconds, int(dead), method)
    print(dashboard_hint(where))
    return 0 if len(results) + int(dead) == len(ids) else 1


def dashboard_hint(where: str) -> str:
    """How to look at this run in ticketq-dashboard (the results stay only in a Redis that outlives us)."""
    command = f"ticketq-dashboard --prefix {PREFIX}"
    if where in ("local", "configured"):  # "configured": it reads the same TICKETQ_REDIS_URL
        return f"Dashboard: {command}  then open http://127.0.0.1:8400/ (add --token to correct labels)"
    return (
        f"Dashboard: this run's Redis ({where}) is gone; with a redis-server on 127.0.0.1:6379 the results "
        f"stay, then: {command} and open http://127.0.0.1:8400/"
    )


def _progress(url: str, keys: Keys, total: int, finished: threading.Event) -> None:
    from tqdm import tqdm

    conn = redis.Redis.from_url(url)
    with tqdm(total=total, unit="ticket", desc="classifying", file=sys.stdout, mininterval=1.0) as bar:
        while not finished.wait(0.2):
            done = int(conn.hlen(keys.results)) + int(conn.llen(keys.dead))
            bar.update(done - bar.n)
        bar.update(total - bar.n)


def _report(
    tickets: list[dict[str, Any]], results: dict[str, Result], seconds: float, dead: int, method: str
) -> None:
    print()
    print(f"{'ticket':<62} {'label':<10} {'conf':>5}  {'expected':<10}")
    print("-" * 92)
    shown = [t for t in tickets if t.get("source") == "banking77"][:6] + [
        t for t in tickets if t.get("source") != "banking77"
    ][:6]
    for t in shown:
        r = results.get(t["id"])
        if r is None:
            continue
        excerpt = " ".join(t["text"].split())
        excerpt = excerpt[:59] + "..." if len(excerpt) > 62 else excerpt
        print(f"{excerpt:<62} {r.label:<10} {r.scores[r.label]:>5.2f}  {t.get('label', ''):<10}")
    labelled = [t for t in tickets if t.get("label") and t["id"] in results]
    right = sum(results[t["id"]].label == t["label"] for t in labelled)
    print("-" * 92)
    rate = len(results) / seconds
    print(f"{len(results)} results, {dead} dead letters in {seconds:.1f} s: {rate:.1f} tickets/s")
    if labelled:
        print(
            f"accuracy against the sample's labels: {right}/{len(labelled)} ({right / len(labelled):.0%}), "
            f"labels by {method}"
        )


if __name__ == "__main__":
    sys.exit(main())

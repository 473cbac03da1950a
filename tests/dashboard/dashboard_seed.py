"""A known dashboard state in Redis: what the dashboard tests put there and look for."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from producer.protocol import DeadLetter, Keys, Result

TOKEN = "test-token-0123456789"
LABELS = ("billing", "technical", "account")
XSS = "<script>alert(1)</script>"


@dataclass
class Seeded:
    """What :func:`seed` put in Redis, for the tests to look for on the pages."""

    waiting: int
    inflight: int
    dead: int
    results: dict[str, str]  # id -> label
    texts: dict[str, str]


def seed(r: redis.Redis, keys: Keys, now: float | None = None) -> Seeded:
    now = time.time() if now is None else now
    results = {"T-1": "billing", "T-2": "technical", "T-3": "billing", "T-XSS": "account"}
    texts = {
        "T-1": "I was charged twice",
        "T-2": "The app crashes",
        "T-3": "Refund please",
        "T-XSS": XSS,
    }
    for n, (tid, label) in enumerate(results.items()):
        scores = {name: 0.1 for name in LABELS}
        scores[label] = 0.8 if tid != "T-3" else 0.4
        result = Result(id=tid, label=label, scores=scores, model="fake", digest="d", worker="w1", at=now - n)
        r.hset(keys.results, tid, result.to_json())
        r.zadd(keys.done, {tid: result.at})
        r.set(keys.text(tid), texts[tid], ex=600)
    for n in range(7):
        payload = {"id": f"W-{n}", "text": f"waiting {n}", "v": 1, "enqueued_at": now - 42 + n}
        r.lpush(keys.tickets, json.dumps(payload))
    r.sadd(keys.workers, "w1", "w2")
    r.set(keys.heartbeat("w1"), json.dumps({"id": "w1", "model": "fake", "host": "h", "at": now - 3}), ex=60)
    r.rpush(keys.inflight("w1"), b"{}", b"{}", b"{}")
    r.rpush(keys.inflight("w2"), b"{}")  # w2's heartbeat expired: shown as not alive
    for reason in ("not JSON: Expecting value", "missing field: text"):
        r.rpush(keys.dead, DeadLetter(reason=reason, payload=b"oops " + XSS.encode(), worker="w1").to_json())
    replayable = json.dumps({"id": "D-1", "text": "charged again", "v": 1}).encode()
    r.lpush(keys.dead, DeadLetter(reason="engine error: boom", payload=replayable, id="D-1").to_json())
    return Seeded(waiting=7, inflight=4, dead=3, results=results, texts=texts)

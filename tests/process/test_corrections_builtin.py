"""Issue 24's scenario through a real worker process, with the embedded model and the built-in task.

A labelled stream of held-out tickets (real Banking77 *test* queries and seeded synthetic tickets, none of
them in the head's training data) goes through the worker with the built-in head; its wrong labels are
corrected with ``Client.label``; ``train --from-redis --publish`` trains on the task's base data plus the
corrections at the head in use's L2 penalty, passes the publish gate and the worker loads the head without
a restart. Fresh tickets of the same kind, never seen by either head, must be labelled as accurately as
before, to within two tickets, and so must the kind of ticket that was corrected (the label most corrections
moved tickets to). Before the fix this loop trained on the corrections alone and fell from 90% to 49% on
fresh tickets. One split of 150 + 150 tickets cannot show a gain of a few tenths of a point: the
simulation over 30 splits does (``tools/corrections_sim.py``, docs/head.md, Corrections).

Slow (the model runs on 2 CPU cores: a few minutes); the numbers are printed for docs/head.md.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis
from support import wait_for

from producer.client import Client
from producer.protocol import Keys
from tools.synthetic import generate
from worker.launch import WorkerProcess

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "worker" / "data"
PER_SET = 75  # real and synthetic tickets in the stream, and again in the fresh set: 150 + 150
# One ticket of the 150 fresh ones. With the head in use's penalty kept, the new head changes the label of
# 0.9% of fresh tickets; a random 150-ticket fresh set loses one ticket or more in 22% of draws, two or more
# in 5% (`python -m tools.corrections_sim churn`), though over all fresh tickets it gains (docs/head.md,
# Corrections). Before, a penalty chosen again moved the head by up to 3 tickets of 150 on its own.
NOISE = 2 / (2 * PER_SET)  # two tickets: float32 rounding with other thread counts may flip one more


def held_out() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(stream, fresh): disjoint, and no text of the head's training data (head_train.csv) in either."""

    def norm(text: str) -> str:
        return " ".join(text.lower().split())

    with (DATA / "head_train.csv").open(newline="", encoding="utf-8") as f:
        seen = {norm(r["text"]) for r in csv.DictReader(f)}
    with (DATA / "banking77_eval.csv").open(newline="", encoding="utf-8") as f:
        real = [r for r in csv.DictReader(f) if norm(r["text"]) not in seen]

    def synthetic(seed: int, tag: str) -> list[dict[str, str]]:
        rows = [t for t in generate(PER_SET * 2, seed=seed) if norm(t.text) not in seen][:PER_SET]
        return [{"id": f"{tag}-{t.id}", "text": t.text, "label": t.label} for t in rows]

    stream = [dict(r) for r in real[0::2][:PER_SET]] + synthetic(31, "s31")
    fresh = [dict(r) for r in real[1::2][:PER_SET]] + synthetic(37, "s37")
    assert not {norm(r["text"]) for r in stream} & {norm(r["text"]) for r in fresh}
    return stream, fresh


def test_corrections_make_the_builtin_router_better_on_fresh_tickets(
    redis_url: str, r: redis.Redis, keys: Keys, tmp_path: Path
) -> None:
    stream, fresh = held_out()
    truth = {row["id"]: row["label"] for row in stream + fresh}
    flags = ["--threads", "2", "--drain", "64", "--heartbeat-s", "10"]
    worker = WorkerProcess.start(
        redis_url=redis_url, prefix=keys.prefix, worker_id="loop", log=tmp_path / "w.log", flags=flags
    )
    try:
        client = Client(r, keys.prefix)
        tickets = [{"id": t["id"], "text": t["text"]} for t in stream + fresh]
        first = client.push_and_wait(tickets, timeout=1500)
        assert first.complete and not first.dead
        assert {res.method for res in first.results.values()} == {"head"}
        wrong = [t["id"] for t in stream if first.results[t["id"]].label != t["label"]]
        assert wrong, "the built-in head got every stream ticket right: nothing to correct"
        for tid in wrong:
            client.label(tid, truth[tid], by="test")

        train = [sys.executable, "-m", "worker", "train", "--redis-url", redis_url, "--prefix", keys.prefix]
        train += ["--threads", "2", "--from-redis", "--publish", "--out", str(tmp_path / "new.head")]
        done = subprocess.run(train, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        print(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{len(wrong)} corrections from Redis + " in done.stdout  # the base data, not them alone
        assert "the head in use's)" in done.stdout  # its L2 penalty kept, not chosen again
        assert "publish gate: candidate vs the head in use" in done.stdout
        assert "as version 1: running workers load it" in done.stdout
        history = client.head_versions()
        assert history[0].gate is not None and history[0].gate["corrections"] == len(wrong)

        def loaded() -> bool:
            return any(e["event"] == "head_loaded" and e.get("version") == "1" for e in worker.events())

        wait_for(loaded, timeout=120, what="the worker to load head 1")
        again = client.push_and_wait(
            [{"id": f"{t['id']}-again", "text": t["text"]} for t in fresh], timeout=1500
        )
        assert again.complete and not again.dead
        after = {tid.removesuffix("-again"): res for tid, res in again.results.items()}
        assert {res.head for res in after.values()} == {"1"}
    finally:
        worker.stop()
    assert not worker.unexpected_exit, worker.tail()

    def accuracy(results: dict, ids: list[str]) -> float:
        return sum(results[i].label == truth[i] for i in ids) / len(ids)

    fresh_ids = [t["id"] for t in fresh]
    kind = Counter(truth[tid] for tid in wrong).most_common(1)[0][0]  # where most corrections moved tickets
    kind_ids = [tid for tid in fresh_ids if truth[tid] == kind]
    numbers = {
        "stream wrong (corrected)": len(wrong),
        "fresh before": accuracy(first.results, fresh_ids),
        "fresh after": accuracy(after, fresh_ids),
        f"fresh {kind} before": accuracy(first.results, kind_ids),
        f"fresh {kind} after": accuracy(after, kind_ids),
    }
    print(numbers)
    # Measured (docs/head.md, Corrections; float32 as --dtype auto chose): 7 corrections; fresh 96.0% ->
    # 95.3%, technical (where 5 of the 7 went) 94.7% -> 93.0%: one ticket each. No drop beyond two tickets is
    # asserted, on the fresh set and on the corrected kind; the corrections-only head (90% -> 49%)
    # fails it by far.
    assert numbers["fresh after"] >= numbers["fresh before"] - NOISE - 1e-9, numbers
    kind_noise = 2 / len(kind_ids)
    assert numbers[f"fresh {kind} after"] >= numbers[f"fresh {kind} before"] - kind_noise - 1e-9, numbers

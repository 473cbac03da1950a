"""A head arriving as bytes from Redis (Engine.load_head, what worker.headwatch calls): it switches the
engine's decisions and names itself in them; corrupt or mismatched bytes raise HeadError, change nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from worker.engine import Engine
from worker.engine.head import HeadError
from worker.engine.model import LoadedModel
from worker.engine.task import load_task
from worker.engine.training import train_head

TEXTS = [f"my {w} problem ({i})" for i in range(6) for w in ("refund", "crash", "password")]
LABELS = [lab for _ in range(6) for lab in ("billing", "technical", "account")]


def test_load_head_switches_and_a_bad_head_keeps_the_current_one(tiny: LoadedModel) -> None:
    engine = Engine(tiny, load_task())
    head = train_head(engine, TEXTS, LABELS, seed=1)
    assert engine.head is None
    engine.load_head(head.to_bytes(), "7")
    assert engine.head is not None and (engine.head.id, engine.head.version) == (head.id, "7")
    (p,), _ = engine.classify([TEXTS[0]])
    assert (p.method, p.head) == ("head", "7")
    with pytest.raises(HeadError):
        engine.load_head(b"\x00 not a head", "8")
    task = load_task()
    reworded = Engine(tiny, replace(task, instructions=task.instructions + " Be brief."))
    with pytest.raises(HeadError, match="another prompt"):
        engine.load_head(train_head(reworded, TEXTS, LABELS, seed=1).to_bytes(), "9")
    assert engine.head.version == "7"

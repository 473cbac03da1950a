"""The built-in task's head on the real model: trained from the bundled data, accurate on the eval file."""

from __future__ import annotations

import pytest

from worker.bench.data import read_items
from worker.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.task import load_task
from worker.engine.training import resolve_head
from worker.evaluate import DEFAULT_TICKETS

pytestmark = pytest.mark.model


def test_builtin_head_is_accurate_on_the_bundled_eval(smollm2_f32: LoadedModel) -> None:
    engine = Engine(smollm2_f32, load_task())
    events: list[str] = []
    head = resolve_head(engine, None, log=lambda event, **kw: events.append(event))
    assert head is not None and engine.head is head and events[-1] in ("head_cached", "head_trained")
    assert resolve_head(engine, None) is not None  # second time: from the cache
    items = read_items(DEFAULT_TICKETS)
    preds, _ = engine.classify([it.text for it in items])
    accuracy = sum(p.label == it.label for p, it in zip(preds, items, strict=True)) / len(items)
    assert accuracy >= 0.85, f"built-in head: {accuracy:.1%} on the bundled eval"
    assert {p.method for p in preds} == {"head"}
    assert resolve_head(engine, "none") is None

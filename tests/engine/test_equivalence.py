"""The fast path (prefix cache + packing + label tree + label-rows head) against the plain
item-by-item reference: identical labels, float32 log-probabilities within 1e-4."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from texts import varied_texts

from worker.bench.modes import Baseline
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import EngineOptions
from worker.engine.reference import ReferenceScorer
from worker.engine.task import Task, load_task

TOL = 1e-4

# Labels of several tokens that share leading tokens: exercises the label tree.
MULTI = Task(
    name="multi",
    labels=("card payment problem", "card delivery", "password reset", "other"),
    instructions="Pick the topic of the message.",
    examples=(),
)

# name -> how to build the engine; padded and uncached rows are the bench's baselines (worker.bench.modes)
CONFIGS: dict[str, Callable[[LoadedModel, Task], Engine]] = {
    "packed": lambda m, t: Engine(m, t, EngineOptions(batch_size=32)),
    "padded": lambda m, t: Baseline(m, t, EngineOptions(batch_size=32), pack=False, cache_prefix=True),
    "item-by-item": lambda m, t: Engine(m, t, EngineOptions(batch_size=1)),
    "tight-budget": lambda m, t: Engine(
        m, t, EngineOptions(batch_size=64, max_batch_tokens=300, max_row_len=96)
    ),
    "uncached-bucketed": lambda m, t: Baseline(
        m, t, EngineOptions(batch_size=32, max_batch_tokens=1 << 16), pack=False, cache_prefix=False
    ),
}


def _reference(loaded: LoadedModel, task: Task, texts: list[str]) -> torch.Tensor:
    engine = Engine(loaded, task)
    reference = ReferenceScorer(loaded.model, loaded.tokenizer, task, engine.prompt)
    return torch.tensor(reference.score(texts))


@pytest.fixture(scope="module")
def tiny_texts() -> list[str]:
    return varied_texts(240)


@pytest.fixture(scope="module")
def tiny_reference(tiny: LoadedModel, tiny_texts: list[str]) -> dict[str, torch.Tensor]:
    return {task.name: _reference(tiny, task, tiny_texts) for task in (load_task(), MULTI)}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("task", [load_task(), MULTI], ids=["default", "multi-token"])
def test_fast_path_equals_reference_on_tiny_model(tiny, tiny_texts, tiny_reference, task, config) -> None:
    ref = tiny_reference[task.name]
    fast, stats = config(tiny, task).logprobs(tiny_texts)
    assert sum(s.items for s in stats) == len(tiny_texts)
    assert (fast - ref).abs().max().item() < TOL
    assert fast.argmax(-1).tolist() == ref.argmax(-1).tolist()


@pytest.mark.model
def test_fast_path_equals_reference_on_smollm2(smollm2_f32: LoadedModel) -> None:
    texts = varied_texts(64)
    task = load_task()
    ref = _reference(smollm2_f32, task, texts)
    engine = Engine(smollm2_f32, task)
    fast, stats = engine.logprobs(texts)
    assert len(stats) >= 1
    assert (fast - ref).abs().max().item() < TOL
    preds, _ = engine.classify(texts)
    reference = ReferenceScorer(smollm2_f32.model, smollm2_f32.tokenizer, task, engine.prompt)
    prior = reference.prior()
    assert prior is not None and engine.prior is not None
    assert (prior - engine.prior).abs().max().item() < TOL
    decided = ref - prior  # calibrated, as the engine decides
    assert [p.label for p in preds] == [task.labels[i] for i in decided.argmax(-1).tolist()]
    for p in preds:
        assert abs(sum(p.scores.values()) - 1.0) < 1e-4
        assert p.label == max(p.scores, key=p.scores.__getitem__)


def test_packing_reports_its_padding(tiny, tiny_texts) -> None:
    _, packed = CONFIGS["packed"](tiny, load_task()).logprobs(tiny_texts)
    _, padded = CONFIGS["padded"](tiny, load_task()).logprobs(tiny_texts)

    def overhead(stats):
        return 1 - sum(s.real_tokens for s in stats) / sum(s.padded_tokens for s in stats)

    assert overhead(packed) < overhead(padded)
    assert overhead(packed) < 0.05
    assert all(s.items <= 32 for s in packed)


def test_empty_input(tiny) -> None:
    assert Engine(tiny, load_task()).classify([]) == ([], [])

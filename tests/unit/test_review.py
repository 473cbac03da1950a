"""The review threshold resolves in one place (flag > task review_below > head's threshold for
auto_accuracy), and the stage marks each result by it. No torch, no Redis."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from producer.protocol import Result
from worker.engine.task import Task, TaskError
from worker.engine.types import BatchStats, Prediction
from worker.review import Threshold, resolve
from worker.stage import process


def task(**extra: Any) -> Task:
    return Task(name="t", labels=("a", "b"), instructions="", **extra)


def test_the_flag_wins_then_the_task_then_the_heads_stored_threshold() -> None:
    head = SimpleNamespace(review_below=0.8, training={})
    assert resolve(0.5, SimpleNamespace(task=task(review_below=0.7), head=head)) == Threshold(
        0.5, "--review-below"
    )
    assert resolve(None, SimpleNamespace(task=task(review_below=0.7), head=head)).value == 0.7
    picked = resolve(None, SimpleNamespace(task=task(auto_accuracy=0.98), head=head))
    assert picked.value == 0.8 and "auto_accuracy 0.98" in picked.source
    older = SimpleNamespace(training={"review_below": 0.66})  # a head file from before the attribute
    assert resolve(None, SimpleNamespace(task=task(auto_accuracy=0.98), head=older)).value == 0.66
    none = resolve(None, SimpleNamespace(task=task(auto_accuracy=0.98), head=None))
    assert none.value is None and "no head" in none.source and not none.needs_review(0.0)
    assert resolve(None, object()).value is None  # a test double without a task


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"review_below": 0.7, "auto_accuracy": 0.9}, "give one"),
        ({"review_below": 1.5}, "between 0 and 1"),
        ({"auto_accuracy": 0.0}, "between 0 and 1"),
    ],
)
def test_bad_thresholds_in_a_task_are_refused(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskError, match=message):
        task(**extra)


def test_a_review_route_is_allowed_beside_the_labels() -> None:
    assert task(routes={"review": "people", "a": "team-a"}).routes["review"] == "people"


class Sure:
    name = "sure"
    labels: ClassVar[list[str]] = ["a", "b"]

    def describe(self) -> dict[str, Any]:
        return {}

    def classify(self, texts: Any, **_: Any) -> tuple[list[Prediction], list[BatchStats]]:
        out = []
        for t in texts:
            p = 0.9 if "clear" in t else 0.55
            out.append(Prediction("a", {"a": p, "b": 1 - p}, {}))
        return out, []


def test_results_carry_their_confidence_and_the_unsure_are_marked() -> None:
    payloads = [json.dumps({"id": i, "text": t}).encode() for i, t in (("1", "clear"), ("2", "murky"))]
    out = process(payloads, Sure(), "w", review=Threshold(0.7, "test"))
    results = {f.result.id: Result.from_json(f.result.to_json()) for f in out.finished}
    assert (results["1"].confidence, results["1"].review) == (0.9, False)
    assert (results["2"].confidence, results["2"].review) == (0.55, True)
    unmarked = process(payloads, Sure(), "w")
    assert not any(f.result.review for f in unmarked.finished)

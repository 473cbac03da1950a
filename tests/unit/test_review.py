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
from worker.review import Threshold, resolve, resolve_question, resolve_questions
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


def asking(**questions: dict[str, Any]) -> Task:
    from worker.engine.task import Question

    qs = tuple(Question(name, ("x", "y"), **keys) for name, keys in questions.items())
    return Task(name="t", labels=("a", "b"), instructions="", questions=qs)


def test_each_question_resolves_its_own_threshold_and_the_flag_is_the_primarys_only() -> None:
    """A [questions.NAME] review_below, else with its auto_accuracy the threshold its own head stores;
    --review-below re-thresholds the primary question only (worker/review.py says why)."""
    task = asking(intent={"review_below": 0.6}, urgency={"auto_accuracy": 0.99}, mood={})
    heads = {"urgency": SimpleNamespace(review_below=0.83, training={}), "intent": None}
    classifier = SimpleNamespace(
        task=task, head=None, answer_heads=heads, questions=("intent", "urgency", "mood")
    )
    found = resolve_questions(classifier)
    assert found["intent"] == Threshold(0.6, "task review_below")
    assert found["urgency"].value == 0.83 and "auto_accuracy 0.99" in found["urgency"].source
    assert found["mood"] == Threshold(None, "none")
    assert resolve(0.5, classifier).value == 0.5  # the flag: the primary's
    assert resolve_question(classifier, "intent").value == 0.6  # not the flag's 0.5
    unheaded = resolve_question(SimpleNamespace(task=task, answer_heads={}), "urgency")
    assert unheaded.value is None and "no head" in unheaded.source
    assert resolve_questions(Sure()) == {}  # a double without questions


def test_zero_shot_with_auto_accuracy_says_where_its_threshold_comes_from() -> None:
    none = resolve(None, SimpleNamespace(task=task(auto_accuracy=0.9), head=None))
    assert none.value is None and "set review_below" in none.source and "eval" in none.source


class Asking(Sure):
    """Sure's primary, plus an intent answer whose confidence the text decides."""

    def classify(self, texts: Any, **_: Any) -> tuple[list[Prediction], list[BatchStats]]:
        from dataclasses import replace

        from worker.engine.types import Answer

        out, stats = super().classify(texts)
        answers = [
            {"intent": Answer("x", {"x": p, "y": 1 - p}, "h")}
            for p in (0.9 if "certain" in t else 0.6 for t in texts)
        ]
        return [replace(p, answers=a) for p, a in zip(out, answers, strict=True)], stats


def test_the_stage_marks_each_question_by_its_own_threshold() -> None:
    texts = (
        ("1", "clear, certain"),
        ("2", "clear, doubtful"),
        ("3", "murky, certain"),
        ("4", "murky, doubtful"),
    )
    payloads = [json.dumps({"id": i, "text": t}).encode() for i, t in texts]
    out = process(
        payloads, Asking(), "w", review=Threshold(0.7, "t"), question_review={"intent": Threshold(0.75, "t")}
    )
    got = {f.result.id: Result.from_json(f.result.to_json()) for f in out.finished}
    assert {i: (r.review, r.questions_to_review()) for i, r in got.items()} == {
        "1": (False, []),
        "2": (False, ["intent"]),
        "3": (True, []),
        "4": (True, ["intent"]),
    }
    assert got["2"].answers["intent"]["confidence"] == 0.6 and got["1"].answers["intent"]["confidence"] == 0.9

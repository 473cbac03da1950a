"""Which results need a person: the review threshold, resolved in one place, and each result's mark.

The operator states either a threshold or the accuracy they need, per question:

- ``--review-below`` / ``TICKETQ_REVIEW_BELOW`` (a probability), which overrides, for the primary question
  only,
- the task's ``review_below = 0.7`` (a further question's: ``review_below`` in ``[questions.NAME]``), or
- ``auto_accuracy = 0.98`` (at the top level, or in ``[questions.NAME]``): the threshold the head's training
  picked from out-of-fold predictions so that the tickets above it are labelled that accurately (stored
  in that question's head file; a head without one marks nothing for review and says so in the
  ``review_threshold`` log line). Zero-shot scoring has no head to store it in: ``ticketq-worker eval``
  prints the ``review_below`` line that reaches the accuracy, to put in the task.

Why the flag is the primary's only: each question has its own labels, head and calibration, so one number
means a different coverage for each; a flag that silently re-thresholded every question would override
what each ``[questions.NAME]`` table says. A further question is set in its table.

A result whose ``confidence`` (the probability of its label, calibrated when the head is) is below the
threshold carries ``"review": true``, enters ``P:review`` (:mod:`producer.protocol`) and, when a
``review`` route is configured, goes to that RQ queue instead of its label's. A further question's answer
(``answers.NAME``) carries its own ``confidence`` and ``review``, enters ``P:q:NAME:review`` and goes to
the ``NAME:review`` route instead of ``NAME:label``. No torch, no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from producer.config import Check, option, problems


@dataclass(frozen=True)
class AccuracyOptions:
    """``--auto-accuracy``, declared once for the commands that turn an accuracy into a threshold."""

    auto_accuracy: float | None = option(
        None,
        help="accuracy the auto-routed tickets must reach: `train` stores in the head the confidence "
        "threshold (review_below) its out-of-fold predictions reach it at; `eval` of zero-shot scores "
        "prints the review_below line that reaches it on the file",
        shown="the asked question's auto_accuracy in the task",
        check=Check(lambda v: 0.0 < v <= 1.0, "must lie in (0, 1]"),
    )

    def __post_init__(self) -> None:
        found = problems(self)
        if found:
            raise ValueError("; ".join(found))


@dataclass(frozen=True)
class Threshold:
    value: float | None  # None: nothing is marked for review
    source: str  # "flag", "task review_below", "head (auto_accuracy 0.98)", "none", ...

    def needs_review(self, confidence: float) -> bool:
        return self.value is not None and confidence < self.value


def resolve(flag: float | None, classifier: Any) -> Threshold:
    """The primary question's threshold for ``classifier`` now: flag > task ``review_below`` > the head's
    stored threshold (with ``auto_accuracy``). Read defensively: test doubles have no task, older heads no
    threshold."""
    if flag is not None:
        return Threshold(flag, "--review-below")
    return _from(getattr(classifier, "task", None), getattr(classifier, "head", None))


def resolve_question(classifier: Any, question: str) -> Threshold:
    """A further question's threshold: its ``[questions.NAME]`` ``review_below`` > its head's stored
    threshold (with the question's ``auto_accuracy``). ``--review-below`` does not apply (the primary's)."""
    task = getattr(classifier, "task", None)
    found = [q for q in getattr(task, "questions", ()) or () if getattr(q, "name", None) == question]
    heads = getattr(classifier, "answer_heads", None)
    return _from(found[0] if found else None, heads.get(question) if isinstance(heads, dict) else None)


def resolve_questions(classifier: Any) -> dict[str, Threshold]:
    """Every further question's threshold (a classifier without questions: none)."""
    return {q: resolve_question(classifier, q) for q in getattr(classifier, "questions", ()) or ()}


def _from(asked: Any, head: Any) -> Threshold:
    """What a question's keys (the task's, or a ``[questions.NAME]`` table's) and its head say."""
    below = getattr(asked, "review_below", None)
    if isinstance(below, int | float):
        return Threshold(float(below), "task review_below")
    wanted = getattr(asked, "auto_accuracy", None)
    if not isinstance(wanted, int | float):
        return Threshold(None, "none")
    stored = getattr(head, "review_below", None)
    if stored is None and head is not None:  # a head file written before the attribute existed
        stored = (getattr(head, "training", None) or {}).get("review_below")
    if isinstance(stored, int | float) and not isinstance(stored, bool):
        return Threshold(float(stored), f"head (auto_accuracy {wanted:g})")
    why = (
        "no head (zero-shot: set review_below; ticketq-worker eval prints the one that reaches it)"
        if head is None
        else "the head stores no threshold; retrain it"
    )
    return Threshold(None, f"auto_accuracy {wanted:g}: {why}")

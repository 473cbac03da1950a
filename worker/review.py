"""Which results need a person: the review threshold, resolved in one place, and each result's mark.

The operator states either a threshold or the accuracy they need:

- ``--review-below`` / ``TICKETQ_REVIEW_BELOW`` (a probability), which overrides
- the task's ``review_below = 0.7``, or
- the task's ``auto_accuracy = 0.98``: the threshold the head's training picked from out-of-fold
  predictions so that the tickets above it are labelled that accurately (stored in the head file; a head
  without one, or zero-shot scoring, marks nothing for review and says so in ``worker_start``).

A result whose ``confidence`` (the probability of its label, calibrated when the head is) is below the
threshold carries ``"review": true``, enters ``P:review`` (:mod:`producer.protocol`) and, when a
``review`` route is configured, goes to that RQ queue instead of its label's. No torch, no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Threshold:
    value: float | None  # None: nothing is marked for review
    source: str  # "flag", "task review_below", "head (auto_accuracy 0.98)", "none", ...

    def needs_review(self, confidence: float) -> bool:
        return self.value is not None and confidence < self.value


def resolve(flag: float | None, classifier: Any) -> Threshold:
    """The threshold for ``classifier`` now: flag > task ``review_below`` > the head's stored threshold
    (with ``auto_accuracy``). Read defensively: test doubles have no task, older heads no threshold."""
    if flag is not None:
        return Threshold(flag, "--review-below")
    task = getattr(classifier, "task", None)
    below = getattr(task, "review_below", None)
    if isinstance(below, int | float):
        return Threshold(float(below), "task review_below")
    wanted = getattr(task, "auto_accuracy", None)
    if not isinstance(wanted, int | float):
        return Threshold(None, "none")
    head = getattr(classifier, "head", None)
    stored = getattr(head, "review_below", None)
    if stored is None and head is not None:  # a head file written before the attribute existed
        stored = (getattr(head, "training", None) or {}).get("review_below")
    if isinstance(stored, int | float) and not isinstance(stored, bool):
        return Threshold(float(stored), f"head (auto_accuracy {wanted:g})")
    why = "no head" if head is None else "the head stores no threshold; retrain it"
    return Threshold(None, f"auto_accuracy {wanted:g}: {why}")

"""The seam between the service and the rest: what it needs from a classifier, and the records it hands
to the queue. No torch, no Redis.

:class:`worker.engine.Engine` is the classifier a worker runs; tests and tools bring their own doubles
(``tools/fake.py``). The queue writes :class:`Finished` tickets as results and :class:`Rejected` payloads
as dead letters, in one transaction (:meth:`worker.queue.RedisQueue.ack`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from producer.protocol import DeadLetter, Result, Ticket
from worker.review import Threshold

if TYPE_CHECKING:  # the engine package imports torch; the service must not, until a real model is asked for
    from worker.engine.types import BatchStats, Prediction


class Classifier(Protocol):
    """What the service needs from an engine."""

    @property
    def name(self) -> str: ...  # model name, written to Result.model

    @property
    def labels(self) -> list[str]: ...

    def describe(self) -> dict[str, Any]: ...  # model, dtype, device (and whatever else helps an operator)

    # ``on_pass`` (optional: a classifier without it still works, its passes are reported when it
    # returns) is called as each forward pass ends, so logs, metrics and the watchdog see progress
    def classify(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[list[Prediction], list[BatchStats]]: ...


@runtime_checkable
class TakesHeads(Protocol):
    """A classifier that can switch to a head published in Redis (:mod:`worker.headwatch`); the engine is
    one, test doubles need not be. ``head`` is the head in use (with ``id`` and ``version``), or None."""

    head: Any

    def load_head(self, data: bytes, version: str) -> None: ...  # raises HeadError, keeping the old head


@dataclass(frozen=True)
class Finished:
    """A classified ticket, ready to be written."""

    raw: bytes
    ticket: Ticket
    result: Result


@dataclass(frozen=True)
class Rejected:
    """A payload to dead-letter."""

    raw: bytes
    letter: DeadLetter


def kept_scores(scores: Mapping[str, float], label: str, keep: int | None = None) -> dict[str, float]:
    """The scores a result carries: every label's, in the engine's order; with ``keep`` (``--result-scores``)
    the ``keep`` most probable, most probable first, the chosen label always among them."""
    if keep is None or len(scores) <= keep:
        return dict(scores)
    top = sorted(scores.items(), key=lambda kv: -kv[1])[:keep]
    if label in scores and all(name != label for name, _ in top):
        top[-1] = (label, scores[label])
    return dict(top)


def answers_of(
    prediction: Any, review: Mapping[str, Threshold] | None = None, keep: int | None = None
) -> dict[str, dict[str, Any]]:
    """A prediction's further answers as the result carries them (a test double may have none): label,
    scores (with ``keep``, the most probable only: :func:`kept_scores`), ``confidence`` (the label's
    probability) and head; ``"review": true`` when the confidence is below that question's threshold in
    ``review``."""
    out: dict[str, dict[str, Any]] = {}
    for name, a in (getattr(prediction, "answers", None) or {}).items():
        scores = kept_scores(a.scores, a.label, keep)
        entry: dict[str, Any] = {"label": a.label, "scores": scores}
        confidence = scores.get(a.label)
        if confidence is not None:
            entry["confidence"] = round(confidence, 4)
            threshold = (review or {}).get(name)
            if threshold is not None and threshold.needs_review(confidence):
                entry["review"] = True
        out[name] = entry | ({"head": a.head} if a.head else {})
    return out

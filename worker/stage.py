"""Claimed payloads in, results and dead letters out: decode, classify, isolate failures. No Redis.

The stage between claim and ack, kept free of I/O so it can be tested with a fake classifier.
A payload the protocol refuses is dead-lettered with the decoder's reason. If the engine raises on a
drain, each ticket is retried alone, so one ticket that breaks the engine cannot sink the others.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from producer.protocol import BadTicket, DeadLetter, Result, Ticket, decode_ticket, payload_digest, peek_id
from worker.contract import Classifier, Finished, Rejected, answers_of, kept_scores
from worker.review import Threshold

if TYPE_CHECKING:  # the engine package imports torch; the service must not, until a real model is asked for
    from worker.engine.types import BatchStats, Prediction


OnPass = Callable[["BatchStats"], None]  # called as each forward pass ends (logs, metrics, the watchdog)


@dataclass
class Outcome:
    """What one drain came to: results to write, payloads to dead-letter, and what the engine said."""

    finished: list[Finished] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    stats: list[BatchStats] = field(default_factory=list)
    engine_errors: list[str] = field(default_factory=list)  # one per failed drain or ticket, for logging


def decode_all(
    payloads: Sequence[bytes], worker_id: str
) -> tuple[list[tuple[bytes, Ticket]], list[Rejected]]:
    good: list[tuple[bytes, Ticket]] = []
    bad: list[Rejected] = []
    for raw in payloads:
        try:
            good.append((raw, decode_ticket(raw)))
        except BadTicket as exc:
            bad.append(Rejected(raw, DeadLetter(exc.reason, raw, worker=worker_id, id=peek_id(raw))))
    return good, bad


def process(
    payloads: Sequence[bytes],
    classifier: Classifier,
    worker_id: str,
    *,
    on_pass: OnPass | None = None,
    claimed_at: float | None = None,
    review: Threshold | None = None,
    question_review: Mapping[str, Threshold] | None = None,
    keep_scores: int | None = None,
) -> Outcome:
    """``claimed_at`` (unix seconds, default now) times each result's ``queued_s`` and ``took_s``;
    results less confident than ``review`` are marked for review, and each further question's answer
    less confident than its threshold in ``question_review``; ``keep_scores`` (``--result-scores``): each
    answer keeps only its most probable labels' scores (:func:`worker.contract.kept_scores`)."""
    claimed = time.time() if claimed_at is None else claimed_at
    good, bad = decode_all(payloads, worker_id)
    out = Outcome(rejected=bad)
    if not good:
        return out

    def finish(raw: bytes, ticket: Ticket, prediction: Prediction) -> Finished:
        return _finish(
            raw, ticket, prediction, classifier.name, worker_id, claimed, review, question_review, keep_scores
        )

    try:
        predictions, stats = _classify(classifier, [t.text for _, t in good], on_pass)
        out.stats += stats
        out.finished += [finish(raw, t, p) for (raw, t), p in zip(good, predictions, strict=True)]
    except Exception as exc:  # any engine failure: fall back to one ticket at a time
        out.engine_errors.append(f"drain of {len(good)}: {_describe(exc)}")
        for raw, ticket in good:
            try:
                (prediction,), stats = _classify(classifier, [ticket.text], on_pass)
            except Exception as one:
                reason = f"engine error: {_describe(one)}"
                out.engine_errors.append(f"{ticket.id}: {_describe(one)}")
                out.rejected.append(Rejected(raw, DeadLetter(reason, raw, worker=worker_id, id=ticket.id)))
                continue
            out.stats += stats
            out.finished.append(finish(raw, ticket, prediction))
    return out


def _classify(
    classifier: Classifier, texts: list[str], on_pass: OnPass | None
) -> tuple[list[Prediction], list[BatchStats]]:
    if on_pass is None:
        predictions, stats = classifier.classify(texts)
    elif _takes_on_pass(classifier.classify):
        predictions, stats = classifier.classify(texts, on_pass=on_pass)
    else:  # a classifier without the hook: its passes are reported when it returns
        predictions, stats = classifier.classify(texts)
        for b in stats:
            on_pass(b)
    if len(predictions) != len(texts):
        raise RuntimeError(f"engine returned {len(predictions)} predictions for {len(texts)} texts")
    return predictions, stats


def _takes_on_pass(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "on_pass" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _finish(
    raw: bytes,
    ticket: Ticket,
    prediction: Prediction,
    model: str,
    worker_id: str,
    claimed_at: float,
    review: Threshold | None = None,
    question_review: Mapping[str, Threshold] | None = None,
    keep_scores: int | None = None,
) -> Finished:
    now = time.time()
    confidence = prediction.scores.get(prediction.label)
    queued = None if ticket.enqueued_at is None else max(0.0, claimed_at - ticket.enqueued_at)
    result = Result(
        id=ticket.id,
        label=prediction.label,
        scores=kept_scores(prediction.scores, prediction.label, keep_scores),
        model=model,
        digest=payload_digest(raw),
        fields=ticket.fields,
        worker=worker_id,
        at=now,
        queued_s=queued,
        took_s=max(0.0, now - claimed_at),
        # how the label was decided, and by which head (its published version, else its id)
        method=getattr(prediction, "method", None),
        head=getattr(prediction, "head", None),
        confidence=confidence,
        review=confidence is not None and review is not None and review.needs_review(confidence),
        answers=answers_of(prediction, question_review, keep_scores),
    )
    return Finished(raw, ticket, result)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]

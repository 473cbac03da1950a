"""Claimed payloads in, results and dead letters out: decode, classify, isolate failures. No Redis.

The stage between claim and ack, kept free of I/O so it can be tested with a fake classifier.
A payload the protocol refuses is dead-lettered with the decoder's reason. If the engine raises on a
drain, each ticket is retried alone, so one ticket that breaks the engine cannot sink the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from producer.protocol import BadTicket, DeadLetter, Result, Ticket, decode_ticket, payload_digest, peek_id
from worker.contract import Classifier, Finished, Rejected

if TYPE_CHECKING:  # the engine package imports torch; the service must not, until a real model is asked for
    from worker.engine.types import BatchStats, Prediction


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


def process(payloads: Sequence[bytes], classifier: Classifier, worker_id: str) -> Outcome:
    good, bad = decode_all(payloads, worker_id)
    out = Outcome(rejected=bad)
    if not good:
        return out
    try:
        predictions, stats = _classify(classifier, [t.text for _, t in good])
        out.stats += stats
        out.finished += [
            _finish(raw, t, p, classifier.name, worker_id)
            for (raw, t), p in zip(good, predictions, strict=True)
        ]
    except Exception as exc:  # any engine failure: fall back to one ticket at a time
        out.engine_errors.append(f"drain of {len(good)}: {_describe(exc)}")
        for raw, ticket in good:
            try:
                (prediction,), stats = _classify(classifier, [ticket.text])
            except Exception as one:
                reason = f"engine error: {_describe(one)}"
                out.engine_errors.append(f"{ticket.id}: {_describe(one)}")
                out.rejected.append(Rejected(raw, DeadLetter(reason, raw, worker=worker_id, id=ticket.id)))
                continue
            out.stats += stats
            out.finished.append(_finish(raw, ticket, prediction, classifier.name, worker_id))
    return out


def _classify(classifier: Classifier, texts: list[str]) -> tuple[list[Prediction], list[BatchStats]]:
    predictions, stats = classifier.classify(texts)
    if len(predictions) != len(texts):
        raise RuntimeError(f"engine returned {len(predictions)} predictions for {len(texts)} texts")
    return predictions, stats


def _finish(raw: bytes, ticket: Ticket, prediction: Prediction, model: str, worker_id: str) -> Finished:
    result = Result(
        id=ticket.id,
        label=prediction.label,
        scores=dict(prediction.scores),
        model=model,
        digest=payload_digest(raw),
        fields=ticket.fields,
        worker=worker_id,
    )
    return Finished(raw, ticket, result)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]

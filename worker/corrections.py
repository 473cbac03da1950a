"""Training data from corrections, and publishing the head trained on them: ``train --from-redis --publish``.

Corrections are what people and services recorded with ``ticketq-producer label`` (``P:labels``). Each
carries the ticket's text, copied when the label was set, so training does not depend on the TTL of
``P:text:<id>``. Corrections add to what the head already knows: they are trained on together with the
task's base data (``--tickets FILE`` when given, else the task's ``head_data``, the rows its own head was
trained from); an id in both keeps the correction, the newer and human word. ``--corrections-only`` trains
on the corrections alone (a head that knows only them: rarely what you want). ``--publish`` stores the head
in ``P:head``, versioned, once the publish gate (:mod:`worker.gate`) found it no worse than the head in
use; every running worker loads it at its next drain (:mod:`worker.headwatch`). No torch here: data
plumbing, testable with Redis alone.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from producer import config
from producer.client import Client
from producer.config import at_least, option
from producer.learning import Correction
from producer.options import RedisOptions
from worker.engine.task import SELF_TRAIN_UP_TO

STREAM_TICKETS = 10_000  # kept ticket texts self-trained on, at most (the banking example's file: 9,229)


class CorrectionsError(ValueError):
    """Training data that cannot make a head; the message is one line, for the CLI (exit 2)."""


@dataclass
class TrainingSet:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    corrected: dict[int, str | None] = field(default_factory=dict)  # row -> the worker's label, if known

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def from_redis(self) -> int:
        """Corrections used."""
        return len(self.corrected)

    @property
    def from_file(self) -> int:
        """File rows used (a row whose id was corrected is replaced, not counted)."""
        return len(self.texts) - len(self.corrected)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.labels).items()))


@dataclass(frozen=True)
class CorrectionsOptions(RedisOptions):
    """The Redis side of ``ticketq-worker train``: where corrections come from and heads go to."""

    from_redis: bool = option(
        False,
        help="train on the corrections recorded in Redis (ticketq-producer label) added to the base data: "
        "--tickets, else the task's head_data",
    )
    corrections_only: bool = option(
        False,
        help="with --from-redis: train on the corrections alone, without the task's base data (head_data)",
    )
    correction_weight: float = option(
        1.0,
        help="with --from-redis: how many base rows each correction counts as when the head is fitted "
        "(1: as one; docs/head.md, Corrections, measures the choice)",
        check=at_least(1),
    )
    l2: str = option(
        "in-use",
        choices=("in-use", "cv"),
        help="with --from-redis: the new head's L2 penalty: the head in use's (`in-use`; cross-validation "
        "when there is none, or when it learnt from other base rows than these) or chosen again by "
        "cross-validation (`cv`)",
    )
    stream_tickets: int = option(
        STREAM_TICKETS,
        help="with --from-redis and no --unlabeled (nor the task's unlabeled_data): self-train on up to N "
        "of the tickets the workers classified, their texts as kept in Redis (P:text:<id>, labels unread), "
        f"where it pays: the median label has at most {SELF_TRAIN_UP_TO} labelled tickets, or the head in "
        "use self-trained; 0: never (docs/head.md, Corrections)",
        check=at_least(0),
        metavar="N",
    )
    force: bool = option(
        False,
        help="publish even when the publish gate finds the new head worse than the head in use",
    )
    publish: bool = option(
        False,
        help="publish the head in Redis: every running worker loads it at its next drain, no restart",
    )
    by: str | None = option(
        default_factory=lambda: os.environ.get("USER"),
        help="who published the head",
        shown="$USER",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("corrections and publishing (Redis)")
    config.add_arguments(group, CorrectionsOptions)


def options(args: argparse.Namespace) -> CorrectionsOptions:
    """Raises ``ValueError`` for a setting that cannot work."""
    return config.resolve(CorrectionsOptions, args, os.environ)


def client(options: CorrectionsOptions) -> Client:
    return Client.from_url(
        options.redis_url, options.prefix, cluster=options.cluster, socket_connect_timeout=5
    )


def read_corrections(source: Client, question: str | None = None) -> list[Correction]:
    """Every correction in ``P:labels`` (a further question's: its own key), oldest first (a stable order
    makes training reproducible)."""
    return sorted(source.correction_records(question), key=lambda c: (c.at, c.id))


def base_source(tickets: str | None, head_data: str | None, corrections_only: bool) -> str | None:
    """The file whose rows the corrections are added to: ``--tickets``, else the task's ``head_data``
    (None when the task names none). With ``--corrections-only`` (which ``--tickets`` contradicts) the
    head learns from the corrections alone, and the base rows are the publish gate's evidence only."""
    if corrections_only and tickets:
        raise CorrectionsError("--corrections-only trains on the corrections alone: drop --tickets")
    return tickets or head_data


def stream_texts(
    source: Client, limit: int, known_ids: Iterable[str], known_texts: Iterable[str]
) -> list[str]:
    """Up to ``limit`` texts of tickets the workers classified (``P:text:<id>``), to self-train on: none
    whose id or text is already among the training rows (their labels are known), each text once."""
    seen = set(known_texts)

    def new(text: str) -> bool:  # a known or repeated text does not count toward the limit
        fresh = text not in seen
        seen.add(text)
        return fresh

    return [text for _, text in source.kept_texts(limit, skip=set(known_ids), accept=new)]


def training_set(
    corrections: Iterable[Correction],
    rows: Sequence[tuple[str, str, str]] = (),
    unnamed: Collection[str] = (),
) -> TrainingSet:
    """File ``rows`` (id, text, label) then the corrections; a correction replaces the row with its id.
    ``unnamed``: ids of rows the file gave none (named by their line, ``line 7``): no correction replaces
    one (a ticket whose id is ``line 7`` is another ticket), it joins beside it.

    The labels are checked against the task by the trainer (``check_training_labels``), not here."""
    by_key: dict[tuple[bool, str], tuple[str, str, Correction | None]] = {
        (tid in unnamed, tid): (text, lab, None) for tid, text, lab in rows
    }
    for c in corrections:
        by_key[False, c.id] = (c.text, c.label, c)
    out = TrainingSet()
    for (_, tid), (text, label, correction) in by_key.items():
        if correction is not None:
            out.corrected[len(out.texts)] = correction.was
        out.ids.append(tid)
        out.texts.append(text)
        out.labels.append(label)
    if not out.texts:
        raise CorrectionsError("no training data: no corrections in Redis and no --tickets rows")
    return out

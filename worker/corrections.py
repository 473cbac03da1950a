"""Training data from corrections: what people and services recorded with ``ticketq-producer label``.

``ticketq-worker train --from-redis`` reads every correction in ``P:labels`` (each carries the ticket's
text, copied when the label was set, so it does not depend on ``P:text:<id>``'s TTL), adds the labelled
tickets of ``--tickets FILE`` when given, and fits a head on the lot. An id in both keeps the correction:
it is the newer, human word. No torch here: this is data plumbing, testable with Redis alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from producer.client import Client
from producer.learning import Correction


class CorrectionsError(ValueError):
    """Training data that cannot make a head; the message is one line, for the CLI (exit 2)."""


@dataclass
class TrainingSet:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    from_redis: int = 0  # corrections used
    from_file: int = 0  # file rows used (file rows whose id was corrected are replaced, not counted)

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.labels).items()))


def read_corrections(client: Client) -> list[Correction]:
    """Every correction in ``P:labels``, oldest first (a stable order makes training reproducible)."""
    return sorted(client.correction_records(), key=lambda c: (c.at, c.id))


def training_set(
    corrections: Iterable[Correction],
    rows: Sequence[tuple[str, str, str]] = (),
    *,
    labels: Sequence[str] | None = None,
) -> TrainingSet:
    """File ``rows`` (id, text, label) then the corrections; a correction replaces a row with its id.

    With ``labels`` (the task's), a label outside them is a :class:`CorrectionsError` naming each one
    and where it came from. An empty set is an error too.
    """
    by_id: dict[str, tuple[str, str, str]] = {}
    for tid, text, label in rows:
        by_id[tid] = (text, label, "file")
    for c in corrections:
        by_id[c.id] = (c.text, c.label, "redis")
    out = TrainingSet()
    for tid, (text, label, source) in by_id.items():
        out.ids.append(tid)
        out.texts.append(text)
        out.labels.append(label)
        if source == "redis":
            out.from_redis += 1
        else:
            out.from_file += 1
    if not out.texts:
        raise CorrectionsError("no training data: no corrections in Redis and no --tickets rows")
    if labels is not None:
        known = set(labels)
        unknown = sorted({lab for lab in out.labels if lab not in known})
        if unknown:
            raise CorrectionsError(
                f"labels the task lacks: {', '.join(unknown)} (task labels: {', '.join(labels)})"
            )
    return out

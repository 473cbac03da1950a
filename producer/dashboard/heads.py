"""What decided a label (a published head, the task's own head, zero-shot) and what the published head
says of its training: read from ``P:head``/``P:heads`` without the worker's code."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from producer.client import Client, as_text
from producer.learning import head_metadata
from producer.protocol import Result
from producer.strictjson import count, digits


@dataclass(frozen=True)
class Decider:
    """What decided a result's label, in words a reader can check."""

    kind: str  # "published" | "own" | "zero-shot" | "unknown"
    head: str | None  # the published version, or the task's own head's id
    published_at: float | None = None
    published_by: str | None = None

    def __str__(self) -> str:
        if self.kind == "published":
            return f"published head version {self.head}"
        if self.kind == "own":
            return f"the task's own head {self.head} (from the worker's task file, not published)"
        if self.kind == "zero-shot":
            return "zero-shot scoring (no head)"
        return "not recorded (a worker older than method/head)"


def deciders(client: Client, results: list[Result]) -> list[Decider]:
    """For each result, what decided it: a head published through Redis (``P:heads``, the last
    ``HEADS_KEPT``), the task's own head (a head id no publish names), or zero-shot."""
    published = {v.version: v for v in client.head_versions()} if any(r.head for r in results) else {}
    out = []
    for r in results:
        if r.method == "zero-shot":
            out.append(Decider("zero-shot", None))
        elif r.method == "head" and r.head and r.head in published:
            v = published[r.head]
            out.append(Decider("published", r.head, v.at, v.by))
        elif r.method == "head" and r.head and digits(r.head):
            out.append(Decider("published", r.head))  # older than the publish history kept
        elif r.method == "head":
            out.append(Decider("own", r.head))
        else:
            out.append(Decider("unknown", None))
    return out


def decider_summary(client: Client, results: list[Result]) -> list[tuple[str, int]]:
    """What decided the results shown, most first: (description, results)."""
    counts = Counter(str(d) for d in deciders(client, results))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


@dataclass(frozen=True)
class HeadInfo:
    """The published head, as far as the producer side can read it without the worker's code."""

    version: str | None  # None: no head published yet
    next_version: str  # the version the next ``train --from-redis --publish`` will get
    at: float | None
    training: dict[str, Any]  # the head file's training metadata (n, cv_accuracy, corrections ...)
    corrections: int  # recorded in P:labels

    @property
    def correction_accuracy(self) -> tuple[Any, Any] | None:
        """Accuracy on the corrections before and after training, when the trainer recorded them."""
        t = self.training  # written by worker/engine/training.py (_on_corrections)
        if "corrections_accuracy_before" in t and "corrections_accuracy_after" in t:
            return t["corrections_accuracy_before"], t["corrections_accuracy_after"]
        return None


_HEAD_META: dict[tuple[str, str], dict[str, Any]] = {}  # (prefix, version) -> training metadata


def head_info(client: Client) -> HeadInfo:
    keys = client.keys
    with client.redis.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.head, ["version", "at"])
        pipe.get(keys.head_seq)
        pipe.hlen(keys.labels)
        (version_raw, at_raw), seq_raw, n_corrections = pipe.execute()
    version = as_text(version_raw) if version_raw is not None else None
    last = (count(as_text(seq_raw)) if seq_raw is not None else None) or 0  # by hand: 5,000 digits
    training: dict[str, Any] = {}
    if version is not None:
        cache_key = (keys.prefix, version)
        if cache_key not in _HEAD_META:
            _HEAD_META[cache_key] = _training_metadata(client.redis.hget(keys.head, "data"))
        training = _HEAD_META[cache_key]
    at = _time(as_text(at_raw)) if at_raw is not None else None
    return HeadInfo(
        version=version, next_version=str(last + 1), at=at, training=training, corrections=int(n_corrections)
    )


def _time(text: str) -> float | None:
    """A publish time as ``publish_head.lua`` writes it (seconds, maybe with a fraction); None for text no
    publish wrote (5,000 digits by hand read as infinity)."""
    whole, _, part = text.partition(".")
    if count(whole, 11) is None or (part and count(part, 9) is None):
        return None
    return float(text)


def _training_metadata(data: bytes | str | None) -> dict[str, Any]:
    """The ``training`` entry of a published head's metadata; anything unexpected reads as none."""
    try:
        training = head_metadata(data).get("training") if isinstance(data, bytes) else None
    except ValueError:
        return {}
    return dict(training) if isinstance(training, dict) else {}

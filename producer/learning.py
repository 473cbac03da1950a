"""The wire formats of learning from corrections: ``P:labels``, ``P:heads`` and the label script.

The keys are named and documented with all the others in :mod:`producer.protocol`. A correction is
recorded by :data:`LABEL_SCRIPT` (``producer/label.lua``): one ``EVAL`` from any language; its header
lists its ``KEYS`` (results, text, labels, the asked question's label set, review queue, ``P:questions``)
and ``ARGV`` (id, label, by, question). It refuses an id whose text is not kept (unknown, or expired), a
label not in the asked question's label set (written by workers at start; else, while the result is
there, not among its labels), and a further question no worker has published; its errors start with
``TICKETQ``. Standard library only, like the protocol.
"""

from __future__ import annotations

import difflib
import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from producer.scripts import source
from producer.strictjson import encodable, finite_number, may_hold_surrogate

DEFAULT_KEEP_TEXT_S = 7 * 24 * 3600  # how long workers keep each ticket's text (P:text:<id>)
MAX_LABEL_BYTES = 128  # also checked by LABEL_SCRIPT
MAX_BY_BYTES = 256
HEADS_KEPT = 50  # entries of P:heads; the data of old heads is not kept
MAX_HEAD_BYTES = 64 * 1024 * 1024
# A head with a nonlinear second reading (worker/engine/mlp.py) is tens of MB: a worker's copy of the
# published head into P:head:good (keep_head.lua) held Redis for 385 ms with one of 39 MB (about 20 ms
# since it copies with COPY), publishing it 114 ms when the bytes passed through publish_head.lua (21 ms
# since they are staged with one HSET and renamed), and every worker's HGET of it 22 ms. Such heads are
# used from their file, not published (docs/head.md).
UNPUBLISHED_FORMATS = ("ticketq-head/2",)

HEAD_META_KEY = "ticketq"  # the safetensors metadata entry that holds a head file's JSON

#: The one Redis command that records a correction: ``EVAL LABEL_SCRIPT 3 P:results P:text:<id> P:labels
#: <id> <label> [<by>]``. The file ships with the package so other languages can load it as it is.
LABEL_SCRIPT = source("producer", "label.lua")
#: Publishes a head, versioned (``producer/publish_head.lua``).
PUBLISH_HEAD_SCRIPT = source("producer", "publish_head.lua")


def closest_labels(label: str, known: Iterable[str], most: int = 3) -> list[str]:
    """The labels of ``known`` closest to ``label``, a near miss of one of them (case, ``_``, ``-`` and the
    Unicode normal form folded: "card arrival" for ``card_arrival``, a decomposed "café" for the task's
    composed one), closest first; none when nothing is near. For the hint after an unknown label, in a
    taxonomy of dozens of intents."""

    def fold(name: str) -> str:
        return unicodedata.normalize("NFC", name).casefold().replace("_", " ").replace("-", " ").strip()

    folded = {fold(name): name for name in known}
    return [folded[k] for k in difflib.get_close_matches(fold(label), list(folded), n=most, cutoff=0.75)]


@dataclass(frozen=True)
class Correction:
    """``P:labels[id]``: the right label of a ticket, as :data:`LABEL_SCRIPT` records it. ``text`` is copied
    from ``P:text:<id>`` then (so training outlives that TTL); ``was`` is the worker's label, if known."""

    id: str
    label: str
    text: str
    at: float = 0.0
    by: str | None = None
    was: str | None = None

    def to_json(self) -> str:
        out = {
            "label": self.label,
            "text": self.text,
            "at": round(self.at, 3),
            "by": self.by,
            "was": self.was,
        }
        return json.dumps({k: v for k, v in out.items() if v is not None}, ensure_ascii=False)

    @classmethod
    def from_json(cls, ticket_id: str, raw: bytes | str) -> Correction:
        """Raises ``ValueError`` on a record that is not a correction (written by hand, say: nested
        thousands deep, a lone surrogate in its text)."""
        try:
            obj = json.loads(raw)
        except RecursionError:
            raise ValueError(f"correction for {ticket_id}: nested too deeply") from None
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in ("label", "text")):
            raise ValueError(f"correction for {ticket_id}: no label or no text")
        if may_hold_surrogate(raw) and not all(encodable(v) for v in obj.values() if isinstance(v, str)):
            raise ValueError(f"correction for {ticket_id}: a lone surrogate in a string")
        at = obj.get("at")
        at = finite_number(at) or 0.0
        by, was = opt_str(obj.get("by")), opt_str(obj.get("was"))
        return cls(ticket_id, obj["label"], obj["text"], at, by, was)


@dataclass(frozen=True)
class HeadVersion:
    """One entry of ``P:heads``: a published head (its bytes live in ``P:head`` while it is current)."""

    version: str
    at: float
    size: int  # bytes; "bytes" on the wire
    sha256: str
    by: str | None = None
    # the publish gate's comparison with the head it replaced (worker/gate.py, Comparison.summary):
    # {candidate, current, candidate_corrections, current_corrections, n, corrections, forced}; None when
    # it was published without one (publish-head, an older ticketq, or no head in use before it)
    gate: dict[str, Any] | None = None

    def to_json(self) -> str:
        out: dict[str, Any] = {"version": self.version, "at": round(self.at, 3), "bytes": self.size}
        out["sha256"] = self.sha256
        extra = {"by": self.by, "gate": self.gate}
        return json.dumps({**out, **{k: v for k, v in extra.items() if v is not None}})

    @classmethod
    def from_json(cls, raw: bytes | str) -> HeadVersion:
        """ValueError (or KeyError, TypeError) for an entry no publish wrote; a time no clock reads is 0
        and a gate whose accuracies are not numbers is left out, so listing the history never fails."""
        obj = json.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError("a head version is a JSON object")
        at, size, sha = finite_number(obj.get("at")), obj.get("bytes", 0), str(obj.get("sha256", ""))
        # 1e400, 400 digits or -1 by hand: float() or gmtime would raise
        at = at if at is not None and 0 <= at < 1e11 else 0.0
        size = size if _number(size) and 0 <= size < 2**63 else 0  # 1e999 by hand: int() would raise
        gate = obj.get("gate")
        numbers = ("candidate", "current")  # both or neither: a reader of one reads the other
        if not isinstance(gate, dict) or (
            any(k in gate for k in numbers) and not all(_number(gate.get(k)) for k in numbers)
        ):
            gate = None
        return cls(
            str(obj["version"]),
            at,
            int(size),
            sha,
            opt_str(obj.get("by")),
            gate,
        )


def _number(value: Any) -> bool:
    return finite_number(value) is not None  # math.isfinite of a 400-digit integer raises


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def label_problem(ticket_id: str, label: str, by: str | None) -> str:
    """The script checks these too (for callers in other languages); checked here first for clear errors."""
    if not isinstance(ticket_id, str) or not ticket_id.strip():
        return "empty ticket id"
    try:
        ticket_id.encode("utf-8")
    except UnicodeEncodeError:
        return "ticket id: not valid Unicode (a lone surrogate: bytes that are not UTF-8?)"
    if not isinstance(label, str) or not label.strip():
        return "empty label"
    for name, value, most in (("label", label, MAX_LABEL_BYTES), ("by", by or "", MAX_BY_BYTES)):
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return f"{name}: not valid Unicode (lone surrogate)"
        if size > most:
            return f"{name} too long: over {most} bytes"
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            return f"control character in {name}"
    return ""


def head_metadata(data: bytes) -> dict[str, Any]:
    """The JSON a head file (``P:head``'s data; worker/engine/head.py writes it) carries in its safetensors
    header: 8 bytes of header length, then a JSON header whose ``__metadata__`` entry :data:`HEAD_META_KEY`
    is ticketq's JSON. Standard library only, so the producer side reads it without torch. ValueError if
    ``data`` is not a ticketq head."""
    n = int.from_bytes(data[:8], "little")
    if len(data) < 8 or n <= 0 or n > len(data) - 8:
        raise ValueError("not a safetensors file")
    header = json.loads(data[8 : 8 + n])
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or HEAD_META_KEY not in meta:
        raise ValueError("a safetensors file without ticketq metadata (not a head)")
    out = json.loads(meta[HEAD_META_KEY])
    if not isinstance(out, dict):
        raise ValueError("ticketq metadata that is not a JSON object")
    return out


def publish_problem(data: bytes) -> str | None:
    """Why a head file's bytes are not published through Redis, or None: a head with an MLP (its
    format), which would hold the shared Redis while it is copied. Bytes that are no ticketq head are
    the workers' to refuse (they keep theirs), as before."""
    try:
        meta = head_metadata(data)
    except (ValueError, RecursionError):
        return None
    if meta.get("format") not in UNPUBLISHED_FORMATS:
        return None
    size = len(data) / 1e6
    return (
        f"a head with an MLP ({size:.0f} MB) is not published through Redis: copying it would hold the "
        "shared Redis for a large fraction of a second; name its file in the task (head = ...) instead, "
        "or train it with mlp = false to publish"
    )


def read_head(client: Any, key: str) -> tuple[str, bytes] | None:
    """(version, bytes) of a head hash (``P:head``, ``P:head:good``), or None: absent, without both
    fields, or a key of another type (by hand). A version written by hand that is not UTF-8 is shown
    replaced, never raised on."""
    try:
        version, data = client.hmget(key, ["version", "data"])
    except Exception as exc:  # redis.ResponseError (redis is not imported here: the engine imports this)
        if "WRONGTYPE" not in str(exc):
            raise
        return None
    if not isinstance(version, bytes) or not isinstance(data, bytes):
        return None
    return version.decode("utf-8", "replace"), data

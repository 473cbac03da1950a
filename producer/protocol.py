"""The wire protocol: every Redis key ticketq uses, and the JSON that travels through them.

This module is the contract between producers (any language) and workers. It is imported by both
sides and must stay light: the standard library only.

Keys (``P`` is the prefix, default ``ticketq``; put a hash tag in it, e.g. ``{ticketq}``, and every
key lands in one Redis Cluster slot, so the multi-key scripts and transactions work there too):

=========================  ======  ===========================================================  ==========
key                        type    what                                                         lifetime
=========================  ======  ===========================================================  ==========
``P:tickets``              list    input. Producers LPUSH ticket JSON; workers take the oldest  permanent
                                   (right end) first.
``P:results``              hash    ticket id -> result JSON (see :class:`Result`).              until trimmed
``P:done``                 zset    ticket id scored by its result's finish time (unix s):       with its
                                   workers delete results older than ``--keep-results-s``       result
                                   oldest first (Redis 6.2 has no per-field hash TTL).
``P:dead``                 list    dead letters: JSON ``{"reason", "payload", "id"?, ...}``     newest
                                   (see :class:`DeadLetter`; ``id`` when one could be read);   ``--max-dead``
                                   newest at the left. Each at most ``MAX_LETTER_BYTES``.      kept
``P:inflight:<worker>``    list    raw payloads a worker has claimed and not yet acknowledged.  until acked
                                   Requeued onto ``P:tickets`` if the worker's heartbeat        or requeued
                                   expires.
``P:heartbeat:<worker>``   string  worker info JSON (id, host, model, ``questions``: the        TTL
                                   task's further questions); refreshed with a TTL. Readers
                                   read its first ``MAX_HEARTBEAT_BYTES`` only. Alive: a string
                                   that expires (one without a TTL, or another type: no beat).
``P:workers``              set     ids of workers that may hold in-flight lists.                removed on
                                                                                                recovery
``P:recovering:<worker>``  hash    payload digest -> the attempt count a recovery of that       until its
                                   worker's list gave it, read by the recovery's later steps   list is
                                   (``recover.lua``): a payload held twice is one death.         empty
``P:attempts``             hash    payload digest (:func:`payload_digest`: the sha1 of the      deleted on
                                   payload, or of its first 64 KiB and size when it is larger)  ack / dead
                                   -> times it was claimed by a worker that then died.
                                   Bounded: a poison ticket is dead-lettered.
``P:events``               pubsub  channel: JSON ``{"ids": [...], "dead": {id: reason},         transient
                                   "dead_digests": {id: [digest, ...]}}`` after each
                                   acknowledged batch (``ids`` got results, ``dead`` were
                                   dead-lettered, ``dead_digests`` their payloads' digests), so
                                   clients wait without polling (see :class:`Event`). At most
                                   ``MAX_EVENT_BYTES``: ``"left_out"`` names the rest by
                                   :func:`id_token`.
``P:text:<id>``            string  ticket text, kept with its result for training corrections  ``--keep-``
                                   and self-training (``train --from-redis``; ~160 bytes + the  ``text-s``
                                   text each, on Redis 7.0).
``P:labels``               hash    id -> correction JSON (:mod:`producer.learning`);            permanent
                                   ``unlabel.lua`` (``Client.unlabel``) withdraws one.
``P:labelset``             set     the task's labels, written by each worker; label.lua checks  at start
                                   a correction's label against it.
``P:questions``            set     the task's further questions' names, written by each worker   at start
                                   with ``P:labelset``; label.lua refuses any other question.
``P:q:<NAME>:labelset``    set     question NAME's labels, written with ``P:questions``;         at start
                                   label.lua checks a correction for NAME against it.
``P:head``                 hash    published head: version, data (file bytes), at, sha256, by.  replaced
``P:head:staging:<t>``     hash    a head being published: its bytes, HSET by the publisher,     10 min TTL
                                   renamed onto ``P:head`` by ``publish_head.lua``.             or renamed
``P:heads``                list    publish history, newest first, no data; ``P:head:seq``: INCR bounded
``P:head:good``            hash    version, data: the newest published head a worker loaded      replaced
                                   (``keep_head.lua``, a COPY of ``P:head``, its other fields
                                   too): a worker that refuses ``P:head`` serves
                                   this one, as the workers running since before it was
                                   published still do, not its task's own head.
``P:review``               zset    ids of ``"review": true`` results scored by margin (top      labelled,
                                   probability minus the runner-up's, :func:`review_margin`;    trimmed
                                   smallest first); labelling, trim or ``MAX_REVIEW`` (largest
                                   margins go first) remove ids.
``P:q:<NAME>:labels``      hash    as ``P:labels``, ``P:head``, ``P:heads``, ``P:head:seq`` and  as those
``P:q:<NAME>:head`` ...            ``P:head:good``, for a task's further question NAME
                                   (``[questions.NAME]``): its corrections and its published
                                   heads, one per question.
``P:q:<NAME>:review``      zset    as ``P:review``, for question NAME: ids whose answer          labelled
                                   ``answers.NAME`` carries ``"review": true``, scored by that  for NAME,
                                   answer's margin; labelling the ticket for that question      trimmed
                                   (``label.lua`` with ARGV 4 NAME), trim or ``MAX_REVIEW``
                                   (each question's own bound) remove ids.
=========================  ======  ===========================================================  ==========

A ticket is a JSON object (UTF-8)::

    {"id": "T-1001", "text": "I was charged twice", "v": 1, "customer": "acme"}

``id`` is a non-empty string (at most 256 characters), ``text`` a non-empty string (after stripping
white space) of at most ``MAX_TEXT_CHARS`` characters, without control characters other than tab,
newline and carriage return. ``v`` (optional) is the format version, 1. ``enqueued_at`` (optional) is
the time the producer pushed it, in unix seconds (a number): results then carry ``queued_s``, the wait
before a worker claimed it. Every other field is passed through to the result under ``fields``.
Anything else (and what :mod:`producer.strictjson` refuses) is dead-lettered with the reason.

Duplicate ids: a ticket whose id already has a result is a redelivery when its payload is byte-for-byte
the same (the result is rewritten), else dead-lettered as ``duplicate id``: the first result wins.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from producer.strictjson import (
    MAX_PAYLOAD_BYTES,
    TEXT_CONTROLS,
    BadTicket,
    check_chars,
    check_id_chars,
    clean,
    dumps_strict,
    finite_number,
    loads_strict,
    may_hold_surrogate,
)

__all__ = ["MAX_PAYLOAD_BYTES", "BadTicket"]  # the wire contract's, though they live in producer.strictjson
VERSION = 1
MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 16_384
DEFAULT_PREFIX = "ticketq"
# What a reader of a heartbeat reads of it (GETRANGE): a worker writes a few hundred bytes; one made by hand
# of 100 MB was read whole by every `stats` and every health probe (`ticketq-worker check`).
MAX_HEARTBEAT_BYTES = 64 * 1024
# Most bytes of one P:events message (see Event): copied by Redis to every subscriber, inside the ack.
MAX_EVENT_BYTES = 32 * 1024
MAX_REVIEW = 10_000  # ids kept in P:review (and each P:q:NAME:review); past it the largest margins go


def review_margin(scores: dict[str, float]) -> float:
    """A result's place in ``P:review``: its top probability minus the runner-up's (1.0 with one label).

    Smallest first: in a simulated labelling session on Banking77's 77 intents, labelling the smallest
    margins first beat random and least-confident-first orders (docs/active-learning.md)."""
    top = sorted((float(v) for v in scores.values()), reverse=True)[:2]
    if not top:
        return 0.0
    return round(top[0] - (top[1] if len(top) > 1 else 0.0), 6)


@dataclass(frozen=True)
class Keys:
    """Every key name, built from one prefix. The only place key names are spelled."""

    prefix: str = DEFAULT_PREFIX

    @property
    def tickets(self) -> str:
        return f"{self.prefix}:tickets"

    @property
    def results(self) -> str:
        return f"{self.prefix}:results"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def attempts(self) -> str:
        return f"{self.prefix}:attempts"

    @property
    def events(self) -> str:
        return f"{self.prefix}:events"

    @property
    def done(self) -> str:
        return f"{self.prefix}:done"

    @property
    def labels(self) -> str:
        return f"{self.prefix}:labels"

    @property
    def labelset(self) -> str:
        return f"{self.prefix}:labelset"

    @property
    def questions(self) -> str:
        return f"{self.prefix}:questions"

    @property
    def head(self) -> str:
        return f"{self.prefix}:head"

    @property
    def heads(self) -> str:
        return f"{self.prefix}:heads"

    @property
    def head_seq(self) -> str:
        return f"{self.prefix}:head:seq"

    @property
    def head_good(self) -> str:
        return f"{self.prefix}:head:good"

    def recovering(self, worker_id: str) -> str:
        return f"{self.prefix}:recovering:{worker_id}"

    def head_staging(self, token: str) -> str:
        return f"{self.prefix}:head:staging:{token}"

    @property
    def review(self) -> str:
        return f"{self.prefix}:review"

    def asking(self, question: str | None) -> Keys:
        """Keys whose ``labels``, ``labelset``, ``head``, ``heads``, ``head_seq``, ``head_good``,
        ``review`` are ``question``'s (None: these)."""
        if question is not None and (not question or ":" in question):
            raise ValueError(f"question name {question!r}: non-empty, without ':'")
        return self if question is None else Keys(f"{self.prefix}:q:{question}")

    def text(self, ticket_id: str) -> str:
        return f"{self.prefix}:text:{ticket_id}"

    def inflight(self, worker_id: str) -> str:
        return f"{self.prefix}:inflight:{worker_id}"

    def heartbeat(self, worker_id: str) -> str:
        return f"{self.prefix}:heartbeat:{worker_id}"


def cluster_prefix(prefix: str) -> str:
    """The prefix with a Redis Cluster hash tag: ``ticketq`` -> ``{ticketq}``; one that already has a
    non-empty ``{...}`` is kept. Every key then hashes to one slot, which scripts and MULTI need there."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    if start >= 0 and end > start + 1:
        return prefix
    return "{" + prefix + "}"


#: The payload keys the protocol owns: a ticket's ``fields`` may not use them (one would replace the id,
#: the text or the stamp the ticket was pushed with).
RESERVED_FIELDS = frozenset({"id", "text", "v", "enqueued_at"})
SHOWN_VALUE_CHARS = 40  # a producer's value quoted in a reason is cut here (reasons reach logs)


@dataclass(frozen=True)
class Ticket:
    id: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    enqueued_at: float | None = None  # unix seconds, stamped by the producer

    def __post_init__(self) -> None:
        if taken := sorted(RESERVED_FIELDS.intersection(self.fields)):
            raise ValueError(f"fields may not use the protocol's keys {taken} (id, text, v, enqueued_at)")

    def to_json(self) -> str:
        stamp = {} if self.enqueued_at is None else {"enqueued_at": self.enqueued_at}
        return json.dumps(
            {"id": self.id, "text": self.text, "v": VERSION, **stamp, **self.fields}, ensure_ascii=False
        )


#: A payload up to this size is identified by the sha1 of all of it; a larger one (refused anyway) by the
#: sha1 of its first DIGEST_BYTES bytes, a newline and its size in decimal, so hashing one costs the same
#: whatever its size (claim.lua computes the same inside Redis; recover.lua checks it). The input hashed for
#: a large one is over DIGEST_BYTES long, so it never equals a small payload's.
DIGEST_BYTES = MAX_PAYLOAD_BYTES


def payload_digest(raw: bytes) -> str:
    """Identity of one raw payload: used to tell a redelivery from a different ticket with the same id, and
    as its ``P:attempts`` field. The sha1 of the payload; over :data:`DIGEST_BYTES`, of a bounded prefix."""
    if len(raw) <= DIGEST_BYTES:
        return hashlib.sha1(raw).hexdigest()
    return hashlib.sha1(raw[:DIGEST_BYTES] + b"\n" + str(len(raw)).encode()).hexdigest()


def decode_ticket(raw: bytes | str) -> Ticket:
    """Strictly decode one payload from the input list, or raise :class:`BadTicket` with the reason."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    obj = loads_strict(raw)
    if not isinstance(obj, dict):
        raise BadTicket(f"not a JSON object: got {_type_name(obj)}")
    version = obj.pop("v", VERSION)
    if version != VERSION or isinstance(version, bool):
        shown = _cut(repr(version), SHOWN_VALUE_CHARS)  # a producer's value, quoted: bounded
        raise BadTicket(f"unsupported version: {shown} (this worker speaks v{VERSION})")
    if "id" not in obj:
        raise BadTicket("missing field: id")
    ticket_id = obj.pop("id")
    if not isinstance(ticket_id, str):
        raise BadTicket(f"wrong type: id must be a string, got {_type_name(ticket_id)}")
    if not ticket_id.strip():
        raise BadTicket("empty field: id")
    if ticket_id in (".", ".."):  # a URL path segment browsers resolve away: no page could show it
        raise BadTicket(f"id {ticket_id!r} is not an id (a path segment: '.' and '..' are refused)")
    if len(ticket_id) > MAX_ID_CHARS:
        raise BadTicket(f"id too long: {len(ticket_id)} characters > {MAX_ID_CHARS}")
    # Ids end up in logs, terminals and web pages: no control characters there (not even tab or newline),
    # no C1 controls, and no bidi or line-separator characters that reorder or break what a person reads.
    check_chars(ticket_id, "id", allowed=frozenset())
    check_id_chars(ticket_id)
    if "text" not in obj:
        raise BadTicket("missing field: text")
    body = obj.pop("text")
    if not isinstance(body, str):
        raise BadTicket(f"wrong type: text must be a string, got {_type_name(body)}")
    if len(body) > MAX_TEXT_CHARS:
        raise BadTicket(f"text too long: {len(body)} characters > {MAX_TEXT_CHARS}")
    # checked before the strip: str.strip() removes U+001C-001F and U+0085 too, which are refused
    check_chars(body, "text", allowed=TEXT_CONTROLS)
    body = body.strip()
    if not body:
        raise BadTicket("empty field: text is empty or white space")
    enqueued_at = obj.pop("enqueued_at", None)
    if enqueued_at is not None and (
        isinstance(enqueued_at, bool)
        or not isinstance(enqueued_at, int | float)
        or not math.isfinite(enqueued_at)
    ):
        raise BadTicket(
            f"wrong type: enqueued_at must be a number (unix seconds), got {_type_name(enqueued_at)}"
        )
    return Ticket(
        id=ticket_id,
        text=body,
        fields=obj,
        enqueued_at=None if enqueued_at is None else float(enqueued_at),
    )


def _is_answer(a: Any) -> bool:  # lenient, as Result.from_json is: a malformed answer is left out
    if not (isinstance(a, dict) and isinstance(a.get("label"), str) and isinstance(a.get("scores"), dict)):
        return False
    numbers = [*a["scores"].values(), *([a["confidence"]] if a.get("confidence") is not None else [])]
    return all(finite_number(v) is not None for v in numbers)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@dataclass(frozen=True)
class Result:
    """What a worker writes to ``P:results[id]``."""

    id: str
    label: str
    scores: dict[str, float]  # label -> probability: every label's (summing to 1), or the most probable
    # N only, most probable first, the label among them (a worker's --result-scores N; answers' too)
    model: str
    digest: str  # payload_digest of the ticket it answers
    fields: dict[str, Any] = field(default_factory=dict)
    worker: str = ""
    at: float = field(default_factory=time.time)
    queued_s: float | None = None  # enqueued_at to claim; None when the ticket carried no enqueued_at
    took_s: float | None = None  # claim to result: decode, classify (the whole drain's passes)
    # Optional (absent from older results): how the label was decided, "head" or "zero-shot"; with a head,
    # the head: its published version (P:head) when it came through Redis, else its id (a short digest).
    method: str | None = None
    head: str | None = None
    # Optional: scores[label] (calibrated when the head is); review (written when true): below the threshold
    confidence: float | None = None
    review: bool = False
    # Optional: question name -> {"label", "scores", "confidence", "review"?, "head"?}, the task's further
    # questions' answers; "review": true (written when true) below that question's threshold
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def questions_to_review(self) -> list[str]:
        """The further questions whose answer needs review (``answers.NAME.review``), in answer order."""
        return [q for q, a in self.answers.items() if a.get("review") is True]

    def to_json(self) -> str:
        out: dict[str, Any] = {
            "v": VERSION,
            "id": self.id,
            "label": self.label,
            "scores": self.scores,
            "model": self.model,
            "digest": self.digest,
            "fields": self.fields,
            "worker": self.worker,
            "at": round(self.at, 3),
        }
        if self.queued_s is not None:
            out["queued_s"] = round(self.queued_s, 3)
        if self.took_s is not None:
            out["took_s"] = round(self.took_s, 3)
        conf = None if self.confidence is None else round(self.confidence, 4)
        extra = {
            "method": self.method,
            "head": self.head,
            "confidence": conf,
            "review": self.review or None,
            "answers": self.answers or None,
        }
        # Strict (raises Unwritable): NaN scores or a field that is not UTF-8 never reach Redis.
        return dumps_strict({**out, **{k: v for k, v in extra.items() if v is not None}})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Result:
        """The result a worker wrote; ValueError (only) for anything else: not JSON, nested too deeply, a
        field missing or of the wrong type. Results are read from a Redis that others can write to: a
        reader that skips what this refuses never fails on a hand-edited record. A malformed answer is
        left out, as an older worker's result has none."""
        try:
            obj = json.loads(raw)
        except RecursionError:
            raise ValueError("not a result: nested too deeply") from None
        if not isinstance(obj, dict):
            raise ValueError(f"not a result: a JSON {_type_name(obj)}")
        if may_hold_surrogate(raw):  # a "\ud800" escape no worker writes: text nobody can print
            try:
                json.dumps(obj, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("not a result: a lone surrogate in a string") from None
        for key, kinds in _RESULT_TYPES.items():
            value = obj.get(key)
            if (value is None and key not in _RESULT_NEEDS) or (
                isinstance(value, kinds) and not isinstance(value, bool)
            ):
                continue
            raise ValueError(f"not a result: {key} is {_type_name(value)}")
        if not all(finite_number(v) is not None for v in obj["scores"].values()):
            # NaN, or an integer of 400 digits (JSON too): float() of it raises in every reader
            raise ValueError("not a result: a score is not a finite number")
        for key in ("at", "queued_s", "took_s", "confidence"):
            if obj.get(key) is not None and finite_number(obj[key]) is None:
                raise ValueError(f"not a result: {key} is not a finite number")
        defaults = {"model": "", "digest": "", "fields": {}, "worker": "", "at": 0.0}
        optional = ("queued_s", "took_s", "method", "head", "confidence")  # None when absent
        given = {k: obj.get(k, v) for k, v in defaults.items()} | {k: obj.get(k) for k in optional}
        answers = obj.get("answers")
        answers = {k: a for k, a in answers.items() if _is_answer(a)} if isinstance(answers, dict) else {}
        return cls(
            obj["id"], obj["label"], obj["scores"], **given, review=obj.get("review") is True, answers=answers
        )


_NUMBER = (int, float)
# What each key of a result must be (bool is refused where a number is wanted); keys in _RESULT_NEEDS
# must be present, the others may be absent or null.
_RESULT_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "label": str,
    "scores": dict,
    "model": str,
    "digest": str,
    "fields": dict,
    "worker": str,
    "at": _NUMBER,
    "queued_s": _NUMBER,
    "took_s": _NUMBER,
    "confidence": _NUMBER,
    "method": str,
    "head": str,
}
_RESULT_NEEDS = frozenset({"id", "label", "scores"})


#: Most bytes a dead letter's payload takes as JSON-escaped text. A payload whose escaped form is longer
#: (control bytes escape as ``\u00XX``, six bytes each) is kept as base64 instead, which never grows it
#: by more than 4/3, so a letter of a 64 KiB payload stays under :data:`MAX_LETTER_BYTES`.
LETTER_TEXT_BYTES = 80 * 1024  # a 64 KiB payload stays text when escaping adds at most a quarter
MAX_REASON_CHARS = 500  # a letter's reason is cut here (with "…"); reasons are short, this bounds the letter
MAX_WORKER_CHARS = 256
#: Most bytes one encoded dead letter takes: 87,384 of base64 payload (64 KiB; more than the text form's
#: LETTER_TEXT_BYTES), the reason, id and worker at six bytes a character at worst, and the fixed fields.
#: Readers of ``P:dead`` budget with it.
MAX_LETTER_BYTES = 96 * 1024

#: The kinds of dead-letter reason: each reason starts with one of these, and the rest is detail (a field
#: name, a position, an exception's message). Metrics label dead letters by kind (:func:`reason_kind`), so
#: a producer cannot mint a label value per payload. Anything else is ``other``.
DEAD_REASON_KINDS = (
    # the strict decoder (producer/strictjson.py) and decode_ticket
    "payload too large",
    "byte-order mark before the JSON",
    "not UTF-8",
    "nested too deeply",
    "not JSON",
    "not strict JSON",
    "number out of range",
    "duplicate key",
    "lone surrogate",
    "control character",
    "format character",
    "not a JSON object",
    "unsupported version",
    "missing field",
    "wrong type",
    "empty field",
    "id too long",
    "text too long",
    # the worker
    "duplicate id",
    "engine error",
    "unwritable result",
    "poison",
)
OTHER_REASON = "other"


def reason_kind(reason: str) -> str:
    """The kind of a dead letter's reason: the :data:`DEAD_REASON_KINDS` entry it starts with (followed by
    its end or a character that is not a letter or digit), else ``"other"``. A fixed set, for labels."""
    for kind in DEAD_REASON_KINDS:
        if reason.startswith(kind) and (len(reason) == len(kind) or not reason[len(kind)].isalnum()):
            return kind
    return OTHER_REASON


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "\u2026"


UNREADABLE_LETTER = "unreadable dead letter"  # the reason a P:dead entry that is not a letter reads with


@dataclass(frozen=True)
class DeadLetter:
    """What a worker pushes to ``P:dead``: the original payload and why it was rejected.

    The payload is kept in one of three forms, so one letter is at most :data:`MAX_LETTER_BYTES`:

    - ``payload``: the payload as text, when it is strict UTF-8 and its JSON-escaped form takes at most
      :data:`LETTER_TEXT_BYTES` (every valid ticket of up to 40 KiB, and nearly every larger one: escaping
      at most doubles a valid one);
    - ``payload_b64`` with ``"payload_utf8": true``: UTF-8 text whose escaped form is longer (a payload
      full of control bytes or quotes), as base64. Still whole: ``requeue-dead`` replays it;
    - ``payload_b64`` alone: a payload that is not UTF-8 (no worker would take it back).

    A payload over ``MAX_PAYLOAD_BYTES`` keeps its first ``MAX_PAYLOAD_BYTES`` bytes in one of these forms,
    with ``payload_bytes``, its original size; such a letter is not replayed.
    """

    reason: str
    payload: bytes
    worker: str = ""
    at: float = field(default_factory=time.time)
    id: str | None = None  # the ticket id when one could be read (see :func:`peek_id`), so waiters can tell
    # Workers that died holding it (a poison letter): restored to P:attempts when it is replayed, so a
    # replayed poison ticket still travels alone and is dead again after one more death, not three.
    attempts: int = 0
    # The original payload's size when only its head is kept (``payload`` is then that head).
    payload_bytes: int | None = None

    @property
    def whole(self) -> bool:
        """Whether the payload is kept whole (not cut to its head)."""
        return self.payload_bytes is None

    def to_json(self) -> str:
        # Never raises: the reason (it may quote an exception) and the id are cleaned of lone surrogates,
        # and the payload travels as UTF-8 text only when it is strict UTF-8 and short once escaped.
        out: dict[str, Any] = {
            "v": VERSION,
            "reason": _cut(clean(self.reason), MAX_REASON_CHARS),
            "worker": _cut(clean(self.worker), MAX_WORKER_CHARS),
            "at": round(self.at, 3) if math.isfinite(self.at) else 0.0,
        }
        if self.id is not None:
            out["id"] = _cut(clean(self.id), MAX_ID_CHARS)
        if self.attempts:
            out["attempts"] = self.attempts
        payload = self.payload
        if len(payload) > MAX_PAYLOAD_BYTES:
            # Keep the dead list bounded: an oversized payload is kept as its head plus its size.
            out["payload_bytes"] = len(payload)
            payload = payload[:MAX_PAYLOAD_BYTES]
        elif self.payload_bytes is not None:  # a head read back from a letter
            out["payload_bytes"] = self.payload_bytes
        try:
            text: str | None = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if (
            text is not None
            and len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2 <= LETTER_TEXT_BYTES
        ):
            out["payload"] = text
        else:
            import base64

            out["payload_b64"] = base64.b64encode(payload).decode("ascii")
            if text is not None:
                out["payload_utf8"] = True
        return json.dumps(out, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        """ValueError or TypeError for a record that is not a letter; :meth:`read` never raises."""
        obj = json.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError(f"a dead letter is a JSON object, not {type(obj).__name__}")
        if "payload_b64" in obj:
            import base64

            payload = base64.b64decode(obj["payload_b64"])
        else:
            payload = str(obj.get("payload", "")).encode("utf-8", "surrogatepass")
        ticket_id = obj.get("id")
        attempts = obj.get("attempts", 0)
        size = obj.get("payload_bytes")
        return cls(
            reason=str(obj.get("reason", "")),
            payload=payload,
            worker=str(obj.get("worker", "")),
            at=finite_number(obj.get("at")) or 0.0,  # never raises: a 400-digit integer is JSON too
            id=ticket_id if isinstance(ticket_id, str) else None,
            attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
            payload_bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
        )

    @classmethod
    def read(cls, raw: bytes | str) -> DeadLetter:
        """A ``P:dead`` entry as a letter, never raising: one that is not a letter (written by hand or by
        another tool under the prefix) reads as :data:`UNREADABLE_LETTER`, the entry as its payload, so
        one bad entry cannot break ``dead``, ``push --wait`` or the dashboard."""
        try:
            return cls.from_json(raw)
        except (ValueError, TypeError, RecursionError):
            data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")
            return cls(reason=UNREADABLE_LETTER, payload=data, at=0.0)  # no time: not the reader's clock


def peek_id(raw: bytes | str) -> str | None:
    """Best-effort ticket id of a payload that may be invalid, so a dead letter can still name its ticket.

    Never raises: a payload that the strict parser refuses, or whose ``id`` is not one a valid ticket
    could carry (a lone surrogate, a control or bidi character, too long), simply has no id.
    """
    try:
        obj = loads_strict(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    except BadTicket:
        return None
    ticket_id = obj.get("id") if isinstance(obj, dict) else None
    if not isinstance(ticket_id, str) or not ticket_id.strip() or len(ticket_id) > MAX_ID_CHARS:
        return None
    try:
        check_chars(ticket_id, "id", allowed=frozenset())
        check_id_chars(ticket_id)
    except BadTicket:
        return None
    return ticket_id


@dataclass(frozen=True)
class Event:
    """What a worker publishes on ``P:events`` after an acknowledged batch.

    ``ids`` got results; ``dead`` maps the ids of dead-lettered tickets (those with a readable id) to the
    reason, and ``dead_digests`` each such id to the :func:`payload_digest` of its dead payloads, so a
    waiter for one payload is not told that another payload with the same id died. Events from older
    workers have no ``dead_digests``: a waiter then takes ``dead`` by id. Events are a wake-up call only:
    pub/sub is fire-and-forget, so the results hash stays the truth.

    An event is at most :data:`MAX_EVENT_BYTES` of JSON: Redis copies it to every subscriber, and ids of
    256 four-byte characters made one ack's event half a megabyte. What does not fit is left out, the
    largest entries first (the dead before the written: a result can be read back, a letter cannot be
    looked up), and named in ``left_out`` by :func:`id_token` (16 bytes each): a waiter whose id's token
    is there reads that id's result back, or, with none, looks for its letter in ``P:dead``.
    """

    ids: list[str] = field(default_factory=list)
    dead: dict[str, str] = field(default_factory=dict)
    dead_digests: dict[str, list[str]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)

    @classmethod
    def after(
        cls, written: Iterable[str], letters: Iterable[DeadLetter], budget: int = MAX_EVENT_BYTES
    ) -> Event:
        """The event for an ack that wrote results for ``written`` and these dead letters, within
        ``budget`` bytes of JSON (the smallest entries kept, dead letters first; see the class)."""
        grouped: dict[str, tuple[str, list[str]]] = {}
        for letter in letters:
            if letter.id is not None:
                grouped.setdefault(clean(letter.id), (clean(letter.reason), []))[1].append(
                    payload_digest(letter.payload)
                )
        names = [clean(i) for i in written]
        whole = cls(
            ids=names,
            dead={k: v[0] for k, v in grouped.items()},
            dead_digests={k: v[1] for k, v in grouped.items()},
        )
        if len(whole.to_json().encode("utf-8")) <= budget:
            return whole
        # room for every entry's token, should all of them be left out: what is left is for whole entries
        left = budget - _EVENT_FRAME - _TOKEN_BYTES * (len(grouped) + len(names))
        dead: dict[str, str] = {}
        digests: dict[str, list[str]] = {}
        out: list[str] = []
        for tid, (reason, seen) in sorted(grouped.items(), key=lambda kv: _dead_size(kv[0], *kv[1])):
            size = _dead_size(tid, reason, seen)
            if size > left:
                out.append(tid)
                continue
            left -= size
            dead[tid], digests[tid] = reason, seen
        ids: list[str] = []
        for tid in sorted(names, key=_json_size):
            size = _json_size(tid) + 2
            if size > left:
                out.append(tid)
                continue
            left -= size
            ids.append(tid)
        return cls(ids=ids, dead=dead, dead_digests=digests, left_out=sorted({id_token(t) for t in out}))

    def died(self, ticket_id: str, digest: str | None = None) -> bool:
        """Whether this event reports ``ticket_id`` dead: with ``digest``, that payload of it, when the
        event names its dead payloads (older events do not; their ``dead`` entries count by id)."""
        if ticket_id not in self.dead:
            return False
        seen = self.dead_digests.get(ticket_id)
        return not digest or seen is None or digest in seen

    def to_json(self) -> str:
        """Never raises: ids and reasons are cleaned of lone surrogates (see :func:`clean`)."""
        dead = {clean(k): clean(v) for k, v in self.dead.items()}
        out: dict[str, Any] = {"ids": [clean(i) for i in self.ids], "dead": dead}
        if self.dead_digests:
            out["dead_digests"] = {clean(k): list(v) for k, v in self.dead_digests.items()}
        if self.left_out:
            out["left_out"] = list(self.left_out)
        return json.dumps(out, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Event:
        """Lenient: a malformed event decodes as empty rather than breaking a waiter."""
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            return cls()
        if not isinstance(obj, dict):
            return cls()
        ids, dead, digests, cut = (
            obj.get("ids"),
            obj.get("dead"),
            obj.get("dead_digests"),
            obj.get("left_out"),
        )
        return cls(
            ids=[i for i in ids if isinstance(i, str)] if isinstance(ids, list) else [],
            dead={str(k): str(v) for k, v in dead.items()} if isinstance(dead, dict) else {},
            dead_digests={
                str(k): [d for d in v if isinstance(d, str)]
                for k, v in (digests.items() if isinstance(digests, dict) else ())
                if isinstance(v, list)
            },
            left_out=[t for t in cut if isinstance(t, str)] if isinstance(cut, list) else [],
        )


_EVENT_FRAME = len('{"ids": [], "dead": {}, "dead_digests": {}, "left_out": []}')
_TOKEN_BYTES = 16  # one id_token in left_out: 12 hex digits, quotes, comma and space


def id_token(ticket_id: str) -> str:
    """How an event names an id it left out: the first 12 hex digits of the SHA-1 of its UTF-8 (a lone
    surrogate as its code point, as :func:`clean` writes ids): two ids share one once in 2^48."""
    return hashlib.sha1(clean(ticket_id).encode("utf-8")).hexdigest()[:12]


def _json_size(text: str) -> int:
    """The bytes ``text`` takes as a JSON string in an event (UTF-8, quotes and escapes)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def _dead_size(ticket_id: str, reason: str, digests: list[str]) -> int:
    """The bytes one dead entry adds to an event: its id twice (``dead`` and ``dead_digests``), its reason
    and its digests, with the separators."""
    return 2 * (_json_size(ticket_id) + 4) + _json_size(reason) + sum(len(d) + 4 for d in digests) + 4

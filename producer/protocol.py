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
                                   newest at the left.                                          kept
``P:inflight:<worker>``    list    raw payloads a worker has claimed and not yet acknowledged.  until acked
                                   Requeued onto ``P:tickets`` if the worker's heartbeat        or requeued
                                   expires.
``P:heartbeat:<worker>``   string  worker info JSON; refreshed every few seconds with a TTL.    TTL
``P:workers``              set     ids of workers that may hold in-flight lists.                removed on
                                                                                                recovery
``P:attempts``             hash    sha1(raw payload) -> times it was claimed by a worker that    deleted on
                                   then died. Bounded: a poison ticket is dead-lettered.        ack / dead
``P:events``               pubsub  channel: JSON ``{"ids": [...], "dead": {id: reason}}`` after transient
                                   each acknowledged batch (``ids`` got results, ``dead`` were
                                   dead-lettered), so clients wait without polling.
``P:text:<id>``            string  ticket text, kept with its result for training corrections  ``--keep-``
                                   (~160 bytes + the text each, on Redis 7.0).                  ``text-s``
``P:labels``               hash    id -> correction JSON (:mod:`producer.learning`).            permanent
``P:head``                 hash    published head: version, data (file bytes), at, sha256, by.  replaced
``P:heads``                list    publish history, newest first, no data; ``P:head:seq``: INCR bounded
``P:q:<NAME>:labels``      hash    as ``P:labels``, ``P:head``, ``P:heads`` and ``P:head:seq``,  as those
``P:q:<NAME>:head`` ...            for a task's further question NAME (``[questions.NAME]``):
                                   its corrections and its published heads, one per question.
=========================  ======  ===========================================================  ==========

A ticket is a JSON object (UTF-8)::

    {"id": "T-1001", "text": "I was charged twice", "v": 1, "customer": "acme"}

``id`` is a non-empty string (at most 256 characters), ``text`` a non-empty string (after stripping
white space) of at most ``MAX_TEXT_CHARS`` characters, without control characters other than tab,
newline and carriage return. ``v`` (optional) is the format version, 1. ``enqueued_at`` (optional) is
the time the producer pushed it, in unix seconds (a number): results then carry ``queued_s``, the wait
before a worker claimed it. Every other field is passed through to the result under ``fields``.
Anything else is dead-lettered with the reason.

Duplicate ids: a ticket whose id already has a result is treated as a redelivery when its payload is
byte-for-byte the same (the result is rewritten, harmlessly), and dead-lettered with the reason
``duplicate id`` when it differs. The first result for an id wins.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

VERSION = 1
MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 16_384
# Checked before JSON parsing, so a 10 MB payload is refused without being decoded.
MAX_PAYLOAD_BYTES = 64 * 1024
DEFAULT_PREFIX = "ticketq"

_ALLOWED_CONTROL = frozenset({"\t", "\n", "\r"})


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
    def head(self) -> str:
        return f"{self.prefix}:head"

    @property
    def heads(self) -> str:
        return f"{self.prefix}:heads"

    @property
    def head_seq(self) -> str:
        return f"{self.prefix}:head:seq"

    def asking(self, question: str | None) -> Keys:
        """Keys whose ``labels``, ``head``, ``heads``, ``head_seq`` are ``question``'s (None: these)."""
        if question is not None and (not question or ":" in question):
            raise ValueError(f"question name {question!r}: non-empty, without ':'")
        return self if question is None else Keys(f"{self.prefix}:q:{question}")

    def text(self, ticket_id: str) -> str:
        return f"{self.prefix}:text:{ticket_id}"

    def inflight(self, worker_id: str) -> str:
        return f"{self.prefix}:inflight:{worker_id}"

    def heartbeat(self, worker_id: str) -> str:
        return f"{self.prefix}:heartbeat:{worker_id}"


class BadTicket(ValueError):
    """A payload that can never be classified. It is dead-lettered with ``reason``; never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def cluster_prefix(prefix: str) -> str:
    """The prefix with a Redis Cluster hash tag: ``ticketq`` -> ``{ticketq}``; one that already has a
    non-empty ``{...}`` is kept. Every key then hashes to one slot, which scripts and MULTI need there."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    if start >= 0 and end > start + 1:
        return prefix
    return "{" + prefix + "}"


@dataclass(frozen=True)
class Ticket:
    id: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    enqueued_at: float | None = None  # unix seconds, stamped by the producer

    def to_json(self) -> str:
        stamp = {} if self.enqueued_at is None else {"enqueued_at": self.enqueued_at}
        return json.dumps(
            {"id": self.id, "text": self.text, "v": VERSION, **stamp, **self.fields}, ensure_ascii=False
        )


def payload_digest(raw: bytes) -> str:
    """Identity of one raw payload: used to tell a redelivery from a different ticket with the same id."""
    return hashlib.sha1(raw).hexdigest()


def decode_ticket(raw: bytes | str) -> Ticket:
    """Strictly decode one payload from the input list, or raise :class:`BadTicket` with the reason."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise BadTicket(f"payload too large: {len(raw)} bytes > {MAX_PAYLOAD_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadTicket(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise BadTicket("not JSON: nested too deeply") from None
    except ValueError as exc:
        raise BadTicket(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadTicket(f"not a JSON object: got {type(obj).__name__}")
    version = obj.pop("v", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise BadTicket(f"unsupported version: {version!r} (this worker speaks v{VERSION})")
    if "id" not in obj:
        raise BadTicket("missing field: id")
    ticket_id = obj.pop("id")
    if not isinstance(ticket_id, str):
        raise BadTicket(f"wrong type: id must be a string, got {_type_name(ticket_id)}")
    if not ticket_id.strip():
        raise BadTicket("empty field: id")
    if len(ticket_id) > MAX_ID_CHARS:
        raise BadTicket(f"id too long: {len(ticket_id)} characters > {MAX_ID_CHARS}")
    # Ids end up in logs and terminals: no control characters there either (not even tab or newline).
    _check_chars(ticket_id, "id", allowed=frozenset())
    if "text" not in obj:
        raise BadTicket("missing field: text")
    body = obj.pop("text")
    if not isinstance(body, str):
        raise BadTicket(f"wrong type: text must be a string, got {_type_name(body)}")
    if len(body) > MAX_TEXT_CHARS:
        raise BadTicket(f"text too long: {len(body)} characters > {MAX_TEXT_CHARS}")
    body = body.strip()
    if not body:
        raise BadTicket("empty field: text is empty or white space")
    _check_chars(body, "text", allowed=_ALLOWED_CONTROL)
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


def _check_chars(value: str, name: str, allowed: frozenset[str]) -> None:
    for ch in value:
        if (ord(ch) < 32 or ord(ch) == 127) and ch not in allowed:
            raise BadTicket(f"control character U+{ord(ch):04X} in {name}")
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise BadTicket(f"lone surrogate U+{ord(ch):04X} in {name}")


def _is_answer(a: Any) -> bool:  # lenient, as Result.from_json is: a malformed answer is left out
    return isinstance(a, dict) and isinstance(a.get("label"), str) and isinstance(a.get("scores"), dict)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@dataclass(frozen=True)
class Result:
    """What a worker writes to ``P:results[id]``."""

    id: str
    label: str
    scores: dict[str, float]  # label -> probability, summing to 1
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
    # Optional: question name -> {"label", "scores", "head"?}, the task's further questions' answers
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

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
        extra: dict[str, Any] = {"method": self.method, "head": self.head, "answers": self.answers or None}
        return json.dumps({**out, **{k: v for k, v in extra.items() if v is not None}}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Result:
        obj = json.loads(raw)
        return cls(
            id=obj["id"],
            label=obj["label"],
            scores=obj["scores"],
            model=obj.get("model", ""),
            digest=obj.get("digest", ""),
            fields=obj.get("fields", {}),
            worker=obj.get("worker", ""),
            at=obj.get("at", 0.0),
            queued_s=obj.get("queued_s"),
            took_s=obj.get("took_s"),
            method=obj.get("method"),
            head=obj.get("head"),
            answers={k: a for k, a in (obj.get("answers") or {}).items() if _is_answer(a)},
        )


@dataclass(frozen=True)
class DeadLetter:
    """What a worker pushes to ``P:dead``: the original payload (as text when it is UTF-8, else
    base64 under ``payload_b64``) and why it was rejected."""

    reason: str
    payload: bytes
    worker: str = ""
    at: float = field(default_factory=time.time)
    id: str | None = None  # the ticket id when one could be read (see :func:`peek_id`), so waiters can tell

    def to_json(self) -> str:
        out: dict[str, Any] = {
            "v": VERSION,
            "reason": self.reason,
            "worker": self.worker,
            "at": round(self.at, 3),
        }
        if self.id is not None:
            out["id"] = self.id
        payload = self.payload
        if len(payload) > MAX_PAYLOAD_BYTES:
            # Keep the dead list bounded: an oversized payload is kept as its head plus its size.
            out["payload_bytes"] = len(payload)
            payload = payload[:MAX_PAYLOAD_BYTES]
        try:
            out["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            out["payload_b64"] = base64.b64encode(payload).decode("ascii")
        return json.dumps(out, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        obj = json.loads(raw)
        if "payload_b64" in obj:
            import base64

            payload = base64.b64decode(obj["payload_b64"])
        else:
            payload = str(obj.get("payload", "")).encode("utf-8", "surrogatepass")
        ticket_id = obj.get("id")
        return cls(
            reason=str(obj.get("reason", "")),
            payload=payload,
            worker=str(obj.get("worker", "")),
            at=float(obj.get("at", 0.0)),
            id=ticket_id if isinstance(ticket_id, str) else None,
        )


def peek_id(raw: bytes | str) -> str | None:
    """Best-effort ticket id of a payload that may be invalid, so a dead letter can still name its ticket.

    Never raises: a payload that is not a JSON object with a string ``id`` simply has no id.
    """
    try:
        if isinstance(raw, bytes):
            if len(raw) > MAX_PAYLOAD_BYTES:
                return None
            raw = raw.decode("utf-8")
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    ticket_id = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(ticket_id, str) and ticket_id.strip() and len(ticket_id) <= MAX_ID_CHARS:
        return ticket_id
    return None

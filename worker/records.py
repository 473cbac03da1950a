"""Reading what may be junk, never raising: a payload's ``enqueued_at``, an old result's digest, and the
dead letter a payload becomes when it was in flight on one dead worker too many. The queue's helpers,
kept apart so each is tested on hostile bytes alone.
"""

from __future__ import annotations

import json

from producer.protocol import MAX_PAYLOAD_BYTES, DeadLetter, peek_id
from producer.strictjson import finite_number


def attempts_of(stored: bytes | None) -> int:
    """A ``P:attempts`` count as recover.lua reads it: up to nine decimal digits, else 0 (a value no worker
    wrote: '01' is 1, but ' 1', '1e+20' or twenty digits count afresh rather than fail a recovery)."""
    if stored and len(stored) <= 9 and stored.isdigit() and stored.isascii():
        return int(stored)
    return 0


def poison_letter(payload: bytes, wid: str, attempts: int) -> str:
    """The letter a payload becomes if this death is one too many; each built on its own, never raising
    (a payload that defeats :func:`peek_id` still gets a letter, without its id)."""
    reason = f"poison: killed {attempts} workers"
    try:
        ticket_id = peek_id(payload)
    except Exception:
        ticket_id = None
    return DeadLetter(reason, payload, worker=wid, id=ticket_id, attempts=attempts).to_json()


def enqueued_at(raw: bytes | None) -> float | None:
    """A payload's ``enqueued_at`` when it has a numeric one; never raises (the payload may be junk)."""
    if not raw or len(raw) > MAX_PAYLOAD_BYTES:
        return None
    try:
        value = json.loads(raw).get("enqueued_at")
    except (ValueError, AttributeError, RecursionError):
        return None
    return finite_number(value)


def digest_of(result_json: bytes) -> str:
    """The digest of an existing result; an unreadable one matches nothing, so the first result stands."""
    try:
        return str(json.loads(result_json).get("digest", ""))
    except (ValueError, AttributeError, RecursionError):  # RecursionError: nested thousands deep
        return ""

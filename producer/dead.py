"""Replaying dead letters in bounded steps: the loop around ``producer/requeue_dead.lua``.

One script call looks at :data:`REQUEUE_LOOK` letters from the old end of ``P:dead`` (about a millisecond
for letters of 500 bytes), and stops reading once :data:`REQUEUE_BYTES` of letters were read, so
replaying 20,000 letters never blocks Redis: workers and producers run between the steps. Each step is
atomic; the replay as a whole is not, and need not be: a client that dies part way leaves every letter
either still dead or back in the queue, never both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

REQUEUE_LOOK = 100  # letters looked at per call
REQUEUE_BYTES = 1024 * 1024  # bytes of letters read per call, plus one letter (MAX_LETTER_BYTES, 96 KiB)


def replay(
    script: Callable[..., Any],
    keys: Sequence[str],
    reason: str | None,
    limit: int | None,
    ticket_id: str | None,
    poison: bool,
) -> list[str]:
    """Run ``script`` (requeue_dead.lua on ``keys`` P:dead, P:tickets, P:attempts) until done or ``limit``
    letters moved; returns their ids, oldest first. Poison letters only with ``poison``, a ``reason``
    that starts with ``poison``, or a ``ticket_id`` (asking for one letter by name is asking for it)."""
    if limit is not None and limit < 1:
        raise ValueError("limit must be at least 1")
    with_poison = poison or bool(ticket_id) or (reason or "").startswith("poison")
    moved: list[str] = []
    cursor = 0
    while limit is None or len(moved) < limit:
        most = REQUEUE_LOOK if limit is None else min(REQUEUE_LOOK, limit - len(moved))
        args: list[str | int] = [reason or "", most, ticket_id or "", cursor, REQUEUE_LOOK, REQUEUE_BYTES]
        ids, cursor, done = script(keys=list(keys), args=[*args, "1" if with_poison else "0"])
        cursor = int(cursor)
        # an id of a letter written by hand may not be UTF-8: shown replaced (it was moved all the same)
        moved += [m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m) for m in ids]
        if int(done):
            break
    return moved

"""The verdict: where did every planned payload end up?

Read once, after the run has settled and every worker has stopped. A good ticket must have a result for
*its* payload (the digest says which); a malformed one must be in the dead list with the reason it was
built to get; a rival pair must end as one result and one ``duplicate id``. Anything else is counted
under a name that says what went wrong, and ``lost`` (neither a result nor a dead letter) must be 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from producer.protocol import DeadLetter, Keys, Result, payload_digest
from tools.chaos.feed import BAD, RIVAL, Planned

_SHOW = 10  # examples of each problem kept for the report


@dataclass
class Verdict:
    planned: int = 0  # distinct payloads (twins once)
    good: int = 0  # payloads that should get a result (twins and rivals included)
    malformed: int = 0  # payloads built to be dead-lettered
    results: int = 0  # entries in the results hash
    dead: int = 0  # entries in the dead list
    ok: int = 0  # planned payloads that ended where they should
    lost: int = 0  # neither a result for that payload nor a dead letter
    wrong: int = 0  # ended, but not as planned (e.g. a dead letter with another reason)
    poisoned: int = 0  # good tickets dead-lettered as poison (in flight on --max-attempts killed workers)
    duplicates: int = 0  # more than one outcome for one payload (extra dead letters, or result and letter)
    stray: int = 0  # results or dead letters for nothing that was pushed
    left_in_input: int = 0
    left_in_flight: int = 0
    left_attempts: int = 0  # attempt counters still set (payloads marked suspect and never acked)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, problem: str, what: str) -> None:
        shown = self.examples.setdefault(problem, [])
        if len(shown) < _SHOW:
            shown.append(what[:200])


def audit(r: redis.Redis, keys: Keys, planned: Sequence[Planned]) -> Verdict:
    results = {_text(k): Result.from_json(v) for k, v in r.hgetall(keys.results).items()}
    letters: dict[str, list[DeadLetter]] = {}
    raw_dead = r.lrange(keys.dead, 0, -1)
    for raw in raw_dead:
        letter = DeadLetter.from_json(raw)
        letters.setdefault(payload_digest(letter.payload), []).append(letter)
    v = Verdict(planned=len(planned), results=len(results), dead=len(raw_dead))
    v.malformed = sum(p.kind == BAD for p in planned)
    v.good = v.planned - v.malformed
    for p in planned:
        _check_one(v, p, results, letters.get(p.key, []))
    keys_planned = {p.key for p in planned}
    ids_planned = {p.id for p in planned if p.id is not None}
    v.stray = sum(len(ls) for k, ls in letters.items() if k not in keys_planned)
    v.stray += sum(tid not in ids_planned for tid in results)
    v.left_in_input = int(r.llen(keys.tickets))
    v.left_in_flight = sum(int(r.llen(k)) for k in r.scan_iter(match=keys.inflight("*"), count=1000))
    v.left_attempts = int(r.hlen(keys.attempts))
    return v


def _check_one(v: Verdict, p: Planned, results: dict[str, Result], letters: list[DeadLetter]) -> None:
    result = results.get(p.id) if p.id is not None else None
    answered = result is not None and result.digest == payload_digest(p.payload)
    reasons = [d.reason for d in letters]
    label = p.id or p.payload[:60].decode("utf-8", "replace")
    v.duplicates += max(0, len(letters) - 1) + (1 if answered and letters else 0)
    if p.kind == BAD:
        if answered:
            v.wrong += 1
            v.note("malformed payload got a result", label)
        elif not letters:
            v.lost += 1
            v.note("lost", label)
        elif p.reason is not None and reasons[0].startswith(p.reason):
            v.ok += 1
        else:
            v.wrong += 1
            v.note("wrong reason", f"{label}: expected {p.reason!r}, got {reasons[0]!r}")
        return
    if answered:
        v.ok += 1
    elif not letters:
        v.lost += 1
        v.note("lost", label)
    elif all(r.startswith("poison:") for r in reasons):
        v.poisoned += 1
        v.note("poisoned", f"{label}: {reasons[0]}")
    elif p.kind == RIVAL and reasons[0] == "duplicate id":
        v.ok += 1
    else:
        v.wrong += 1
        v.note("good ticket dead", f"{label}: {reasons[0]}")


def log_totals(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """What the workers said they did: redeliveries, requeues, outages, engine errors."""
    out: Counter[str] = Counter()
    for e in events:
        name = e.get("event")
        if name == "drain":
            out["drains"] += 1
            out["claimed"] += int(e.get("claimed") or 0)
            out["redelivered"] += int(e.get("redelivered") or 0)
        elif name == "requeued":
            out[f"requeued ({e.get('why')})"] += int(e.get("count") or 0)
            out["poisoned by recovery"] += int(e.get("dead") or 0)
        elif name in ("redis_unavailable", "engine_error", "exit_during_outage", "requeue_failed"):
            out[str(name)] += 1
    return dict(sorted(out.items()))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

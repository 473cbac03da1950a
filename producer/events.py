"""The wire format of ``P:events`` (named and documented with every other key in :mod:`producer.protocol`):
the wake-up call a worker publishes after each acknowledged batch. Standard library only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    """What a worker publishes on ``P:events`` after an acknowledged batch.

    ``ids`` got results; ``dead`` maps the ids of dead-lettered tickets (those with a readable id) to the
    reason. Events are a wake-up call only: pub/sub is fire-and-forget, so the results hash stays the truth.
    """

    ids: list[str] = field(default_factory=list)
    dead: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"ids": self.ids, "dead": self.dead}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Event:
        """Lenient: a malformed event decodes as empty rather than breaking a waiter."""
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            return cls()
        if not isinstance(obj, dict):
            return cls()
        ids = obj.get("ids")
        dead = obj.get("dead")
        return cls(
            ids=[i for i in ids if isinstance(i, str)] if isinstance(ids, list) else [],
            dead={str(k): str(v) for k, v in dead.items()} if isinstance(dead, dict) else {},
        )

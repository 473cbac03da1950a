"""What the harness pushes, and the producer threads that push it through Redis restarts.

Good tickets are synthetic (:mod:`tools.synthetic`). A few payloads (``bad_rate``) are malformed in a
way whose dead-letter reason is known in advance, and every malformed payload is unique, so its
dead letter can be matched by the payload itself (``key``). Two more shapes test the duplicate rule:
*twins* (the same bytes pushed twice: one result, nothing dead) and *rivals* (two payloads sharing an
id: one result, one ``duplicate id``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from producer.protocol import MAX_PAYLOAD_BYTES, MAX_TEXT_CHARS, payload_digest
from tools import synthetic

GOOD, BAD, TWIN, RIVAL = "good", "bad", "twin", "rival"


@dataclass(frozen=True)
class Planned:
    payload: bytes
    kind: str  # GOOD, BAD, TWIN (pushed twice) or RIVAL (shares its id with one other)
    id: str | None = None  # the ticket id, when the payload has a readable one
    reason: str | None = None  # BAD: the dead-letter reason it must get (a prefix)

    @property
    def key(self) -> str:
        """How its dead letter is found: a dead letter keeps at most MAX_PAYLOAD_BYTES of the payload."""
        return payload_digest(self.payload[:MAX_PAYLOAD_BYTES])


def _j(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _wrap(n: int, value: bytes) -> bytes:
    return b'{"id": "bad-%d", "text": "x", "x": %s}' % (n, value)


# (name, payload built from a serial number n, the reason it must be dead-lettered with)
MALFORMED: list[tuple[str, Callable[[int], bytes], str]] = [
    ("not JSON", lambda n: f"chaos garbage {n} {{".encode(), "not JSON: "),
    ("not UTF-8", lambda n: b'{"id": "bad-%d", "text": "caf\xe9"}' % n, "not UTF-8: "),
    ("not an object", lambda n: _j([f"bad-{n}", "text"]), "not a JSON object: got list"),
    ("missing id", lambda n: _j({"text": f"no id {n}"}), "missing field: id"),
    ("missing text", lambda n: _j({"id": f"bad-{n}"}), "missing field: text"),
    ("wrong id type", lambda n: _j({"id": n, "text": "x"}), "wrong type: id must be a string, got int"),
    ("wrong text type", lambda n: _j({"id": f"bad-{n}", "text": [n]}), "wrong type: text must be a string"),
    ("blank text", lambda n: _j({"id": f"bad-{n}", "text": " \t\n " * (n % 5 + 1)}), "empty field: text"),
    ("control char", lambda n: _j({"id": f"bad-{n}", "text": "bell \x07"}), "control character U+0007"),
    ("version", lambda n: _j({"id": f"bad-{n}", "text": "x", "v": 9}), "unsupported version: 9"),
    ("long text", lambda n: _j({"id": f"bad-{n}", "text": "a" * (MAX_TEXT_CHARS + 1)}), "text too long"),
    ("nested", lambda n: _wrap(n, b"[" * 20_000 + b"]" * 20_000), "nested too deeply: more than 32 levels"),
    ("oversized", lambda n: _wrap(n, b'"' + b"z" * MAX_PAYLOAD_BYTES + b'"'), "payload too large"),
]  # fmt: skip
ENGINE_ERROR = "engine error: FakeEngineError"  # the fake engine raises on __raise__


def plan(tickets: int, seed: int, *, bad_rate: float = 0.02, fake: bool = True) -> list[Planned]:
    """About ``tickets`` payloads in push order (a rival pair replaces one ticket; twins count once).

    ``bad_rate`` of them are malformed, cycling through :data:`MALFORMED`; a quarter as many each are
    engine failures (the fake engine only), twins and rival pairs. The same arguments give the same plan.
    """
    rng = random.Random(seed)
    out: list[Planned] = []
    for n, t in enumerate(synthetic.generate(tickets, seed)):
        roll = rng.random() / bad_rate  # < 1: malformed; then three bands of a quarter each
        if roll < 1:
            _, build, reason = MALFORMED[n % len(MALFORMED)]
            out.append(Planned(build(n), BAD, reason=reason))
        elif roll < 1.25 and fake:
            out.append(Planned(_j({"id": t.id, "text": f"{t.text} __raise__"}), BAD, t.id, ENGINE_ERROR))
        elif 1.25 <= roll < 1.5:
            out.append(Planned(_j({"id": t.id, "text": t.text}), TWIN, t.id))
        elif 1.5 <= roll < 1.75:
            out.append(Planned(_j({"id": t.id, "text": t.text}), RIVAL, t.id))
            out.append(Planned(_j({"id": t.id, "text": t.text + " (again)"}), RIVAL, t.id))
        else:
            out.append(Planned(_j({"id": t.id, "text": t.text, "seq": n}), GOOD, t.id))
    return out


def wire(planned: Sequence[Planned]) -> list[bytes]:
    """The payloads as pushed: twins go twice, back to back (so they often share a drain)."""
    return [p.payload for item in planned for p in ([item, item] if item.kind == TWIN else [item])]


class Producer:
    """A thread that pushes its payloads in small random chunks, paced to last ``spread_s``, retrying
    through outages for up to ``give_up_s`` per chunk.

    Redis refusing writes (maxmemory) is retried too. A retried LPUSH whose first try did land pushes
    the same bytes again: a redelivery, harmless by the duplicate rule, and counted in ``retries``.
    """

    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        key: str,
        payloads: Sequence[bytes],
        spread_s: float,
        seed: int,
        give_up_s: float = 60.0,
    ) -> None:
        self.connect = connect
        self.key = key
        self.payloads = payloads
        self.spread_s = spread_s
        self.give_up_s = give_up_s
        self.pushed = 0
        self.retries = 0
        self.error: str | None = None
        self._rng = random.Random(seed)
        self.thread = threading.Thread(target=self._run, name=f"chaos-producer-{seed}", daemon=True)

    def _run(self) -> None:
        client = self.connect()
        began = time.monotonic()
        total = max(len(self.payloads), 1)
        try:
            while self.pushed < len(self.payloads):
                chunk = list(self.payloads[self.pushed : self.pushed + self._rng.randint(1, 20)])
                self._push(client, chunk)
                self.pushed += len(chunk)
                due = began + self.spread_s * self.pushed / total
                time.sleep(max(0.0, due - time.monotonic()))
        except Exception as exc:  # recorded; the audit reports what was never pushed
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()

    def _push(self, client: redis.Redis, chunk: list[bytes]) -> None:
        deadline = time.monotonic() + self.give_up_s
        while True:
            try:
                client.lpush(self.key, *chunk)
                return
            except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.OutOfMemoryError):
                if time.monotonic() > deadline:
                    raise
                self.retries += 1
                time.sleep(self._rng.uniform(0.05, 0.3))

"""What can go wrong in the worker, split by what to do about it, and the back-off used for retrying.

- :class:`~producer.protocol.BadTicket` (permanent): the payload can never be classified; dead-letter it.
- :class:`TransientError`: Redis is unreachable or timed out; wait, reconnect and retry the same step.
  Nothing is lost meanwhile because claimed payloads stay in the worker's in-flight list in Redis.
- :class:`ConfigError`: bad flags or environment; reported once at start-up, exit code 2.
- :class:`FatalError`: retrying cannot help (a wrong password, missing ACL permissions, a key of the wrong
  type): the worker hands back its claims if it can and exits at once with the error's exit code.

Exit codes of ``ticketq-worker`` (documented in README, Operations): 0 done, 1 the model failed to load,
2 settings, 3 Redis refused our credentials or permissions, 4 a ticketq key holds the wrong type,
5 ``--burst`` gave up on an unreachable Redis, 6 the watchdog found the loop stalled,
7 ``train --publish``: the publish gate found the new head worse than the one in use (not published;
``--force`` publishes it), 70 a test poison
ticket (fake model), 128+N stopped by a second signal N.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from producer.protocol import BadTicket

__all__ = ["Backoff", "BadTicket", "ConfigError", "FatalError", "TicketqError", "TransientError"]

EXIT_MODEL = 1
EXIT_CONFIG = 2
EXIT_AUTH = 3
EXIT_WRONGTYPE = 4
EXIT_REDIS_GONE = 5
EXIT_STALLED = 6
EXIT_HEAD_WORSE = 7


class TicketqError(Exception):
    """Base of the worker's own errors (BadTicket is the protocol's, shared with producers)."""


class TransientError(TicketqError):
    """A Redis operation failed for a reason that may go away (connection refused, reset, timeout)."""


class ConfigError(TicketqError):
    """Settings that cannot work; raised once, while the settings are validated."""


class FatalError(TicketqError):
    """A Redis answer that no retry will change. ``cause`` is a short name for logs and metrics."""

    def __init__(self, message: str, *, cause: str, exit_code: int) -> None:
        super().__init__(message)
        self.cause = cause
        self.exit_code = exit_code


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential back-off with full jitter.

    Full jitter (a uniform draw in ``[0, min(cap, base * 2**n)]``) spreads a fleet of workers that lost
    Redis at the same moment, so they do not reconnect in lock-step; the floor keeps it from spinning.
    """

    base: float = 0.1
    cap: float = 5.0
    floor: float = 0.05

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        draw = (rng or random.Random()).uniform
        attempt = 0
        while True:
            ceiling = min(self.cap, self.base * (2**attempt))
            yield max(self.floor, draw(0.0, ceiling))
            attempt = min(attempt + 1, 30)  # 2**30 * base is far past any cap; stop growing the int

"""RQ job functions for tests/redis/test_routing.py; RQ imports them by dotted path
(``routing_handlers.x``)."""

from __future__ import annotations

from typing import Any

CALLS: list[tuple[dict[str, Any], dict[str, Any]]] = []


def record(ticket: dict[str, Any], result: dict[str, Any]) -> str:
    CALLS.append((ticket, result))
    return str(ticket["id"])


def fail(ticket: dict[str, Any], result: dict[str, Any]) -> None:
    raise RuntimeError(f"handler refused {ticket['id']}")

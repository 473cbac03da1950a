"""Batch planning: a pure function from token lengths to forward passes.

Each forward pass is a matrix of ``rows x row_len`` tokens. In ``pad`` mode each row holds one
ticket: tickets are sorted by length so a pass pads only to its own longest ticket. In ``pack`` mode
several tickets share a row (first-fit decreasing), separated by a block-diagonal attention mask, so
almost no padding is computed; rows stay at most ``max_row_len`` wide (unless one ticket is longer),
because attention inside a packed row costs more as the row grows. Both respect a maximum item
count and a token budget (``rows x row_len``), so one very long ticket never drags a huge batch along.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PAD = "pad"
PACK = "pack"


@dataclass(frozen=True)
class Plan:
    """One forward pass: ``rows[r]`` lists the indices of the items laid end to end in row ``r``."""

    rows: tuple[tuple[int, ...], ...]
    row_len: int
    real_tokens: int

    @property
    def items(self) -> int:
        return sum(len(r) for r in self.rows)

    @property
    def padded_tokens(self) -> int:
        return len(self.rows) * self.row_len

    @property
    def padding_overhead(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


def plan_batches(
    lengths: Sequence[int],
    *,
    max_items: int,
    max_tokens: int,
    mode: str = PACK,
    max_row_len: int,
) -> list[Plan]:
    """Group items (given by token length) into forward passes.

    Every item appears in exactly one plan. An item longer than ``max_tokens`` gets a pass of its own.
    """
    if max_items < 1 or max_tokens < 1:
        raise ValueError("max_items and max_tokens must be positive")
    if mode not in (PAD, PACK):
        raise ValueError(f"unknown mode {mode!r}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if mode == PACK:
        return _packed(lengths, order, max_items, max_tokens, max_row_len)
    plans: list[Plan] = []
    pos = 0
    while pos < len(order):
        plan, pos = _next_padded(order, pos, lengths, max_items, max_tokens)
        plans.append(plan)
    return plans


def _next_padded(
    order: list[int], pos: int, lengths: Sequence[int], max_items: int, max_tokens: int
) -> tuple[Plan, int]:
    row_len = lengths[order[pos]]  # sorted longest first: the first item sets the width
    take = max(1, min(max_items, max_tokens // max(row_len, 1), len(order) - pos))
    chosen = order[pos : pos + take]
    return Plan(tuple((i,) for i in chosen), row_len, sum(lengths[i] for i in chosen)), pos + take


def _packed(
    lengths: Sequence[int], order: list[int], max_items: int, max_tokens: int, row: int
) -> list[Plan]:
    """First-fit decreasing over the whole drain, then rows grouped into passes.

    A row opened by an item gets a capacity of ``row`` tokens, or the next multiple of ``row`` for
    a longer item, and the short items that come last fill the gaps that long ones leave. Rows of
    one capacity are then grouped into passes, so a pass is as wide as its rows are full.
    """
    caps: list[int] = []
    free: list[int] = []
    members: list[list[int]] = []
    for i in order:
        n = lengths[i]
        for r in range(len(free)):
            if n <= free[r] and len(members[r]) < max_items:
                free[r] -= n
                members[r].append(i)
                break
        else:
            cap = max(1, -(-n // row)) * row
            if cap > max_tokens:  # an item over the budget gets a pass of its own, exactly its width
                cap = n
            caps.append(cap)
            free.append(cap - n)
            members.append([i])
    plans: list[Plan] = []
    by_cap = sorted(range(len(caps)), key=lambda r: (-caps[r], free[r]))
    batch: list[int] = []
    for r in [*by_cap, -1]:
        if batch and (
            r < 0
            or caps[r] != caps[batch[0]]
            or sum(len(members[b]) for b in batch) + len(members[r]) > max_items
            or (len(batch) + 1) * caps[r] > max_tokens
        ):
            width = max(caps[b] - free[b] for b in batch)
            real = sum(caps[b] - free[b] for b in batch)
            plans.append(Plan(tuple(tuple(members[b]) for b in batch), width, real))
            batch = []
        if r >= 0:
            batch.append(r)
    return plans

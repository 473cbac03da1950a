"""Batch planning: a pure function from token lengths to forward passes.

Each forward pass is a matrix of ``rows x row_len`` tokens. In ``pad`` mode each row holds one
ticket: tickets are sorted by length so a pass pads only to its own longest ticket. In ``pack`` mode
several tickets share a row (first-fit decreasing), separated by a block-diagonal attention mask, so
almost no padding is computed. Both respect a maximum item count and a token budget
(``rows x row_len``), so one very long ticket never drags a huge batch along.
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
    max_items: int = 32,
    max_tokens: int = 8192,
    mode: str = PACK,
    min_row_len: int = 64,
) -> list[Plan]:
    """Group items (given by token length) into forward passes.

    Every item appears in exactly one plan. An item longer than ``max_tokens`` gets a pass of its own.
    """
    if max_items < 1 or max_tokens < 1:
        raise ValueError("max_items and max_tokens must be positive")
    if mode not in (PAD, PACK):
        raise ValueError(f"unknown mode {mode!r}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    plans: list[Plan] = []
    pos = 0
    while pos < len(order):
        if mode == PAD:
            plan, pos = _next_padded(order, pos, lengths, max_items, max_tokens)
        else:
            plan, pos = _next_packed(order, pos, lengths, max_items, max_tokens, min_row_len)
        plans.append(plan)
    return plans


def _next_padded(
    order: list[int], pos: int, lengths: Sequence[int], max_items: int, max_tokens: int
) -> tuple[Plan, int]:
    row_len = lengths[order[pos]]  # sorted longest first: the first item sets the width
    take = max(1, min(max_items, max_tokens // max(row_len, 1), len(order) - pos))
    chosen = order[pos : pos + take]
    return Plan(tuple((i,) for i in chosen), row_len, sum(lengths[i] for i in chosen)), pos + take


def _next_packed(
    order: list[int], pos: int, lengths: Sequence[int], max_items: int, max_tokens: int, min_row_len: int
) -> tuple[Plan, int]:
    longest = lengths[order[pos]]
    row_len = max(longest, min(min_row_len, max_tokens))
    max_rows = max(1, max_tokens // row_len)
    rows: list[list[int]] = []
    free: list[int] = []
    taken = 0
    while pos < len(order) and taken < max_items:
        i = order[pos]
        n = lengths[i]
        for r, room in enumerate(free):  # first fit: items come longest first
            if n <= room:
                rows[r].append(i)
                free[r] -= n
                break
        else:
            if len(rows) == max_rows:
                break
            rows.append([i])
            free.append(row_len - n)
        taken += 1
        pos += 1
    # Trim the shared width to the fullest row: nothing beyond it is ever computed.
    width = max(row_len - room for room in free)
    real = sum(lengths[i] for row in rows for i in row)
    return Plan(tuple(tuple(r) for r in rows), width, real), pos

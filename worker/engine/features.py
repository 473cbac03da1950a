"""Ticket features for a trained head: hidden states of the engine's own packed, prefix-cached pass.

A head reads one vector per ticket. The recipe says which: the hidden state after ``layer`` decoder
layers, averaged over the ticket's own tokens (``mean``) or taken at the prompt's last position, the one
that predicts the label (``last``). The pass is the scorer's (same packing, same cached prefix, same
positions) without the label tree, and it stops at ``layer``: the layers above it are never run. On
SmolLM2-135M a third of the way up, mean-pooled, is both the most accurate recipe measured and about
three times cheaper than zero-shot scoring (docs/head.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .planner import Plan
from .scorer import PrefixCache, Scorer

MEAN = "mean"
LAST = "last"
POOLS = (MEAN, LAST)


@dataclass(frozen=True)
class Recipe:
    """Which hidden state a head reads."""

    layer: int  # after this many decoder layers (the model's last = its final, normalized, state)
    pool: str = MEAN  # MEAN: over the ticket's own tokens; LAST: the prompt's last position

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ValueError(f"unknown pooling {self.pool!r}; use {' or '.join(POOLS)}")
        if self.layer < 1:
            raise ValueError(f"feature layer must be at least 1, got {self.layer}")

    @classmethod
    def default(cls, n_layers: int) -> Recipe:
        """A third of the way up, mean-pooled: layer 10 of SmolLM2-135M's 30 (measured, docs/head.md)."""
        return cls(layer=max(1, round(n_layers / 3)), pool=MEAN)

    @property
    def layers(self) -> tuple[int, ...]:
        """The layers read, shallowest first; the pass stops after the last."""
        return (self.layer,)

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "pool": self.pool}

    @classmethod
    def from_dict(cls, data: Any) -> Recipe:
        """The recipe a head file records (ValueError if malformed)."""
        if not isinstance(data, dict) or "layer" not in data:
            raise ValueError(f"a recipe needs a layer, got {data!r}")
        return cls(int(data["layer"]), str(data.get("pool", MEAN)))


class _Reached(Exception):
    """Raised by a forward hook to stop the pass once the wanted layer has run."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.hidden = hidden


def n_layers(scorer: Scorer) -> int:
    return len(scorer.body.layers)


@torch.inference_mode()
def hidden_states(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, layer: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows * width, d) states after ``layer`` layers, and each item's last flat index (plan order)."""
    ids, pos, mask, query = scorer._layout(suffixes, plan, tree=False)
    depth = n_layers(scorer)
    if not 1 <= layer <= depth:
        raise ValueError(f"feature layer {layer} is outside the model's 1..{depth}")
    kwargs: dict[str, Any] = {"input_ids": ids, "position_ids": pos, "attention_mask": mask}
    if scorer.prefix_kv:
        kwargs.update(use_cache=True, **{scorer._cache_kw: PrefixCache(scorer.prefix_kv)})
    if layer == depth:  # the final state, after the model's last norm (as hidden_states[-1] in HF)
        hidden = scorer.body(**kwargs).last_hidden_state
    else:

        def stop(_module: Any, _args: Any, output: Any) -> None:
            raise _Reached(output[0] if isinstance(output, tuple) else output)

        handle = scorer.body.layers[layer - 1].register_forward_hook(stop)
        try:
            scorer.body(**kwargs)
            raise RuntimeError("the model never ran its feature layer")  # pragma: no cover
        except _Reached as reached:
            hidden = reached.hidden
        finally:
            handle.remove()
    return hidden.reshape(-1, hidden.shape[-1]), query[:, 0]


def pool(
    hidden: torch.Tensor, last: torch.Tensor, lengths: Sequence[int], own: Sequence[int], how: str
) -> torch.Tensor:
    """(items, d) float32 features. ``lengths``: each item's suffix length; ``own``: how many of its
    first tokens are the ticket's (the rest is the chat template's hand-over)."""
    if how == LAST:
        return hidden.index_select(0, last).float()
    idx: list[int] = []
    seg: list[int] = []
    for item, (end, n, k) in enumerate(zip(last.tolist(), lengths, own, strict=True)):
        start = end - n + 1
        k = k or n  # an empty ticket: average what there is
        idx.extend(range(start, start + k))
        seg.extend([item] * k)
    picked = hidden.index_select(0, torch.tensor(idx, device=hidden.device)).float()
    seg_t = torch.tensor(seg, device=hidden.device)
    total = torch.zeros(len(lengths), hidden.shape[-1], device=hidden.device).index_add_(0, seg_t, picked)
    counts = torch.bincount(seg_t, minlength=len(lengths)).clamp(min=1)
    return total / counts[:, None]


def extract(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, recipe: Recipe, after: int
) -> torch.Tensor:
    """(items in plan order, d) features for one pass. ``after``: template tokens ending each suffix."""
    hidden, last = hidden_states(scorer, suffixes, plan, recipe.layer)
    order = [i for row in plan.rows for i in row]
    lengths = [len(suffixes[i]) for i in order]
    own = [max(0, n - after) for n in lengths]
    return pool(hidden, last, lengths, own, recipe.pool)

"""Ticket features for trained heads: hidden states of the engine's own packed, prefix-cached pass.

Each head names its recipe (:class:`~worker.engine.recipe.Recipe`: parts, each a layer and a pooling).
The pass is the scorer's (same packing, same cached prefix, same positions) without the label tree;
forward hooks keep the state after every layer some part reads and the pass is stopped after the
deepest: the layers above it are never run. One pass serves one head or several (a task's further
questions, :meth:`worker.engine.engine.Engine.classify`): asking three questions costs one pass plus a
pooling and a small matrix product per head, and each head's features are exactly those it would get
asked alone (tests/engine/test_questions.py). On SmolLM2-135M a third of the way up, mean-pooled, is
about three times cheaper than zero-shot scoring (docs/head.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .planner import Plan
from .recipe import LAST, MAX, MEAN, Part, Recipe
from .scorer import PrefixCache, Scorer


class _Deepest(Exception):
    """Raised by the hook on the deepest layer wanted: the layers above it never run."""


def n_layers(scorer: Scorer) -> int:
    return len(scorer.body.layers)


@torch.inference_mode()
def hidden_states_at(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """layer -> (rows * width, d) states after that many layers, from one pass, and each item's last flat
    index (plan order). The model's last layer is its final, normalized state (as hidden_states[-1] in
    HF)."""
    depth = n_layers(scorer)
    wanted = sorted(set(layers))
    if not wanted or wanted[0] < 1 or wanted[-1] > depth:
        raise ValueError(f"feature layers {wanted} are outside the model's 1..{depth}")
    ids, pos, mask, query = scorer._layout(suffixes, plan, tree=False)
    kwargs: dict[str, Any] = {"input_ids": ids, "position_ids": pos, "attention_mask": mask}
    if scorer.prefix_kv:
        kwargs.update(use_cache=True, **{scorer._cache_kw: PrefixCache(scorer.prefix_kv)})
    got: dict[int, torch.Tensor] = {}
    deepest = wanted[-1]

    def keep(layer: int) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            got[layer] = output[0] if isinstance(output, tuple) else output
            if layer == deepest:
                raise _Deepest()

        return hook

    handles = [scorer.body.layers[k - 1].register_forward_hook(keep(k)) for k in wanted if k < depth]
    try:
        if deepest == depth:
            got[depth] = scorer.body(**kwargs).last_hidden_state
        else:
            try:
                scorer.body(**kwargs)
                raise RuntimeError("the model never ran its deepest feature layer")  # pragma: no cover
            except _Deepest:
                pass
    finally:
        for h in handles:
            h.remove()
    return {k: v.reshape(-1, v.shape[-1]) for k, v in got.items()}, query[:, 0]


def own_tokens(
    last: torch.Tensor, lengths: Sequence[int], own: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat indices, item of each) of every item's own tokens: the first ``own`` of its ``lengths``
    suffix tokens (the rest is the chat template's hand-over); an empty ticket: all of them."""
    idx: list[int] = []
    seg: list[int] = []
    for item, (end, n, k) in enumerate(zip(last.tolist(), lengths, own, strict=True)):
        start = end - n + 1
        k = k or n  # an empty ticket: pool what there is
        idx.extend(range(start, start + k))
        seg.extend([item] * k)
    return torch.tensor(idx, device=last.device), torch.tensor(seg, device=last.device)


def pool(
    hidden: torch.Tensor, last: torch.Tensor, tokens: tuple[torch.Tensor, torch.Tensor], items: int, how: str
) -> torch.Tensor:
    """(items, d) float32 features: ``hidden`` at each item's last position, or its own ``tokens``
    (:func:`own_tokens`) averaged or maximized."""
    if how == LAST:
        return hidden.index_select(0, last).float()
    idx, seg = tokens
    picked = hidden.index_select(0, idx).float()
    out = torch.zeros(items, hidden.shape[-1], device=hidden.device)
    if how == MAX:
        index = seg[:, None].expand_as(picked)
        return out.scatter_reduce_(0, index, picked, "amax", include_self=False)
    if how != MEAN:
        raise ValueError(f"unknown pooling {how!r}")
    counts = torch.bincount(seg, minlength=items).clamp(min=1)
    return out.index_add_(0, seg, picked) / counts[:, None]


def extract_many(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, recipes: Sequence[Recipe], after: int
) -> list[torch.Tensor]:
    """Per recipe, (items in plan order, parts * d) features from one pass: its parts' pooled states
    side by side, in the recipe's order. ``after``: template tokens ending each suffix."""
    states, last = hidden_states_at(scorer, suffixes, plan, [k for r in recipes for k in r.layers])
    order = [i for row in plan.rows for i in row]
    lengths = [len(suffixes[i]) for i in order]
    tokens = own_tokens(last, lengths, [max(0, n - after) for n in lengths])
    pooled: dict[Part, torch.Tensor] = {}
    for part in {p for r in recipes for p in r.parts}:
        pooled[part] = pool(states[part.layer], last, tokens, len(order), part.pool)
    return [torch.cat([pooled[p] for p in r.parts], dim=1) for r in recipes]


def extract(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, recipe: Recipe, after: int
) -> torch.Tensor:
    """(items in plan order, parts * d) features of one recipe for one pass (:func:`extract_many`)."""
    return extract_many(scorer, suffixes, plan, [recipe], after)[0]

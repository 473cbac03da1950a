"""Several questions, one pass: the features every head reads, from one packed, prefix-cached pass that
stops at the deepest layer any of them reads.

A task's primary question and each ``[questions.NAME]`` have a head of their own, and each head names its
recipe (a layer and a pooling, :class:`~worker.engine.features.Recipe`). The pass is the one
:func:`worker.engine.features.extract` runs for a single head (same layout, same cached prefix, same
positions); forward hooks keep the state after every layer some head reads, and the pass is stopped after
the deepest, so asking three questions costs one pass plus a pooling and a small matrix product per head.
Each head's features are exactly those it would get asked alone (tests/engine/test_questions.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .features import Recipe, n_layers, pool
from .planner import Plan
from .scorer import PrefixCache, Scorer


class _Deepest(Exception):
    """Raised by the hook on the deepest layer wanted: the layers above it never run."""


@torch.inference_mode()
def hidden_states_at(
    scorer: Scorer, suffixes: Sequence[Sequence[int]], plan: Plan, layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """layer -> (rows * width, d) states after that many layers, from one pass, and each item's last flat
    index (plan order). The model's last layer is its final, normalized state, as for a single head."""
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


def extract_many(
    scorer: Scorer,
    suffixes: Sequence[Sequence[int]],
    plan: Plan,
    recipes: Sequence[Recipe],
    after: int,
) -> list[torch.Tensor]:
    """Per recipe, (items in plan order, d) features from one pass. ``after``: template tokens ending
    each suffix (as :func:`worker.engine.features.extract`)."""
    states, last = hidden_states_at(scorer, suffixes, plan, [r.layer for r in recipes])
    order = [i for row in plan.rows for i in row]
    lengths = [len(suffixes[i]) for i in order]
    own = [max(0, n - after) for n in lengths]
    return [pool(states[r.layer], last, lengths, own, r.pool) for r in recipes]

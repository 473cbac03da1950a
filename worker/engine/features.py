"""Ticket features for trained heads: hidden states of the engine's own packed, prefix-cached pass.

Each head names its recipe (:class:`~worker.engine.recipe.Recipe`: parts, each a layer and a pooling).
The pass is the scorer's (same packing, same cached prefix, same positions) without the label tree;
forward hooks keep the state after every layer some part reads and the pass is stopped after the
deepest: the layers above it are never run. One pass serves one head or several (a task's further
questions, :meth:`worker.engine.engine.Engine.classify`): asking three questions costs one pass plus a
pooling and a small matrix product per head, and each head's features are exactly those it would get
asked alone (tests/engine/test_questions.py). On SmolLM2-135M a third of the way up, mean-pooled, is
about three times cheaper than zero-shot scoring (docs/head.md).

A recipe with an ``echo`` part reads each ticket twice (suffix ``ticket + hand-over + echo text +
ticket``, :meth:`~worker.engine.prompt.Prompt.ticket_ids`): the first reading and the hand-over sit
where an ordinary pass has them, so the other parts' features are the same, and ``echo`` averages the
second reading (:func:`readings`). ``rare`` weights the ticket's tokens by :func:`rarity` of their ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from .planner import Plan
from .recipe import ECHO, LAST, MAX, MEAN, RARE, Part, Recipe
from .scorer import PrefixCache, Scorer

#: Smooth inverse frequency's ``a`` (Arora et al., 2017) in :func:`rarity`, as a token's share of all
#: tokens: a token estimated at 1e-5 counts half. Chosen on Banking77's train split alone (10 rows per
#: intent, 2,000 other train rows scoring; 3e-5 and 1e-4 within 0.4 points, docs/head.md).
RARITY = 1e-5
EULER_GAMMA = 0.5772156649015329


def rarity(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Each token's weight in a ``rare`` mean: ``a / (a + p)`` (:data:`RARITY`), ``p`` the token's
    frequency as Zipf's law estimates it from its rank in a vocabulary of ``vocab`` entries listed roughly
    most frequent first, as byte-pair and SentencePiece vocabularies are: ``p = 1 / ((id + 1) H)``,
    ``H = ln(vocab) + 0.5772`` (the harmonic number that makes them sum to one). float32, in (0, 1)."""
    harmonic = math.log(max(int(vocab), 2)) + EULER_GAMMA
    share = 1.0 / ((ids.to(torch.float64) + 1.0) * harmonic)
    return (RARITY / (RARITY + share)).float()


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


Tokens = tuple[torch.Tensor, torch.Tensor]  # (flat indices, item of each)


def own_tokens(starts: Sequence[int], counts: Sequence[int], device: torch.device | None = None) -> Tokens:
    """(flat indices, item of each) of ``counts[i]`` tokens from ``starts[i]``, for every item ``i``."""
    idx: list[int] = []
    seg: list[int] = []
    for item, (start, k) in enumerate(zip(starts, counts, strict=True)):
        idx.extend(range(start, start + k))
        seg.extend([item] * k)
    return torch.tensor(idx, device=device), torch.tensor(seg, device=device)


class Readings(NamedTuple):
    """Where each item's pooled positions lie in a pass's flat states (plan order)."""

    first: Tokens  # the ticket's own tokens (an empty ticket: the hand-over's)
    last: torch.Tensor  # the hand-over's last position: the one that predicts the label
    second: Tokens | None  # echo layout: the second reading (an empty ticket: the echo text); else None


def readings(ends: torch.Tensor, lengths: Sequence[int], after: int, echo: int | None = None) -> Readings:
    """The :class:`Readings` of suffixes of ``lengths`` ending at flat indices ``ends``: each a ticket then
    ``after`` hand-over tokens; with ``echo`` (the echo text's token count), then the echo text and the
    ticket again."""
    device = ends.device
    starts = [end - n + 1 for end, n in zip(ends.tolist(), lengths, strict=True)]
    reads = 1 if echo is None else 2  # the ticket's tokens appear once or twice in each suffix
    own = [max(0, n - after - (echo or 0)) // reads for n in lengths]
    first = own_tokens(starts, [k or after for k in own], device)  # an empty ticket: its hand-over
    if echo is None:
        return Readings(first, ends, None)
    last = torch.tensor([s + k + after - 1 for s, k in zip(starts, own, strict=True)], device=device)
    again = [s + k + after + (echo if k else 0) for s, k in zip(starts, own, strict=True)]
    second = own_tokens(again, [k or echo for k in own], device)  # an empty ticket: the echo text
    return Readings(first, last, second)


def rarity_at(at: Readings, suffixes: Sequence[Sequence[int]], vocab: int) -> torch.Tensor:
    """:func:`rarity` of each token ``at.first`` pools, in its order: the first tokens of each of
    ``suffixes`` (plan order; a ticket's own tokens, or an empty ticket's hand-over)."""
    counts = torch.bincount(at.first[1], minlength=len(suffixes)).tolist()
    own = [t for suffix, k in zip(suffixes, counts, strict=True) for t in suffix[:k]]
    return rarity(torch.tensor(own, dtype=torch.long), vocab)


def pool(
    hidden: torch.Tensor, at: Readings, items: int, how: str, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """(items, d) float32 features: ``hidden`` at each item's last position, its own tokens averaged or
    maximized, or (``echo``) its second reading averaged (:func:`readings`); ``rare``: its own tokens
    averaged with ``weights``, one per own token in ``at.first``'s order (:func:`rarity`)."""
    if how == LAST:
        return hidden.index_select(0, at.last).float()
    if how == ECHO:
        if at.second is None:
            raise ValueError("an echo part needs the pass that reads each ticket twice")
        idx, seg = at.second
        how = MEAN
    else:
        idx, seg = at.first
    picked = hidden.index_select(0, idx).float()
    out = torch.zeros(items, hidden.shape[-1], device=hidden.device)
    if how == MAX:
        index = seg[:, None].expand_as(picked)
        return out.scatter_reduce_(0, index, picked, "amax", include_self=False)
    if how == RARE:
        if weights is None:
            raise ValueError("a rare part needs its tokens' weights")
        w = weights.to(hidden.device)
        total = torch.zeros(items, device=hidden.device).index_add_(0, seg, w)
        return out.index_add_(0, seg, picked * w[:, None]) / total[:, None]
    if how != MEAN:
        raise ValueError(f"unknown pooling {how!r}")
    counts = torch.bincount(seg, minlength=items).clamp(min=1)
    return out.index_add_(0, seg, picked) / counts[:, None]


def extract_many(
    scorer: Scorer,
    suffixes: Sequence[Sequence[int]],
    plan: Plan,
    recipes: Sequence[Recipe],
    after: int,
    echo: int | None = None,
) -> list[torch.Tensor]:
    """Per recipe, (items in plan order, parts * d) features from one pass: its parts' pooled states
    side by side, in the recipe's order (the parts the model computes: ``chars`` is the engine's, from
    the texts). ``after``: hand-over tokens after each ticket; ``echo``: the
    echo text's tokens when the suffixes read each ticket twice (ValueError if a recipe needs it and it
    is None)."""
    if echo is None and any(r.echo for r in recipes):
        raise ValueError("an echo recipe needs the suffixes that read each ticket twice")
    states, ends = hidden_states_at(scorer, suffixes, plan, [k for r in recipes for k in r.layers])
    order = [i for row in plan.rows for i in row]
    at = readings(ends, [len(suffixes[i]) for i in order], after, echo)
    parts = {p for r in recipes for p in r.model_parts}
    weights = None
    if any(p.pool == RARE for p in parts):
        weights = rarity_at(at, [suffixes[i] for i in order], int(scorer.body.config.vocab_size))
    pooled: dict[Part, torch.Tensor] = {}
    for part in parts:
        pooled[part] = pool(states[part.layer], at, len(order), part.pool, weights)
    return [torch.cat([pooled[p] for p in r.model_parts], dim=1) for r in recipes]


def extract(
    scorer: Scorer,
    suffixes: Sequence[Sequence[int]],
    plan: Plan,
    recipe: Recipe,
    after: int,
    echo: int | None = None,
) -> torch.Tensor:
    """(items in plan order, parts * d) features of one recipe for one pass (:func:`extract_many`)."""
    return extract_many(scorer, suffixes, plan, [recipe], after, echo)[0]

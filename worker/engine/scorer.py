"""The fast path: score every label for a batch of tickets in one forward pass.

Three ideas, in the order the data meets them:

* **Prefix cache.** The instructions and few-shot turns are run through the model once; their keys
  and values are handed to every pass through a read-only cache layer that joins them to the
  pass's own keys (a broadcast view, never a per-ticket copy).
* **Packing.** A row holds several tickets laid end to end. A block-diagonal mask lets each token
  see the shared prefix and the earlier tokens of its own ticket only; positions restart after the
  prefix for every ticket, so each one is computed exactly as if it were alone.
* **Label tree, label rows only.** After each ticket the label tokens are appended as a tree (labels
  that share leading tokens share nodes), each node seeing its ticket and its ancestors. One pass
  thus yields the hidden state before every label token. Only those few states are multiplied by
  the output matrix, and only by the rows of the label vocabulary ``K`` (the tokens that occur in
  any label, plus end-of-turn): a label's score is the sum over its tokens of
  ``log softmax_K(logits)[token]``. The full vocabulary head is never computed.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from .planner import Plan


@dataclass(frozen=True)
class LabelTree:
    """Label token sequences as a trie, with the index tensors that turn a pass into label scores."""

    node_tokens: tuple[int, ...]  # token fed at each node (label prefixes, end-of-turn excluded)
    node_depth: tuple[int, ...]  # 1-based depth: the node's position is ticket_end + depth
    ancestors: torch.Tensor  # (n, n) bool: ancestors[a, b] = b is a or an ancestor of a
    vocab: torch.Tensor  # (K,) token ids of the label vocabulary
    query: torch.Tensor  # (L, S) which query row predicts step s of label l (0 = the ticket's end)
    target: torch.Tensor  # (L, S) index into vocab of the token predicted at step s
    steps: torch.Tensor  # (L, S) 1.0 where step s exists for label l

    @classmethod
    def build(cls, label_ids: Sequence[Sequence[int]]) -> LabelTree:
        node_of: dict[tuple[int, ...], int] = {}
        tokens: list[int] = []
        depth: list[int] = []
        parent: list[int] = []
        for ids in label_ids:
            for d in range(1, len(ids)):
                pre = tuple(ids[:d])
                if pre not in node_of:
                    node_of[pre] = len(tokens)
                    tokens.append(ids[d - 1])
                    depth.append(d)
                    parent.append(node_of.get(pre[:-1], -1))
        n = len(tokens)
        anc = torch.zeros(n, n, dtype=torch.bool)
        for a in range(n):
            b = a
            while b >= 0:
                anc[a, b] = True
                b = parent[b]
        vocab = sorted({t for ids in label_ids for t in ids})
        col = {t: i for i, t in enumerate(vocab)}
        width = max(len(ids) for ids in label_ids)
        query = torch.zeros(len(label_ids), width, dtype=torch.long)
        target = torch.zeros(len(label_ids), width, dtype=torch.long)
        steps = torch.zeros(len(label_ids), width)
        for lab, ids in enumerate(label_ids):
            for s, tok in enumerate(ids):
                query[lab, s] = 0 if s == 0 else 1 + node_of[tuple(ids[:s])]
                target[lab, s] = col[tok]
                steps[lab, s] = 1.0
        return cls(tuple(tokens), tuple(depth), anc, torch.tensor(vocab), query, target, steps)

    @property
    def size(self) -> int:
        return len(self.node_tokens)


class _PrefixLayer(DynamicLayer):
    """A cache layer holding the shared prefix. ``update`` returns prefix + new keys/values for
    this pass and stores nothing, so the prefix is never modified and never copied per ticket."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self._prefix = (keys, values)
        self.device = keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        b = key_states.shape[0]
        keys, values = self._prefix
        return (
            torch.cat([keys.expand(b, -1, -1, -1), key_states], dim=-2),
            torch.cat([values.expand(b, -1, -1, -1), value_states], dim=-2),
        )


class PrefixCache(DynamicCache):
    def __init__(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.layers = [_PrefixLayer(k, v) for k, v in layers]


class Scorer:
    """Scores label sequences for tokenized tickets against one cached prefix."""

    def __init__(
        self, model: Any, prefix_ids: Sequence[int], label_ids: Sequence[Sequence[int]], pad_id: int = 0
    ) -> None:
        self.model = model
        self.body = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        first = next(model.parameters())
        self.device = first.device
        self.dtype = first.dtype if first.is_floating_point() else torch.float32  # int8: float activations
        self.tree = LabelTree.build(label_ids)
        self.prefix_len = len(prefix_ids)
        self.pad_id = pad_id
        head = model.get_output_embeddings()
        rows = self.tree.vocab.to(self.device)
        # (K, d): the label rows only, in float32. Logits of 20-30 in bfloat16 are rounded to 1/8, which
        # would turn close calls into exact ties; K rows at a few positions cost nothing in float32.
        self.head_weight = head.weight.detach().index_select(0, rows).float().contiguous()
        bias = getattr(head, "bias", None)
        self.head_bias = None if bias is None else bias.detach().index_select(0, rows).float()
        # transformers 5.x renamed ``past_key_values`` to ``cache``; speak whichever this version knows.
        params = inspect.signature(self.body.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        if self.prefix_len:  # no prefix: every ticket carries its whole prompt (the uncached baselines)
            with torch.inference_mode():
                out = self.body(
                    input_ids=torch.tensor([list(prefix_ids)], device=self.device), use_cache=True
                )
            cache = getattr(out, "cache", None) or out.past_key_values
            self.prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]
        self._anc = self.tree.ancestors.to(self.device)
        self._node_tokens = torch.tensor(self.tree.node_tokens, dtype=torch.long)
        self._node_depth = torch.tensor(self.tree.node_depth, dtype=torch.long)

    def segment_len(self, suffix_len: int) -> int:
        """Tokens one ticket occupies in a row: its suffix plus the label tree."""
        return suffix_len + self.tree.size

    @torch.inference_mode()
    def score(self, suffixes: Sequence[Sequence[int]], plan: Plan) -> torch.Tensor:
        """Log-probabilities (items in plan order, labels) for the tickets named by ``plan``."""
        ids, pos, mask, query = self._layout(suffixes, plan)
        out = self.body(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask,
            use_cache=bool(self.prefix_kv),
            **({self._cache_kw: PrefixCache(self.prefix_kv)} if self.prefix_kv else {}),
        )
        hidden = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1])
        states = hidden.index_select(0, query.reshape(-1))  # (N*Q, d): only the states we need
        logits = torch.nn.functional.linear(states.float(), self.head_weight, self.head_bias)
        logp = torch.log_softmax(logits, dim=-1).reshape(query.shape[0], query.shape[1], -1)
        t = self.tree
        picked = logp[:, t.query, t.target]  # (N, L, S)
        return (picked * t.steps).sum(-1)

    def _layout(
        self, suffixes: Sequence[Sequence[int]], plan: Plan, *, tree: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Input ids, positions, 4-D mask and query indices for one pass.

        ``tree=False`` lays out the tickets alone (a trained head reads their hidden states and needs no
        label tree); ``query[:, 0]`` is then each ticket's last position."""
        rows, width, n_nodes = len(plan.rows), plan.row_len, self.tree.size if tree else 0
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        pos = torch.zeros(rows, width, dtype=torch.long)
        seg = torch.full((rows, width), -1, dtype=torch.long)  # which ticket owns the slot (-1: padding)
        local = torch.zeros(rows, width, dtype=torch.long)  # index inside its ticket's segment
        node = torch.full((rows, width), -1, dtype=torch.long)  # label-tree node, -1 for ticket tokens
        query = torch.empty(plan.items, 1 + n_nodes, dtype=torch.long)
        item = 0
        for r, row in enumerate(plan.rows):
            off = 0
            for i in row:
                s = len(suffixes[i])
                end = off + s + n_nodes
                ids[r, off : off + s] = torch.tensor(suffixes[i], dtype=torch.long)
                ids[r, off + s : end] = self._node_tokens[:n_nodes]
                pos[r, off : off + s] = torch.arange(s)
                pos[r, off + s : end] = s - 1 + self._node_depth[:n_nodes]
                seg[r, off:end] = item
                local[r, off:end] = torch.arange(s + n_nodes)
                node[r, off + s : end] = torch.arange(n_nodes)
                base = r * width + off
                query[item, 0] = base + s - 1
                query[item, 1:] = torch.arange(base + s, base + s + n_nodes)
                off = end
                item += 1
        pos += self.prefix_len
        is_node = node >= 0
        same = seg[:, :, None] == seg[:, None, :]
        causal = (~is_node[:, None, :]) & (local[:, None, :] <= local[:, :, None])
        in_tree = is_node[:, :, None] & is_node[:, None, :] & self._tree_pairs(node)
        own = same & (causal | in_tree)
        own |= torch.eye(width, dtype=torch.bool)  # padding sees itself: no empty softmax rows
        # Additive, in the model's dtype, built once per pass: a boolean mask would be converted to this by
        # SDPA in every layer (30 conversions a pass for SmolLM2; 1.5% of a float32 pass's profile).
        mask = torch.zeros(rows, 1, width, self.prefix_len + width, dtype=self.dtype)
        mask[:, 0, :, self.prefix_len :].masked_fill_(~own, torch.finfo(self.dtype).min)
        dev = self.device
        return ids.to(dev), pos.to(dev), mask.to(dev), query.to(dev)

    def _tree_pairs(self, node: torch.Tensor) -> torch.Tensor:
        """(rows, T, T): True where query slot's node has key slot's node as ancestor-or-self."""
        safe = node.clamp(min=0)
        return self._anc.cpu()[safe[:, :, None], safe[:, None, :]]

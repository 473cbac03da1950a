"""The engine's attention (worker/engine/attention.py) computes what transformers' SDPA computes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from worker.engine import attention
from worker.engine.model import LoadedModel

HEADS, KV_HEADS, DIM = 9, 3, 64  # SmolLM2-135M's shape: three query heads per key/value head


def _inputs(dtype: torch.dtype, masked: bool = True) -> tuple[torch.Tensor, ...]:
    """A packed pass: 4 rows of 24 queries over 40 cached prefix keys plus the row's own 24 keys, two
    tickets per row (block-diagonal, causal inside each ticket), as the engine lays it out."""
    g = torch.Generator().manual_seed(7)
    rows, width, prefix = 4, 24, 40
    q = torch.randn(rows, HEADS, width, DIM, generator=g).to(dtype)
    k = torch.randn(rows, KV_HEADS, prefix + width, DIM, generator=g).to(dtype)
    v = torch.randn(rows, KV_HEADS, prefix + width, DIM, generator=g).to(dtype)
    if not masked:
        return q, k, v, None  # type: ignore[return-value]
    ticket = torch.arange(width) // 12
    pos = torch.arange(width)
    own = (ticket[:, None] == ticket[None, :]) & (pos[:, None] >= pos[None, :])
    allowed = torch.cat([torch.ones(width, prefix, dtype=torch.bool), own], dim=1)
    mask = torch.zeros(width, prefix + width, dtype=dtype).masked_fill(~allowed, float("-inf"))
    return q, k, v, mask.expand(rows, 1, -1, -1)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_grouped_heads_give_transformers_numbers(dtype: torch.dtype, tol: float) -> None:
    """Each query head reads its own key/value head (query head h -> h // 3), as repeat_kv lays them out;
    a wrong grouping would be off by O(1)."""
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=False)
    q, k, v, mask = _inputs(dtype)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=DIM**-0.5)  # type: ignore[arg-type]
    got, weights = attention.grouped_sdpa(module, q, k, v, mask, scaling=DIM**-0.5)  # type: ignore[arg-type]
    assert weights is None
    assert got.shape == want.shape == (4, 24, HEADS, DIM)  # (batch, queries, heads, head_dim)
    assert got.is_contiguous()
    assert (got.float() - want.float()).abs().max().item() <= tol
    rolled = attention.grouped_sdpa(module, q, k.roll(1, dims=1), v.roll(1, dims=1), mask, scaling=DIM**-0.5)  # type: ignore[arg-type]
    assert (rolled[0].float() - want.float()).abs().max().item() > 0.1  # the grouping is what is tested


def test_without_a_mask_it_is_transformers_own_sdpa() -> None:
    """The prefix run and the plain reference scorer pass no mask: those calls are transformers' own."""
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=False)
    q, k, v, _ = _inputs(torch.float32, masked=False)
    k, v = k[:, :, :24], v[:, :, :24]
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=DIM**-0.5)  # type: ignore[arg-type]
    got, _ = attention.grouped_sdpa(module, q, k, v, None, scaling=DIM**-0.5)  # type: ignore[arg-type]
    assert torch.equal(got, want)


def test_models_load_with_the_engines_attention(tiny: LoadedModel) -> None:
    assert tiny.model.config._attn_implementation == attention.IMPLEMENTATION

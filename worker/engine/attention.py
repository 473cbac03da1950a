"""The attention the engine runs: transformers' SDPA, with grouped-query heads kept grouped on the CPU.

SmolLM2 and Qwen2.5 share each key/value head among several query heads (grouped-query attention).
Given a mask, transformers copies every key and value head once per query head that reads it
(``repeat_kv``) before calling ``scaled_dot_product_attention``, because CUDA's fused kernels refuse a
mask with ``enable_gqa``. The engine always passes a mask (packed tickets, cached prefix), so on the CPU
those copies, three times the keys and values of the prefix and the row per layer, cost as much as the
attention itself. torch's CPU flash kernel takes the mask with ``enable_gqa=True`` and reads the shared
heads in place: the same numbers, bit for bit; at the engine's shapes an attention call took 3.6 ms
instead of 7.6-8.0 in bfloat16, and a whole pass ran ~10 % faster (docs/bench.md, "Attention without
copies").

``IMPLEMENTATION`` names this function to transformers (``attn_implementation=``). Everywhere it does
not apply (no mask, no grouping, a GPU, a position bias or soft-capping) it is transformers' own SDPA.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

IMPLEMENTATION = "ticketq_sdpa"


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention with the signature transformers expects: (batch, q_len, heads, head_dim), no weights."""
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = kwargs.get("position_bias") is None and kwargs.get("softcap") is None
    if not (grouped and plain and attention_mask is not None and query.device.type == "cpu"):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(IMPLEMENTATION, grouped_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, sdpa_mask)

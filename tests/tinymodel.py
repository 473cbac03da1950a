"""A tiny random Llama with SmolLM2's real tokenizer, saved as a normal Hugging Face directory: it runs
the same loading and scoring code as any hub model, in milliseconds. Shared by the engine, bench and eval
tests."""

from __future__ import annotations

from pathlib import Path

import torch

from worker.engine.model import converted_gguf, embedded_gguf


def build_tiny_llama(path: Path, seed: int = 1234) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(converted_gguf(embedded_gguf())))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.3,  # decisive logits: few near-ties between labels
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path

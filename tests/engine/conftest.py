"""Engine fixtures: one real model and one tiny model per test session, shared by every test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from worker.engine.model import LoadedModel, converted_gguf, embedded_gguf, load_model


@pytest.fixture(scope="session")
def smollm2_f32() -> LoadedModel:
    """The embedded SmolLM2-135M in float32 (converted once into the cache, then reloaded fast)."""
    return load_model("smollm2", dtype="float32")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved as a normal Hugging Face directory, with SmolLM2's real tokenizer:
    it exercises the same loading and scoring code as any hub model, in milliseconds."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    path = tmp_path_factory.mktemp("tiny-llama")
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


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path) -> LoadedModel:
    return load_model(str(tiny_dir), dtype="float32")

"""Engine fixtures: one real model and one tiny model per test session, shared by every test."""

from __future__ import annotations

from pathlib import Path

import pytest
from tinymodel import build_tiny_llama

from worker.engine.model import LoadedModel, load_model


@pytest.fixture(scope="session")
def smollm2_f32() -> LoadedModel:
    """The embedded SmolLM2-135M in float32 (converted once into the cache, then reloaded fast)."""
    return load_model("smollm2", dtype="float32")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (see tests/tinymodel.py): the real loading and scoring code, in milliseconds."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path) -> LoadedModel:
    return load_model(str(tiny_dir), dtype="float32")

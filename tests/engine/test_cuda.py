"""The CUDA path, wherever CUDA exists (every test skips elsewhere): the engine on the GPU against the plain
float32 reference on the CPU, in float32, float16 and bfloat16; SDPA attention; ``--dtype auto``'s
candidates there.

What "agree" means, as ``ticketq-worker verify`` reports it: float32 on the GPU decides every ticket as the
CPU reference does, within 1e-3 nats (cuBLAS sums in another order; TF32 is off by default for matmuls).
Half precisions round activations to 8 (bfloat16) or 11 (float16) bits, so a ticket whose top two labels
are within a few tenths of a nat may flip; every flip must be such a near-tie, and 95% must agree.
"""

from __future__ import annotations

import pytest
import torch
from texts import varied_texts

from worker.engine import attention, autodtype
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel, load_model
from worker.engine.reference import ReferenceScorer
from worker.engine.task import load_task

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

NEAR_TIE = 0.5  # nats between the reference's top two labels: a flip closer than this is rounding


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return varied_texts(64)


@pytest.fixture(scope="module")
def reference(smollm2_f32: LoadedModel, texts: list[str]) -> torch.Tensor:
    """Decided (calibrated) label scores of the plain item-by-item judge, float32 on the CPU."""
    task = load_task()
    engine = Engine(smollm2_f32, task)
    judge = ReferenceScorer(smollm2_f32.model, smollm2_f32.tokenizer, task, engine.prompt)
    prior = judge.prior()
    ref = torch.tensor(judge.score(texts))
    return ref if prior is None else ref - prior


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_engine_agrees_with_the_cpu_reference(
    dtype: str, texts: list[str], reference: torch.Tensor
) -> None:
    loaded = load_model("smollm2", dtype=dtype, device="cuda")
    assert loaded.device.type == "cuda"
    assert loaded.model.config._attn_implementation == attention.IMPLEMENTATION
    engine = Engine(loaded, load_task())
    logp, stats = engine.logprobs(texts)
    assert sum(s.items for s in stats) == len(texts)
    decided = logp if engine.prior is None else logp - engine.prior.cpu()
    got, want = decided.argmax(-1), reference.argmax(-1)
    if dtype == "float32":
        assert (decided - reference).abs().max().item() < 1e-3
        assert got.tolist() == want.tolist()
        return
    top2 = reference.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    flips = (got != want).nonzero().flatten().tolist()
    assert len(flips) <= 0.05 * len(texts), f"{dtype}: {len(flips)} flips of {len(texts)}"
    assert all(margins[i] < NEAR_TIE for i in flips), [round(float(margins[i]), 3) for i in flips]


def test_auto_measures_the_half_precisions_on_cuda(tmp_path) -> None:
    task = load_task()
    loaded = load_model("smollm2", dtype="float32", device="cuda")
    chosen, decision = autodtype.choose(
        loaded, task, lambda m: Engine(m, task), source="smollm2", cache_dir=tmp_path
    )
    assert {t.dtype for t in decision.trials} == {"float32", "float16", "bfloat16"}
    assert decision.chosen in ("float32", "float16", "bfloat16")
    assert next(chosen.model.parameters()).device.type == "cuda"
    assert "NVIDIA" in decision.key["hardware"] or decision.key["device"] == "cuda"

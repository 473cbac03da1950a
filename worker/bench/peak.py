"""What the hardware could do: the machine line, a matrix-multiply peak measured in the same run, and
the useful FLOPs of a scoring pass, so the engine's speed can be quoted as a fraction of that peak.

FLOP model (per ticket, ``L`` = tokens it occupies in a row: its suffix plus the label-tree nodes)::

    2 * P * L                                   weights: P non-embedding parameters, one MAC per token
  + 4 * layers * d_attn * (prefix * L + L(L+1)/2)   attention: QK^T and AV over the keys each token sees
                                                    (the cached prefix and its own earlier tokens)

It counts useful work only: padding, masked-out keys, the prefix (run once) and the label head (a few
rows) are left out, so it is a lower bound on what the hardware actually computed.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from worker.engine.autodtype import cpu_field


def machine_info() -> dict[str, Any]:
    flags = cpu_field("flags").split()
    import transformers

    return {
        "cpu": cpu_field("model name") or platform.processor() or "unknown",
        "cores": cores(),
        "amx_bf16": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "loadavg_start": round(os.getloadavg()[0], 2),
    }


def cores() -> int:
    """CPUs this process may run on (a container's limit, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CpuMeter:
    """How much of the machine's CPU time other processes took while a mode ran: 0 on a quiet machine.

    The machine is shared; a mode that ran while someone else's job held a core is slower for reasons
    that have nothing to do with it. This number says which rows to distrust. Linux only (``/proc``);
    elsewhere it reads ``None``."""

    def __init__(self) -> None:
        self._start = _jiffies()

    def others(self) -> float | None:
        """Share of all CPU time since start used by processes outside this one and its children."""
        now = _jiffies()
        if self._start is None or now is None:
            return None
        busy, total, own = (b - a for a, b in zip(self._start, now, strict=True))
        return max(0.0, busy - own) / total if total > 0 else None


def _jiffies() -> tuple[int, int, int] | None:
    """(machine busy, machine total, this process tree's) CPU clock ticks so far."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        procs = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parts = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # a process that ended while we looked
            procs[int(stat.parent.name)] = (
                int(parts[1]),
                int(parts[11]) + int(parts[12]),
            )  # ppid, utime+stime
    except (OSError, ValueError):
        return None
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, (ppid, _) in procs.items() if ppid == parent and pid not in tree]
        tree.update(kids)
        frontier += kids
    total, idle = sum(fields), fields[3] + fields[4]
    return total - idle, total, sum(procs[p][1] for p in tree if p in procs)


def matmul_peak_gflops(dtype: torch.dtype, n: int = 2048, repeats: int = 7) -> float:
    """Best-of-``repeats`` GFLOP/s of one ``n x n x n`` torch.mm: the best case on a noisy machine."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # first call picks and builds the kernel
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def non_embedding_params(model: Any) -> int:
    """Parameters a token's forward pass multiplies by: all but the embedding table (a lookup) and an
    untied output head (the engine multiplies only its few label rows)."""
    skip = {id(model.get_input_embeddings().weight)}
    head = model.get_output_embeddings()
    if head is not None:
        skip.add(id(head.weight))
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


# Which computation each bench mode performs (end-to-end modes run the engine's).
METHODS = {
    "naive": "naive",
    "per-item": "uncached",
    "bucketed": "uncached",
    "per-item-cached": "cached",
    "engine": "cached",
    "llamacpp": "llamacpp",
}


def method_of(mode: str) -> str:
    return "cached" if mode.startswith("end-to-end") else METHODS.get(mode, "cached")


@dataclass(frozen=True)
class FlopModel:
    """FLOPs each mode's method needs for one ticket of ``s`` suffix tokens, padding excluded.

    ``cached`` (engine): suffix + label-tree nodes against the cached prefix. ``uncached`` (per-item,
    bucketed): the whole prompt + suffix + tree. ``naive``: for every label the whole prompt + suffix + the
    label's tokens, full-vocabulary logits at every position. ``llamacpp``: suffix against the cached
    prefix, then each label's tokens one at a time, full-vocabulary logits for each evaluated token.
    The ratio of two methods' FLOPs bounds the speed-up one can have over the other at equal efficiency."""

    params: int  # non-embedding parameters
    layers: int
    d_attn: int
    hidden: int
    vocab: int
    prefix: int  # shared prompt tokens
    tree: int  # label-tree nodes
    label_lens: tuple[int, ...]  # tokens per label, end-of-turn included

    @classmethod
    def of(cls, model: Any, prefix: int, tree: int, label_lens: Sequence[int]) -> FlopModel:
        cfg = model.config
        heads = cfg.num_attention_heads
        d_attn = heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        return cls(
            non_embedding_params(model),
            cfg.num_hidden_layers,
            d_attn,
            cfg.hidden_size,
            cfg.vocab_size,
            prefix,
            tree,
            tuple(label_lens),
        )

    def tokens(self, n: int, past: int) -> float:
        """``n`` new tokens after ``past`` cached ones: weights, then attention over what each token sees."""
        return 2 * self.params * n + 4 * self.layers * self.d_attn * (past * n + n * (n + 1) / 2)

    def per_ticket(self, method: str, s: int) -> float:
        head = 2 * self.hidden * self.vocab  # one position's full-vocabulary logits
        p = self.prefix
        if method == "cached":
            return self.tokens(s + self.tree, past=p)
        if method == "uncached":
            return self.tokens(p + s + self.tree, past=0)
        if method == "naive":
            return sum(self.tokens(p + s + k - 1, 0) + head * (p + s + k - 1) for k in self.label_lens)
        if method == "llamacpp":
            labels = sum(self.tokens(1, p + s + j) + head for k in self.label_lens for j in range(k - 1))
            return self.tokens(s, past=p) + head + labels
        raise ValueError(f"unknown method {method!r}")

    def total(self, method: str, suffix_lengths: Sequence[int]) -> float:
        return sum(self.per_ticket(method, s) for s in suffix_lengths)

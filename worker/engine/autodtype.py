"""``--dtype auto``: choose the compute dtype by measuring it on this machine, once, and remember it.

CPU flags do not say which dtype is fast. A CPU that lists ``avx512_bf16`` but has no AMX can run
bfloat16 matmuls slower than float32 (measured here: an AMD EPYC with AVX512-BF16 and a Xeon without
AMX), and on an AMX machine bfloat16 is ~4x faster. So at the first start the worker runs one
representative packed pass per candidate dtype on the real model and the task's calibration tickets,
and takes the fastest candidate whose labels agree with float32's on every one of them. The decision is
cached as JSON under ``<cache>/dtype/`` keyed by the machine (CPU model and flags, or GPU name), the
torch version, the model's digest and the task's, so later starts read it in microseconds.

Cost of a first start: per candidate an engine (prefix pass, calibration prior), one warm-up pass and
one timed pass over ~12 short tickets; a few seconds for SmolLM2-135M on two cores. When the timings
are within ``CLOSE`` of each other a second interleaved round is timed (one pass each), the best kept.

float32 is the reference: a candidate replaces it only when it is at least ``MARGIN`` faster; a shared
machine's noise must not flip the choice. ``int8`` (dynamic quantization of the decoder's linear
layers) is never a default candidate: on SmolLM2 its labels agree with float32 on well under 90 % of
tickets. Passed explicitly as a candidate it is held to the same agreement rule as the others.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .decide import decide as decide_labels
from .model import INT8, LoadedModel, ModelError, cache_root, quantize_int8
from .task import Task

CPU_CANDIDATES = ("float32", "bfloat16")
CUDA_CANDIDATES = ("float32", "float16", "bfloat16")
REFERENCE = "float32"
MARGIN = 0.10  # leave float32 only for a candidate at least this much faster
CLOSE = 0.30  # timings closer than this get a second interleaved round
CACHE_VERSION = 1  # bump when the measurement changes: old cached decisions are then ignored

# Short, varied tickets added to the task's own examples, so the timed pass has a few rows to pack
# and the agreement check more than three tickets to look at.
CALIBRATION = (
    "My card was declined at the shop but the money left my account.",
    "How do I change the email address on my profile?",
    "The website shows error 500 when I try to download my statement.",
    "Why was I charged a fee for a transfer to my own account?",
    "I can't log in, it says my account is locked.",
    "The app is very slow since yesterday and keeps freezing.",
    "Please cancel my subscription and refund this month.",
    "I never received the verification code by SMS.",
    "Where can I find the invoice for my last payment?",
)

Timer = Callable[[str, Callable[[], torch.Tensor]], tuple[float, torch.Tensor]]
MakeEngine = Callable[[LoadedModel], Any]  # LoadedModel -> Engine (an argument: no import cycle)


@dataclass(frozen=True)
class Trial:
    """One candidate, measured: seconds of its best timed pass and its decided labels."""

    dtype: str
    seconds: float
    labels: tuple[str, ...]
    max_delta: float = 0.0  # largest |decided log-probability - float32's| on the calibration tickets

    def agreement(self, reference: Trial) -> float:
        same = sum(a == b for a, b in zip(self.labels, reference.labels, strict=True))
        return same / len(reference.labels) if reference.labels else 1.0


@dataclass(frozen=True)
class DtypeChoice:
    chosen: str
    reason: str
    trials: tuple[Trial, ...]
    key: dict[str, str]
    cached: bool = False
    seconds: float = 0.0  # what measuring cost (0 when read from the cache)

    def log_fields(self) -> dict[str, Any]:
        """What ``worker_start`` logs: the choice, each candidate's timing and agreement, and why."""
        ref = next((t for t in self.trials if t.dtype == REFERENCE), None)
        return {
            "dtype_chosen": self.chosen,
            "dtype_reason": self.reason,
            "dtype_cached": self.cached,
            "dtype_pass_ms": {t.dtype: round(t.seconds * 1000, 1) for t in self.trials},
            "dtype_agreement": {t.dtype: round(t.agreement(ref), 4) for t in self.trials} if ref else {},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CACHE_VERSION,
            "chosen": self.chosen,
            "reason": self.reason,
            "key": self.key,
            "measured_s": round(self.seconds, 3),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "trials": [dataclasses.asdict(t) for t in self.trials],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DtypeChoice:
        trials = tuple(
            Trial(t["dtype"], float(t["seconds"]), tuple(t["labels"]), float(t.get("max_delta", 0.0)))
            for t in data["trials"]
        )
        return cls(str(data["chosen"]), str(data["reason"]), trials, dict(data["key"]), cached=True)


def pick(trials: Sequence[Trial], *, margin: float = MARGIN) -> tuple[str, str]:
    """(chosen dtype, reason): the fastest trial whose labels all equal float32's, float32 unless a
    candidate beats it by ``margin``. Pure: the tests feed it made-up timings."""
    by_name = {t.dtype: t for t in trials}
    ref = by_name.get(REFERENCE)
    if ref is None:
        raise ValueError("the float32 reference was not measured")
    agreeing = [t for t in trials if t.labels == ref.labels]
    rejected = [f"{t.dtype} ({t.agreement(ref):.0%} agreement)" for t in trials if t.labels != ref.labels]
    best = min(agreeing, key=lambda t: t.seconds)
    note = f"; rejected: {', '.join(rejected)}" if rejected else ""
    if best is ref or best.seconds > ref.seconds * (1 - margin):
        runner_up = min((t for t in agreeing if t is not ref), key=lambda t: t.seconds, default=None)
        than = f", best other {runner_up.dtype} {runner_up.seconds * 1000:.0f} ms" if runner_up else ""
        return (
            REFERENCE,
            f"float32 {ref.seconds * 1000:.0f} ms: no agreeing dtype {margin:.0%} faster{than}{note}",
        )
    return best.dtype, (
        f"{best.dtype} {best.seconds * 1000:.0f} ms vs float32 {ref.seconds * 1000:.0f} ms "
        f"({ref.seconds / best.seconds:.2f}x), labels agree{note}"
    )


def candidates_for(device: torch.device) -> tuple[str, ...]:
    return CUDA_CANDIDATES if device.type == "cuda" else CPU_CANDIDATES


def convert(loaded: LoadedModel, name: str) -> LoadedModel:
    """``loaded`` (float32) as ``name``: float32 is returned as is, others are converted copies."""
    if name == REFERENCE:
        return loaded
    model = copy.deepcopy(loaded.model)
    if name == INT8:
        return dataclasses.replace(loaded, model=quantize_int8(model), quantized=INT8)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name)
    if dtype is None:
        raise ModelError(f"unknown dtype candidate {name!r}")
    return dataclasses.replace(loaded, model=model.to(dtype), dtype=dtype)


def calibration_texts(task: Task) -> list[str]:
    return [ex.text for ex in task.examples] + list(CALIBRATION)


def _wall(name: str, run: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def measure(
    loaded: LoadedModel,
    task: Task,
    make_engine: MakeEngine,
    candidates: Sequence[str],
    *,
    timer: Timer = _wall,
) -> tuple[list[Trial], dict[str, LoadedModel]]:
    """Time one packed pass per candidate (after one warm-up each; the timed passes interleaved) and
    record the decided labels. Returns the trials and each candidate's loaded model."""
    if REFERENCE not in candidates:
        candidates = (REFERENCE, *candidates)
    texts = calibration_texts(task)
    models = {name: convert(loaded, name) for name in candidates}
    engines = {name: make_engine(m) for name, m in models.items()}
    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)

    def one_pass(engine: Any) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            logp, _ = engine.logprobs(texts)
            sync()
            return logp

        return run

    for engine in engines.values():
        one_pass(engine)()  # warm-up: first calls pick and build kernels
    best: dict[str, float] = {}
    decided: dict[str, torch.Tensor] = {}
    for round_ in range(2):
        for name, engine in engines.items():
            seconds, logp = timer(name, one_pass(engine))
            best[name] = min(seconds, best.get(name, float("inf")))
            decided[name] = decide_labels(logp.float(), engine.prior).scores  # as the engine decides
        if round_ == 0 and not _close(best):
            break
    ref = decided[REFERENCE]
    labels = list(task.labels)
    trials = [
        Trial(
            name,
            best[name],
            tuple(labels[i] for i in decided[name].argmax(-1).tolist()),
            float((decided[name].float() - ref.float()).abs().max()),
        )
        for name in engines
    ]
    return trials, models


def _close(seconds: dict[str, float]) -> bool:
    ref = seconds[REFERENCE]
    return any(abs(s - ref) < CLOSE * ref for name, s in seconds.items() if name != REFERENCE)


def machine_key(device: torch.device) -> dict[str, str]:
    """What the speed of a dtype depends on: the processor (or GPU) and the torch build."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(idx)
        hw = f"{torch.cuda.get_device_name(idx)} sm_{major}{minor}"
    else:
        flags = hashlib.sha256(cpu_field("flags").encode()).hexdigest()[:12]
        hw = f"{cpu_field('model name') or 'cpu'} flags:{flags}"
    return {"device": device.type, "hardware": hw, "torch": torch.__version__}


def model_digest(source: str) -> str:
    """A cheap identity of the model's weights: the converted GGUF's directory is named by its content
    hash; another directory by its config and weight files' names, sizes and times; a hub id by itself."""
    path = Path(source)
    if not path.is_dir():
        return source
    if path.parent == cache_root() / "models":
        return path.name
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.suffix in (".json", ".safetensors", ".bin", ".gguf"):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:24]


def task_digest(task: Task) -> str:
    """The calibration tickets' labels depend on the task's prompt as well as on the model."""
    text = json.dumps(
        [
            task.labels,
            task.instructions,
            task.question,
            [(e.text, e.label) for e in task.examples],
            task.calibrate,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_file(key: dict[str, str], directory: Path | None = None) -> Path:
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return (directory or cache_root() / "dtype") / f"{name}.json"


def read_cached(key: dict[str, str], directory: Path | None = None) -> DtypeChoice | None:
    path = cache_file(key, directory)
    try:
        data = json.loads(path.read_text())
        if data.get("version") != CACHE_VERSION or data.get("key") != key:
            return None
        return DtypeChoice.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, torn or from another version: measure again


def write_cached(decision: DtypeChoice, directory: Path | None = None) -> None:
    path = cache_file(decision.key, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(decision.to_json(), indent=1) + "\n")
    os.replace(tmp, path)  # atomic: workers starting together never read half a file


def choose(
    loaded: LoadedModel,
    task: Task,
    make_engine: MakeEngine,
    *,
    source: str,
    candidates: Sequence[str] | None = None,
    cache_dir: Path | None = None,
    refresh: bool = False,
    timer: Timer = _wall,
) -> tuple[LoadedModel, DtypeChoice]:
    """``loaded`` (float32) converted to the measured best dtype, and the decision (cached or new)."""
    if loaded.dtype != torch.float32:
        raise ModelError("dtype auto measures from a float32 model")
    names = tuple(candidates or candidates_for(loaded.device))
    key = {
        **machine_key(loaded.device),
        "model": model_digest(source),
        "task": task_digest(task),
        "candidates": ",".join(names),
    }
    if not refresh and (hit := read_cached(key, cache_dir)) is not None:
        return convert(loaded, hit.chosen), hit
    start = time.perf_counter()
    trials, models = measure(loaded, task, make_engine, names, timer=timer)
    chosen, reason = pick(trials)
    decision = DtypeChoice(chosen, reason, tuple(trials), key, seconds=time.perf_counter() - start)
    with contextlib.suppress(OSError):  # a read-only cache costs the next start a few seconds, no more
        write_cached(decision, cache_dir)
    return models[chosen], decision


def cpu_field(name: str) -> str:
    """One field of /proc/cpuinfo's first processor (``model name``, ``flags``); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def load(
    model: str,
    task: Task,
    make_engine: MakeEngine,
    *,
    dtype: str = "auto",
    device: str = "auto",
    cache_dir: Path | None = None,
) -> tuple[LoadedModel, DtypeChoice | None]:
    """Load ``model`` in ``dtype``; for ``auto``, in the dtype measured (or cached) for this machine."""
    from .model import load_model, resolve_source

    if dtype != "auto":
        return load_model(model, dtype=dtype, device=device), None
    loaded = load_model(model, dtype="float32", device=device)
    source, _ = resolve_source(model)
    return choose(loaded, task, make_engine, source=source, cache_dir=cache_dir)

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

What a candidate must agree on is what decides the task's answers. Zero-shot label scoring: the decided
labels of every calibration ticket, equal to float32's. A task whose answers all come from trained heads
(the primary's ``head``/``head_data`` and every question's): the pass timed is the features pass the worker
runs for them (it stops at their deepest layer), and the features they read must match float32's to within
``FEATURE_TOLERANCE``; labels it never outputs, which a 135M model's near-uniform zero-shot scores flip at
the slightest rounding, do not decide (heads are trained per dtype: a bfloat16 head learns bfloat16
features). Measured on the banking example: bfloat16's head features are 1.7-2.5% off float32's and its
77-intent head as accurate (81.2% against 81.3%); int8's are 43-51% off.

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
from .recipe import Recipe
from .task import Task

CPU_CANDIDATES = ("float32", "bfloat16")
CUDA_CANDIDATES = ("float32", "float16", "bfloat16")
REFERENCE = "float32"
MARGIN = 0.10  # leave float32 only for a candidate at least this much faster
CLOSE = 0.30  # timings closer than this get a second interleaved round
# a head-decided task's candidate: each feature block (a layer's pooling) may differ from float32's by at
# most this share of how much the calibration tickets' own features differ from each other
FEATURE_TOLERANCE = 0.10
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
    # a head-decided task's trials (labels empty): the largest relative error of a feature block
    feature_error: float | None = None

    def agreement(self, reference: Trial) -> float:
        same = sum(a == b for a, b in zip(self.labels, reference.labels, strict=True))
        return same / len(reference.labels) if reference.labels else 1.0

    def agrees(self, reference: Trial) -> bool:
        """Decides as ``reference`` does: the same labels, and features within FEATURE_TOLERANCE."""
        close = self.feature_error is None or self.feature_error <= FEATURE_TOLERANCE
        return self.labels == reference.labels and close

    def disagreement(self, reference: Trial) -> str:
        if self.labels != reference.labels:
            return f"{self.dtype} ({self.agreement(reference):.0%} agreement)"
        return f"{self.dtype} (features {self.feature_error:.0%} off)"


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
        fields = {
            "dtype_chosen": self.chosen,
            "dtype_reason": self.reason,
            "dtype_cached": self.cached,
            "dtype_pass_ms": {t.dtype: round(t.seconds * 1000, 1) for t in self.trials},
        }
        if any(t.feature_error is not None for t in self.trials):  # judged on the heads' features
            fields["dtype_feature_error"] = {t.dtype: round(t.feature_error or 0.0, 4) for t in self.trials}
        else:
            fields["dtype_agreement"] = (
                {t.dtype: round(t.agreement(ref), 4) for t in self.trials} if ref else {}
            )
        return fields

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
            Trial(
                t["dtype"],
                float(t["seconds"]),
                tuple(t["labels"]),
                float(t.get("max_delta", 0.0)),
                None if t.get("feature_error") is None else float(t["feature_error"]),
            )
            for t in data["trials"]
        )
        return cls(str(data["chosen"]), str(data["reason"]), trials, dict(data["key"]), cached=True)


def pick(trials: Sequence[Trial], *, margin: float = MARGIN) -> tuple[str, str]:
    """(chosen dtype, reason): the fastest trial that decides as float32 does (:meth:`Trial.agrees`),
    float32 unless a candidate beats it by ``margin``. Pure: the tests feed it made-up timings."""
    by_name = {t.dtype: t for t in trials}
    ref = by_name.get(REFERENCE)
    if ref is None:
        raise ValueError("the float32 reference was not measured")
    agreeing = [t for t in trials if t.agrees(ref)]
    rejected = [t.disagreement(ref) for t in trials if not t.agrees(ref)]
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
        f"({ref.seconds / best.seconds:.2f}x), {'features' if best.feature_error is not None else 'labels'} "
        f"agree{note}"
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
    recipes: Sequence[Recipe] | None = None,
) -> tuple[list[Trial], dict[str, LoadedModel]]:
    """Time one packed pass per candidate (after one warm-up each; the timed passes interleaved) and
    record what it decides: the zero-shot labels, or with ``recipes`` (a head-decided task's) the features
    its heads read, from the features pass. Returns the trials and each candidate's loaded model."""
    if REFERENCE not in candidates:
        candidates = (REFERENCE, *candidates)
    texts = calibration_texts(task)
    models = {name: convert(loaded, name) for name in candidates}
    engines = {name: make_engine(m) for name, m in models.items()}
    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)

    def one_pass(engine: Any) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            if recipes:
                xs, _ = engine.features_many(texts, recipes)
                sync()
                return torch.cat(xs, dim=1)
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
            seconds, out = timer(name, one_pass(engine))
            best[name] = min(seconds, best.get(name, float("inf")))
            # as the engine decides: its heads read the features; zero-shot, the labels' scores
            decided[name] = out.float() if recipes else decide_labels(out.float(), engine.prior).scores
        if round_ == 0 and not _close(best):
            break
    ref = decided[REFERENCE]
    if recipes:
        hidden = int(loaded.model.config.hidden_size)
        return [
            Trial(name, best[name], (), 0.0, feature_error(decided[name], ref, hidden)) for name in engines
        ], models
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


def feature_error(got: torch.Tensor, ref: torch.Tensor, block: int) -> float:
    """The largest, over ``block``-wide feature blocks (one layer's pooling each), of ``got``'s distance
    from ``ref`` relative to the spread of ``ref``'s rows about their mean: 0 identical, 1 as far off as
    the tickets are from each other."""
    worst = 0.0
    for g, r in zip(got.split(block, dim=1), ref.split(block, dim=1), strict=True):
        off, spread = float((g - r).norm()), float((r - r.mean(0)).norm())
        worst = max(worst, off / spread if spread > 0 else (0.0 if off == 0 else float("inf")))
    return worst


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
    recipes: Sequence[Recipe] | None = None,
) -> tuple[LoadedModel, DtypeChoice]:
    """``loaded`` (float32) converted to the measured best dtype, and the decision (cached or new).
    ``recipes``: what the task's heads read when heads decide all its answers (None: zero-shot primary)."""
    if loaded.dtype != torch.float32:
        raise ModelError("dtype auto measures from a float32 model")
    names = tuple(candidates or candidates_for(loaded.device))
    key = {
        **machine_key(loaded.device),
        "model": model_digest(source),
        "task": task_digest(task),
        "candidates": ",".join(names),
        **({"heads": ";".join(str(r) for r in recipes)} if recipes else {}),
    }
    if not refresh and (hit := read_cached(key, cache_dir)) is not None:
        return convert(loaded, hit.chosen), hit
    start = time.perf_counter()
    trials, models = measure(loaded, task, make_engine, names, timer=timer, recipes=recipes)
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
    recipes: Callable[[int], Sequence[Recipe] | None] = lambda n_layers: None,
) -> tuple[LoadedModel, DtypeChoice | None]:
    """Load ``model`` in ``dtype``; for ``auto``, in the dtype measured (or cached) for this machine.
    ``recipes(n_layers)``: what the task's heads will read when heads decide all its answers, else None."""
    from .model import load_model, resolve_source

    if dtype != "auto":
        return load_model(model, dtype=dtype, device=device), None
    loaded = load_model(model, dtype="float32", device=device)
    source, _ = resolve_source(model)
    reads = recipes(int(loaded.model.config.num_hidden_layers))
    return choose(loaded, task, make_engine, source=source, cache_dir=cache_dir, recipes=reads)

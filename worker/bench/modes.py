"""The in-process modes: the naive first version, and the engine under four configurations.

Every mode scores the same tickets with the same loaded model; only the way the work is cut into
forward passes differs. Each returns a :class:`ModeResult`: per-ticket labels and top-two margins (for
agreement) and the tokens computed (for padding overhead).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from worker.bench.data import Item
from worker.bench.peak import CpuMeter
from worker.engine.decide import decide
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import EngineOptions
from worker.engine.planner import PACK, PAD, Plan
from worker.engine.reference import ReferenceScorer
from worker.engine.task import Task
from worker.engine.types import BatchStats


class Baseline(Engine):
    """The engine with a published baseline's handicaps, which only the bench needs: without the prefix
    cache every ticket carries the whole prompt through the model; without packing each ticket gets a
    row of its own, padded to the longest in its pass."""

    def __init__(
        self, loaded: LoadedModel, task: Task, options: EngineOptions, *, pack: bool, cache_prefix: bool
    ) -> None:
        self.pack, self.cache_prefix = pack, cache_prefix  # before the engine plans its calibration pass
        super().__init__(loaded, task, options)

    def cached_prefix(self) -> Sequence[int]:
        return super().cached_prefix() if self.cache_prefix else ()

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        suffixes = super().tokenize(texts)
        if self.cache_prefix:
            return suffixes
        prefix = list(self.prompt.prefix_ids)
        return [prefix + s for s in suffixes]

    def plan(self, lengths: Sequence[int], mode: str = PACK) -> list[Plan]:
        return super().plan(lengths, mode if self.pack else PAD)


def make_engines(loaded: LoadedModel, task: Task, options: EngineOptions) -> dict[str, Engine]:
    """Mode name -> the engine it runs. per-item and bucketed are the published baselines, hence no prefix
    cache; bucketed's token budget is lifted so that only its 32-ticket batches bound a pass, as published.
    Only ``engine`` takes the options given on the command line."""
    return {
        "per-item": Baseline(loaded, task, EngineOptions(batch_size=1), pack=True, cache_prefix=False),
        "bucketed": Baseline(
            loaded, task, EngineOptions(max_batch_tokens=1 << 16), pack=False, cache_prefix=False
        ),
        "per-item-cached": Engine(loaded, task, EngineOptions(batch_size=1)),
        "engine": Engine(loaded, task, options),
    }


def head_engine(loaded: LoadedModel, task: Task, options: EngineOptions) -> tuple[Engine | None, str]:
    """The engine with the head ``options`` select (the task's own by default), or None and why not."""
    from worker.engine.training import resolve_head

    engine = Engine(loaded, task, options)
    head = resolve_head(engine, options.head)
    return (engine, "") if head else (None, "no head (--head none, or a task without one)")


def asking_three(engine: Engine) -> Engine:
    """The head engine asking three questions of every ticket: its primary head plus two further
    questions answered by copies of it (same labels, same recipe), so the run measures what answering
    more questions from the one pass costs, not what another recipe would."""
    import copy
    from dataclasses import replace

    from worker.engine.task import Question

    three = copy.copy(engine)
    three.answer_heads = {}
    extra = tuple(Question(f"copy{i}", engine.task.labels) for i in (1, 2))
    three.task = replace(engine.task, questions=extra)
    for q in extra:
        three.use_head(engine.head, q.name)
    return three


Progress = Callable[[int], None]  # told how many more tickets are done


@dataclass
class ModeResult:
    name: str
    ids: list[str]
    labels: list[str]
    margins: list[float]  # top-1 minus top-2 label log-probability: how close each call was
    seconds: float
    real_tokens: int = 0
    padded_tokens: int = 0  # 0: the mode never pads
    others_cpu: float | None = None  # share of the machine's CPU other processes took meanwhile
    notes: list[str] = field(default_factory=list)

    @property
    def items_per_s(self) -> float:
        return len(self.ids) / self.seconds if self.seconds > 0 else float("inf")

    @property
    def padding_overhead(self) -> float:
        return 1 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    def add_stats(self, stats: Sequence[BatchStats]) -> None:
        self.real_tokens += sum(s.real_tokens for s in stats)
        self.padded_tokens += sum(s.padded_tokens for s in stats)


def run_engine(
    name: str, engine: Engine, items: Sequence[Item], chunk: int, progress: Progress
) -> ModeResult:
    """Score ``items`` in chunks of ``chunk`` (1 for the item-by-item modes; the service's drain size
    otherwise, so that ``engine`` plans passes over the same groups a worker would)."""
    out = ModeResult(name, [], [], [], 0.0)
    meter, start = CpuMeter(), time.perf_counter()
    for lo in range(0, len(items), chunk):
        part = items[lo : lo + chunk]
        logp, prior, stats = engine.decision_logprobs([it.text for it in part])  # a head's pass, if any
        decision = decide(logp, prior)
        out.ids += [it.id for it in part]
        out.labels += decision.labels(engine.task.labels)
        out.margins += decision.margins
        out.add_stats(stats)
        progress(len(part))
    out.seconds, out.others_cpu = time.perf_counter() - start, meter.others()
    return out


def run_asking(
    name: str, engine: Engine, items: Sequence[Item], chunk: int, progress: Progress
) -> ModeResult:
    """As :func:`run_engine`, through ``classify``: every question the engine asks, from one pass."""
    out = ModeResult(name, [], [], [], 0.0)
    meter, start = CpuMeter(), time.perf_counter()
    for lo in range(0, len(items), chunk):
        part = items[lo : lo + chunk]
        predictions, stats = engine.classify([it.text for it in part])
        out.ids += [it.id for it in part]
        out.labels += [p.label for p in predictions]
        out.margins += [_margin(p.scores) for p in predictions]
        out.add_stats(stats)
        progress(len(part))
    out.seconds, out.others_cpu = time.perf_counter() - start, meter.others()
    return out


def _margin(scores: dict[str, float]) -> float:
    top = sorted(scores.values(), reverse=True)
    return top[0] - top[1] if len(top) > 1 else 0.0


def naive_scorer(engine: Engine) -> ReferenceScorer:
    """What a first version does: for each ticket and each label, the whole prompt plus the label's tokens
    through the model, full-vocabulary logits at every position, log-softmax over all of them. That is the
    reference scorer without its one shortcut, so that its labels are comparable with everyone's."""
    loaded = engine.loaded
    return ReferenceScorer(loaded.model, loaded.tokenizer, engine.task, engine.prompt, every_position=True)


def run_naive(engine: Engine, items: Sequence[Item], progress: Progress) -> ModeResult:
    scorer = naive_scorer(engine)
    prior = scorer.prior()  # computed the same plain way, once per task like the engine's
    out = ModeResult("naive", [], [], [], 0.0)
    meter, start = CpuMeter(), time.perf_counter()
    for it in items:
        decision = decide(torch.tensor([scorer.score_one(it.text)]), prior)
        out.ids.append(it.id)
        out.labels += decision.labels(engine.task.labels)
        out.margins += decision.margins
        progress(1)
    out.seconds, out.others_cpu = time.perf_counter() - start, meter.others()
    return out

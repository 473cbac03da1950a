"""The engine: texts in, labels and scores out. Pure compute: it never touches Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .decide import decide
from .model import LoadedModel
from .options import EngineOptions
from .planner import PACK, Plan, plan_batches
from .prompt import Prompt
from .scorer import Scorer
from .task import CONTENT_FREE, Task, load_task
from .types import BatchStats, Prediction


class Engine:
    """Classifies texts into a task's labels with one causal LM, as fast as the hardware allows."""

    def __init__(self, loaded: LoadedModel, task: Task, options: EngineOptions | None = None) -> None:
        self.loaded = loaded
        self.task = task
        self.options = options or EngineOptions()
        self.tokenizer = loaded.tokenizer
        self.prompt = Prompt.build(
            self.tokenizer, task, context=loaded.context, max_ticket_tokens=self.options.max_ticket_tokens
        )
        # Prove the prefix/suffix split on the task's own texts before trusting the cache with them.
        self.prompt.check_split(self.tokenizer, [ex.text for ex in task.examples] or ["Hello, I need help."])
        pad = self.tokenizer.pad_token_id
        self.scorer = Scorer(loaded.model, self.cached_prefix(), self.prompt.label_ids, pad or 0)
        self.startup: dict[str, Any] = {}
        self.prior: torch.Tensor | None = None
        if task.calibrate:
            self.prior = self.logprobs(CONTENT_FREE)[0].mean(0)

    @classmethod
    def load(cls, options: EngineOptions | None = None) -> Engine:
        """Load the model and the task ``options`` name: torch's threads by :mod:`.threads`' rule (or as
        set), the dtype as set or, for ``auto``, as measured on this machine (:mod:`.autodtype`)."""
        from . import autodtype, threads

        opts = options or EngineOptions()
        chosen = threads.apply(opts.threads)
        task = load_task(opts.task)
        loaded, decision = autodtype.load(
            opts.model, task, lambda m: cls(m, task, opts), dtype=opts.dtype, device=opts.device
        )
        engine = cls(loaded, task, opts)
        engine.startup = {
            **chosen.log_fields(),
            **(decision.log_fields() if decision else {"dtype_chosen": loaded.dtype_name}),
        }
        return engine

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def labels(self) -> list[str]:
        return list(self.task.labels)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.loaded.name,
            "dtype": self.loaded.dtype_name,
            "device": str(self.loaded.device),
            "threads": torch.get_num_threads(),
            "task": self.task.name,
            "labels": self.labels,
            "prefix_tokens": len(self.prompt.prefix_ids),
            "calibrated": self.prior is not None,
            **self.startup,  # how threads and dtype were chosen (Engine.load): worker_start logs it
        }

    def cached_prefix(self) -> Sequence[int]:
        """The prompt tokens run once and shared by every ticket (the prefix cache)."""
        return self.prompt.prefix_ids

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """What each ticket adds after the cached prefix."""
        return self.prompt.ticket_ids(self.tokenizer, texts)

    def plan(self, lengths: Sequence[int], mode: str = PACK) -> list[Plan]:
        """Forward passes for segments of these lengths within the batch and token budgets: packed rows (the
        bench's baselines also ask for padded ones)."""
        o = self.options
        return plan_batches(
            lengths,
            max_items=o.batch_size,
            max_tokens=o.max_batch_tokens,
            mode=mode,
            max_row_len=o.max_row_len,
        )

    def logprobs(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[torch.Tensor, list[BatchStats]]:
        """(tickets, labels) summed label log-probabilities, in input order, and per-pass stats;
        ``on_pass`` hears of each pass as it ends, so a long drain shows progress while it runs."""
        suffixes = self.tokenize(texts)
        lengths = [self.scorer.segment_len(len(s)) for s in suffixes]
        plans = self.plan(lengths)
        out = torch.empty(len(texts), len(self.task.labels))
        stats = []
        for plan in plans:
            start = time.perf_counter()
            scores = self.scorer.score(suffixes, plan)
            order = torch.tensor([i for row in plan.rows for i in row], dtype=torch.long)
            out[order] = scores.cpu()
            seconds = time.perf_counter() - start
            stats.append(
                BatchStats(plan.items, len(plan.rows), plan.real_tokens, plan.padded_tokens, seconds)
            )
            if on_pass is not None:
                on_pass(stats[-1])
        return out, stats

    def classify(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[list[Prediction], list[BatchStats]]:
        if not texts:
            return [], []
        logp, stats = self.logprobs(texts, on_pass=on_pass)
        return predictions(self.task.labels, logp, self.prior), stats


def predictions(
    labels: Sequence[str], logp: torch.Tensor, prior: torch.Tensor | None = None
) -> list[Prediction]:
    """Turn (tickets, labels) log-probabilities into labels and normalized scores.

    With a calibration ``prior`` the decision and the scores use ``logp - prior``; ``logprobs`` stay raw.
    """
    decision = decide(logp, prior)
    probs = torch.softmax(decision.scores, dim=-1)
    best = decision.best
    rows_p, rows_l = probs.tolist(), logp.tolist()
    return [
        Prediction(
            label=labels[b],
            scores={lab: round(p, 6) for lab, p in zip(labels, ps, strict=False)},
            logprobs={lab: round(v, 6) for lab, v in zip(labels, ls, strict=False)},
        )
        for b, ps, ls in zip(best, rows_p, rows_l, strict=False)
    ]

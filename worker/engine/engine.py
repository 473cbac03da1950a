"""The engine: texts in, labels and scores out. Pure compute: it never touches Redis."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from . import chars
from . import features as feats
from .decide import decide
from .head import Head, HeadError, Identity, digest
from .hierarchy import consistent
from .model import LoadedModel
from .options import EngineOptions
from .planner import PACK, Plan, plan_batches
from .prompt import Prompt, PromptSplitError
from .recipe import Recipe
from .scorer import Scorer
from .task import CONTENT_FREE, Task, TaskError, load_task
from .training import planned_recipes, recipe_for, resolve_head
from .types import Answer, BatchStats, Prediction


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
        self.prompt.check_split(self.tokenizer, self._split_texts())
        self._echo_checked = False  # the split that reads tickets twice: proven on first use (check_echo)
        pad = self.tokenizer.pad_token_id
        self.scorer = Scorer(loaded.model, self.cached_prefix(), self.prompt.label_ids, pad or 0)
        self.startup: dict[str, Any] = {}
        self.asks: str | None = None  # the question this engine answers alone (asking()); None: all
        self.prior: torch.Tensor | None = None
        if task.calibrate:
            self.prior = self.logprobs(CONTENT_FREE)[0].mean(0)
        self.head: Head | None = None  # decides when set (use_head); else zero-shot label scoring
        # further questions' heads (task [questions.NAME]), read from the same pass as the primary's
        self.answer_heads: dict[str, Head] = {}

    @classmethod
    def load(
        cls,
        options: EngineOptions | None = None,
        log: Callable[..., None] | None = None,
        *,
        questions: bool = True,
        as_worker: bool = False,
    ) -> Engine:
        """Load the model and the task ``options`` name: torch's threads by :mod:`.threads`' rule (or as
        set), the dtype as set or, for ``auto``, as measured on this machine (:mod:`.autodtype`); then the
        head they select (:func:`.training.resolve_head`; HeadError if it does not fit). ``log(event,
        **fields)`` hears of a head being trained or taken from the cache. ``questions``: also load (or
        train) the heads of the task's further questions (``train`` needs none of them). ``as_worker``:
        judge ``auto`` as a worker running the task with its own heads would, whatever head these options
        name: a command that loads no head or another file (``train``, ``eval --question Q --head FILE``)
        then trains and checks heads in the dtype the workers run (with ``--head none`` a task whose
        heads decide was judged by zero-shot labels: float32 where workers chose bfloat16)."""
        from . import autodtype, threads

        opts = options or EngineOptions()
        chosen = threads.apply(opts.threads)
        task = load_task(opts.task)
        loaded, decision = autodtype.load(
            opts.model,
            task,
            lambda m: cls(m, task, opts),
            dtype=opts.dtype,
            device=opts.device,
            # judged as the worker runs the task (every question), so its commands decide alike
            recipes=lambda n_layers: planned_recipes(task, None if as_worker else opts.head, n_layers),
        )
        engine = cls(loaded, task, opts)
        engine.startup = {
            **chosen.log_fields(),
            **(decision.log_fields() if decision else {"dtype_chosen": loaded.dtype_name}),
        }
        engine.resolve_heads(opts.head, log, questions=questions)
        return engine

    def resolve_heads(
        self, spec: str | None = None, log: Callable[..., None] | None = None, *, questions: bool = True
    ) -> None:
        """Use the primary head ``spec`` selects (:func:`.training.resolve_head`) and, with ``questions``,
        each further question's own (its file or its ``head_data``, trained on first use and cached)."""
        resolve_head(self, spec, log)
        for q in self.task.questions if questions else ():
            self.use_head(resolve_head(self.asking(q.name), None, log), q.name)

    @property
    def identity(self) -> Identity:
        """What a head must have been trained for to be used on this engine."""
        return Identity(
            model=self.loaded.name,
            model_digest=self.loaded.digest,
            prompt_digest=digest(self.prompt.prefix_ids, self.prompt.after_ids),
            labels=tuple(self.task.labels),
            hidden_size=int(self.loaded.model.config.hidden_size),
        )

    @property
    def questions(self) -> tuple[str, ...]:
        """The task's further questions, by name (each answered when it has a head)."""
        return tuple(q.name for q in self.task.questions)

    def asking(self, question: str | None) -> Engine:
        """This engine answering one question alone, sharing the loaded model, prompt and prefix cache:
        its task's labels are the question's and its head is the question's head, so training, ``eval``
        and ``verify`` of a question use the same code as the primary's. ``None``: the primary alone.
        Zero-shot label scoring answers the primary question only (the prompt asks that one)."""
        try:
            q = self.task.get_question(question)
        except TaskError as exc:
            raise HeadError(str(exc)) from None
        alone = copy.copy(self)
        alone.answer_heads = {}
        if q is None:
            return alone
        alone.asks = q.name
        alone.task = Task(
            name=f"{self.task.name}:{q.name}",
            labels=q.labels,
            instructions=self.task.instructions,
            question=self.task.question,
            calibrate=False,
            head=q.head,
            head_data=q.head_data,
            recipe=q.recipe,
            review_below=q.review_below,
            auto_accuracy=q.auto_accuracy,
            label_names=q.label_names,
            unlabeled_data=q.unlabeled_data,
            balance=q.balance,
            mlp=q.mlp,
        )
        alone.prior = None
        alone.head = self.answer_heads.get(q.name)
        return alone

    @property
    def n_layers(self) -> int:
        return feats.n_layers(self.scorer)

    def use_head(self, head: Head | None, question: str | None = None) -> None:
        """Decide with ``head`` from now on (``None``: zero-shot; for a further ``question``: not
        answered). Raises HeadError if it does not fit."""
        if question is not None:
            alone = self.asking(question)  # HeadError for a question the task does not ask
            alone.use_head(head)
            if head is None:
                self.answer_heads.pop(question, None)
            else:
                self.answer_heads[question] = head
            return
        if head is not None:
            head.check(self.identity)
            try:
                head.recipe.check(self.n_layers)
            except ValueError as exc:
                raise HeadError(f"head {head.id}: {exc}") from None
            if tuple(self.cached_prefix()) != self.prompt.prefix_ids:
                raise HeadError("a head reads the prefix-cached pass; this engine does not cache the prefix")
            if head.recipe.echo:
                self.check_echo()
        self.head = head

    def _split_texts(self) -> list[str]:
        return [ex.text for ex in self.task.examples] or ["Hello, I need help."]

    def check_echo(self) -> None:
        """HeadError unless this engine can read tickets twice (recipe ``echo``): both readings of the
        longest ticket fit the model's context, and the split that reads them tokenizes like the whole
        prompt (proven once, on the task's own texts)."""
        if not self.prompt.echo_fits:
            raise HeadError(
                f"an echo recipe reads each ticket twice and {self.prompt.max_ticket_tokens}-token tickets "
                f"do not fit the model's {self.loaded.context}-token context twice; lower --max-ticket-tokens"
            )
        if not self._echo_checked:
            try:
                self.prompt.check_split(self.tokenizer, self._split_texts(), echo=True)
            except PromptSplitError as exc:
                raise HeadError(
                    f"an echo recipe cannot read tickets twice with this template: {exc}"
                ) from None
            self._echo_checked = True

    def load_head(self, data: bytes, version: str, question: str | None = None) -> None:
        """Switch to a head published in Redis (worker.headwatch) for the primary question or a further
        one; HeadError keeps the current one."""
        self.use_head(Head.from_bytes(data, version=version), question)

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
            "layers": self.n_layers,
            "calibrated": self.prior is not None,
            "zero_shot_temperature": self.task.zero_shot_temperature,
            "method": "head" if self.head else "zero-shot",
            "head": self.head.summary() if self.head else None,
            "questions": {
                q: self.answer_heads[q].summary() if q in self.answer_heads else None for q in self.questions
            },
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
        if self.asks is not None:
            raise HeadError(
                f"question {self.asks!r} has no head; zero-shot scoring answers the primary question only"
            )
        suffixes = self.tokenize(texts)
        lengths = [self.scorer.segment_len(len(s)) for s in suffixes]
        return self._passes(suffixes, lengths, len(self.task.labels), self.scorer.score, on_pass)

    def features(
        self,
        texts: Sequence[str],
        recipe: Recipe | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        on_pass: Callable[[BatchStats], None] | None = None,
    ) -> tuple[torch.Tensor, list[BatchStats]]:
        """(tickets, features) float32 features a head reads, in input order: the packed, prefix-cached pass
        without the label tree, stopped at the recipe's deepest layer. ``progress(n)`` after each pass;
        no ``recipe``: the head's, else the one a head is trained with (:func:`.training.recipe_for`)."""
        recipe = recipe or (self.head.recipe if self.head else recipe_for(self))
        suffixes, echo = self.suffixes(texts, echo=recipe.echo)
        after = len(self.prompt.after_ids)

        def run(sfx: Sequence[Sequence[int]], plan: Plan) -> torch.Tensor:
            out = feats.extract(self.scorer, sfx, plan, recipe, after, echo)
            if progress:
                progress(plan.items)
            return out

        width = int(self.loaded.model.config.hidden_size) * len(recipe.model_parts)
        x, stats = self._passes(suffixes, [len(s) for s in suffixes], width, run, on_pass)
        return with_chars(x, recipe, texts), stats

    def features_many(
        self,
        texts: Sequence[str],
        recipes: Sequence[Recipe],
        *,
        on_pass: Callable[[BatchStats], None] | None = None,
    ) -> tuple[list[torch.Tensor], list[BatchStats]]:
        """Per recipe, (tickets, features) float32 features in input order, all from one packed,
        prefix-cached pass that stops at the deepest layer any recipe reads (:mod:`.features`)."""
        unique = list(dict.fromkeys(recipes))
        suffixes, echo = self.suffixes(texts, echo=any(r.echo for r in unique))
        after = len(self.prompt.after_ids)

        def run(sfx: Sequence[Sequence[int]], plan: Plan) -> torch.Tensor:
            return torch.cat(feats.extract_many(self.scorer, sfx, plan, unique, after, echo), dim=1)

        hidden = int(self.loaded.model.config.hidden_size)
        widths = [hidden * len(r.model_parts) for r in unique]  # the pass's; chars are added after it
        x, stats = self._passes(suffixes, [len(s) for s in suffixes], sum(widths), run, on_pass)
        text = chars.features(texts) if any(r.chars for r in unique) else None
        parts = [with_chars(p, r, texts, text) for p, r in zip(x.split(widths, dim=1), unique, strict=True)]
        return [parts[unique.index(r)] for r in recipes], stats

    def suffixes(self, texts: Sequence[str], *, echo: bool = False) -> tuple[list[list[int]], int | None]:
        """The features pass's suffixes and, with ``echo`` (a recipe reads each ticket twice: the whole
        pass then does), the echo text's token count, else None (HeadError if it cannot:
        :meth:`check_echo`)."""
        if not echo:
            return self.prompt.ticket_ids(self.tokenizer, texts), None
        self.check_echo()
        return self.prompt.ticket_ids(self.tokenizer, texts, echo=True), len(self.prompt.echo_ids)

    def _passes(
        self,
        suffixes: Sequence[Sequence[int]],
        lengths: Sequence[int],
        width: int,
        fn: Callable[[Sequence[Sequence[int]], Plan], torch.Tensor],
        on_pass: Callable[[BatchStats], None] | None = None,
    ) -> tuple[torch.Tensor, list[BatchStats]]:
        """Plan the passes, run ``fn`` on each, and put its rows (plan order) back in input order."""
        out = torch.empty(len(suffixes), width)
        stats = []
        for plan in self.plan(lengths):
            start = time.perf_counter()
            rows = fn(suffixes, plan)
            order = torch.tensor([i for row in plan.rows for i in row], dtype=torch.long)
            out[order] = rows.cpu()
            seconds = time.perf_counter() - start
            stats.append(
                BatchStats(plan.items, len(plan.rows), plan.real_tokens, plan.padded_tokens, seconds)
            )
            if on_pass is not None:
                on_pass(stats[-1])
        return out, stats

    @property
    def temperature(self) -> float:
        """What the primary's decision scores are divided by before their softmax: the task's
        ``zero_shot_temperature`` for zero-shot scoring; 1.0 with a head (its log-probabilities carry
        its own temperature already). Scores only: decisions, ``logprobs`` and ``verify`` never see it."""
        return 1.0 if self.head is not None else self.task.zero_shot_temperature

    def decision_logprobs(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[BatchStats]]:
        """What decides each ticket: (tickets, task labels) log-probabilities, the prior to subtract
        before deciding (None with a head) and the passes' stats. With a head, its log-softmax over the
        features pass; else the labels' full-sequence log-probabilities."""
        head = self.head
        if head is not None:
            x, stats = self.features(texts, head.recipe, on_pass=on_pass)
            return head_logprobs(head, x), None, stats
        logp, stats = self.logprobs(texts, on_pass=on_pass)
        return logp, self.prior, stats

    def classify(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[list[Prediction], list[BatchStats]]:
        if not texts:
            return [], []
        head = self.head  # a head's labels are the task's (use_head checks), in the same order
        asked = dict(self.answer_heads)
        if not asked:
            logp, prior, stats = self.decision_logprobs(texts, on_pass=on_pass)
            return predictions(self.task.labels, logp, prior, head, self.temperature), stats
        # Every head reads one pass; a zero-shot primary needs its label-scoring pass besides.
        heads = ([head] if head is not None else []) + list(asked.values())
        xs, stats = self.features_many(texts, [h.recipe for h in heads], on_pass=on_pass)
        if head is not None:
            logp, prior = head_logprobs(head, xs.pop(0)), None
        else:
            logp, more = self.logprobs(texts, on_pass=on_pass)
            prior, stats = self.prior, stats + more
        answers = {q: answer(h, x) for (q, h), x in zip(asked.items(), xs, strict=True)}
        primary = predictions(self.task.labels, logp, prior, head, self.temperature)
        return [
            consistent(replace(p, answers={q: a[i] for q, a in answers.items()}), self.task.parents)
            for i, p in enumerate(primary)
        ], stats


def with_chars(
    x: torch.Tensor, recipe: Recipe, texts: Sequence[str], text: torch.Tensor | None = None
) -> torch.Tensor:
    """The pass's features of a recipe, followed by the texts' character n-grams when it ends in
    ``chars`` (``text``: those already computed, else computed here)."""
    if not recipe.chars:
        return x
    return torch.cat([x, chars.features(texts) if text is None else text], dim=1)


def head_logprobs(head: Head, features: torch.Tensor) -> torch.Tensor:
    """(tickets, head labels) calibrated log-probabilities a head gives its features (its temperature
    applied): what decides its answers, and what results report as scores."""
    return head.log_probs(features)


def answer(head: Head, features: torch.Tensor) -> list[Answer]:
    """A further question's answers, one per ticket, from its head over its features."""
    return [
        Answer(p.label, p.scores, head.name)
        for p in predictions(head.labels, head_logprobs(head, features), None, head)
    ]


def predictions(
    labels: Sequence[str],
    logp: torch.Tensor,
    prior: torch.Tensor | None = None,
    head: Head | None = None,
    temperature: float = 1.0,
) -> list[Prediction]:
    """Turn (tickets, labels) log-probabilities into labels and normalized scores.

    With a calibration ``prior`` the decision and the scores use ``logp - prior``; ``logprobs`` stay raw.
    With a ``head``, ``logp`` is its log-softmax and the predictions name it. The scores are
    ``softmax(decision scores / temperature)`` (:attr:`Engine.temperature`): the one place a zero-shot
    temperature is applied, after the decision, so it never changes a label.
    """
    method, head_name = ("head", head.name) if head else ("zero-shot", None)
    decision = decide(logp, prior)
    probs = torch.softmax(decision.scores / temperature, dim=-1)
    best = decision.best
    rows_p, rows_l = probs.tolist(), logp.tolist()
    return [
        Prediction(
            label=labels[b],
            scores={lab: round(p, 6) for lab, p in zip(labels, ps, strict=False)},
            logprobs={lab: round(v, 6) for lab, v in zip(labels, ls, strict=False)},
            method=method,
            head=head_name,
        )
        for b, ps, ls in zip(best, rows_p, rows_l, strict=False)
    ]

"""Measure accuracy on labelled tickets: confusion matrix, per-class precision and recall, items/s.

Labelled data in (JSONL or CSV with text,label; an id is optional), numbers out, so that tasks, few-shot
examples and models can be compared on the same file. The default file is the bundled Banking77 sample
(400 real banking queries mapped onto billing / technical / account; CC BY 4.0, see worker/data/README.md).

    ticketq-worker eval
    ticketq-worker eval --tickets mine.csv --task my_task.toml --json eval.json

Besides accuracy, the calibration of the results' own probabilities (ECE, risk-coverage). When zero-shot
label scoring decides, it also fits the task's ``zero_shot_temperature`` on these tickets and prints the
line to put in the task TOML, with the ECE before and after (and cross-fitted, so the gain is not
flattered by fitting on the tickets it is measured on); with ``--auto-accuracy`` (or the task's
``auto_accuracy``) the ``review_below`` that reaches that accuracy here at that temperature (zero-shot
has no head to store it in). When a head decides the primary question, zero-shot label scoring runs
beside it on the same tickets, up to ``--zero-shot-sample`` of them (a length-stratified sample beyond;
by default 400 for a few labels, down to 100 for many).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from producer import config
from producer.config import at_least, group, option
from producer.exitcodes import Exit
from producer.learning import closest_labels
from producer.options import QuestionOptions
from worker.bench.data import DataError, Item, length_sample, read_items
from worker.engine.calibration import BINS, T_RANGE, TemperatureCheck, ece, format_report, risk_coverage
from worker.engine.options import NO_HEAD, EngineOptions, is_no_head
from worker.review import AccuracyOptions

DEFAULT_TICKETS = Path(__file__).resolve().parent / "data" / "banking77_eval.csv"
CHUNK = 256  # tickets per engine call: the service's default drain
ZERO_SHOT_SAMPLE = 400  # tickets the side-by-side zero-shot line scores at most (the bundled file: all)
ZERO_SHOT_SAMPLE_MIN = 100  # ... and at least, however many labels (77: ~1 min on two cores)


def zero_shot_sample(n_labels: int) -> int:
    """How many tickets the zero-shot line scores by default: about 1,600 ticket-labels, 400 tickets at most
    and 100 at least. Zero-shot's cost grows with the label count: 77 intents scored 1.8 items/s on a
    2-core AMD EPYC (the whole 3,080-query test split would have taken 28 minutes)."""
    return min(ZERO_SHOT_SAMPLE, max(ZERO_SHOT_SAMPLE_MIN, 4 * ZERO_SHOT_SAMPLE // max(n_labels, 1)))


@dataclass(frozen=True)
class EvalOptions:
    tickets: str = option(
        str(DEFAULT_TICKETS),
        help="JSONL or CSV with text,label (an id column is optional)",
        shown="the Banking77 sample",
    )
    limit: int | None = option(None, help="only the first N tickets", shown="all", check=at_least(1))
    zero_shot_sample: int | None = option(
        None,
        help="when a head decides, the side-by-side zero-shot line scores all the tickets up to this many, "
        "else a length-stratified sample of this many (zero-shot scores every label of every ticket, so "
        "its cost grows with the labels); 0 skips it",
        shown=f"{ZERO_SHOT_SAMPLE} for up to 4 labels, fewer for more, {ZERO_SHOT_SAMPLE_MIN} at least",
        check=at_least(0),
        metavar="N",
    )
    json: str | None = option(None, help="write the results as JSON to this file", metavar="PATH")
    accuracy: AccuracyOptions = group(AccuracyOptions, "review", env=False)
    engine: EngineOptions = group(EngineOptions, "engine", env=False)
    asked: QuestionOptions = group(QuestionOptions, "question", env=False)

    def __post_init__(self) -> None:
        found = config.problems(self)
        if found:
            raise ValueError("; ".join(found))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, EvalOptions)


@dataclass(frozen=True)
class ClassScores:
    precision: float | None  # None: the class was never predicted
    recall: float | None  # None: the class never occurs in the file
    f1: float | None
    support: int


@dataclass(frozen=True)
class Scores:
    labels: list[str]
    confusion: list[list[int]]  # [true][predicted], in ``labels`` order
    per_class: dict[str, ClassScores]

    @property
    def n(self) -> int:
        return sum(map(sum, self.confusion))

    @property
    def correct(self) -> int:
        return sum(self.confusion[i][i] for i in range(len(self.labels)))

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def mean_recall(self) -> float | None:
        """Recall averaged over the labels these tickets show, each label counting once: what accuracy
        would read on a stream with every label equally common (uneven label sets, docs/head.md,
        "Long-tailed label sets"). None: no tickets."""
        recalls = [c.recall for c in self.per_class.values() if c.recall is not None]
        return sum(recalls) / len(recalls) if recalls else None


def score(labels: Sequence[str], truth: Sequence[str], predicted: Sequence[str]) -> Scores:
    index = {lab: i for i, lab in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for t, p in zip(truth, predicted, strict=True):
        matrix[index[t]][index[p]] += 1
    per_class = {}
    for i, lab in enumerate(labels):
        hit, predicted_n, support = matrix[i][i], sum(row[i] for row in matrix), sum(matrix[i])
        precision = hit / predicted_n if predicted_n else None
        recall = hit / support if support else None
        f1 = None
        if precision is not None and recall is not None:
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[lab] = ClassScores(precision, recall, f1, support)
    return Scores(list(labels), matrix, per_class)


def run(ns: argparse.Namespace) -> int:
    from worker.engine.task import TaskError, load_task

    try:
        args = config.resolve(EvalOptions, ns)
        options = args.engine
        items = read_items(args.tickets)[: args.limit] if args.limit else read_items(args.tickets)
        task = load_task(options.task)
        question = args.asked.question
        labels = task.labels_of(question)
        check_labels(items, labels)
    except (ValueError, DataError, TaskError) as exc:
        print(f"ticketq-worker eval: {exc}", file=sys.stderr)
        return Exit.CONFIG
    if question is None:
        engine = load_engine("eval", options)
    else:  # the question's head alone: the same features as asked with the rest
        loaded = load_asking("eval", options, question)
        engine = loaded if isinstance(loaded, int) else loaded[1]
    if isinstance(engine, int):
        return engine
    truth = [it.label or "" for it in items]
    predicted, seconds, confidence, logprobs = _classify(engine, items)
    scores = score(labels, truth, predicted)
    correct = [p == t for p, t in zip(predicted, truth, strict=True)]
    info = engine.describe()
    zero_shot = None
    sample = zero_shot_sample(len(labels)) if args.zero_shot_sample is None else args.zero_shot_sample
    if engine.head is not None and question is None and sample:
        # the same tickets (or a length-stratified sample of them) without the head, side by side
        picked = length_sample([len(it.text) for it in items], sample)
        head = engine.head
        engine.use_head(None)
        zs_predicted, zs_seconds, _, _ = _classify(engine, [items[i] for i in picked])
        engine.use_head(head)
        zero_shot = (score(labels, [truth[i] for i in picked], zs_predicted), zs_seconds)
    print(table(scores, info, args.tickets, seconds, zero_shot))
    method = "head" if engine.head is not None else "zero-shot"
    print("\n".join(["", *format_report(confidence, correct, f"{method} scores")]))
    fitted = None
    if engine.head is None:  # zero-shot decides: fit the task's zero_shot_temperature on these tickets
        wanted = args.accuracy.auto_accuracy
        wanted = task.auto_accuracy if wanted is None else wanted
        fitted = fit_zero_shot(engine, logprobs, [labels.index(t) for t in truth], wanted)
        print("\n".join(["", *fitted.lines()]))
    if args.json:
        out = to_json(scores, info, args.tickets, seconds, zero_shot)
        out["calibration"] = calibration_json(confidence, correct)
        if fitted is not None:
            out["calibration"]["zero_shot_temperature"] = fitted.to_dict()
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


@dataclass(frozen=True)
class ZeroShotFit:
    """The zero-shot temperature fitted on an eval file, and the review threshold at it."""

    check: TemperatureCheck
    auto_accuracy: float | None = None
    review_below: float | None = None  # None with auto_accuracy: unreachable on these tickets
    coverage: float | None = None  # the share of tickets at or above review_below

    def lines(self) -> list[str]:
        c = self.check
        out = [
            f"zero-shot temperature fitted on these tickets: {c.temperature:g} (the task's: {c.current:g}); "
            f"ECE {c.ece_current:.2%} at the task's -> {c.ece_fitted:.2%} at {c.temperature:g} "
            f"({c.ece_cross:.2%} cross-fitted: each of {c.folds} folds scored at a temperature fitted "
            "on the others)",
            "put in the task TOML (scores only: no label changes, heads still fit):",
            f"  zero_shot_temperature = {c.temperature:g}",
        ]
        if c.temperature >= 0.99 * T_RANGE[1]:
            out.insert(
                1, "(the search's upper bound: these scores tell the labels apart hardly better than chance)"
            )
        if self.auto_accuracy is None:
            return out
        if self.review_below is None:
            return [
                *out,
                f"auto_accuracy {self.auto_accuracy:.1%}: no threshold reaches it on these tickets; "
                "zero-shot cannot route any share of them automatically at that accuracy",
            ]
        return [
            *out,
            f"auto_accuracy {self.auto_accuracy:.1%}: review below confidence {self.review_below:g} at "
            f"that temperature keeps {self.coverage:.1%} of these tickets auto-routed; zero-shot has no "
            "head to store it in, so put it in the task TOML instead of auto_accuracy:",
            f"  review_below = {self.review_below:g}",
        ]

    def to_dict(self) -> dict[str, Any]:
        c = self.check
        return {
            "fitted": c.temperature,
            "task": c.current,
            "ece_task": round(c.ece_current, 4),
            "ece_fitted": round(c.ece_fitted, 4),
            "ece_cross_fitted": round(c.ece_cross, 4),
            "folds": c.folds,
            "auto_accuracy": self.auto_accuracy,
            "review_below": self.review_below,
            "expected_coverage": None if self.coverage is None else round(self.coverage, 4),
        }


def fit_zero_shot(
    engine: Any, logprobs: Sequence[Sequence[float]], y: Sequence[int], auto_accuracy: float | None
) -> ZeroShotFit:
    """Fit ``zero_shot_temperature`` on the logits zero-shot decides on (the labels' log-probabilities
    minus the task's content-free prior), and with ``auto_accuracy`` the lowest ``review_below`` whose
    auto-routed tickets reach it at that temperature. The threshold is a ticket's own confidence rounded
    down to 6 places (results' scores carry 6), so a result of that confidence stays auto-routed; the
    coverage is counted at the rounded value."""
    import torch

    from worker.engine.calibration import check_temperature, confidences, threshold_for_accuracy

    logits = torch.tensor([list(row) for row in logprobs], dtype=torch.float64)
    if engine.prior is not None:
        logits = logits - engine.prior.to(torch.float64)
    check = check_temperature(logits, y, current=engine.task.zero_shot_temperature)
    if auto_accuracy is None:
        return ZeroShotFit(check)
    conf = confidences(logits, check.temperature)
    correct = (logits.argmax(1) == torch.tensor(list(y))).tolist()
    threshold, _ = threshold_for_accuracy(conf, correct, auto_accuracy)
    if threshold is None:
        return ZeroShotFit(check, auto_accuracy)
    below = math.floor(threshold * 1e6) / 1e6
    return ZeroShotFit(check, auto_accuracy, below, sum(c >= below for c in conf) / len(conf))


def load_engine(
    command: str, options: EngineOptions, *, questions: bool = True, as_worker: bool = False
) -> Any:
    """The engine for an operator command, or its exit status after one line on stderr: 2 for a head that
    does not fit the model or task (a configuration error), 1 for a model that cannot be loaded.
    ``as_worker``: ``--dtype auto`` as the task's workers decide it (:meth:`Engine.load`)."""
    from worker.engine import Engine
    from worker.engine.head import HeadError
    from worker.engine.model import ModelError

    try:
        return Engine.load(options, log=head_log(command), questions=questions, as_worker=as_worker)
    except (HeadError, ModelError) as exc:
        print(f"ticketq-worker {command}: {exc}", file=sys.stderr)
        return Exit.CONFIG if isinstance(exc, HeadError) else Exit.FAILED


def load_asking(command: str, options: EngineOptions, question: str) -> Any:
    """(engine, the engine asking ``question`` alone) for an operator command, or its exit status.

    ``--head FILE`` is then that question's head, not the primary's: the task's other heads are neither
    loaded nor trained (the pass and the prompt are the same). Without it, the question's own (``head`` or
    ``head_data`` in its table); a question with no head is a configuration error (exit 2)."""
    from worker.engine.head import Head, HeadError

    own = None if options.head is None or is_no_head(options.head) else options.head
    engine = load_engine(
        command,
        replace(options, head=NO_HEAD) if own else options,
        questions=own is None,
        as_worker=own is not None,  # the question's own head file, in the dtype the workers run
    )
    if isinstance(engine, int):
        return engine
    try:
        asked = engine.asking(question)
        if own:
            asked.use_head(Head.load(own))
    except HeadError as exc:
        print(f"ticketq-worker {command}: {exc}", file=sys.stderr)
        return Exit.CONFIG
    if asked.head is None:
        print(f"ticketq-worker {command}: question {question!r} has no head", file=sys.stderr)
        return Exit.CONFIG
    return engine, asked


def head_log(command: str) -> Any:
    """Tell the operator, on stderr, when the task's head is being trained (first use) or read from cache."""

    def log(event: str, **fields: Any) -> None:
        if event == "head_training":
            print(
                f"ticketq-worker {command}: training the task's head from {fields['data']} "
                f"({fields['tickets']} tickets; first use with this model, then cached)",
                file=sys.stderr,
            )

    return log


_NAMED_IDS = 10  # ids a label error names at most


def check_labels(items: Sequence[Item], labels: Sequence[str]) -> None:
    """Every ticket labelled, with one of the task's labels: otherwise accuracy would mean nothing."""
    unlabelled = [it.id for it in items if not it.label]
    if unlabelled:
        raise DataError(
            f"{len(unlabelled)} of {len(items)} tickets have no label (first: {unlabelled[0]!r}); labelled"
            " tickets need a label field (a CSV: a label column)"
        )
    unknown = Counter(it.label for it in items if it.label not in labels)
    if unknown:
        found = ", ".join(f"{lab!r} ({n})" for lab, n in unknown.most_common())
        # name the tickets (with --from-redis, the corrections' ids): the one to relabel may be anywhere
        bad = [it.id for it in items if it.label not in labels]
        named = ", ".join(repr(i) for i in bad[:_NAMED_IDS]) + (
            f" and {len(bad) - _NAMED_IDS} more" if len(bad) > _NAMED_IDS else ""
        )
        near = [
            f"{lab!r} for {close[0]!r}" for lab in unknown if (close := closest_labels(lab or "", labels))
        ]
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        known = ", ".join(labels)
        raise DataError(
            f"labels not in the task: {found}, on ids {named}; the task's labels are {known}{hint}"
        )


def calibration_json(confidence: Sequence[float], correct: Sequence[bool]) -> dict[str, Any]:
    """ECE and risk-coverage of the results' own probabilities (the chosen label's score)."""
    rc = risk_coverage(confidence, correct)
    return {
        "ece": round(ece(confidence, correct), 4),
        "bins": BINS,
        "accuracy_at": {f"{f:g}": a for f, a in rc.accuracy_at.items()},
        "coverage_for": {
            f"{c.target:g}": {"coverage": c.coverage, "threshold": c.threshold} for c in rc.coverage_for
        },
    }


def _classify(engine: Any, items: Sequence[Item]) -> tuple[list[str], float, list[float], list[list[float]]]:
    """Labels, seconds, each label's probability, and each ticket's log-probabilities (the engine's
    labels' order): what accuracy, the rate, calibration and a temperature fit need."""
    from tqdm import tqdm

    engine.classify([items[0].text])  # warm-up: the first call builds kernels; not part of the rate
    predicted: list[str] = []
    confidence: list[float] = []
    logprobs: list[list[float]] = []
    with tqdm(total=len(items), unit="ticket", disable=not sys.stderr.isatty(), leave=False) as bar:
        start = time.perf_counter()
        for lo in range(0, len(items), CHUNK):
            preds, _ = engine.classify([it.text for it in items[lo : lo + CHUNK]])
            predicted += [p.label for p in preds]
            confidence += [min(1.0, p.scores[p.label]) for p in preds]
            logprobs += [[p.logprobs[lab] for lab in engine.labels] for p in preds]
            bar.update(len(preds))
        seconds = time.perf_counter() - start
    return predicted, seconds, confidence, logprobs


def table(
    scores: Scores,
    info: dict[str, Any],
    source: str,
    seconds: float,
    zero_shot: tuple[Scores, float] | None = None,
) -> str:
    width = max(12, *(len(lab) + 2 for lab in scores.labels))
    n = scores.n
    head = info.get("head")
    method = f"head {head['id']}" if head else "zero-shot"
    lines = [
        f"model: {info['model']} ({info['dtype']}, {info['threads']} threads); task: {info['task']}",
        f"tickets: {source} ({n})",
        f"accuracy: {scores.accuracy:.1%} ({scores.correct}/{n}), mean recall per label "
        f"{_pct(scores.mean_recall)}, at {n / seconds:.1f} items/s ({seconds:.1f} s); labels by {method}",
    ]
    if zero_shot is not None:
        zs, zs_s = zero_shot
        lines += [
            "",
            f"{'method':<20}{'accuracy':>20}{'items/s':>10}",
            f"{'zero-shot':<20}{f'{zs.accuracy:.1%} ({zs.correct}/{zs.n})':>20}{zs.n / zs_s:>10.1f}",
            f"{method:<20}{f'{scores.accuracy:.1%} ({scores.correct}/{n})':>20}{n / seconds:>10.1f}"
            f"   ({(n / seconds) / (zs.n / zs_s):.1f}x the zero-shot speed, same run)",
        ]
        if zs.n < n:
            lines.append(
                f"zero-shot on a length-stratified sample of {zs.n} of the {n} tickets (--zero-shot-sample)"
            )
    lines += ["", *confusion_lines(scores.labels, scores.confusion)]
    lines += ["", f"{'class':<{width}}{'precision':>10}{'recall':>10}{'f1':>10}{'support':>10}"]
    for lab, c in scores.per_class.items():
        lines.append(
            f"{lab:<{width}}{_pct(c.precision):>10}{_pct(c.recall):>10}{_pct(c.f1):>10}{c.support:>10}"
        )
    return "\n".join(lines)


WIDEST = 20  # labels beyond which the matrix is not printed: 77 columns of counts fit no terminal


def confusion_lines(
    labels: Sequence[str], matrix: Sequence[Sequence[int]], *, note: str = "", stored: str = "--json"
) -> list[str]:
    """The matrix (:func:`confusion_table`) up to :data:`WIDEST` labels, else one line saying where it is
    (``stored``); then the most confused pairs (:func:`confused_pairs`), which stay readable at any size."""
    if len(labels) <= WIDEST:
        lines = confusion_table(labels, matrix, note)
    else:
        lines = [f"confusion matrix{note}: {len(labels)} labels, too wide to print (in {stored})"]
    if pairs := confused_pairs(labels, matrix):
        lines += ["", f"most confused{note} (true -> predicted: tickets)"]
        lines += [f"  {t} -> {p}: {n}" for t, p, n in pairs]
    return lines


def confusion_table(labels: Sequence[str], matrix: Sequence[Sequence[int]], note: str = "") -> list[str]:
    """Rows: true label; columns: predicted. Columns are headed by the label when every label is short,
    else by its row number, so a matrix of long intent names stays as narrow as its counts."""
    cell = max(5, len(str(max((max(r) for r in matrix), default=0))) + 2)
    short = all(len(lab) <= 10 for lab in labels)
    if short:
        cell = max(cell, *(len(lab) + 2 for lab in labels))
    names = list(labels) if short else [str(i + 1) for i in range(len(labels))]
    rows = list(labels) if short else [f"{i + 1:>2} {lab}" for i, lab in enumerate(labels)]
    left = max(len(r) for r in rows) + 2
    columns = "predicted" if short else "predicted, numbered as the rows"
    out = [f"confusion matrix{note} (rows: true label, columns: {columns})"]
    out.append(" " * left + "".join(f"{name:>{cell}}" for name in names))
    for r, row in zip(rows, matrix, strict=True):
        out.append(f"{r:<{left}}" + "".join(f"{v:>{cell}}" for v in row))
    return out


def confused_pairs(
    labels: Sequence[str], matrix: Sequence[Sequence[int]], top: int = 10
) -> list[tuple[str, str, int]]:
    """The ``top`` off-diagonal cells, largest first (ties by label order): where a label set with
    dozens of near-synonymous intents still goes wrong, readable where the matrix is not."""
    cells = [(-n, i, j) for i, row in enumerate(matrix) for j, n in enumerate(row) if i != j and n > 0]
    return [(labels[i], labels[j], -n) for n, i, j in sorted(cells)[:top]]


def to_json(
    scores: Scores,
    info: dict[str, Any],
    source: str,
    seconds: float,
    zero_shot: tuple[Scores, float] | None = None,
) -> dict[str, Any]:
    out = {
        "model": info["model"],
        "dtype": info["dtype"],
        "threads": info["threads"],
        "task": info["task"],
        "tickets": source,
        "n": scores.n,
        "accuracy": round(scores.accuracy, 4),
        "mean_recall": None if scores.mean_recall is None else round(scores.mean_recall, 4),
        "correct": scores.correct,
        "seconds": round(seconds, 3),
        "items_per_s": round(scores.n / seconds, 2) if seconds > 0 else None,
        "labels": scores.labels,
        "confusion": scores.confusion,
        "confused_pairs": [
            {"true": t, "predicted": p, "n": n} for t, p, n in confused_pairs(scores.labels, scores.confusion)
        ],
        "per_class": {
            lab: {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(c).items()}
            for lab, c in scores.per_class.items()
        },
        "method": info.get("method", "zero-shot"),
        "head": info.get("head"),
    }
    if zero_shot is not None:
        zs, zs_s = zero_shot
        out["zero_shot"] = {
            "accuracy": round(zs.accuracy, 4),
            "correct": zs.correct,
            "n": zs.n,
            "seconds": round(zs_s, 3),
            "items_per_s": round(zs.n / zs_s, 2) if zs_s > 0 else None,
            "confusion": zs.confusion,
        }
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"

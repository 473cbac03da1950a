"""Train a head from labelled tickets: accurate labels for any task, from a few hundred examples.

    ticketq-worker train --tickets labelled.csv --out support.head
    ticketq-worker train --task my_task.toml --tickets labelled.jsonl --out my_task.head

The tickets (JSONL or CSV with text,label, an id optional, as ``eval`` reads) run through the engine's own
forward pass; a logistic regression over its hidden states is fitted with the L2 penalty chosen by stratified
k-fold cross-validation. Prints the cross-validated accuracy and confusion matrix, writes one safetensors
file. Use it with ``--head PATH``, ``TICKETQ_HEAD=PATH`` or ``head = "file"`` in the task TOML.

    ticketq-worker train --task banking.toml --question intent --tickets intents.csv --out intent.head

``--question NAME`` trains the head of one of the task's further questions (``[questions.NAME]``) on
the task's own prompt, with that question's labels; name the file in the question's table (``head``).

    ticketq-worker train --tickets labelled.csv --recipe 8:mean,12:mean,8:max,12:max,chars --out rich.head

``--recipe`` says which hidden states the head reads (:mod:`worker.engine.recipe`); without it, the
task's ``recipe`` (the question's, with ``--question``), else the default. The file records it.

    ticketq-worker train --task banking.toml --question intent --tickets intents.csv \
        --label-names --unlabeled stream.csv --out intent.head

With few labelled tickets per label, ``--label-names`` also learns each label's name as an example of it
and ``--unlabeled FILE`` self-trains on tickets nobody labelled (:mod:`worker.engine.beyond`; the task's
or question's ``label_names`` / ``unlabeled_data`` keys are the defaults). The whole procedure is then
cross-validated too, at the penalty the labelled tickets chose: the extras are kept only if they do not
lower the out-of-fold accuracy, and the report prints both. With ``--from-redis`` or ``--publish`` the
label names and the unlabelled tickets are learnt as without them, and the publish gate refits each head
per fold as it was trained: with the names where it learnt them, self-training on the same unlabelled
tickets where it self-trained.

Labels with uneven numbers of tickets (the most frequent one with twice the rarest's, or more) are
balanced unasked: every label's tickets weigh as much in all as the mean label's, in the fit and in every
fold that judges it (``--balance``; the task's or question's ``balance`` key, ``false`` to refuse;
:func:`worker.engine.fit.balanced`). Accuracy is still counted on tickets.

    ticketq-worker train --from-redis [--tickets base.csv] --publish [--out fixed.head]

``--from-redis`` trains on the corrections recorded with ``ticketq-producer label`` added to the task's
base data (``--tickets`` when given, else the task's ``head_data``; a correction replaces the row with its
id; ``--corrections-only``: the corrections alone), at the L2 penalty of the head in use (``--l2 cv``:
chosen again by cross-validation), each correction counting as one base row (``--correction-weight``):
what measured best (docs/head.md, Corrections). ``--publish`` first compares the new head with the one
the workers use, out of fold on the same tickets (:mod:`worker.gate`), and publishes it only if it is not
worse (``--force``: anyway); every running worker loads it at its next drain, without a restart (see
:mod:`worker.corrections`). Offered no unlabelled file, ``--from-redis`` self-trains on the tickets the
workers classified (their texts as kept in Redis, up to ``--stream-tickets``) where that pays: few
labelled tickets per label, or a head in use that self-trained.

Exit codes: :mod:`producer.exitcodes` (a head that does not fit the model is a bad input, ``CONFIG``;
the publish gate refusing a head, ``HEAD_WORSE``: written to ``--out`` if given, not published).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis

from producer import config
from producer.config import group, option
from producer.exitcodes import Exit, for_redis_error
from producer.options import QuestionOptions
from worker.bench.data import DataError, Item, read_items
from worker.engine.options import NO_HEAD, EngineOptions
from worker.engine.recipe import FINE, Preset, Recipe, parse_spec
from worker.engine.task import SELF_TRAIN_UP_TO, few_per_label
from worker.evaluate import confusion_lines
from worker.review import AccuracyOptions


@dataclass(frozen=True)
class TrainOptions:
    tickets: str | None = option(
        None, help="labelled tickets: JSONL or CSV with text,label (an id column is optional)"
    )
    out: str | None = option(None, help="where to write the head (a .safetensors file)")
    seed: int = option(0, help="seed of the cross-validation folds")
    recipe: Recipe | Preset | None = option(
        None,
        help="the hidden states the head reads: a preset (fast, default, or accurate: about a point "
        "more on fine-grained intents at about 0.22x the items/s) or LAYER:POOL parts, comma-separated, "
        "concatenated in that order (POOL mean, max, last, echo: the mean over a second reading of the "
        "ticket, which the pass then reads twice, or rare: the mean weighted toward the ticket's rarer "
        "tokens; a bare LAYER is mean-pooled), and last, if wanted, chars: the ticket's "
        "character n-grams, e.g. 8:mean,12:mean,8:max,12:max,chars",
        shown="the task's recipe, else a third of the way up, mean-pooled (10 of SmolLM2's 30); from 10 "
        "labels on, the mean, rare mean and max of layers 8 and 12, and chars",
        metavar="SPEC",
        parse=parse_spec,
    )
    label_names: bool = option(
        False,
        help="also learn each label's name as one example of it (card_arrival reads 'card arrival'): "
        "for names that say what they mean; kept only if no worse out of fold (docs/head.md, Beyond the "
        "labelled tickets)",
        shown="the task's or question's label_names key, else on for 10 labels or more with at most 20 "
        "tickets for the median label",
    )
    unlabeled: str | None = option(
        None,
        help="tickets without labels (JSONL or CSV with text, an id optional; labels ignored) to self-train "
        "on: the head labels them, keeps the more confident half at 0.3 of a labelled ticket's weight and "
        "fits again, then keeps more (70%, 90%, all) as it improves (docs/head.md, Beyond the labelled "
        "tickets)",
        metavar="FILE",
    )
    balance: bool = option(
        False,
        help="weigh every label's tickets as much in all as the mean label's, so that rare labels are "
        "chosen (docs/head.md, Long-tailed label sets); the task's or question's `balance = false` refuses",
        shown="the task's or question's balance key, else on when the most frequent label has twice the "
        "tickets of the rarest or more",
    )
    mlp: bool = option(
        False,
        help="also read the features through an MLP and blend it with the linear head, kept only if it "
        "adds on a held-out fifth (docs/head.md, A nonlinear second reading: half a point to 0.65 on "
        "Banking77's 77 intents from 130 tickets each; minutes on a small CPU); the task's or question's "
        "`mlp = false` refuses",
        shown="the task's or question's mlp key, else on for 10 labels or more with over 50 tickets for the "
        "median label; never with --publish (a head with an MLP is used from its file)",
    )
    accuracy: AccuracyOptions = group(AccuracyOptions, "review", env=False)
    engine: EngineOptions = group(EngineOptions, "engine", env=False)
    asked: QuestionOptions = group(QuestionOptions, "question", env=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worker import corrections

    config.add_arguments(parser, TrainOptions)
    corrections.add_arguments(parser)


def fail(message: str, code: Exit = Exit.CONFIG) -> int:
    print(f"ticketq-worker train: {message}", file=sys.stderr)
    return code


def run(ns: argparse.Namespace) -> int:
    from worker import corrections
    from worker.engine.task import load_task, wants_balance, wants_mlp, wants_names
    from worker.evaluate import check_labels

    source = ns.tickets or ""
    corrected: dict[int, str | None] = {}
    ids: list[str] = []
    base_sha256: str | None = None
    published: tuple[str, bytes] | None = None
    good: tuple[str, bytes] | None = None  # the last good published head, served while P:head is refused
    try:
        args = config.resolve(TrainOptions, ns)
        options = replace(args.engine, head=NO_HEAD)  # train with features, not a head
        store = corrections.options(ns)
        if not (args.tickets or store.from_redis):
            raise DataError("nothing to train on: give --tickets FILE, --from-redis, or both")
        if not (args.out or store.publish):
            raise DataError("nowhere to put the head: give --out PATH, --publish, or both")
        if store.corrections_only and not store.from_redis:
            raise DataError("--corrections-only needs --from-redis")
        if store.correction_weight != 1 and not store.from_redis:
            raise DataError("--correction-weight needs --from-redis")
        # a head with an MLP is used from its file, never published (producer.learning.publish_problem)
        if args.mlp and store.publish:
            raise DataError(
                "--mlp with --publish: a head with an MLP is not published through Redis (too large "
                "to copy there without holding it); give --out and name the file in the task"
            )
        task = load_task(options.task)
        question = args.asked.question
        question_labels = task.labels_of(question)  # TaskError (a ValueError) for an unknown one
        asked = task.get_question(question)
        head_data = task.head_data if asked is None else asked.head_data
        # the flags, else the asked question's keys (label_names, unlabeled_data), with --from-redis too:
        # a head published from corrections self-trains as the head it replaces did
        declared = task if asked is None else asked
        unlabeled = args.unlabeled or declared.unlabeled_data
        free = [it.text for it in read_items(unlabeled)] if unlabeled else []
        base = args.tickets
        if store.from_redis:
            base = corrections.base_source(args.tickets, head_data, store.corrections_only)
        items = read_items(base) if base else []
        if base:
            base_sha256 = hashlib.sha256(Path(base).read_bytes()).hexdigest()
        if store.from_redis or store.publish:
            redis_client = corrections.client(store)
        if store.from_redis:
            rows = [(it.id, it.text, it.label or "") for it in items]
            unnamed = {it.id for it in items if not it.named}  # "line 7": no ticket's id, never replaced
            found = corrections.training_set(
                corrections.read_corrections(redis_client, question), rows, unnamed
            )
            items = [Item(i, t, lab) for i, t, lab in zip(found.ids, found.texts, found.labels, strict=True)]
            corrected = found.corrected
            source = f"{found.from_redis} corrections from Redis" + (
                f" + {found.from_file} rows of {base}" if base else " alone (no base data)"
            )
        if store.from_redis or store.publish:
            published = redis_client.current_head(question)
            good = redis_client.last_good_head(question)
        ids = [it.id for it in items]
        try:  # every ticket labelled, with one of the task's labels
            check_labels(items, question_labels)
        except DataError as exc:  # named by where the rows came from: a file, corrections, both
            raise DataError(f"{source or base}: {exc}") from None
        # the flag, else the asked question's own key ([questions.NAME] auto_accuracy, or the task's)
        auto_accuracy = args.accuracy.auto_accuracy
        if auto_accuracy is None:
            auto_accuracy = task.auto_accuracy if asked is None else asked.auto_accuracy
        labels = [it.label or "" for it in items]
        label_names = args.label_names or wants_names(declared.label_names, labels, len(question_labels))
        # what the head learns from: every row, or with --corrections-only the corrections (the base rows
        # are then the gate's evidence only)
        learn = [row in corrected or not store.corrections_only for row in range(len(items))]
        picked = [row for row, use in enumerate(learn) if use]
        learnt = [labels[row] for row in picked]
        balance = args.balance or wants_balance(declared.balance, learnt)
        mlp = args.mlp or (not store.publish and wants_mlp(declared.mlp, learnt, len(question_labels)))
        if len(set(labels)) < 2:
            raise DataError(
                f"all {len(labels)} tickets are labelled {labels[0]!r}; a head needs two labels or more"
            )
    except ValueError as exc:  # bad options, task file, tickets file or labels
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot read the base data: {exc.strerror or exc}")
    except redis.RedisError as exc:
        return fail(f"Redis: {type(exc).__name__}: {exc}", for_redis_error(exc))
    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        return fail(f"--out {out} is a directory; name the head file")

    from worker.engine.training import extras_features, recipe_for, train_head
    from worker.evaluate import load_engine

    # features in the dtype the workers will run: auto judged as they judge it (by their heads' features)
    engine = load_engine("train", options, questions=False, as_worker=True)
    if isinstance(engine, int):
        return engine
    engine = engine.asking(question)  # the question's labels and recipe; the task's prompt and pass
    in_use = _head_in_use(engine, published, good) if store.from_redis or store.publish else None
    texts = [it.text for it in items]
    streamed = 0
    if store.from_redis and not unlabeled and _wants_stream(store, learnt, in_use):
        try:
            free = corrections.stream_texts(redis_client, store.stream_tickets, ids, texts)
        except redis.RedisError as exc:
            return fail(f"Redis: {type(exc).__name__}: {exc}", for_redis_error(exc))
        streamed = len(free)
        source += (
            f"; self-training on {streamed} tickets the workers classified (kept in Redis)"
            if streamed
            else "; no texts of classified tickets kept in Redis to self-train on (--keep-text-s)"
        )
    # --l2 in-use: the new head keeps the penalty of the head in use, so that it differs from it by what
    # the corrections teach, not by a penalty chosen again on a few more rows (docs/head.md, Corrections);
    # not when that head learnt from other base data: its penalty was chosen for other rows
    own_l2 = in_use[0].training.get("l2") if isinstance(in_use, tuple) else None
    l2 = float(own_l2) if store.from_redis and store.l2 == "in-use" and own_l2 else None
    if l2 is not None and not store.corrections_only and _other_base(in_use, base, base_sha256, head_data):
        l2 = None
        source += "; L2 chosen again by cross-validation: the head in use learnt from other base data"
    try:
        recipe = recipe_for(engine, args.recipe)
    except ValueError as exc:  # a layer the model lacks
        return fail(str(exc))
    # each correction counts as --correction-weight base rows (None: all 1, today's fit exactly)
    weight = store.correction_weight if corrected else 1.0
    weights = None if weight == 1 else [weight if row in corrected else 1.0 for row in range(len(items))]
    start = time.perf_counter()
    with Progress() as progress:
        x, _ = engine.features(texts, recipe, progress=_counter(progress, len(texts)))
        names, free_x = extras_features(
            engine, recipe, label_names, free, _counter(progress, len(free), "unlabeled")
        )
        try:
            head = train_head(
                engine,
                [texts[row] for row in picked],
                [labels[row] for row in picked],
                seed=args.seed,
                progress=progress,
                corrected={picked.index(row): was for row, was in corrected.items()},
                recipe=recipe,
                features=x[picked],
                auto_accuracy=auto_accuracy,
                row_weight=None if weights is None else [weights[row] for row in picked],
                l2=l2,
                names=names,
                unlabeled=free_x,
                balance=balance,
                mlp=mlp,
            )
        except ValueError as exc:  # e.g. --corrections-only with a single label among the corrections
            return fail(str(exc))
    seconds = time.perf_counter() - start
    head.training["data"] = {  # what it learnt from: the publish gate refits the head in use from this
        "base": Path(base).name if base and not store.corrections_only else None,
        "base_sha256": None if store.corrections_only else base_sha256,
        "base_rows": len(picked) - len(corrected),
        "corrections": sorted(ids[row] for row in corrected),
        "correction_weight": weight,
        "l2_from": "cv" if l2 is None else "in-use",
        "unlabeled": Path(unlabeled).name if unlabeled else (STREAM if streamed else None),
    }
    print(report(head, engine.describe(), source, seconds))
    comparison = None
    if store.from_redis or store.publish:
        comparison = _gate(
            engine,
            in_use,
            texts,
            x,
            recipe,
            labels,
            ids,
            corrected,
            base,
            base_sha256,
            head,
            args,
            learn,
            weights,
            store.force,
            names,
            free_x,
        )
        if comparison is not None:
            head.training["gate"] = comparison.to_dict()
            print("\n".join(["", *comparison.lines()]))
    if out is not None:
        try:
            head.save(out)
        except OSError as exc:
            return fail(f"cannot write {out}: {exc.strerror or exc}", Exit.FAILED)
        print(f"wrote {out} (head {head.id}); {_how_to_use(out, question)}")
    if store.publish:
        if comparison is not None and comparison.refused and not store.force:
            return fail(
                "not published: the new head is worse than the head in use (see the comparison above); "
                "--force publishes it anyway",
                Exit.HEAD_WORSE,
            )
        try:
            gate = comparison.summary() if comparison is not None else None
            judged = published[0] if published is not None else ""  # what the gate compared with
            version = redis_client.publish_head(
                head.to_bytes(), by=store.by, gate=gate, question=question, replacing=judged
            )
        except redis.RedisError as exc:
            return fail(f"cannot publish the head: {type(exc).__name__}: {exc}", for_redis_error(exc))
        except ValueError as exc:
            return fail(f"cannot publish the head: {exc}", Exit.FAILED)
        print(f"published head {head.id} as version {version}: running workers load it at their next drain")
    return 0


STREAM = "stream"  # training["data"]["unlabeled"] of a head that self-trained on the workers' kept texts


def _wants_stream(store: Any, labels: list[str], in_use: tuple[Any, str, bool] | str | None) -> bool:
    """Whether ``train --from-redis``, offered no unlabelled file, self-trains on the tickets the workers
    classified: where self-training pays (the median label has at most :data:`SELF_TRAIN_UP_TO` labelled
    tickets, :func:`few_per_label`) or where the head in use self-trained (a head published from
    corrections keeps what it learnt that way, and the publish gate compares like with like); never with
    ``--stream-tickets 0``."""
    from worker.gate import self_trained

    if not store.stream_tickets:
        return False
    return few_per_label(Counter(labels).values(), SELF_TRAIN_UP_TO) or (
        isinstance(in_use, tuple) and self_trained(in_use[0].training)
    )


def _other_base(
    in_use: tuple[Any, str, bool] | str | None,
    base: str | None,
    base_sha256: str | None,
    head_data: str | None,
) -> bool:
    """Whether the head in use is known to have learnt from other base rows than ``base``: the task's
    head when ``base`` is not its ``head_data``, or a head whose training record names another file's
    digest (a head without that record: not known, False)."""
    if not isinstance(in_use, tuple):
        return False
    current, _, from_head_data = in_use
    if from_head_data:
        return not _is_head_data(base, head_data)
    data = current.training.get("data")
    used = data.get("base_sha256") if isinstance(data, dict) else None
    return used is not None and used != base_sha256


def _is_head_data(base: str | None, head_data: str | None) -> bool:
    """Whether the base rows are the task's (or question's) ``head_data`` file, the task's head's rows."""
    return base is not None and head_data is not None and Path(base).resolve() == Path(head_data).resolve()


def _head_in_use(
    engine: Any, published: tuple[str, bytes] | None, good: tuple[str, bytes] | None = None
) -> tuple[Any, str, bool] | str | None:
    """(head, name, from_head_data) of the head the workers use (:func:`worker.gate.head_in_use`), None
    when they run zero-shot, or why it cannot be read."""
    from worker import gate

    try:
        return gate.head_in_use(engine, published, good)
    except ValueError as exc:  # the task's head file unreadable, or its head_data unusable
        return str(exc)


def _gate(
    engine: Any,
    found: tuple[Any, str, bool] | str | None,
    texts: list[str],
    x: Any,
    recipe: Any,
    labels: list[str],
    ids: list[str],
    corrected: dict[int, str | None],
    base: str | None,
    base_sha256: str | None,
    head: Any,
    args: TrainOptions,
    learn: list[bool],
    weights: list[float] | None,
    force: bool,
    names: Any,
    unlabeled: Any,
) -> Any:
    """The candidate against the head in use (:mod:`worker.gate`); None when there is none to compare
    with (workers run zero-shot). One that cannot be compared (the head in use unreadable, no label with
    two tickets) is refused: unjudged is how issue 24's 49% head got out. ``names``: the label names'
    features when the candidate was offered them, ``unlabeled``: the unlabelled tickets' (each side's
    refits learn from them if its head did)."""
    from worker import gate
    from worker.engine.training import extras_features

    def unjudged(name: str, why: str) -> Any:
        side = gate.Side(0.0, None, {})
        reasons = [f"cannot compare it with the head in use: {why}"]
        return gate.Comparison(len(labels), len(corrected), side, side, name, "none", reasons, force)

    if isinstance(found, str):
        return unjudged("the task's head", found)
    if found is None:
        print("\npublish gate: no head in use (zero-shot): nothing to compare with")
        return None
    current, name, from_head_data = found
    # the task's own head was trained on exactly the evidence's base rows when the base is its head_data
    own = from_head_data and _is_head_data(base, engine.task.head_data)
    rows = gate.rows_trained_on(current.training, ids, corrected, base_sha256, own=own)
    in_use = gate.InUse(current, name, rows, gate.correction_weights(current.training, ids, corrected))
    if names is None and gate.learnt_names(current.training):
        names, _ = extras_features(engine, recipe, True, None)
    try:
        with Progress() as progress:
            comparison = gate.compare_with(
                in_use,
                engine,
                texts,
                x,
                recipe,
                labels,
                corrected,
                candidate_rows=learn,
                candidate_weights=weights,
                l2=head.training["l2"],
                seed=args.seed,
                candidate=head.training,
                names=names,
                unlabeled=unlabeled,
                candidate_out_of_fold=head.out_of_fold,
                progress=lambda done, total: progress("gate", done, total),
            )
    except ValueError as exc:
        return unjudged(name, str(exc))
    lost = gate.lost_unseen(current, head, comparison.method)
    if lost:
        comparison = replace(comparison, reasons=[*comparison.reasons, *lost])
    if comparison.refused and force:
        comparison = replace(comparison, forced=True)
    return comparison


def _counter(progress: Progress, total: int, stage: str = "features") -> Any:
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        progress(stage, done, total)

    return step


class Progress:
    """tqdm bars for the stages (features, unlabeled, fit, extras, mlp, gate), on a terminal only."""

    def __enter__(self) -> Progress:
        self.bars: dict[str, Any] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if stage not in self.bars:
            for bar in self.bars.values():
                bar.close()
            units = {
                "features": "ticket",
                "unlabeled": "ticket",
                "extras": "fold",
                "gate": "fold",
                "mlp": "epoch",
            }
            unit = units.get(stage, "fit")
            self.bars[stage] = tqdm(total=total, desc=stage, unit=unit, disable=not sys.stderr.isatty())
        bar = self.bars[stage]
        bar.update(done - bar.n)

    def __exit__(self, *exc: object) -> None:
        for bar in self.bars.values():
            bar.close()


def calibration_lines(head: Any) -> list[str]:
    """The out-of-fold calibration the head recorded: temperature, ECE, risk-coverage, auto_accuracy."""
    t = head.training
    if "cv_ece" not in t:
        return []
    kept = ", ".join(
        f"{float(f):.0%} {'-' if a is None else f'{a:.1%}'}" for f, a in t["cv_accuracy_at"].items()
    )
    reach = ", ".join(
        f"{float(target):.0%} at "
        + (
            "unreachable"
            if c is None
            else f"coverage {c['coverage']:.1%} (confidence >= {c['threshold']:.3f})"
        )
        for target, c in t["cv_coverage_for"].items()
    )
    lines = [
        "",
        f"calibration (out of fold): temperature {head.temperature:g}; ECE {t['cv_ece']:.2%} "
        f"(15 bins; {t['cv_ece_uncalibrated']:.2%} before the temperature)",
        f"accuracy of the most confident: {kept}",
        f"coverage for accuracy: {reach}",
    ]
    if "auto_accuracy" in t:
        coverage = t.get("expected_coverage")
        lines.append(
            f"auto_accuracy {t['auto_accuracy']:.1%}: review below confidence {head.review_below:.3f}; "
            + (
                "unreachable out of fold: every ticket goes to review"
                if coverage is None
                else f"expected coverage {coverage:.1%} auto-routed"
            )
        )
    return lines


def hints(head: Any, layers: Any) -> list[str]:
    """What measured better on fine-grained label sets, when the head does not use it yet."""
    t = head.training
    if len(head.labels) < FINE:
        return []
    out = []
    if isinstance(layers, int) and layers >= 12 and head.recipe == Recipe.default(layers):
        rich = Recipe.default(layers, len(head.labels))
        out.append(
            f"hint: with {len(head.labels)} labels, --recipe {rich} (the default from {FINE} labels on) "
            "measured 2 to 4 points better on fine-grained intents, at 0.87x the items/s (docs/head.md)"
        )
    beyond = t.get("beyond", {})
    counts = t["counts"].values()
    if "unlabeled" not in beyond and few_per_label(counts, SELF_TRAIN_UP_TO):
        free = "--unlabeled FILE (tickets nobody labelled, to self-train on)"
        if not few_per_label(counts):  # more than FEW per label: names no longer pay, self-training less
            what, gain = free, "about a point"
        elif "label_names" in beyond:  # names were tried (asked, or unasked: task.wants_names)
            what, gain = free, "3 to 4 points"
        else:
            what, gain = "--label-names and --unlabeled FILE (tickets nobody labelled)", "4 to 6 points"
        out.append(
            f"hint: with few tickets per label, {what} measured {gain} better on 77 intents; train "
            "checks them out of fold (docs/head.md); with no file, --from-redis self-trains on the texts "
            "your workers kept (--keep-text-s, --stream-tickets)"
        )
    return ["", *out] if out else []


def beyond_lines(b: dict[str, Any]) -> list[str]:
    """What the label names and unlabelled tickets did: both out-of-fold accuracies, kept or not."""
    added = [f"{b['label_names']} label names"] if "label_names" in b else []
    if "pseudo_labelled" in b:
        last = f", last at L2 {b['l2_last_round']:.2g}" if "l2_last_round" in b else ""  # older heads: none
        weight = f"{b['pseudo_weight']:g}" + (" x confidence" if b.get("by_confidence") else "")
        added.append(
            f"{b['pseudo_labelled']} of {b['unlabeled']} unlabelled tickets, labelled by the head "
            f"({b['rounds']} rounds, weight {weight}{last})"
        )
    elif "unlabeled" in b:
        added.append(f"{b['unlabeled']} unlabelled tickets")
    if "used" not in b:  # too few tickets to cross-validate: learnt from, unchecked
        return [f"also learnt from: {'; '.join(added)} (not checked: too few tickets to cross-validate)"]
    with_, without = b["cv_accuracy_with"], b["cv_accuracy_without"]
    if b["used"]:
        return [
            f"also learnt from: {'; '.join(added)}",
            f"out of fold: {with_:.1%} with them, {without:.1%} from the labelled tickets alone (the "
            "numbers above and the calibration are with them)",
        ]
    return [
        f"not used: {'; '.join(added)}: out of fold {with_:.1%} with them, {without:.1%} without; the head "
        "learnt from the labelled tickets alone",
    ]


def report(head: Any, info: dict[str, Any], source: str, seconds: float) -> str:
    t = head.training
    counts = ", ".join(f"{lab} {n}" for lab, n in t["counts"].items())
    lines = [
        f"model: {info['model']} ({info['dtype']}); task: {info['task']}; features: "
        f"recipe {head.recipe} (LAYER:POOL; the model has {info.get('layers', '?')} layers)",
        f"tickets: {source} ({t['n']}: {counts}) in {seconds:.1f} s",
    ]
    if t.get("missing"):
        lines.append(f"warning: no tickets for {', '.join(t['missing'])}: the head will never choose them")
    if t.get("balance"):
        present = [n for n in t["counts"].values() if n]
        lines.append(
            f"labels balanced: {min(present)} to {max(present)} tickets per label, each label weighing "
            "as much in all (the accuracy below counts tickets)"
        )
    if t.get("cv_accuracy") is None:
        lines.append("cross-validation: skipped (no label has two tickets); L2 1e-2")
        return "\n".join(lines)
    rare = [lab for lab, n in t["counts"].items() if 0 < n < t["cv_folds"]]
    if rare:
        named = ", ".join(rare[:8]) + (f" and {len(rare) - 8} more" if len(rare) > 8 else "")
        lines.append(
            f"note: fewer than {t['cv_folds']} tickets for {named}: out of fold, each of their tickets is "
            "judged by heads that saw fewer of them (label more to judge them better)"
        )
    kept = (t.get("data") or {}).get("l2_from") == "in-use"
    lines += [
        f"cross-validated accuracy: {t['cv_accuracy']:.1%} ({t['cv_folds']}-fold, L2 {t['l2']:g}"
        + (", the head in use's)" if kept else ")"),
        "",
        *confusion_lines(t["cv_labels"], t["cv_confusion"], note=", out of fold", stored="the head file"),
    ]
    lines += calibration_lines(head)
    if t.get("beyond"):
        lines += ["", *beyond_lines(t["beyond"])]
    if t.get("mlp"):
        lines += ["", mlp_line(t["mlp"])]
    lines += hints(head, info.get("layers"))
    if "corrections_n" in t:
        weight = (t.get("data") or {}).get("correction_weight", 1)
        before = t.get("corrections_accuracy_before")
        after = t.get("corrections_accuracy_after")
        lines += [
            "",
            f"on the {t['corrections_n']} corrected tickets: the worker's labels were right on "
            + ("(unknown)" if before is None else f"{before:.1%}")
            + "; the new head, out of fold, on "
            + ("(not cross-validated)" if after is None else f"{after:.1%}")
            + ("" if weight == 1 else f" (each correction weighted {weight:g})"),
        ]
    return "\n".join(lines)


def mlp_line(m: dict[str, Any]) -> str:
    """What the MLP beside the linear head did on the fold it was judged on."""
    from worker.gate import mlp_fold

    by = m.get("accuracy_by_share") or {}
    tried = ", ".join(f"{float(s):.0%} {a:.1%}" for s, a in by.items() if float(s) > 0)
    fold = mlp_fold(m)
    where = f"on a held-out fold ({m.get('held_out')} tickets; the linear head alone " + (
        "-" if fold is None else f"{fold[0]:.1%}"
    )
    if not m.get("share"):
        return f"MLP: not kept, it did not add {where}; blended at {tried}) in {m.get('seconds')} s"
    blended = 0.0 if fold is None else fold[1]
    return (
        f"MLP: kept at {m['share']:.0%} of the blend, {blended:.1%} {where}; "
        f"{tried}); the calibration above is the blend's on that fold; {m.get('seconds')} s"
    )


def _how_to_use(out: Path, question: str | None) -> str:
    """Where the head file goes: ``--head`` is the primary question's; a further question's head is named
    in its table of the task file (or published to the workers)."""
    if question is None:
        return f'use it with --head {out} or TICKETQ_HEAD={out} (or head = "{out}" in the task file)'
    return f'use it with head = "{out}" in the task\'s [questions.{question}] table (or --publish it)'

"""Train a head from labelled tickets: accurate labels for any task, from a few hundred examples.

    ticketq-worker train --tickets labelled.csv --out support.head
    ticketq-worker train --task my_task.toml --tickets labelled.jsonl --out my_task.head

The tickets (JSONL or CSV with id,text,label, as ``eval`` reads) run through the engine's own forward
pass; a logistic regression over its hidden states is fitted with the L2 penalty chosen by stratified
k-fold cross-validation. Prints the cross-validated accuracy and confusion matrix, writes one safetensors
file. Use it with ``--head PATH``, ``TICKETQ_HEAD=PATH`` or ``head = "file"`` in the task TOML.

    ticketq-worker train --from-redis [--tickets base.csv] --publish [--out fixed.head]

``--from-redis`` trains on the corrections recorded with ``ticketq-producer label`` (plus the file's rows;
a correction replaces the row with its id); ``--publish`` stores the head in Redis, versioned, and every
running worker loads it at its next drain, without a restart (see :mod:`worker.corrections`).

Exit codes: 0 done; 1 the model could not be loaded or the head not written; 2 bad input or usage (a head
that does not fit included); 3 Redis unreachable or refused the credentials; 4 Redis refused a command.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import redis

from producer import config
from worker.bench.data import DataError, Item, read_items
from worker.engine.options import NO_HEAD, EngineOptions
from worker.evaluate import confusion_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worker import corrections

    parser.add_argument("--tickets", help="labelled tickets: JSONL or CSV with id,text,label")
    parser.add_argument("--out", help="where to write the head (a .safetensors file)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the cross-validation folds (default 0)")
    parser.add_argument(
        "--auto-accuracy",
        type=float,
        help="accuracy the auto-routed tickets must reach: the head stores the confidence threshold "
        "(review_below) that keeps its out-of-fold predictions there (default: the task's auto_accuracy)",
    )
    config.add_arguments(parser, EngineOptions, env=False)
    corrections.add_arguments(parser)


def fail(message: str, code: int = 2) -> int:
    print(f"ticketq-worker train: {message}", file=sys.stderr)
    return code


def redis_exit(exc: redis.RedisError) -> int:
    """The producer's codes: 4 when Redis refused a command (ACL, wrong type), else 3 (unreachable, or
    it refused the credentials)."""
    return 4 if isinstance(exc, redis.ResponseError) else 3


def run(args: argparse.Namespace) -> int:
    from worker import corrections
    from worker.engine.task import load_task
    from worker.evaluate import check_labels

    source = args.tickets or ""
    corrected: dict[int, str | None] = {}
    try:
        options = replace(
            config.resolve(EngineOptions, args), head=NO_HEAD
        )  # train with features, not a head
        store = corrections.options(args)
        if not (args.tickets or store.from_redis):
            raise DataError("nothing to train on: give --tickets FILE, --from-redis, or both")
        if not (args.out or store.publish):
            raise DataError("nowhere to put the head: give --out PATH, --publish, or both")
        task = load_task(options.task)
        items = read_items(args.tickets) if args.tickets else []
        if store.from_redis or store.publish:
            redis_client = corrections.client(store)
        if store.from_redis:
            rows = [(it.id, it.text, it.label or "") for it in items]
            found = corrections.training_set(corrections.read_corrections(redis_client), rows)
            items = [Item(i, t, lab) for i, t, lab in zip(found.ids, found.texts, found.labels, strict=True)]
            corrected = found.corrected
            source = f"{found.from_redis} corrections from Redis" + (
                f" + {found.from_file} rows of {args.tickets}" if args.tickets else ""
            )
        check_labels(items, task.labels)  # every ticket labelled, with one of the task's labels
        auto_accuracy = args.auto_accuracy
        if auto_accuracy is None:
            auto_accuracy = getattr(task, "auto_accuracy", None)
        if auto_accuracy is not None and not 0.0 < auto_accuracy <= 1.0:
            raise DataError(f"--auto-accuracy must lie in (0, 1], got {auto_accuracy}")
        labels = [it.label or "" for it in items]
        if len(set(labels)) < 2:
            raise DataError(
                f"all {len(labels)} tickets are labelled {labels[0]!r}; a head needs two labels or more"
            )
    except ValueError as exc:  # bad options, task file, tickets file or labels
        return fail(str(exc))
    except redis.RedisError as exc:
        return fail(f"Redis: {type(exc).__name__}: {exc}", redis_exit(exc))
    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        return fail(f"--out {out} is a directory; name the head file")

    from worker.engine.training import train_head
    from worker.evaluate import load_engine

    engine = load_engine("train", options)
    if isinstance(engine, int):
        return engine
    start = time.perf_counter()
    with Progress() as progress:
        head = train_head(
            engine,
            [it.text for it in items],
            labels,
            seed=args.seed,
            progress=progress,
            corrected=corrected,
            auto_accuracy=auto_accuracy,
        )
    seconds = time.perf_counter() - start
    print(report(head, engine.describe(), source, seconds))
    if out is not None:
        try:
            head.save(out)
        except OSError as exc:
            return fail(f"cannot write {out}: {exc.strerror or exc}", 1)
        print(f"wrote {out} (head {head.id}); use it with --head {out} or TICKETQ_HEAD={out}")
    if store.publish:
        try:
            version = redis_client.publish_head(head.to_bytes(), by=store.by)
        except redis.RedisError as exc:
            return fail(f"cannot publish the head: {type(exc).__name__}: {exc}", redis_exit(exc))
        except ValueError as exc:
            return fail(f"cannot publish the head: {exc}", 1)
        print(f"published head {head.id} as version {version}: running workers load it at their next drain")
    return 0


class Progress:
    """tqdm bars for the two stages, on a terminal only."""

    def __enter__(self) -> Progress:
        self.bars: dict[str, Any] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if stage not in self.bars:
            for bar in self.bars.values():
                bar.close()
            unit = "ticket" if stage == "features" else "fit"
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


def report(head: Any, info: dict[str, Any], source: str, seconds: float) -> str:
    t = head.training
    counts = ", ".join(f"{lab} {n}" for lab, n in t["counts"].items())
    lines = [
        f"model: {info['model']} ({info['dtype']}); task: {info['task']}; features: "
        f"layer {head.recipe.layer} of {info.get('layers', '?')}, {head.recipe.pool}-pooled",
        f"tickets: {source} ({t['n']}: {counts}) in {seconds:.1f} s",
    ]
    if t.get("missing"):
        lines.append(f"warning: no tickets for {', '.join(t['missing'])}: the head will never choose them")
    if t.get("cv_accuracy") is None:
        lines.append("cross-validation: skipped (a label has a single ticket); L2 1e-2")
        return "\n".join(lines)
    lines += [
        f"cross-validated accuracy: {t['cv_accuracy']:.1%} ({t['cv_folds']}-fold, L2 {t['l2']:g})",
        "",
        *confusion_table(t["cv_labels"], t["cv_confusion"], note=", out of fold"),
    ]
    lines += calibration_lines(head)
    if "corrections_n" in t:
        before = t.get("corrections_accuracy_before")
        after = t.get("corrections_accuracy_after")
        lines += [
            "",
            f"on the {t['corrections_n']} corrected tickets: the worker's labels were right on "
            + ("(unknown)" if before is None else f"{before:.1%}")
            + "; the new head, out of fold, on "
            + ("(not cross-validated)" if after is None else f"{after:.1%}"),
        ]
    return "\n".join(lines)

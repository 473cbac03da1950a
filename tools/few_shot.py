"""Few-shot accuracy over seeded draws (MTEB's protocol: K rows per label, N draws), on cached features.

Each draw takes K labelled rows per label from the training file, fits the head as ``ticketq-worker
train`` does (:func:`worker.engine.fit.fit`: L2 by 5-fold cross-validation on those rows), and scores the
whole test file; then the same fit with the label names learnt as examples (``--label-names``) and with
the rest of the training file, its labels unread, self-trained on (``--unlabeled``), both through
:func:`worker.engine.beyond.refit` as ``train`` calls it; and what ``train`` ships: the extras kept only
where :func:`worker.engine.training.checked_extras` finds them no worse out of fold (``--no-gate`` skips that
check, five more fits of the whole procedure per draw). Features come from ``tools.head_features
extract`` files (float16 copies of the engine's own pass); ``--names`` is such a file for the label names
(:func:`worker.engine.beyond.name_texts` of the labels: each label's name in every phrasing, each row
labelled with its label; a file of one row per label, the bare names, reads as before).

    python -m tools.few_shot --train out/feats/b77-train.pt --test out/feats/b77-test.pt \
        --names out/feats/b77-names.pt --recipe 8:mean,12:mean,8:max,12:max --per-label 8 --draws 10
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import defaultdict

import torch

from tools import head_recipes
from tools.head_recipes import accuracy
from worker.engine.beyond import refit
from worker.engine.fit import fit, stratified_folds
from worker.engine.recipe import Recipe
from worker.engine.training import Outcome, checked_extras


def features(data: dict, recipe: Recipe) -> torch.Tensor:
    """The recipe's parts, concatenated in its order, from a head_features file (as ``train`` fits them)."""
    return head_recipes.features(data, [(p.pool, p.layer) for p in recipe.parts]).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--names", help="head_features file of the label names (enables the names row)")
    parser.add_argument("--recipe", type=Recipe.parse, default=Recipe.parse("10:mean"))
    parser.add_argument("--per-label", type=int, default=8)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--first-draw", type=int, default=0, help="seed of the first draw (to run the rest)")
    parser.add_argument("--no-self-training", action="store_true")
    parser.add_argument("--no-gate", action="store_true", help="skip the out-of-fold check train makes")
    args = parser.parse_args()
    tr, te = torch.load(args.train), torch.load(args.test)
    labels = sorted(set(tr["labels"]))
    ytr = torch.tensor([labels.index(v) for v in tr["labels"]])
    yte = torch.tensor([labels.index(v) for v in te["labels"]])
    xtr, xte = features(tr, args.recipe), features(te, args.recipe)
    names = None
    if args.names:
        nm = torch.load(args.names)
        rows: dict[str, list[int]] = defaultdict(list)  # each label's name rows, in the file's order
        for i, lab in enumerate(nm["labels"]):
            rows[lab].append(i)
        phrases = min(len(rows[lab]) for lab in labels)  # laid out phrase by phrase, as name_texts does
        names = features(nm, args.recipe)[[rows[lab][j] for j in range(phrases) for lab in labels]]
    by: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(ytr.tolist()):
        by[c].append(i)
    print(f"recipe {args.recipe}, {args.per_label} per label x {len(labels)} labels, {args.draws} draws")
    scores: dict[str, list[float]] = defaultdict(list)
    for draw in range(args.first_draw, args.first_draw + args.draws):
        start = time.perf_counter()
        rng = random.Random(draw)
        picked = [i for c in sorted(by) for i in rng.sample(by[c], min(args.per_label, len(by[c])))]
        x, y = xtr[picked], ytr[picked].tolist()
        f = fit(x, y, len(labels), seed=draw)
        scores["labelled"].append(accuracy(xte, yte, f.weight, f.bias))
        first = (f.weight, f.bias)
        if names is not None:
            w, b, _ = refit(x, y, len(labels), f.l2, first=first, names=names)
            scores["+ label names"].append(accuracy(xte, yte, w, b))
        if not args.no_self_training:
            rest = torch.ones(len(ytr), dtype=torch.bool)
            rest[picked] = False
            w, b, _ = refit(x, y, len(labels), f.l2, first=first, names=names, unlabeled=xtr[rest])
            key = "+ names + self-training" if names is not None else "+ self-training"
            scores[key].append(accuracy(xte, yte, w, b))
            if not args.no_gate and f.cv_accuracy is not None:
                extras = {"names": names, "unlabeled": xtr[rest]}
                fold = stratified_folds(y, f.folds, draw)
                out = checked_extras(x, y, len(labels), f.l2, Outcome.of(f), fold, None, extras, None)
                scores["as train ships (checked)"].append(accuracy(xte, yte, out.weight, out.bias))
                with_, kept = out.beyond["cv_accuracy_with"], out.beyond["used"]
                print(f"  out of fold {with_:.1%} with extras vs {f.cv_accuracy:.1%}: kept {kept}")
        shown = ", ".join(f"{k} {v[-1]:.1%}" for k, v in scores.items())
        print(f"draw {draw}: {shown} (L2 {f.l2:g}) [{time.perf_counter() - start:.0f} s]", flush=True)
    for k, v in scores.items():
        spread = statistics.stdev(v) if len(v) > 1 else 0.0
        print(f"{k:<26} mean {statistics.fmean(v):.1%} (sd {spread:.1%}, {min(v):.1%} to {max(v):.1%})")


if __name__ == "__main__":
    main()

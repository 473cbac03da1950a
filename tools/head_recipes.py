"""Try head recipes on cached features (tools.head_features extract): choose on a held-out part of train,
then report the test split once per recipe kept.

    nice -n 10 python -m tools.head_recipes --train out/feats/b77-train.pt --test out/feats/b77-test.pt
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

import torch

from worker.engine import chars
from worker.engine.fit import _train, fit
from worker.engine.recipe import CHARS

RECIPES: dict[str, list[tuple[str, int]]] = {
    "L10 mean (today)": [("mean", 10)],
    "L8 mean": [("mean", 8)],
    "L12 mean": [("mean", 12)],
    "L10 mean+max": [("mean", 10), ("max", 10)],
    "L6+8+10+12 mean": [("mean", 6), ("mean", 8), ("mean", 10), ("mean", 12)],
    "L4+8+12 mean": [("mean", 4), ("mean", 8), ("mean", 12)],
    "L8+12 mean+max": [("mean", 8), ("mean", 12), ("max", 8), ("max", 12)],
    "L12 mean+last": [("mean", 12), ("last", 12)],
    "default": [("mean", 8), ("mean", 12), ("rare", 8), ("rare", 12), ("max", 8), ("max", 12), (CHARS, 0)],
    "accurate": [
        ("mean", 8),
        ("mean", 12),
        ("rare", 8),
        ("rare", 12),
        ("max", 8),
        ("max", 12),
        ("echo", 24),
        ("echo", 28),
        (CHARS, 0),
    ],
}


def features(data: dict, parts: list[tuple[str, int]]) -> torch.Tensor:
    """The parts' cached features side by side; ``chars`` computed from the file's texts."""
    return torch.cat(
        [
            chars.features(data["texts"]) if p == CHARS else data["features"][p][:, layer - 1].float()
            for p, layer in parts
        ],
        1,
    ).double()


def accuracy(x, y, w, b) -> float:
    return float(((x @ w.T + b).argmax(1) == y).double().mean())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--few", type=int, default=10)
    parser.add_argument("--few-only", action="store_true", help="skip the full-train fits (slow)")
    args = parser.parse_args()
    tr, te = torch.load(args.train), torch.load(args.test)
    labels = tr["task_labels"]
    if not set(tr["labels"]) <= set(labels):  # features extracted under another task's prompt
        labels = sorted(set(tr["labels"]))
    ytr = torch.tensor([labels.index(v) for v in tr["labels"]])
    yte = torch.tensor([labels.index(v) for v in te["labels"]])
    rng = random.Random(0)
    idx = list(range(len(ytr)))
    rng.shuffle(idx)
    hold = torch.zeros(len(ytr), dtype=torch.bool)
    hold[idx[: len(idx) // 5]] = True
    by: dict[int, list[int]] = defaultdict(list)
    for i in idx:
        by[int(ytr[i])].append(i)
    few = torch.tensor([i for c in sorted(by) for i in by[c][: args.few]])
    for name in args.recipes.split(","):
        parts = RECIPES[name]
        xtr, xte = features(tr, parts), features(te, parts)
        start = time.perf_counter()
        held: dict[float, float] = {}
        full = float("nan")
        for l2 in () if args.few_only else (1e-3, 3e-3, 1e-2):
            w, b = _train(xtr[~hold], ytr[~hold], len(labels), l2)
            held[l2] = accuracy(xtr[hold], ytr[hold], w, b)
        best = max(held, key=lambda k: (held[k], k)) if held else 0.0
        if held:
            w, b = _train(xtr, ytr, len(labels), best)
            full = accuracy(xte, yte, w, b)
        f = fit(xtr[few], ytr[few].tolist(), len(labels), grid=(1e-3, 1e-2, 1e-1))
        fewacc = accuracy(xte, yte, f.weight.double(), f.bias.double())
        print(
            f"{name:<22} held-out {held.get(best, float('nan')):.1%} (l2 {best:g}) test-full {full:.1%} | "
            f"{args.few}/intent CV {f.cv_accuracy:.1%} (l2 {f.l2:g}) test {fewacc:.1%} "
            f"[{time.perf_counter() - start:.0f} s]",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""A simulated labelling session: which tickets should people label first? Measured on cached features.

Banking77's 77 intents (features from ``tools.head_features extract``, the head's default recipe: layer
10, mean-pooled): start from ``--start`` labelled tickets per intent drawn from the train split, then for
``--rounds`` rounds add ``--step`` labels chosen from the rest of the train split (the unlabelled pool) by
each order: random, least confident first (lowest top probability), smallest margin (top-1 minus top-2)
and highest entropy. After each round the head is refitted (the same logistic regression and
standardization as ``train``, L2 fixed at 1e-2 so rounds compare like for like) and scored on the test
split, which no order ever sees. Several seeds (the starting set and the random order change with each).

    nice -n 10 python -m tools.active_learning --train out/feats/b77-train.pt --test out/feats/b77-test.pt \
        --png docs/active_learning.png
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

import torch

from worker.engine.fit import _train

ORDERS = ("random", "least_confident", "margin", "entropy")


def pick(order: str, probs: torch.Tensor, pool: list[int], k: int, rng: random.Random) -> list[int]:
    """``k`` rows of ``pool`` (``probs``: the pool's rows) to label next, by ``order``."""
    if order == "random":
        return rng.sample(pool, k)
    if order == "least_confident":
        urgency = -probs.max(1).values
    elif order == "margin":
        top2 = probs.topk(2, 1).values
        urgency = -(top2[:, 0] - top2[:, 1])
    else:
        urgency = -(probs * probs.clamp(min=1e-12).log()).sum(1)
    return [pool[i] for i in urgency.topk(k).indices.tolist()]


def session(x, y, xt, yt, classes, order, seed, start, step, rounds, l2) -> list[float]:
    rng = random.Random(seed)
    by: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(y.tolist()):
        by[c].append(i)
    labelled = [i for c in sorted(by) for i in rng.sample(by[c], start)]
    accs = []
    for r in range(rounds + 1):
        idx = torch.tensor(labelled)
        w, b = _train(x[idx], y[idx], classes, l2)
        accs.append(float(((xt @ w.T + b).argmax(1) == yt).double().mean()))
        if r == rounds:
            break
        taken = set(labelled)
        pool = [i for i in range(len(y)) if i not in taken]
        probs = torch.softmax(x[torch.tensor(pool)] @ w.T + b, -1)
        labelled += pick(order, probs, pool, step, rng)
    return accs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--layer", type=int, default=10)
    parser.add_argument("--start", type=int, default=5)
    parser.add_argument("--step", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--l2", type=float, default=1e-2)
    parser.add_argument("--png")
    args = parser.parse_args()
    tr, te = torch.load(args.train), torch.load(args.test)
    labels = tr["task_labels"]
    x = tr["features"]["mean"][:, args.layer - 1].double()
    xt = te["features"]["mean"][:, args.layer - 1].double()
    y = torch.tensor([labels.index(v) for v in tr["labels"]])
    yt = torch.tensor([labels.index(v) for v in te["labels"]])
    results: dict[str, list[list[float]]] = {}
    for order in ORDERS:
        results[order] = [
            session(x, y, xt, yt, len(labels), order, s, args.start, args.step, args.rounds, args.l2)
            for s in range(args.seeds)
        ]
        print(order, [f"{sum(c) / len(c):.1%}" for c in zip(*results[order], strict=True)], flush=True)
    n0 = args.start * len(labels)
    print("\n| round | labelled | " + " | ".join(ORDERS) + " |")
    print("|---:|---:|" + "---:|" * len(ORDERS))
    for r in range(args.rounds + 1):
        means = [sum(run[r] for run in results[o]) / args.seeds for o in ORDERS]
        print(f"| {r} | {n0 + r * args.step} | " + " | ".join(f"{m:.1%}" for m in means) + " |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [n0 + r * args.step for r in range(args.rounds + 1)]
        for o in ORDERS:
            ax.plot(
                xs,
                [100 * sum(run[r] for run in results[o]) / args.seeds for r in range(len(xs))],
                marker="o",
                label=o.replace("_", " "),
            )
        ax.set_xlabel("labelled tickets")
        ax.set_ylabel(f"test accuracy, % (mean of {args.seeds} seeds)")
        ax.set_title("Banking77, 77 intents: which tickets to label first")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)


if __name__ == "__main__":
    main()

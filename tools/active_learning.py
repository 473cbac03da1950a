"""Which tickets should a person label first? A simulated labelling session on Banking77's 77 intents.

Starts from ``--start`` labelled tickets per label (drawn from the train split), then for ``--rounds``
rounds adds ``--batch`` labels chosen from the rest of the train split by one order, refits the product's
head (:func:`worker.engine.fit.fit`: standardized multinomial logistic regression, L2 chosen by stratified
cross-validation) and scores it on the disjoint test split. Every order starts from the same tickets for a
given seed; the whole session is repeated over ``--seeds`` seeds and reported as mean and standard
deviation. The orders (``STRATEGIES``):

- ``least_confident``: lowest top probability first (the review queue's order today).
- ``random``: the baseline, what "label whatever turns up" amounts to.
- ``margin``: smallest gap between the top two probabilities first.
- ``entropy``: highest entropy of the probability vector first.
- ``diverse``: least confident first, at most ``--per-label-cap`` per predicted label, so one muddled
  pair of intents cannot take the whole batch.

Features are read, not computed: a ``torch.save`` file written by ``tools.head_features extract``
(``{"features": {pool: (n, layers, d)}, "labels": [...], "task_labels": [...], "texts": [...]}``, layers
1..n in order) for train and for test. The head reads layer 10, mean-pooled (``docs/head.md``). ::

    nice -n 10 python -m tools.active_learning --train out/feats/b77-train.pt --test out/feats/b77-test.pt \
        --json out/al.json --plot docs/active_learning.png

The selection functions are pure numpy (no torch) so they can be tested on tiny arrays; torch and the
head fit are imported only by the simulation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

STRATEGIES = ("least_confident", "random", "margin", "entropy", "diverse")


class SelectionError(ValueError):
    """A selection request that cannot be met (bad strategy, probabilities or size)."""


def uncertainty(probs: np.ndarray, strategy: str) -> np.ndarray:
    """Per-row score, higher = label sooner, for ``least_confident``/``diverse`` (1 - top probability),
    ``margin`` (-(top1 - top2)) and ``entropy``. ``probs`` is (n, labels), rows summing to 1."""
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise SelectionError(f"probabilities must be (rows, labels >= 2), got shape {probs.shape}")
    if strategy in ("least_confident", "diverse"):
        return 1.0 - probs.max(1)
    if strategy == "margin":
        top2 = np.sort(probs, axis=1)[:, -2:]
        return -(top2[:, 1] - top2[:, 0])
    if strategy == "entropy":
        p = np.clip(probs, 1e-300, 1.0)
        return -(probs * np.log(p)).sum(1)
    raise SelectionError(f"no uncertainty score for strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def select(
    probs: np.ndarray,
    strategy: str,
    n: int,
    rng: np.random.Generator,
    *,
    per_label_cap: int = 2,
) -> np.ndarray:
    """Indices (into the rows of ``probs``, the unlabelled pool) of the ``n`` tickets to label next, in the
    order they would be shown. Ties keep pool order (stable sort), so a result depends only on the inputs
    and, for ``random``, on ``rng``. ``diverse`` takes the least confident rows but at most
    ``per_label_cap`` per predicted label, filling any shortfall with the least confident of the rest."""
    rows = probs.shape[0]
    if not 0 < n <= rows:
        raise SelectionError(f"cannot pick {n} of a pool of {rows}")
    if strategy == "random":
        return rng.permutation(rows)[:n]
    order = np.argsort(-uncertainty(probs, strategy), kind="stable")
    if strategy != "diverse":
        return order[:n]
    if per_label_cap < 1:
        raise SelectionError(f"per_label_cap must be >= 1, got {per_label_cap}")
    predicted = probs.argmax(1)
    taken: dict[int, int] = {}
    picked: list[int] = []
    rest: list[int] = []
    for i in order.tolist():
        label = int(predicted[i])
        if len(picked) < n and taken.get(label, 0) < per_label_cap:
            taken[label] = taken.get(label, 0) + 1
            picked.append(i)
        else:
            rest.append(i)
    picked.extend(rest[: n - len(picked)])
    return np.array(picked, dtype=np.int64)


def initial_set(y: np.ndarray, per_label: int, rng: np.random.Generator) -> np.ndarray:
    """``per_label`` row indices of each label of ``y``, drawn at random, sorted."""
    chosen = []
    for label in np.unique(y):
        rows = np.flatnonzero(y == label)
        if len(rows) < per_label:
            raise SelectionError(f"label {label} has {len(rows)} rows, fewer than {per_label}")
        chosen.append(rng.choice(rows, per_label, replace=False))
    return np.sort(np.concatenate(chosen))


@dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (n, d) float32
    y: np.ndarray  # (n,) int label indices
    texts: list[str]


def load_split(
    path: str, layer: int, pool: str, labels: Sequence[str] | None = None
) -> tuple[Split, list[str]]:
    """Features of ``layer`` (1-based) and ``pool`` from a ``tools.head_features extract`` file."""
    import torch

    data = torch.load(path, map_location="cpu", weights_only=False)
    feats = data["features"][pool]
    stored = list(data.get("layers", range(1, feats.shape[1] + 1)))  # a cut-down file names its layers
    if layer not in stored:
        raise SystemExit(f"{path}: layer {layer} not stored (layers {stored})")
    task_labels = list(data["task_labels"]) if labels is None else list(labels)
    index = {name: i for i, name in enumerate(task_labels)}
    unknown = sorted(set(data["labels"]) - set(index))
    if unknown:
        raise SystemExit(f"{path}: labels not in the label set: {unknown[:5]}")
    y = np.array([index[name] for name in data["labels"]], dtype=np.int64)
    x = feats[:, stored.index(layer), :].float().contiguous()
    return Split(x=x, y=y, texts=list(data["texts"])), task_labels


def accuracy(weight: torch.Tensor, bias: torch.Tensor, split: Split) -> float:
    predicted = (split.x @ weight.T + bias).argmax(1).numpy()
    return float((predicted == split.y).mean())


def pool_probs(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    """The head's probabilities, softmax of its logits (float64 for the ranking)."""
    import torch

    return torch.softmax((x @ weight.T + bias).double(), -1).numpy()


def simulate(
    train: Split,
    test: Split,
    classes: int,
    *,
    seed: int,
    strategies: Sequence[str],
    start: int,
    batch: int,
    rounds: int,
    per_label_cap: int,
    cv_every_round: bool = False,
    log: Any = None,
) -> dict[str, list[float]]:
    """strategy -> test accuracy after rounds 0..``rounds`` for one seed (round 0 is shared).

    Round 0 is the product's full fit (L2 by stratified 5-fold CV over its grid). Later rounds refit with
    the product's own training routine at that L2 (``cv_every_round`` re-runs the CV each round too:
    the same as ``ticketq-worker train``, 7x5 more fits per round)."""
    import torch

    from worker.engine.fit import _train, fit

    rng = np.random.default_rng(seed)
    first = initial_set(train.y, start, rng)
    f0 = fit(train.x[first], train.y[first].tolist(), classes, seed=seed)
    acc0 = accuracy(f0.weight, f0.bias, test)
    if log:
        print(f"  seed {seed} round 0: L2 {f0.l2} by CV, test {acc0:.4f}", file=log, flush=True)

    def refit(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if cv_every_round:
            f = fit(train.x[rows], train.y[rows].tolist(), classes, seed=seed)
            return f.weight, f.bias
        target = torch.from_numpy(train.y[rows])
        w, b = _train(train.x[rows].double(), target, classes, f0.l2)
        return w.float(), b.float()

    out: dict[str, list[float]] = {}
    for strategy in strategies:
        pick_rng = np.random.default_rng([seed, STRATEGIES.index(strategy)])
        labelled = np.zeros(len(train.y), dtype=bool)
        labelled[first] = True
        current = (f0.weight, f0.bias)
        accs = [acc0]
        for r in range(1, rounds + 1):
            pool = np.flatnonzero(~labelled)
            probs = pool_probs(current[0], current[1], train.x[pool])
            chosen = pool[select(probs, strategy, batch, pick_rng, per_label_cap=per_label_cap)]
            assert not labelled[chosen].any(), "a labelled ticket was picked again"
            labelled[chosen] = True
            rows = np.flatnonzero(labelled)
            current = refit(rows)
            accs.append(accuracy(current[0], current[1], test))
            if log:
                print(
                    f"  seed {seed} {strategy} round {r}: {len(rows)} labelled, test {accs[-1]:.4f}",
                    file=log,
                    flush=True,
                )
        out[strategy] = accs
    return out


def summarize(runs: list[dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """strategy -> {"mean": [...], "std": [...]} over seeds (sample std, ddof=1)."""
    out: dict[str, dict[str, list[float]]] = {}
    for strategy in runs[0]:
        a = np.array([run[strategy] for run in runs])
        std = a.std(0, ddof=1) if len(runs) > 1 else np.zeros(a.shape[1])
        out[strategy] = {"mean": a.mean(0).tolist(), "std": std.tolist()}
    return out


def table(summary: dict[str, dict[str, list[float]]], start_n: int, batch: int) -> str:
    rounds = len(next(iter(summary.values()))["mean"])
    head = "| order | " + " | ".join(f"round {r} ({start_n + r * batch})" for r in range(rounds)) + " |"
    lines = [head, "|---|" + "---:|" * rounds]
    for strategy, s in summary.items():
        cells = [f"{100 * m:.1f} ± {100 * d:.1f}" for m, d in zip(s["mean"], s["std"], strict=True)]
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict[str, dict[str, list[float]]], start_n: int, batch: int, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for strategy, s in summary.items():
        xs = [start_n + r * batch for r in range(len(s["mean"]))]
        m, d = np.array(s["mean"]) * 100, np.array(s["std"]) * 100
        ax.plot(xs, m, marker="o", label=strategy, linestyle="--" if strategy == "random" else "-")
        ax.fill_between(xs, m - d, m + d, alpha=0.15)
    ax.set_xlabel("labelled tickets")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.active_learning", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--train", required=True, help="features of the pool (tools.head_features extract)")
    parser.add_argument("--test", required=True, help="features of the disjoint test split")
    parser.add_argument("--layer", type=int, default=10, help="1-based layer the head reads")
    parser.add_argument("--pool", default="mean", help="pooling the head reads")
    parser.add_argument("--start", type=int, default=5, help="labelled tickets per label at round 0")
    parser.add_argument("--batch", type=int, default=100, help="labels added per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5, help="repeat over seeds 0..N-1")
    parser.add_argument(
        "--per-label-cap", type=int, default=2, help="diverse: most picks per predicted label"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: fastest on a shared 2-core box)"
    )
    parser.add_argument("--cv-every-round", action="store_true", help="re-choose L2 by CV every round (slow)")
    parser.add_argument("--json", help="write every run and the summary here")
    parser.add_argument("--plot", help="write the PNG plot here")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        parser.error(f"unknown strategies {bad}; known: {', '.join(STRATEGIES)}")

    import torch

    torch.set_num_threads(args.threads)
    train, labels = load_split(args.train, args.layer, args.pool)
    test, _ = load_split(args.test, args.layer, args.pool, labels)
    overlap = len(set(train.texts) & set(test.texts))
    print(
        f"train pool {len(train.y)}, test {len(test.y)} ({overlap} test texts also in train), "
        f"{len(labels)} labels, layer {args.layer} {args.pool}, {torch.get_num_threads()} threads",
        file=sys.stderr,
    )
    began = time.perf_counter()
    runs = []
    for seed in range(args.seeds):
        runs.append(
            simulate(
                train,
                test,
                len(labels),
                seed=seed,
                strategies=strategies,
                start=args.start,
                batch=args.batch,
                rounds=args.rounds,
                per_label_cap=args.per_label_cap,
                cv_every_round=args.cv_every_round,
                log=sys.stderr,
            )
        )
        print(f"seed {seed} done, {time.perf_counter() - began:.0f} s", file=sys.stderr)
    summary = summarize(runs)
    start_n = args.start * len(labels)
    print(table(summary, start_n, args.batch))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {"args": vars(args), "runs": runs, "summary": summary, "seconds": time.perf_counter() - began}
            )
        )
    if args.plot:
        title = (
            f"Banking77 ({len(labels)} intents): {args.start}/label + {args.batch}/round, "
            f"mean ± std over {args.seeds} seeds"
        )
        plot(summary, start_n, args.batch, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())

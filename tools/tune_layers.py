"""Would fine-tuning the layers a head reads pay? A measurement, not a product path (docs/head.md).

``extract`` runs the engine's own packed, prefix-cached pass over a labelled file and keeps, per ticket,
the hidden state of every suffix token after layer ``--layer`` (the ticket's tokens and the chat template's
hand-over). ``tune`` trains a copy of the layers above it, up to ``--top``, on those states, the tickets
attending to the shared prefix's keys and values exactly as in the engine's pass (the prefix itself stays
the frozen model's), with a linear classifier over the mean- and max-pooled states of both layers; then
it fits the product's own head (:func:`worker.engine.fit.fit`, L2 by cross-validation, or ``--l2``) on the
features of the frozen and of the tuned layers, and scores the test file with each.

    python -m tools.tune_layers extract --task examples/banking/task.toml \
        --tickets ../shared/data/banking77/train.csv --out out/tok/train.pt --layer 8
    python -m tools.tune_layers tune --task examples/banking/task.toml --train out/tok/train.pt \
        --test out/tok/test.pt --top 12 --per-label 10 --epochs 10 --lr 2e-4
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from tools.head_features import read_labelled
from worker.engine import Engine
from worker.engine.fit import fit, fit_at
from worker.engine.options import EngineOptions
from worker.engine.scorer import PrefixCache


class _Stop(Exception):
    pass


def extract(args: argparse.Namespace) -> None:
    engine = Engine.load(EngineOptions(task=args.task, head="none", dtype="float32"))
    texts, labels = read_labelled(args.tickets)
    suffixes = engine.prompt.ticket_ids(engine.tokenizer, texts)
    scorer = engine.scorer
    got: list[torch.Tensor] = []

    def keep(_m: object, _a: object, output: Any) -> None:
        got.append(output[0] if isinstance(output, tuple) else output)
        raise _Stop

    hook = scorer.body.layers[args.layer - 1].register_forward_hook(keep)
    states: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    with torch.inference_mode():
        for plan in engine.plan([len(s) for s in suffixes]):
            ids, pos, mask, query = scorer._layout(suffixes, plan, tree=False)
            got.clear()
            with contextlib.suppress(_Stop):
                cache = {scorer._cache_kw: PrefixCache(scorer.prefix_kv)}
                scorer.body(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True, **cache)
            flat = got[0].reshape(-1, got[0].shape[-1])
            order = [i for row in plan.rows for i in row]
            for item, end in zip(order, query[:, 0].tolist(), strict=True):
                n = len(suffixes[item])
                states[item] = flat[end - n + 1 : end + 1].clone()
    hook.remove()
    torch.save(
        {
            "states": states,
            "labels": labels,
            "layer": args.layer,
            "after": len(engine.prompt.after_ids),
            "prefix_len": scorer.prefix_len,
        },
        args.out,
    )


class Tuner:
    """The copied layers over cached states: padded batches, the engine's positions, the shared prefix."""

    def __init__(self, engine: Engine, layer: int, top: int, after: int) -> None:
        self.body = engine.scorer.body
        self.prefix = engine.scorer.prefix_kv
        self.p = engine.scorer.prefix_len
        self.after = after
        self.layers = copy.deepcopy(self.body.layers[layer:top]).float()
        for q in self.layers.parameters():
            q.requires_grad_(True)

    def features(self, states: Sequence[torch.Tensor], idx: Sequence[int]) -> torch.Tensor:
        """(len(idx), 4d): mean of the input layer, mean of the top, max of the input, max of the top."""
        seqs = [states[i].float() for i in idx]
        t, b, d = max(len(s) for s in seqs), len(seqs), seqs[0].shape[-1]
        h0 = torch.zeros(b, t, d)
        own = torch.zeros(b, t, dtype=torch.bool)
        valid = torch.zeros(b, t, dtype=torch.bool)
        for row, s in enumerate(seqs):
            n = len(s)
            h0[row, :n], valid[row, :n] = s, True
            own[row, : max(0, n - self.after) or n] = True
        pos = (torch.arange(t) + self.p).expand(b, t)
        allow = torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & valid[:, None, :]
        allow |= torch.eye(t, dtype=torch.bool)[None]
        mask = torch.zeros(b, 1, t, self.p + t)
        mask[:, 0, :, self.p :].masked_fill_(~allow, torch.finfo(torch.float32).min)
        h, pe, cache = h0, self.body.rotary_emb(h0, pos), PrefixCache(self.prefix)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos, cache=cache, position_embeddings=pe)
        w = own[..., None].float()

        def pooled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (x * w).sum(1) / w.sum(1), x.masked_fill(~own[..., None], float("-inf")).amax(1)

        (m0, x0), (m1, x1) = pooled(h0), pooled(h)
        return torch.cat([m0, m1, x0, x1], 1)

    def all_features(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        self.layers.eval()
        order = sorted(range(len(states)), key=lambda i: len(states[i]))
        out = torch.empty(len(states), 4 * states[0].shape[-1])
        with torch.no_grad():
            for s in range(0, len(order), 128):
                idx = order[s : s + 128]
                out[idx] = self.features(states, idx)
        self.layers.train()
        return out


def score(tuner: Tuner, tr: dict, te: dict, picked: list[int], ytr, yte, classes: int, l2: float) -> str:
    xtr, xte = tuner.all_features(tr["states"]), tuner.all_features(te["states"])
    x, y = xtr[picked].double(), ytr[picked].tolist()
    if l2:
        w, b = fit_at(x, y, classes, l2)
        cv = ""
    else:
        f = fit(x, y, classes, grid=(3e-4, 1e-3, 3e-3, 1e-2))
        w, b, cv = f.weight, f.bias, f"CV {f.cv_accuracy:.1%} (L2 {f.l2:g}), "
    return f"{cv}test {float(((xte @ w.T + b).argmax(1) == yte).double().mean()):.1%}"


def tune(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    engine = Engine.load(EngineOptions(task=args.task, head="none", dtype="float32"))
    tr, te = torch.load(args.train), torch.load(args.test)
    labels = sorted(set(tr["labels"]))
    ytr = torch.tensor([labels.index(v) for v in tr["labels"]])
    yte = torch.tensor([labels.index(v) for v in te["labels"]])
    by: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(ytr.tolist()):
        by[c].append(i)
    rng = random.Random(args.seed)
    picked = [i for c in sorted(by) for i in rng.sample(by[c], args.per_label)] if args.per_label else []
    picked = picked or list(range(len(ytr)))
    tuner = Tuner(engine, tr["layer"], args.top, tr["after"])
    frozen = score(tuner, tr, te, picked, ytr, yte, len(labels), args.l2)
    print(f"frozen layers {tr['layer']}+{args.top}: {frozen}", flush=True)
    base = tuner.all_features(tr["states"])[picked]
    mu, sd = base.mean(0), base.std(0) + 1e-3
    clf = torch.nn.Linear(base.shape[1], len(labels))
    opt = torch.optim.AdamW(
        [{"params": tuner.layers.parameters(), "lr": args.lr}, {"params": clf.parameters(), "lr": 1e-3}],
        weight_decay=0.01,
    )
    steps = args.epochs * -(-len(picked) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, [args.lr, 1e-3], total_steps=steps, pct_start=0.1)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        random.Random(100 + epoch).shuffle(picked)
        total = 0.0
        for s in range(0, len(picked), args.batch):
            idx = picked[s : s + args.batch]
            x = (tuner.features(tr["states"], idx) - mu) / sd
            loss = torch.nn.functional.cross_entropy(clf(x), ytr[idx], label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        print(
            f"epoch {epoch}: loss {total / len(picked):.3f} [{time.perf_counter() - start:.0f} s]", flush=True
        )
    print(f"tuned, {args.epochs} epochs: {score(tuner, tr, te, picked, ytr, yte, len(labels), args.l2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("--task", required=True)
    ex.add_argument("--tickets", required=True)
    ex.add_argument("--out", required=True)
    ex.add_argument("--layer", type=int, default=8)
    tu = sub.add_parser("tune")
    tu.add_argument("--task", required=True)
    tu.add_argument("--train", required=True)
    tu.add_argument("--test", required=True)
    tu.add_argument("--top", type=int, default=12, help="tune the layers above --layer up to this one")
    tu.add_argument("--per-label", type=int, default=10, help="0: the whole training file")
    tu.add_argument("--epochs", type=int, default=10)
    tu.add_argument("--lr", type=float, default=2e-4)
    tu.add_argument("--batch", type=int, default=32)
    tu.add_argument("--l2", type=float, default=0.0, help="the head's penalty (0: by cross-validation)")
    tu.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    extract(args) if args.command == "extract" else tune(args)


if __name__ == "__main__":
    main()

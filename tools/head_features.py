"""Which hidden states should a head read? Extract every layer's once, cache them, try recipes in seconds.

``extract`` runs the engine's own packed, prefix-cached pass over a labelled file (JSONL or CSV with
id,text,label, or Banking77's text,category) through the whole model, and stores, per ticket and per
layer, the hidden state averaged over the ticket's own tokens (``mean``), its maximum over them
(``max``), the state at the prompt's last position (``last``) and the average weighted toward rarer tokens
(``rare``), as float16 in one ``torch.save`` file (not in git: put it under out/); with ``--echo`` the
pass reads each ticket twice, as an ``echo`` recipe's does, and also stores the mean over the second
reading (``echo``; the others are the same either way).
``tools.head_recipes`` and ``tools.few_shot`` read those files. The engine's dtype is its default
(``auto``) unless ``--dtype`` says otherwise; heads and features are per dtype.

    nice -n 10 python -m tools.head_features extract --task out/b77/task.toml \
        --tickets ../shared/data/banking77/train.csv --out out/feats/b77-train.pt
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from worker.bench.data import read_items
from worker.engine import Engine
from worker.engine import features as feats
from worker.engine.options import EMBEDDED, EngineOptions
from worker.engine.scorer import PrefixCache

POOLS = ("mean", "max", "last", "rare")


def read_labelled(path: str) -> tuple[list[str], list[str]]:
    """Texts and labels of a tickets file, or of Banking77's own ``text,category`` CSV."""
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    if "category" in header:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return [r["text"].strip() for r in rows], [r["category"] for r in rows]
    items = read_items(path)
    return [it.text for it in items], [it.label or "" for it in items]


class _Stop(Exception):
    pass


def layer_states(
    engine: Engine, suffixes: list[list[int]], depth: int
) -> Iterator[tuple[list[int], list[int], torch.Tensor]]:
    """Per packed, prefix-cached pass of the engine over ``suffixes``: the items in plan order, each one's
    last flat position, and (flat positions, depth, d) the states after layers 1..depth (the pass stops
    there)."""
    scorer = engine.scorer
    d = int(engine.loaded.model.config.hidden_size)
    states: list[torch.Tensor] = []

    def keep(_m: object, _a: object, output: object) -> None:
        states.append(output[0] if isinstance(output, tuple) else output)  # type: ignore[arg-type]
        if len(states) == depth:
            raise _Stop

    hooks = [scorer.body.layers[i].register_forward_hook(keep) for i in range(depth)]
    try:
        for plan in engine.plan([len(s) for s in suffixes]):
            ids, pos, mask, query = scorer._layout(suffixes, plan, tree=False)
            states.clear()
            with contextlib.suppress(_Stop), torch.inference_mode():
                scorer.body(
                    input_ids=ids,
                    position_ids=pos,
                    attention_mask=mask,
                    use_cache=True,
                    **{scorer._cache_kw: PrefixCache(scorer.prefix_kv)},
                )
            order = [i for row in plan.rows for i in row]
            yield order, query[:, 0].tolist(), torch.stack([h.reshape(-1, d) for h in states], 1)
    finally:
        for h in hooks:
            h.remove()


@torch.inference_mode()
def all_layers(
    engine: Engine, texts: list[str], depth: int, *, echo: bool = False, log_every: int = 500
) -> dict[str, torch.Tensor]:
    """pool -> (n, depth, d) float16 features of layers 1..depth, in input order, pooled as the engine
    pools them (:func:`worker.engine.features.readings`); the pass stops there. ``echo``: read each
    ticket twice and add the ``echo`` pool."""
    suffixes, again = engine.suffixes(texts, echo=echo)
    after = len(engine.prompt.after_ids)
    d = int(engine.loaded.model.config.hidden_size)
    pools = (*POOLS, "echo") if echo else POOLS
    out = {p: torch.empty(len(texts), depth, d, dtype=torch.float16) for p in pools}
    vocab = int(engine.scorer.body.config.vocab_size)
    done, start = 0, time.perf_counter()
    for order, ends, stack in layer_states(engine, suffixes, depth):
        at = feats.readings(torch.tensor(ends), [len(suffixes[i]) for i in order], after, again)
        weights = feats.rarity_at(at, [suffixes[i] for i in order], vocab)
        flat = stack.reshape(stack.shape[0], -1)  # every layer side by side: one pooling serves all
        for p in pools:
            out[p][order] = feats.pool(flat, at, len(order), p, weights).view(len(order), depth, d).half()
        done += len(order)
        if done // log_every != (done - len(order)) // log_every:
            rate = done / (time.perf_counter() - start)
            print(f"  {done}/{len(texts)} tickets, {rate:.1f}/s", file=sys.stderr, flush=True)
    return out


def extract(args: argparse.Namespace) -> None:
    # auto judged as the task's workers judge it (its heads' features), not by zero-shot labels
    options = EngineOptions(task=args.task, head="none", dtype=args.dtype, model=args.model)
    engine = Engine.load(options, questions=False, as_worker=True)
    info = engine.describe()
    texts, labels = read_labelled(args.tickets)
    print(f"{args.tickets}: {len(texts)} tickets; {info['model']} {info['dtype']}", file=sys.stderr)
    start = time.perf_counter()
    pooled = all_layers(engine, texts, args.depth, echo=args.echo)
    seconds = time.perf_counter() - start
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "features": pooled,
            "texts": texts,
            "labels": labels,
            "task_labels": list(engine.task.labels),
            "dtype": info["dtype"],
            "seconds": seconds,
        },
        args.out,
    )
    print(f"wrote {args.out}: {len(texts)} tickets in {seconds:.0f} s ({info['dtype']})", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="every layer's pooled states of one file, cached")
    ex.add_argument("--task", required=True)
    ex.add_argument("--tickets", required=True)
    ex.add_argument("--out", required=True)
    ex.add_argument("--dtype", default="auto")
    ex.add_argument("--model", default=EMBEDDED, help="the model (as the worker's --model)")
    ex.add_argument("--depth", type=int, default=12, help="layers 1..DEPTH (the pass stops there)")
    ex.add_argument("--echo", action="store_true", help="read each ticket twice; add the echo pool")
    args = parser.parse_args()
    extract(args)


if __name__ == "__main__":
    main()

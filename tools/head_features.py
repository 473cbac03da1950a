"""Which hidden state should a head read? Measure every layer, mean-pooled and at the last prompt position.

Runs the engine's packed, prefix-cached pass once over a training file and one or more test files,
keeping the hidden states of every layer, then fits the head (worker.engine.fit) for each recipe and
prints test accuracy. The numbers in docs/head.md come from:

    TICKETQ_DTYPE=float32 python -m tools.head_features \
        --train worker/data/head_train.csv \
        --test worker/data/banking77_eval.csv worker/data/sample_tickets.jsonl
"""

from __future__ import annotations

import argparse
import time

import torch

from worker.bench.data import read_items as read_tickets
from worker.engine import Engine
from worker.engine.features import LAST, MEAN, pool
from worker.engine.fit import fit
from worker.engine.options import EngineOptions
from worker.engine.planner import PACK, plan_batches


def all_layers(engine: Engine, texts: list[str]) -> dict[tuple[int, str], torch.Tensor]:
    """(layer, pool) -> (n, d) features, for every layer and both poolings, in input order."""
    suffixes = engine.prompt.ticket_ids(engine.tokenizer, texts)
    after = len(engine.prompt.after_ids)
    plans = plan_batches(
        [len(s) for s in suffixes], max_items=32, max_tokens=8192, mode=PACK, max_row_len=128
    )
    out: dict[tuple[int, str], torch.Tensor] = {}
    scorer = engine.scorer
    for plan in plans:
        ids, pos, mask, query = scorer._layout(suffixes, plan, tree=False)
        from worker.engine.scorer import PrefixCache

        with torch.inference_mode():
            res = scorer.body(
                input_ids=ids,
                position_ids=pos,
                attention_mask=mask,
                use_cache=True,
                output_hidden_states=True,
                **{scorer._cache_kw: PrefixCache(scorer.prefix_kv)},
            )
        order = torch.tensor([i for row in plan.rows for i in row])
        lengths = [len(suffixes[i]) for i in order.tolist()]
        own = [max(0, n - after) for n in lengths]
        for layer, h in enumerate(res.hidden_states):
            if layer == 0:
                continue
            flat = h.reshape(-1, h.shape[-1])
            for how in (MEAN, LAST):
                feats = pool(flat, query[:, 0], lengths, own, how)
                buf = out.setdefault((layer, how), torch.empty(len(texts), feats.shape[1]))
                buf[order] = feats.cpu()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", nargs="+", required=True)
    parser.add_argument("--task")
    parser.add_argument("--layers", default="4,6,8,10,12,15,20,25,30")
    args = parser.parse_args()
    engine = Engine.load(EngineOptions(dtype="float32", task=args.task, head="none"))
    labels = list(engine.task.labels)
    train = read_tickets(args.train)
    start = time.perf_counter()
    tr = all_layers(engine, [t.text for t in train])
    print(f"train features: {len(train)} tickets in {time.perf_counter() - start:.1f} s (all layers)")
    y = [labels.index(t.label or "") for t in train]
    tests = {}
    for path in args.test:
        rows = read_tickets(path)
        tests[path] = (
            all_layers(engine, [t.text for t in rows]),
            [labels.index(t.label or "") for t in rows],
        )
    layers = [int(x) for x in args.layers.split(",")]
    print(f"{'layer':>5} {'pool':>5} {'cv':>7} {'l2':>7} " + " ".join(f"{p[-24:]:>26}" for p in tests))
    for layer in layers:
        for how in (MEAN, LAST):
            f = fit(tr[(layer, how)], y, len(labels))
            accs = []
            for feats, truth in tests.values():
                pred = (feats[(layer, how)] @ f.weight.T + f.bias).argmax(1)
                accs.append(float((pred == torch.tensor(truth)).double().mean()))
            cv = f"{f.cv_accuracy:.1%}" if f.cv_accuracy is not None else "-"
            print(
                f"{layer:>5} {how:>5} {cv:>7} {f.l2:>7.0e} " + " ".join(f"{a:>26.1%}" for a in accs),
                flush=True,
            )


if __name__ == "__main__":
    main()

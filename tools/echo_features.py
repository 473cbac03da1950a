"""Does reading the ticket twice give a head better features? Measured, not shipped (docs/head.md).

A causal model's state at a ticket's token has seen only the tokens before it. "Echo" features (Springer
et al., 2024, "Repetition Improves Language Model Embeddings") repeat the text and pool its second
reading, where every token has seen the whole ticket. This tool runs the engine's packed, prefix-cached
pass over ``ticket + ECHO + ticket + hand-over`` once per file and keeps, per layer, the mean and max over
the first reading (what the ordinary pass computes: the model is causal, the first reading comes first)
and over the second; then fits the product's head (:func:`worker.engine.fit._train`) on recipes mixing
them, chooses the penalty on a fifth of the training file held out, and scores the test file once.

    python -m tools.echo_features --task out/b77/task.toml \
        --train ../shared/data/banking77/train.csv --test ../shared/data/banking77/test.csv
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import torch

from tools.head_features import layer_states, read_labelled
from tools.head_recipes import accuracy
from worker.engine import Engine
from worker.engine.fit import _train
from worker.engine.options import EngineOptions

ECHO = "\nThe message again: "
LAYERS = (4, 6, 8, 10, 12, 24, 28)
# name -> parts (pooling over a reading, layer): mean1/max1 the first reading, mean2/max2 the second
RECIPES: dict[str, list[tuple[str, int]]] = {
    "8+12 mean+max": [("mean1", 8), ("mean1", 12), ("max1", 8), ("max1", 12)],
    "8+12 mean+max + echo 28": [("mean1", 8), ("mean1", 12), ("max1", 8), ("max1", 12), ("mean2", 28)],
    "8+12 mean+max + echo 24,28": [
        *[("mean1", 8), ("mean1", 12), ("max1", 8), ("max1", 12)],
        *[("mean2", 24), ("mean2", 28)],
    ],
    "4-12 even mean+max": [(p, k) for p in ("mean1", "max1") for k in (4, 6, 8, 10, 12)],
    "4-12 even mean+max + echo 24,28": [
        *[(p, k) for p in ("mean1", "max1") for k in (4, 6, 8, 10, 12)],
        *[("mean2", 24), ("mean2", 28)],
    ],
}


@torch.inference_mode()
def echo_pass(engine: Engine, texts: list[str]) -> dict[str, torch.Tensor]:
    """pooling -> (n, len(LAYERS), d) float16: mean and max over each reading, in input order."""
    tok = engine.tokenizer
    ids = tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ids = [i[: engine.prompt.max_ticket_tokens] for i in ids]
    sep = tok(ECHO, add_special_tokens=False)["input_ids"]
    suffixes = [[*i, *sep, *i, *engine.prompt.after_ids] for i in ids]
    d = int(engine.loaded.model.config.hidden_size)
    out = {
        k: torch.empty(len(texts), len(LAYERS), d, dtype=torch.float16)
        for k in ("mean1", "max1", "mean2", "max2")
    }
    wanted = [k - 1 for k in LAYERS]
    for order, ends, states in layer_states(engine, suffixes, max(LAYERS)):
        stack = states[:, wanted]
        for item, end in zip(order, ends, strict=True):
            k = len(ids[item]) or 1  # an empty ticket: the first token after it
            first = end - len(suffixes[item]) + 1
            second = first + len(ids[item]) + len(sep)
            for reading, start in (("1", first), ("2", second)):
                own = stack[start : start + k].float()
                out["mean" + reading][item] = own.mean(0).half()
                out["max" + reading][item] = own.amax(0).half()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", required=True, help="a task file without further questions")
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    engine = Engine.load(EngineOptions(task=args.task, head="none", dtype=args.dtype))
    data = {}
    for split, path in (("train", args.train), ("test", args.test)):
        texts, labels = read_labelled(path)
        start = time.perf_counter()
        data[split] = (echo_pass(engine, texts), labels)
        print(f"{path}: {len(texts)} tickets in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    names = sorted(set(data["train"][1]) | set(data["test"][1]))
    ytr = torch.tensor([names.index(v) for v in data["train"][1]])
    yte = torch.tensor([names.index(v) for v in data["test"][1]])
    idx = list(range(len(ytr)))
    random.Random(0).shuffle(idx)
    hold = torch.zeros(len(ytr), dtype=torch.bool)
    hold[idx[: len(idx) // 5]] = True

    def x(split: str, parts: list[tuple[str, int]]) -> torch.Tensor:
        f = data[split][0]
        return torch.cat([f[p][:, LAYERS.index(k)].float() for p, k in parts], 1).double()

    print(f"{engine.describe()['dtype']}; penalty chosen on {int(hold.sum())} held-out training rows")
    for name, parts in RECIPES.items():
        xtr = x("train", parts)
        held = {}
        for l2 in (1e-3, 3e-3):
            w, b = _train(xtr[~hold], ytr[~hold], len(names), l2)
            held[l2] = accuracy(xtr[hold], ytr[hold], w, b)
        best = max(held, key=lambda k: (held[k], k))
        w, b = _train(xtr, ytr, len(names), best)
        test = accuracy(x("test", parts), yte, w, b)
        print(f"{name:<34} held-out {held[best]:.1%} (l2 {best:g})  test {test:.1%}", flush=True)


if __name__ == "__main__":
    main()

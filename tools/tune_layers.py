"""Would fine-tuning the layers a head reads pay? A measurement, not a product path (docs/head.md).

Trains the layers between the lowest and the highest layer a recipe reads (9-12 for the default's 8 and 12;
``--layers 9-12``) on labelled tickets so that their states separate the labels better, then writes the whole
model, tuned layers in place, as a directory ``--model`` loads: the worker, ``train``, ``eval``, ``verify``
and ``tools.head_features extract --model`` run it as any other model (heads record the weights' digest, so
each must be trained on it).

The objective: a linear classifier over the mean and max of the two layers' states (the ticket's own
tokens), cross-entropy with label smoothing 0.1, AdamW on the layers (``--lr``) and the classifier (1e-3),
one cycle. Each ticket's states below the tuned layers are computed once by the engine's own packed,
prefix-cached pass and kept; each step runs only the tuned layers, the tickets attending to the task's
prefix exactly as in the pass, and the prefix itself runs through the tuned layers too (it does in the
saved model). The layers train in float32.

    python -m tools.tune_layers --task T.toml --tickets labelled.csv --out out/tuned
    ticketq-worker train --task T.toml --tickets labelled.csv --model out/tuned --out out/tuned.head
    ticketq-worker eval --task T.toml --tickets test.csv --model out/tuned --head out/tuned.head

Measured on Banking77 (docs/head.md, "Tuning the layers the head reads"): +0.2 to +1.1 points from the full
training split (the richer the recipe, the less), -0.4 from 10 rows per intent with names and
self-training; the cross-validation ``train`` reports on the tuned tickets is optimistic (the layers learnt
them). Not shipped.
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from producer import config
from producer.config import group, option
from producer.exitcodes import Exit
from producer.options import QuestionOptions
from tools.head_features import layer_states
from worker.bench.data import DataError, read_items
from worker.engine.options import NO_HEAD, EngineOptions
from worker.engine.recipe import Recipe
from worker.engine.scorer import PrefixCache

if TYPE_CHECKING:
    from worker.engine import Engine

BATCH = 32  # tickets per step


class TuneError(ValueError):
    """The tuning cannot run as asked."""


class _Record:
    """The cache for the prefix's own pass through the tuned layers: keeps each layer's keys and values."""

    def __init__(self) -> None:
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *a: Any, **kw: Any) -> Any:
        self.kv[layer_idx] = (k, v)
        return k, v


def span(recipe: Recipe) -> tuple[int, int]:
    """(first, last): the lowest and the highest layer of ``recipe``'s ordinary-pass parts; the layers
    first+1..last are the ones to tune (a second reading's layers are not read in between)."""
    layers = sorted({p.layer for p in recipe.model_parts if p.pool != "echo"})
    if len(layers) < 2:
        raise TuneError(
            f"recipe {recipe} reads fewer than two layers of the ordinary pass: there are no layers "
            "between them to tune (use a recipe such as 8:mean,12:mean,8:max,12:max)"
        )
    return layers[0], layers[-1]


@torch.inference_mode()
def token_states(engine: Engine, texts: Sequence[str], layer: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The prefix's states after ``layer`` (P, d), and each ticket's (its tokens and the hand-over), from
    the engine's own packed, prefix-cached pass, which stops there (:func:`.head_features.layer_states`)."""
    suffixes = engine.prompt.ticket_ids(engine.tokenizer, texts)
    states: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    for order, ends, stack in layer_states(engine, suffixes, layer):
        flat = stack[:, layer - 1].float()
        for item, end in zip(order, ends, strict=True):
            states[item] = flat[end - len(suffixes[item]) + 1 : end + 1].clone()
    prefix = torch.tensor([list(engine.prompt.prefix_ids)], device=engine.scorer.device)
    out = engine.scorer.body(input_ids=prefix, output_hidden_states=True)
    return out.hidden_states[layer][0].float().clone(), states


class Tuner:
    """Copies of layers first+1..last over kept states: padded batches at the engine's positions, the prefix
    run through the copies too."""

    def __init__(self, engine: Engine, first: int, last: int, prefix_states: torch.Tensor) -> None:
        scorer = engine.scorer
        self.body = scorer.body
        self.frozen_prefix = [(k.float(), v.float()) for k, v in scorer.prefix_kv]
        self.p = scorer.prefix_len
        self.after = len(engine.prompt.after_ids)
        self.first = first
        self.device = scorer.device
        # a head reads the model's last layer as its final, normalized state (features.layer_states)
        self.norm = self.body.norm if last == len(self.body.layers) else None
        self.prefix_states = prefix_states.float().to(self.device)[None]
        self.layers = copy.deepcopy(self.body.layers[first:last]).float()
        for q in self.layers.parameters():
            q.requires_grad_(True)

    def prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's prefix keys and values: the tuned layers' from the prefix run through them."""
        h = self.prefix_states
        p = h.shape[1]
        dev = self.device
        pos = torch.arange(p, device=dev)[None]
        mask = torch.zeros(1, 1, p, p, device=dev).masked_fill_(
            ~torch.tril(torch.ones(p, p, dtype=torch.bool, device=dev)), torch.finfo(torch.float32).min
        )
        pe, rec = self.body.rotary_emb(h, pos), _Record()
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos, cache=rec, position_embeddings=pe)
        kv = list(self.frozen_prefix)
        for i, pair in rec.kv.items():
            kv[i] = pair
        return kv

    def features(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        """(len(states), 4d): the mean of the first layer's states over the ticket's own tokens, of the
        last's, then their maxima."""
        t, b, d = max(len(s) for s in states), len(states), states[0].shape[-1]
        dev = self.device
        h0 = torch.zeros(b, t, d, device=dev)
        own = torch.zeros(b, t, dtype=torch.bool, device=dev)
        valid = torch.zeros(b, t, dtype=torch.bool, device=dev)
        for row, s in enumerate(states):
            n = len(s)
            h0[row, :n], valid[row, :n] = s, True
            own[row, : max(0, n - self.after) or n] = True
        pos = (torch.arange(t, device=dev) + self.p).expand(b, t)
        allow = torch.tril(torch.ones(t, t, dtype=torch.bool, device=dev))[None] & valid[:, None, :]
        allow |= torch.eye(t, dtype=torch.bool, device=dev)[None]
        mask = torch.zeros(b, 1, t, self.p + t, device=dev)
        mask[:, 0, :, self.p :].masked_fill_(~allow, torch.finfo(torch.float32).min)
        h, pe, cache = h0, self.body.rotary_emb(h0, pos), PrefixCache(self.prefix_kv())
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos, cache=cache, position_embeddings=pe)
        if self.norm is not None:
            h = self.norm(h)
        w = own[..., None].float()

        def pooled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (x * w).sum(1) / w.sum(1), x.masked_fill(~own[..., None], float("-inf")).amax(1)

        (m0, x0), (m1, x1) = pooled(h0), pooled(h)
        return torch.cat([m0, m1, x0, x1], 1)


@dataclass(frozen=True)
class Tuned:
    losses: tuple[float, ...]  # the mean training loss of each epoch
    seconds: float


def default_epochs(rows: int, batch: int) -> int:
    """Enough passes over the tickets for about 900 steps, 3 at least and 10 at most (measured: 10 over
    770 tickets, 3 over 10,003; docs/head.md, "Tuning the layers the head reads")."""
    steps = -(-rows // batch)
    return min(10, max(3, math.ceil(900 / steps)))


def tune(
    engine: Engine,
    texts: Sequence[str],
    labels: Sequence[str],
    *,
    first: int,
    last: int,
    epochs: int | None = None,
    lr: float = 1e-4,
    batch: int = BATCH,
    seed: int = 0,
    progress: Callable[[int, int, float], None] | None = None,
    epoch_done: Callable[[int, int, float], None] | None = None,
) -> Tuned:
    """Train layers first+1..last of ``engine``'s model on the labelled tickets, then put them in place
    (in the model's dtype): the engine's scorer still holds the old prefix keys and values, so load the
    saved model to use them. ``progress(step, steps, loss)`` after each step, ``epoch_done(epoch, epochs,
    mean loss)`` after each pass (epochs from 1)."""
    if not 1 <= first < last <= len(engine.scorer.body.layers):
        raise TuneError(
            f"cannot tune layers {first + 1}-{last} of a {len(engine.scorer.body.layers)}-layer model"
        )
    if len(set(labels)) < 2:
        raise TuneError("tuning needs tickets of at least two labels")
    torch.manual_seed(seed)
    start = time.perf_counter()
    classes = sorted(set(labels))
    y = torch.tensor([classes.index(v) for v in labels], device=engine.scorer.device)
    prefix, states = token_states(engine, texts, first)
    tuner = Tuner(engine, first, last, prefix)
    with torch.no_grad():
        base = torch.cat(
            [
                tuner.features([states[i] for i in range(s, min(s + 64, len(states)))])
                for s in range(0, len(states), 64)
            ]
        )
    mu, sd = base.mean(0), base.std(0) + 1e-3
    clf = torch.nn.Linear(base.shape[1], len(classes)).to(base.device)
    opt = torch.optim.AdamW(
        [{"params": tuner.layers.parameters(), "lr": lr}, {"params": clf.parameters(), "lr": 1e-3}],
        weight_decay=0.01,
    )
    epochs = epochs or default_epochs(len(texts), batch)
    per_epoch = -(-len(texts) // batch)
    steps = epochs * per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, [lr, 1e-3], total_steps=steps, pct_start=0.1)
    order = list(range(len(texts)))
    losses: list[float] = []
    step = 0
    tuner.layers.train()
    for epoch in range(epochs):
        random.Random(seed * 1000 + epoch).shuffle(order)
        total = 0.0
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            x = (tuner.features([states[i] for i in idx]) - mu) / sd
            loss = torch.nn.functional.cross_entropy(clf(x), y[idx], label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
            step += 1
            if progress:
                progress(step, steps, float(loss.detach()))
        losses.append(total / len(order))
        if epoch_done:
            epoch_done(epoch + 1, epochs, losses[-1])
    layers = engine.scorer.body.layers
    with torch.no_grad():
        for i, tuned in enumerate(tuner.layers):
            target = layers[first + i].state_dict()
            for name, value in tuned.state_dict().items():
                target[name].copy_(value.to(target[name].dtype))
    return Tuned(tuple(losses), time.perf_counter() - start)


def save(engine: Engine, out: str | Path) -> None:
    """The engine's model and tokenizer as a directory ``--model`` loads."""
    engine.loaded.model.save_pretrained(str(out))
    engine.tokenizer.save_pretrained(str(out))


def parse_layers(spec: str) -> tuple[int, int]:
    """``9-12`` -> (8, 12): tune layers 9 to 12, the states after layer 8 as their input."""
    try:
        lo, hi = (int(p) for p in spec.split("-"))
    except ValueError:
        raise ValueError(f"--layers {spec!r}: give FIRST-LAST, e.g. 9-12") from None
    if not 2 <= lo <= hi:  # the input is the states after layer FIRST-1, as a head reads them
        raise ValueError(f"--layers {spec!r}: give FIRST-LAST with 2 <= FIRST <= LAST, e.g. 9-12")
    return lo - 1, hi


@dataclass(frozen=True)
class TuneOptions:
    tickets: str | None = option(
        None, help="labelled tickets: JSONL or CSV with text,label (an id column is optional)"
    )
    out: str | None = option(None, help="the directory to write the tuned model to (new or empty)")
    layers: tuple[int, int] | None = option(
        None,
        help="the layers to tune, FIRST-LAST (e.g. 9-12)",
        shown="those between the lowest and the highest layer the question's recipe reads",
        metavar="FIRST-LAST",
        parse=parse_layers,
    )
    epochs: int | None = option(
        None, help="passes over the tickets", shown="enough for about 900 steps, 3 to 10"
    )
    lr: float = option(1e-4, help="the tuned layers' learning rate (AdamW, one cycle)")
    seed: int = option(0, help="seed of the shuffling and the classifier's start")
    engine: EngineOptions = group(EngineOptions, "engine", env=False)
    asked: QuestionOptions = group(QuestionOptions, "question", env=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, TuneOptions)


def fail(message: str, code: Exit = Exit.CONFIG) -> int:
    print(f"tools.tune_layers: {message}", file=sys.stderr)
    return code


def run(ns: argparse.Namespace) -> int:
    from worker.engine.task import load_task
    from worker.evaluate import check_labels

    try:
        args = config.resolve(TuneOptions, ns)
        if not args.tickets:
            raise DataError("nothing to tune on: give --tickets FILE (labelled tickets)")
        if not args.out:
            raise DataError("nowhere to put the model: give --out DIR")
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise DataError(f"--out {out} exists and is not an empty directory; name a new one")
        if args.epochs is not None and args.epochs < 1:
            raise DataError("--epochs must be 1 or more")
        task = load_task(args.engine.task)
        question = args.asked.question
        items = read_items(args.tickets)
        check_labels(items, task.labels_of(question))
        labels = [it.label or "" for it in items]
        if len(set(labels)) < 2:
            raise DataError(
                f"all {len(labels)} tickets are labelled {labels[0]!r}; tuning needs two labels or more"
            )
    except ValueError as exc:  # bad options, task file, tickets file or labels
        return fail(str(exc))

    from worker.engine.training import TrainingError, recipe_for
    from worker.evaluate import load_engine

    # the layers train in float32; the heads' dtype is the worker's choice when it loads the saved model
    engine = load_engine("tune_layers", replace(args.engine, head=NO_HEAD, dtype="float32"), questions=False)
    if isinstance(engine, int):
        return engine
    engine = engine.asking(question)
    try:
        first, last = args.layers or span(recipe_for(engine))
        if last > engine.n_layers:
            raise TuneError(f"--layers: the model has {engine.n_layers} layers")
    except (TrainingError, TuneError) as exc:
        return fail(str(exc))
    epochs = args.epochs or default_epochs(len(items), BATCH)
    print(
        f"tuning layers {first + 1}-{last} of {engine.describe()['model']} on {len(items)} tickets of "
        f"{len(set(labels))} labels ({args.tickets}), {epochs} epochs",
        file=sys.stderr,
    )
    bar = _bar(epochs * -(-len(items) // BATCH))
    try:
        done = tune(
            engine,
            [it.text for it in items],
            labels,
            first=first,
            last=last,
            epochs=epochs,
            lr=args.lr,
            seed=args.seed,
            progress=bar,
            epoch_done=lambda e, n, loss: bar.write(f"epoch {e}/{n}: training loss {loss:.3f}"),
        )
    finally:
        bar.close()
    out.mkdir(parents=True, exist_ok=True)
    save(engine, out)
    losses = ", ".join(f"{x:.3f}" for x in done.losses)
    print(f"training loss by epoch: {losses} ({done.seconds:.0f} s)")
    print(
        f"wrote {out}: train every head the task uses on it (ticketq-worker train --model {out} ...), "
        f"then run the workers with --model {out}"
    )
    return Exit.OK


class _bar:
    """A tqdm bar of the steps, on a terminal only."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.tqdm = tqdm(total=total, desc="tune", unit="step", disable=not sys.stderr.isatty())

    def __call__(self, step: int, steps: int, loss: float) -> None:
        self.tqdm.update(step - self.tqdm.n)
        self.tqdm.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def write(self, line: str) -> None:
        """A line on stderr, above the bar (with or without a terminal)."""
        from tqdm import tqdm

        tqdm.write(line, file=sys.stderr)

    def close(self) -> None:
        self.tqdm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tune_layers", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

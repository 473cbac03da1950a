"""Do corrections make the built-in head better? A cheap, repeatable simulation of ``train --from-redis``.

``extract`` computes, once, the features the built-in task's head reads (the engine's own pass, the
default recipe, the default dtype) for the base data (``worker/data/head_train.csv``) and for a held-out
pool: Banking77 *test* queries that are neither in the base data nor in the bundled eval
(``banking77_eval.csv``), labelled through ``routing_map.json`` as ``tools.build_head_data`` does, plus
synthetic tickets of seeds other than the base's 11 and the demo's 7. Each row keeps its *kind*: the
Banking77 intent of a real query, ``synthetic:<label>`` for a synthetic one. Cached under out/.

``simulate`` then repeats, for ``--rounds`` seeds: split the pool into a stream and a fresh set; the head
in use is the base data's fit (L2 by cross-validation, as the task's own head is trained); its wrong
stream labels are corrected; candidates are trained on base + corrections by each method of
:data:`METHODS`; each is scored on the fresh set against the head in use. Reported per method, as mean and
95% interval over rounds: the change in fresh accuracy, and the change on fresh tickets of the corrected
kind (the intents the corrections came from). Scenarios (``SCENARIOS``) make the head in use worse so
that corrections have something to teach: trained on half the base data, on a base missing some intents,
or on the Banking77 queries alone (no synthetic ticket). ::

    nice -n 10 python -m tools.corrections_sim extract            # ~15-30 min on 2 shared cores
    nice -n 10 python -m tools.corrections_sim simulate --scenarios full --rounds 30   # resumable
    python -m tools.corrections_sim report                                             # the tables
    python -m tools.corrections_sim churn        # what one 150-ticket fresh set (the process test) can show

Data building and the statistics are plain Python (tested without torch); torch comes with the fits.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "worker" / "data"
# TICKETQ_BANKING77_DIR (as the tests read it), else ../shared of the checkout (a git worktree sits one
# level deeper: the nearest one up)
BANKING77 = Path(
    os.environ.get("TICKETQ_BANKING77_DIR")
    or next(
        (p / "shared" / "data" / "banking77" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
        ROOT.parent / "shared" / "data" / "banking77",
    )
)
CACHE = ROOT / "out" / "corrections_sim"
SYNTHETIC_SEEDS = (23, 29)  # not the base's 11 nor the demo's 7
SYNTHETIC_PER_SEED = 300


@dataclass(frozen=True)
class Row:
    id: str
    text: str
    label: str
    kind: str  # the Banking77 intent, or "synthetic:<label>"


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def base_rows(data: Path = DATA, banking77: Path = BANKING77) -> list[Row]:
    """``head_train.csv`` with each row's kind: ids ``b77-train-NNNNN`` name the row of Banking77's
    train.csv (1-based, as ``tools.build_head_data`` numbers them)."""
    train = _csv(banking77 / "train.csv")
    rows = []
    for r in _csv(data / "head_train.csv"):
        tid = r["id"]
        if tid.startswith("b77-train-"):
            kind = train[int(tid.removeprefix("b77-train-")) - 1]["category"]
        else:
            kind = f"synthetic:{r['label']}"
        rows.append(Row(tid, r["text"], r["label"], kind))
    return rows


def pool_rows(
    data: Path = DATA,
    banking77: Path = BANKING77,
    seeds: Sequence[int] = SYNTHETIC_SEEDS,
    per_seed: int = SYNTHETIC_PER_SEED,
) -> list[Row]:
    """Held-out tickets: no text also in the base data or the bundled eval; labels as the task's."""
    from tools.synthetic import generate

    routing: dict[str, str] = json.loads((banking77 / "routing_map.json").read_text(encoding="utf-8"))
    seen = {normalized(r["text"]) for r in _csv(data / "head_train.csv")}
    seen |= {normalized(r["text"]) for r in _csv(data / "banking77_eval.csv")}
    rows = []
    for n, r in enumerate(_csv(banking77 / "test.csv"), start=1):
        text, label = r["text"].strip(), routing[r["category"]]
        key = normalized(text)
        if label != "other" and key not in seen:
            seen.add(key)
            rows.append(Row(f"b77-test-{n:05d}", text, label, r["category"]))
    for seed in seeds:
        for t in generate(per_seed, seed=seed):
            if normalized(t.text) not in seen:
                seen.add(normalized(t.text))
                rows.append(Row(t.id, t.text, t.label, f"synthetic:{t.label}"))
    return rows


def _progress(name: str, total: int) -> Any:
    done, start = 0, time.perf_counter()

    def step(n: int) -> None:
        nonlocal done
        before, done = done, done + n
        if done // 200 != before // 200 or done == total:
            rate = done / (time.perf_counter() - start)
            print(f"  {name}: {done}/{total} tickets, {rate:.1f}/s", file=sys.stderr, flush=True)

    return step


def extract(args: argparse.Namespace) -> int:
    import torch

    from worker.engine import Engine
    from worker.engine.features import Recipe
    from worker.engine.options import EngineOptions

    engine = Engine.load(EngineOptions(head="none", dtype=args.dtype, threads=args.threads))
    info = engine.describe()
    recipe = Recipe.default(engine.n_layers)
    out = Path(args.cache)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("base", base_rows()), ("pool", pool_rows())):
        path = out / f"{name}.pt"
        if path.exists() and not args.again:
            print(f"{path}: cached", file=sys.stderr)
            continue
        start = time.perf_counter()
        x, _ = engine.features([r.text for r in rows], recipe, progress=_progress(name, len(rows)))
        seconds = time.perf_counter() - start
        torch.save(
            {
                "features": x,
                "ids": [r.id for r in rows],
                "labels": [r.label for r in rows],
                "kinds": [r.kind for r in rows],
                "task_labels": list(engine.task.labels),
                "recipe": recipe.to_dict(),
                "model": info["model"],
                "dtype": info["dtype"],
                "seconds": seconds,
            },
            path,
        )
        print(f"wrote {path}: {len(rows)} tickets in {seconds:.0f} s ({info['dtype']})", file=sys.stderr)
    return 0


L2_MODES = ("cv", "keep")  # the penalty chosen by cross-validation (today), or the head in use's
SCENARIOS = ("full", "half", "missing", "no-synthetic")
DEFAULT_METHODS = ("cv", "keep", "keep-w2", "keep-w5", "keep-w10", "keep-auto5", "keep-auto10", "cv-auto5")


class SimError(ValueError):
    """A method, scenario or data request that cannot be simulated; one line."""


@dataclass(frozen=True)
class Method:
    """How a candidate learns base + corrections: ``l2`` (``cv`` or ``keep``) and the corrections'
    weight: ``w<N>`` a fixed weight N, ``auto<K>`` their total weight K% of the base rows', none: 1.
    ``+confirmed``: the stream tickets the head had right are recorded too (the review page's Confirm
    writes a correction with the same label), so the head learns the whole stream, not only its errors."""

    name: str
    l2: str
    weight: str  # "1", "w5", "auto5"
    confirmed: bool = False

    @classmethod
    def parse(cls, name: str) -> Method:
        spec, plus, extra = name.partition("+")
        l2, _, weight = spec.partition("-")
        ok_weight = weight == "" or (
            (weight.startswith("w") and _number(weight[1:]) >= 1)
            or (weight.startswith("auto") and _number(weight[4:]) > 0)
        )
        if l2 not in L2_MODES or not ok_weight or (plus and extra != "confirmed"):
            raise SimError(
                f"unknown method {name!r}: <cv|keep>[-w<N>|-auto<K>][+confirmed], e.g. keep-w5, cv-auto10"
            )
        return cls(name, l2, weight or "1", bool(plus))

    def correction_weight(self, n_base: int, n_corrections: int) -> float:
        return correction_weight(self.weight, n_base, n_corrections)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return -1.0


def correction_weight(spec: str, n_base: int, n_corrections: int) -> float:
    """The weight of each correction: ``"1"``; ``"w<N>"``: N; ``"auto<K>"``: so that the corrections
    together weigh K% of the base rows, never less than 1 each."""
    if spec == "1" or n_corrections == 0:
        return 1.0
    if spec.startswith("w"):
        return float(spec[1:])
    if spec.startswith("auto"):
        return max(1.0, float(spec[4:]) / 100 * n_base / n_corrections)
    raise SimError(f"unknown correction weight {spec!r}")


_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)  # 1..10 degrees of freedom


def t95(n: int) -> float:
    """Two-sided 95% quantile of Student's t with n-1 degrees of freedom: tabled up to 10, then the
    Cornish-Fisher expansion (within 0.004 of the exact value)."""
    if n < 2:
        return float("nan")
    nu, z = n - 1, 1.959964
    if nu <= len(_T95):
        return _T95[nu - 1]
    return z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (NaN half-width for a single value)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t95(n) * (var / n) ** 0.5


def accuracy(predicted: Sequence[int], truth: Sequence[int], rows: Sequence[int]) -> float | None:
    """Accuracy on ``rows`` (None when there are none)."""
    if not rows:
        return None
    return sum(predicted[i] == truth[i] for i in rows) / len(rows)


def kind_rows(
    kinds: Sequence[str], corrected_kinds: set[str], rows: Sequence[int]
) -> tuple[list[int], list[int]]:
    """``rows`` split into those of a corrected kind and the others."""
    same = [i for i in rows if kinds[i] in corrected_kinds]
    other = [i for i in rows if kinds[i] not in corrected_kinds]
    return same, other


@dataclass(frozen=True)
class Split:
    """One cached file: features (float64), label indices, kinds."""

    x: Any  # torch.Tensor (rows, hidden) float64
    y: list[int]
    kinds: list[str]
    dtype: str


def load(path: Path, labels: Sequence[str] | None = None) -> tuple[Split, list[str]]:
    import torch

    data = torch.load(path, map_location="cpu", weights_only=False)
    task_labels = list(data["task_labels"]) if labels is None else list(labels)
    y = [task_labels.index(lab) for lab in data["labels"]]
    x = data["features"].to(torch.float64)
    return Split(x, y, list(data["kinds"]), str(data["dtype"])), task_labels


def scenario_rows(base: Split, scenario: str, seed: int, missing: int) -> tuple[list[int], list[str]]:
    """The base rows the head in use (and the candidates) learn from, and the kinds left out: ``full``
    every row; ``half`` a seeded half of each label; ``missing`` every row but those of ``missing`` seeded
    Banking77 intents (a kind of ticket the head never saw); ``no-synthetic`` the Banking77 queries only
    (the long, e-mail-like synthetic tickets are a channel the head never saw)."""
    import random

    rng = random.Random(seed)
    rows = list(range(len(base.y)))
    if scenario == "full":
        return rows, []
    if scenario == "half":
        kept: list[int] = []
        for label in sorted(set(base.y)):
            of = [i for i in rows if base.y[i] == label]
            kept += rng.sample(of, len(of) // 2)
        return sorted(kept), []
    if scenario == "missing":
        intents = sorted({k for k in base.kinds if not k.startswith("synthetic:")})
        dropped = sorted(rng.sample(intents, missing))
        return [i for i in rows if base.kinds[i] not in dropped], dropped
    if scenario == "no-synthetic":
        return [i for i in rows if not base.kinds[i].startswith("synthetic:")], ["synthetic"]
    raise SimError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")


@dataclass(frozen=True)
class InUse:
    weight: Any
    bias: Any
    l2: float


def one_round(
    base: Split,
    pool: Split,
    labels: Sequence[str],
    methods: Sequence[Method],
    *,
    scenario: str,
    seed: int,
    stream_n: int,
    missing: int,
    in_use_cache: dict[tuple[str, ...], InUse],
) -> dict[str, Any]:
    """One simulated corrections loop: the head in use, its wrong stream labels corrected, each method's
    candidate; accuracies on the fresh set and the publish gate's verdict on each candidate."""
    import random

    import torch

    from worker import gate
    from worker.engine.beyond import cross_refit
    from worker.engine.fit import L2_GRID, fit

    classes = len(labels)
    rows, dropped = scenario_rows(base, scenario, seed, missing)
    key = (scenario,) if scenario == "full" else (scenario, str(seed))
    if key not in in_use_cache:
        f = fit(base.x[rows], [base.y[i] for i in rows], classes, seed=0)  # as the task's head is trained
        in_use_cache[key] = InUse(f.weight.double(), f.bias.double(), f.l2)
    in_use = in_use_cache[key]

    order = list(range(len(pool.y)))
    random.Random(seed).shuffle(order)
    stream, fresh = order[:stream_n], order[stream_n:]
    before = (pool.x @ in_use.weight.T + in_use.bias).argmax(1).tolist()
    corrected = [i for i in stream if before[i] != pool.y[i]]
    kinds = {pool.kinds[i] for i in corrected}
    same, other = kind_rows(pool.kinds, kinds, fresh)
    top = Counter(pool.y[i] for i in corrected).most_common(1)
    top_rows = [i for i in fresh if top and pool.y[i] == top[0][0]]

    def evidence(learnt: Sequence[int]) -> tuple[Any, list[int], list[int], list[int]]:
        """Base + the recorded stream rows: features, labels, the recorded rows' places, and the head in
        use judged out of fold on it as the gate does (refitted on the base rows, at its L2)."""
        x = torch.cat([base.x[rows], pool.x[list(learnt)]])
        y = [base.y[i] for i in rows] + [pool.y[i] for i in learnt]
        recorded = list(range(len(rows), len(y)))
        is_base = [i < len(rows) for i in range(len(y))]
        oof = (
            cross_refit(x, y, classes, in_use.l2, fold=gate.folds_for(y, 0), train=is_base).argmax(1).tolist()
        )
        return x, y, recorded, oof

    evidences: dict[bool, tuple[Any, list[int], list[int], list[int]]] = {}

    def scores(predicted: Sequence[int]) -> dict[str, float | None]:
        return {
            "fresh": accuracy(predicted, pool.y, fresh),
            "kind": accuracy(predicted, pool.y, same),
            "other": accuracy(predicted, pool.y, other),
            "top_label": accuracy(predicted, pool.y, top_rows),
            "stream": accuracy(predicted, pool.y, stream),
        }

    out: dict[str, Any] = {
        "scenario": scenario,
        "seed": seed,
        "base_rows": len(rows),
        "dropped": dropped,
        "corrections": len(corrected),
        "corrected_kinds": sorted(kinds),
        "fresh_n": len(fresh),
        "kind_n": len(same),
        "in_use": {"l2": in_use.l2, **scores(before)},
        "methods": {},
    }
    for method in methods:
        if method.confirmed not in evidences:
            evidences[method.confirmed] = evidence(stream if method.confirmed else corrected)
        x, y, recorded, current_oof = evidences[method.confirmed]
        w = method.correction_weight(len(rows), len(recorded))
        weights = None if w == 1.0 else [1.0] * len(rows) + [w] * len(recorded)
        grid = (in_use.l2,) if method.l2 == "keep" else L2_GRID
        f = fit(x, y, classes, seed=0, grid=grid, row_weight=weights)
        after = (pool.x @ f.weight.double().T + f.bias.double()).argmax(1).tolist()
        verdict = None
        if f.cv_predicted is not None:
            verdict = gate.judge(
                [labels[i] for i in y],
                [labels[i] for i in f.cv_predicted],
                [labels[i] for i in current_oof],
                recorded,
                labels,
                current_name="in use",
                method="refit",
            )
        out["methods"][method.name] = {
            "l2": f.l2,
            "weight": w,
            **scores(after),
            "gate_refused": None if verdict is None else verdict.refused,
            "gate_candidate": None if verdict is None else verdict.candidate.accuracy,
            "gate_current": None if verdict is None else verdict.current.accuracy,
        }
    return out


METRICS = ("fresh", "kind", "other", "top_label")


def summarize(runs: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Over rounds: the method's change against the head in use per metric (mean, 95% half-width, rounds
    worse), how often the gate would have published it, the corrections and the accuracy before."""
    out: dict[str, Any] = {"rounds": len(runs)}
    for metric in METRICS:
        deltas = [
            r["methods"][method][metric] - r["in_use"][metric]
            for r in runs
            if r["methods"][method][metric] is not None and r["in_use"][metric] is not None
        ]
        mean, half = mean_ci(deltas)
        befores = [r["in_use"][metric] for r in runs if r["in_use"][metric] is not None]
        out[metric] = {
            "before": sum(befores) / len(befores) if befores else None,
            "delta": mean,
            "ci": half,
            "worse": sum(d < 0 for d in deltas),
            "better": sum(d > 0 for d in deltas),
            "n": len(deltas),
        }
    verdicts = [r["methods"][method]["gate_refused"] for r in runs]
    out["published"] = sum(v is False for v in verdicts)
    out["corrections"] = sum(r["corrections"] for r in runs) / len(runs)
    out["weight"] = sum(r["methods"][method]["weight"] for r in runs) / len(runs)
    l2s = Counter(r["methods"][method]["l2"] for r in runs)
    out["l2"] = {f"{k:g}": v for k, v in sorted(l2s.items())}
    return out


def _pp(delta: float, half: float) -> str:
    return f"{100 * delta:+.2f} ± {100 * half:.2f}"


def table(runs: Sequence[dict[str, Any]], methods: Sequence[str]) -> str:
    """One markdown table: a row per method, changes in points (mean ± 95% half-width over rounds)."""
    first = summarize(runs, methods[0])
    f, k = first["fresh"], first["kind"]
    lines = [
        f"head in use: fresh {100 * f['before']:.2f}%, corrected kind {100 * k['before']:.2f}% "
        f"(mean of {len(runs)} rounds; {first['corrections']:.1f} corrections a round)",
        "",
        "| method | weight | L2 | fresh Δ (pts) | worse | corrected kind Δ | worse | other kinds Δ "
        "| corrected label Δ | published by the gate |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in methods:
        s = summarize(runs, name)
        l2 = ", ".join(f"{k}×{v}" for k, v in s["l2"].items())
        lines.append(
            f"| {name} | {s['weight']:.1f} | {l2} | {_pp(s['fresh']['delta'], s['fresh']['ci'])} "
            f"| {s['fresh']['worse']}/{s['fresh']['n']} | {_pp(s['kind']['delta'], s['kind']['ci'])} "
            f"| {s['kind']['worse']}/{s['kind']['n']} | {_pp(s['other']['delta'], s['other']['ci'])} "
            f"| {_pp(s['top_label']['delta'], s['top_label']['ci'])} | {s['published']}/{s['rounds']} |"
        )
    return "\n".join(lines)


def _key(r: dict[str, Any]) -> tuple[str, int, int, int]:
    """What makes two rounds the same: scenario, stream size, intents left out (missing) and seed."""
    return r["scenario"], r["stream"], r.get("missing", 0), r["seed"]


def read_rounds(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every round of the JSON Lines files; lines of the same round (the same split, other methods)
    are merged, the last written winning for a method computed twice."""
    rounds: dict[tuple[str, int, int, int], dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    r = json.loads(line)
                    if _key(r) in rounds:
                        r["methods"] = rounds[_key(r)]["methods"] | r["methods"]
                    rounds[_key(r)] = r
    return list(rounds.values())


def simulate(args: argparse.Namespace) -> int:
    """Run the rounds not yet in ``--rounds-file`` (it is appended to a line per round: resumable)."""
    import torch

    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    base, labels = load(cache / "base.pt")
    pool, _ = load(cache / "pool.pt", labels)
    methods = [Method.parse(m) for m in args.methods.split(",") if m]
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            raise SimError(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    out = Path(args.rounds_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {_key(r): set(r["methods"]) for r in read_rounds([out])}
    print(
        f"base {len(base.y)}, pool {len(pool.y)} ({pool.dtype}); stream {args.stream}, fresh the rest; "
        f"{args.rounds} rounds; {torch.get_num_threads()} threads; to {out}",
        file=sys.stderr,
    )
    began = time.perf_counter()
    in_use: dict[tuple[str, ...], InUse] = {}
    for scenario in scenarios:
        for seed in range(args.first_seed, args.first_seed + args.rounds):
            missing = args.missing if scenario == "missing" else 0
            todo = [m for m in methods if m.name not in done.get((scenario, args.stream, missing, seed), ())]
            if not todo:
                continue
            r = one_round(
                base,
                pool,
                labels,
                todo,
                scenario=scenario,
                seed=seed,
                stream_n=args.stream,
                missing=args.missing,
                in_use_cache=in_use,
            )
            r |= {"stream": args.stream, "missing": missing, "dtype": pool.dtype}
            with out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(r) + "\n")
            fresh = " ".join(
                f"{m.name} {100 * (r['methods'][m.name]['fresh'] - r['in_use']['fresh']):+.2f}" for m in todo
            )
            print(
                f"  {scenario} seed {seed}: {r['corrections']} corrections, in use "
                f"{100 * r['in_use']['fresh']:.2f}%; {fresh} ({time.perf_counter() - began:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    return 0


def report(args: argparse.Namespace) -> int:
    """A table per scenario and stream size, over the rounds of the files, for the methods all have."""
    paths = [Path(p) for p in args.rounds_files] or sorted(Path(args.cache).glob("*.jsonl"))
    rounds = read_rounds(paths)
    if not rounds:
        raise SimError(f"no rounds in {', '.join(map(str, paths)) or args.cache}")
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in sorted(rounds, key=_key):
        groups.setdefault(_key(r)[:3], []).append(r)
    for (scenario, stream, missing), runs in groups.items():
        names = [m for m in runs[0]["methods"] if all(m in r["methods"] for r in runs)]
        left = f", {missing} intents left out" if missing else ""
        print(f"\n### {scenario} (stream {stream}{left}; {runs[0].get('dtype', '?')} features)\n")
        print(table(runs, names))
    return 0


def churn(args: argparse.Namespace) -> int:
    """What one small fresh set can show: per round of the ``full`` scenario, the fresh tickets whose
    label the default method (``keep``: unweighted, the head in use's L2) changes, and how often a random
    ``--sample``-ticket fresh set loses one ticket or more, two or more (what the process test, with one
    150-ticket fresh set, can and cannot assert)."""
    import random

    import torch

    from worker.engine.fit import _train, fit

    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    base, labels = load(cache / "base.pt")
    pool, _ = load(cache / "pool.pt", labels)
    in_use = fit(base.x, base.y, len(labels), seed=0)
    before = (pool.x @ in_use.weight.double().T + in_use.bias.double()).argmax(1).tolist()
    changed, lose = [], [0, 0]
    draws = 0
    for seed in range(args.first_seed, args.first_seed + args.rounds):
        order = list(range(len(pool.y)))
        random.Random(seed).shuffle(order)
        stream, fresh = order[: args.stream], order[args.stream :]
        corrected = [i for i in stream if before[i] != pool.y[i]]
        x = torch.cat([base.x, pool.x[corrected]])
        y = torch.tensor(base.y + [pool.y[i] for i in corrected])
        w, b = _train(x, y, len(labels), in_use.l2)
        after = (pool.x @ w.T + b).argmax(1).tolist()
        changed.append(sum(after[i] != before[i] for i in fresh) / len(fresh))
        net = [int(after[i] == pool.y[i]) - int(before[i] == pool.y[i]) for i in fresh]
        rng = random.Random(seed)
        for _ in range(args.draws):
            gained = sum(net[j] for j in rng.sample(range(len(net)), args.sample))
            lose[0] += gained <= -1
            lose[1] += gained <= -2
            draws += 1
    mean = 100 * sum(changed) / len(changed)
    print(
        f"full scenario, keep, {len(changed)} rounds: labels changed on {mean:.2f}% of fresh tickets "
        f"(at most {100 * max(changed):.2f}%); a random {args.sample}-ticket fresh set loses >= 1 ticket "
        f"in {100 * lose[0] / draws:.1f}% of draws, >= 2 in {100 * lose[1] / draws:.1f}%"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.corrections_sim", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="the head's features of the base data and the held-out pool, cached")
    ex.add_argument("--cache", default=str(CACHE))
    ex.add_argument("--dtype", default="auto")
    ex.add_argument("--threads", type=int, default=None)
    ex.add_argument("--again", action="store_true", help="extract even when cached")
    sim = sub.add_parser("simulate", help="corrections loops over seeded rounds, from the cached features")
    sim.add_argument("--cache", default=str(CACHE))
    sim.add_argument("--rounds", type=int, default=30)
    sim.add_argument("--first-seed", type=int, default=0)
    sim.add_argument("--stream", type=int, default=150, help="stream tickets per round (the rest: fresh)")
    sim.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated (see Method)")
    sim.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}"
    )
    sim.add_argument("--missing", type=int, default=15, help="intents left out of the base (missing)")
    sim.add_argument("--threads", type=int, default=1, help="torch threads (1: best on a shared 2-core box)")
    sim.add_argument(
        "--rounds-file", default=str(CACHE / "rounds.jsonl"), help="appended to, a line per round"
    )
    rep = sub.add_parser("report", help="the tables, from the rounds files")
    rep.add_argument("rounds_files", nargs="*", help="JSON Lines of rounds (default: the cache's *.jsonl)")
    rep.add_argument("--cache", default=str(CACHE))
    ch = sub.add_parser("churn", help="how many fresh labels the default changes; what 150 tickets can show")
    ch.add_argument("--cache", default=str(CACHE))
    ch.add_argument("--rounds", type=int, default=30)
    ch.add_argument("--first-seed", type=int, default=0)
    ch.add_argument("--stream", type=int, default=150)
    ch.add_argument("--sample", type=int, default=150, help="fresh tickets in one small set")
    ch.add_argument("--draws", type=int, default=2000, help="small sets drawn per round")
    ch.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    commands = {"extract": extract, "simulate": simulate, "report": report, "churn": churn}
    try:
        return commands[args.command](args)
    except SimError as exc:
        print(f"corrections_sim: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

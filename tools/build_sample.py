"""Build the small data files bundled in worker/data/ (see worker/data/README.md).

- ``sample_tickets.jsonl``: the demo stream. 240 synthetic tickets (tools.synthetic, seed 7) and 60 real
  Banking77 queries (20 per routing class), shuffled together.
- ``banking77_eval.csv``: 400 real Banking77 queries for accuracy evaluation, stratified by routing class
  (134 / 133 / 133) and spread evenly over the intents within each class.

Banking77 rows come from its test split mapped through routing_map.json; intents routed to ``other`` are
left out. The eval rows and the demo's real rows do not overlap. Everything is seeded, so running this
again over the same inputs gives byte-identical files:

    python -m tools.build_sample [--banking77 ../shared/data/banking77] [--out worker/data]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.synthetic import LABELS, generate

ROOT = Path(__file__).resolve().parents[1]

SEED = 7
SYNTHETIC_TICKETS = 240
SAMPLE_REAL_PER_LABEL = 20
EVAL_ROWS = 400


@dataclass(frozen=True)
class Query:
    id: str  # "b77-<row>": the 1-based data row in Banking77's test.csv
    text: str
    intent: str
    label: str


def load_banking77(directory: Path) -> list[Query]:
    """Banking77's test split with each intent mapped to a routing class; ``other`` is dropped."""
    routing: dict[str, str] = json.loads((directory / "routing_map.json").read_text(encoding="utf-8"))
    out = []
    with (directory / "test.csv").open(newline="", encoding="utf-8") as f:
        for row_number, row in enumerate(csv.DictReader(f), start=1):
            label = routing[row["category"]]
            if label in LABELS:
                out.append(Query(f"b77-{row_number:04d}", row["text"].strip(), row["category"], label))
    return out


def split_evenly(total: int, parts: int) -> list[int]:
    """400 over 3 -> [134, 133, 133]."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def stratified(queries: Iterable[Query], per_label: dict[str, int], rng: random.Random) -> list[Query]:
    """``per_label[label]`` queries of each label, taken round-robin over that label's intents so every
    intent is represented about equally; in source order."""
    by_intent: dict[str, dict[str, list[Query]]] = defaultdict(lambda: defaultdict(list))
    for q in queries:
        by_intent[q.label][q.intent].append(q)
    chosen: list[Query] = []
    for label in LABELS:
        pools = [by_intent[label][intent] for intent in sorted(by_intent[label])]
        for pool in pools:
            rng.shuffle(pool)
        want = per_label[label]
        if want > sum(len(p) for p in pools):
            raise ValueError(f"only {sum(len(p) for p in pools)} {label} queries, {want} wanted")
        taken = 0
        while taken < want:
            for pool in pools:
                if pool and taken < want:
                    chosen.append(pool.pop())
                    taken += 1
    return sorted(chosen, key=lambda q: q.id)


def build(banking77: Path, out: Path) -> None:
    rng = random.Random(SEED)
    queries = load_banking77(banking77)

    eval_rows = stratified(queries, dict(zip(LABELS, split_evenly(EVAL_ROWS, len(LABELS)), strict=True)), rng)
    taken = {q.id for q in eval_rows}
    remaining = [q for q in queries if q.id not in taken]
    real = stratified(remaining, dict.fromkeys(LABELS, SAMPLE_REAL_PER_LABEL), rng)

    with (out / "banking77_eval.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["id", "text", "label"])
        writer.writerows([q.id, q.text, q.label] for q in eval_rows)

    sample: list[dict[str, str]] = [
        {"id": t.id, "text": t.text, "label": t.label, "source": "synthetic"}
        for t in generate(SYNTHETIC_TICKETS, seed=SEED)
    ]
    sample += [{"id": q.id, "text": q.text, "label": q.label, "source": "banking77"} for q in real]
    rng.shuffle(sample)
    with (out / "sample_tickets.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in sample)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--banking77", type=Path, default=ROOT.parent / "shared" / "data" / "banking77")
    parser.add_argument("--out", type=Path, default=ROOT / "worker" / "data")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build(args.banking77, args.out)
    print(f"wrote {args.out / 'sample_tickets.jsonl'} and {args.out / 'banking77_eval.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

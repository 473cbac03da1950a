"""Build ``worker/data/head_train.csv``: the labelled tickets the built-in task's head is trained from.

- 1,200 real queries from Banking77's *train* split (400 per routing class, spread evenly over the
  intents of each class), mapped onto billing / technical / account with routing_map.json; intents
  routed to ``other`` are left out. The bundled eval file and the demo's real rows come from the *test*
  split, so no row is shared; rows whose text also occurs there (Banking77 repeats a few queries across
  its splits) are dropped all the same.
- 300 synthetic tickets from the seeded generator with seed 11 (the demo sample uses seed 7); any whose
  text occurs in the demo sample is dropped.

Seeded: running it again over the same inputs writes a byte-identical file.

    python -m tools.build_head_data [--banking77 ../shared/data/banking77] [--out worker/data/head_train.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a plain checkout, without installing the project

from tools.synthetic import LABELS, generate  # noqa: E402

SEED = 11  # not the demo sample's 7
REAL_PER_LABEL = 400
SYNTHETIC = 300
DATA = ROOT / "worker" / "data"


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def held_out_texts(data: Path) -> set[str]:
    """Texts of the eval file and the demo sample: the head must never train on them."""
    texts = set()
    with (data / "banking77_eval.csv").open(newline="", encoding="utf-8") as f:
        texts |= {normalized(row["text"]) for row in csv.DictReader(f)}
    with (data / "sample_tickets.jsonl").open(encoding="utf-8") as f:
        texts |= {normalized(json.loads(line)["text"]) for line in f if line.strip()}
    return texts


def banking77_train(directory: Path, rng: random.Random, exclude: set[str]) -> list[list[str]]:
    routing: dict[str, str] = json.loads((directory / "routing_map.json").read_text(encoding="utf-8"))
    by_intent: dict[str, dict[str, list[list[str]]]] = defaultdict(lambda: defaultdict(list))
    seen: set[str] = set()
    with (directory / "train.csv").open(newline="", encoding="utf-8") as f:
        for n, row in enumerate(csv.DictReader(f), start=1):
            label, text = routing[row["category"]], row["text"].strip()
            key = normalized(text)
            if label in LABELS and key not in exclude and key not in seen:
                seen.add(key)
                by_intent[label][row["category"]].append([f"b77-train-{n:05d}", text, label])
    rows: list[list[str]] = []
    for label in LABELS:
        pools = [by_intent[label][intent] for intent in sorted(by_intent[label])]
        for pool in pools:
            rng.shuffle(pool)
        taken: list[list[str]] = []
        while len(taken) < REAL_PER_LABEL:  # round-robin over intents: each about equally represented
            before = len(taken)
            for pool in pools:
                if pool and len(taken) < REAL_PER_LABEL:
                    taken.append(pool.pop())
            if len(taken) == before:
                raise ValueError(f"only {len(taken)} {label} queries in the train split")
        rows += taken
    return rows


def build(banking77: Path, out: Path) -> int:
    rng = random.Random(SEED)
    exclude = held_out_texts(DATA)
    rows = banking77_train(banking77, rng, exclude)
    rows += [
        [t.id, t.text, t.label] for t in generate(SYNTHETIC, seed=SEED) if normalized(t.text) not in exclude
    ]
    rows.sort(key=lambda r: r[0])
    with out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["id", "text", "label"])
        writer.writerows(rows)
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--banking77", type=Path, default=ROOT.parent / "shared" / "data" / "banking77")
    parser.add_argument("--out", type=Path, default=DATA / "head_train.csv")
    args = parser.parse_args()
    n = build(args.banking77, args.out)
    print(f"wrote {args.out} ({n} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

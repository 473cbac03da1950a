"""Build the banking example's data: Banking77 queries labelled with a team and one of 77 intents.

Writes, into ``--out`` (default ``examples/banking/data/``, not in git): ``team_train.csv`` and
``intent_train.csv`` (the same ``--per-intent`` rows per intent from Banking77's *train* split, labelled
with the team its ``routing_map.json`` gives the intent, and with the intent), ``team_test.csv`` /
``intent_test.csv`` (every row of the *test* split whose text is not among the training rows), and
``intent_unlabeled.csv`` (id,text: the rest of the *train* split, no labels: what the intent head
self-trains on, ``unlabeled_data`` in task.toml). Seeded: the same arguments give the same files.
``task.toml`` beside this script names them.

    python examples/banking/build.py --banking77 ../shared/data/banking77
    ticketq-worker run --task examples/banking/task.toml      # trains both heads on first use
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parents[1].parent / "shared" / "data" / "banking77"


def read(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [(row["text"].strip(), row["category"]) for row in csv.DictReader(f)]


def write(path: Path, rows: list[tuple[str, str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["id", "text", "label"])
        out.writerows(rows)


def build(
    source: Path,
    out: Path,
    per_intent: int = 10,
    seed: int = 21,
    test_limit: int | None = None,
    unlabeled_limit: int | None = None,
) -> dict:
    """Write the five files; returns counts. ``test_limit``, ``unlabeled_limit``: at most that many test
    rows, unlabelled rows per intent."""
    teams: dict[str, str] = json.loads((source / "routing_map.json").read_text(encoding="utf-8"))
    rng = random.Random(seed)
    by_intent: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for n, (text, intent) in enumerate(read(source / "train.csv"), start=1):
        by_intent[intent].append((f"train-{n:05d}", text))
    train: list[tuple[str, str, str]] = []
    free: list[tuple[str, str]] = []
    for intent in sorted(by_intent):
        rows = sorted(by_intent[intent])
        rng.shuffle(rows)
        train += [(tid, text, intent) for tid, text in rows[:per_intent]]
        free += [(tid, text) for tid, text in rows[per_intent:][:unlabeled_limit]]
    train.sort()
    free.sort()
    seen = {text.lower() for _, text, _ in train}
    kept: dict[str, int] = defaultdict(int)
    test: list[tuple[str, str, str]] = []
    for n, (text, intent) in enumerate(read(source / "test.csv"), start=1):
        if text.lower() in seen or (test_limit is not None and kept[intent] >= test_limit):
            continue
        kept[intent] += 1
        test.append((f"test-{n:04d}", text, intent))
    tested = {text.lower() for _, text, _ in test}  # no test text among the unlabelled ones either
    free = [(tid, text) for tid, text in free if text.lower() not in tested]
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("test", test)):
        write(out / f"intent_{split}.csv", rows)
        write(out / f"team_{split}.csv", [(tid, text, teams[intent]) for tid, text, intent in rows])
    with (out / "intent_unlabeled.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([("id", "text"), *free])
    return {"train": len(train), "test": len(test), "unlabeled": len(free), "intents": len(by_intent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--banking77", type=Path, default=DEFAULT_SOURCE, help="Banking77 folder")
    parser.add_argument("--out", type=Path, default=HERE / "data")
    parser.add_argument("--per-intent", type=int, default=10, help="training rows per intent (default 10)")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    counts = build(args.banking77, args.out, args.per_intent, args.seed)
    print(
        f"wrote {args.out}: {counts['train']} train rows, {counts['test']} test rows, "
        f"{counts['unlabeled']} unlabelled rows, {counts['intents']} intents"
    )


if __name__ == "__main__":
    main()

"""A task the head was not designed around: Banking77 fine-grained intents as labels.

Writes, into ``--out``: ``task.toml`` (the intents as labels, a one-line instruction, no examples),
``train.csv`` (``--per-label`` rows per intent from Banking77's *train* split) and ``test.csv`` (every
row of those intents in its *test* split: disjoint by construction, and rows whose text also occurs in
train are dropped). Seeded. docs/head.md uses it as:

    python -m tools.build_intent_task --out /tmp/intents
    ticketq-worker train --task /tmp/intents/task.toml --tickets /tmp/intents/train.csv \
        --out /tmp/intents/head
    ticketq-worker eval --task /tmp/intents/task.toml --tickets /tmp/intents/test.csv --head /tmp/intents/head
"""

from __future__ import annotations

import argparse
import importlib.util
import random
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
INTENTS = (
    "Refund_not_showing_up",
    "card_arrival",
    "card_not_working",
    "cash_withdrawal_charge",
    "change_pin",
    "exchange_rate",
    "lost_or_stolen_card",
    "pending_transfer",
    "top_up_failed",
    "transfer_fee_charged",
    "verify_my_identity",
    "wrong_amount_of_cash_received",
)


def _example_build() -> ModuleType:
    """examples/banking/build.py, which runs as a plain script (no package): its CSV read and write are
    the ones used here, so the two builders read Banking77 and write tickets files the same way."""
    spec = importlib.util.spec_from_file_location("banking_build", ROOT / "examples" / "banking" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BUILD = _example_build()
read, write = _BUILD.read, _BUILD.write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--banking77", type=Path, default=ROOT.parent / "shared" / "data" / "banking77")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--intents", default=",".join(INTENTS), help="comma-separated Banking77 intents")
    parser.add_argument("--per-label", type=int, default=80, help="training rows per intent (default 80)")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    intents = args.intents.split(",")
    rng = random.Random(args.seed)
    by_intent: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for n, (text, intent) in enumerate(read(args.banking77 / "train.csv"), start=1):
        if intent in intents:
            by_intent[intent].append((f"train-{n:05d}", text, intent))
    train = []
    for intent in intents:
        rng.shuffle(by_intent[intent])
        train += by_intent[intent][: args.per_label]
    seen = {text.lower() for _, text, _ in train}
    test = [
        (f"test-{n:04d}", text, intent)
        for n, (text, intent) in enumerate(read(args.banking77 / "test.csv"), start=1)
        if intent in intents and text.lower() not in seen
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "train.csv", sorted(train))
    write(args.out / "test.csv", test)
    labels = ", ".join(f'"{i}"' for i in intents)
    (args.out / "task.toml").write_text(
        f'name = "banking77-intents"\nlabels = [{labels}]\n'
        "instructions = \"Classify the banking customer's message into exactly one intent. "
        'Answer with the intent name only."\n',
        encoding="utf-8",
    )
    print(f"wrote {args.out}: {len(train)} train rows, {len(test)} test rows, {len(intents)} labels")


if __name__ == "__main__":
    main()

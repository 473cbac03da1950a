"""The synthetic ticket generator: deterministic, balanced, long-tailed, and valid on the wire."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from producer.protocol import decode_ticket
from tools.synthetic import LABELS, MAX_WORDS, SyntheticTicket, generate


@pytest.fixture(scope="module")
def tickets() -> list[SyntheticTicket]:
    return generate(1500, seed=0)


def test_same_seed_same_tickets() -> None:
    assert generate(200, seed=5) == generate(200, seed=5)


def test_other_seed_other_tickets() -> None:
    assert [t.text for t in generate(50, seed=1)] != [t.text for t in generate(50, seed=2)]


def test_ids_are_unique(tickets: list[SyntheticTicket]) -> None:
    assert len({t.id for t in tickets}) == len(tickets)


def test_labels_are_balanced(tickets: list[SyntheticTicket]) -> None:
    counts = Counter(t.label for t in tickets)
    assert set(counts) == set(LABELS)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_lengths_are_short_with_a_long_tail(tickets: list[SyntheticTicket]) -> None:
    words = [len(t.text.split()) for t in tickets]
    assert 15 <= statistics.median(words) < 60
    assert max(words) > 150
    assert max(words) <= MAX_WORDS
    assert min(words) >= 2


def test_texts_vary_and_some_are_not_ascii(tickets: list[SyntheticTicket]) -> None:
    assert len({t.text for t in tickets}) > 0.9 * len(tickets)
    non_ascii = [t for t in tickets if not t.text.isascii()]
    assert len(non_ascii) > 0.05 * len(tickets)
    assert any(c in t.text for t in tickets for c in "€£¥")


def test_every_ticket_passes_the_strict_decoder(tickets: list[SyntheticTicket]) -> None:
    for t in tickets:
        decoded = decode_ticket(t.to_json())
        assert (decoded.id, decoded.text, decoded.fields) == (t.id, t.text, {"label": t.label})


def test_zero_and_negative() -> None:
    assert generate(0) == []
    with pytest.raises(ValueError):
        generate(-1)


def test_command_line_writes_jsonl() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tools.synthetic", "30", "--seed", "4"],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    rows = [json.loads(line) for line in out.decode("utf-8").splitlines()]
    assert rows == [{"id": t.id, "text": t.text, "label": t.label} for t in generate(30, seed=4)]

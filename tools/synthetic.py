"""Seeded synthetic support tickets: billing, technical and account, with realistic lengths.

Real ticket streams are mostly short (one or two sentences) with a long tail of customers who recount
the whole history. Benchmarks that only use short, equal-length texts hide the cost of padding, so the
length of each ticket is drawn from a log-normal (median about 30 words, clipped at 400) and the text
is grown to that length from templates: a greeting, the issue, class-specific details, a history of
earlier contacts, an ask and a sign-off. A few tickets carry typos, non-ASCII names, currency symbols
or an emoji, as real ones do.

Standard library only: benchmarks and tests import it. The same ``(n, seed)`` always gives the same
tickets, on any platform.

    python -m tools.synthetic 1000 --seed 3 > tickets.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tools.synthetic_words import (  # the word tables
    ACTIONS,
    ADDONS,
    AGENTS,
    ASKS,
    BROWSERS,
    CARDS,
    DETAILS,
    DEVICES,
    EMAIL_DOMAINS,
    EMOJI,
    EPISODES,
    ERRORS,
    FEATURES,
    FIRST_NAMES,
    GENERIC_ASKS,
    GREETINGS,
    HISTORY,
    ISSUES,
    LAST_NAMES,
    MONTHS,
    OUTCOMES,
    PLANS,
    SIGN_OFFS,
    TERSE,
)

LABELS: tuple[str, ...] = ("billing", "technical", "account")

MEDIAN_WORDS = 30
SIGMA = 0.8  # log-normal shape: p90 ~ 84 words, p99 ~ 190
MIN_WORDS = 4
MAX_WORDS = 400
TYPO_RATE = 0.10
EMOJI_RATE = 0.06


@dataclass(frozen=True)
class SyntheticTicket:
    id: str
    text: str
    label: str

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "text": self.text, "label": self.label}, ensure_ascii=False)


def _amount(rng: random.Random, style: int) -> str:
    """A price in one of a few currency styles; ``style`` is fixed per ticket (one customer, one currency)."""
    value = rng.choice((4.99, 9.0, 12.5, 19.99, 29.0, 49.0, 79.99, 99.0, 149.0, 240.0, 1188.0))
    if style == 0:
        return f"€{value:.2f}".replace(".", ",")
    if style == 1:
        return f"{value:.2f} EUR"
    if style == 2:
        return f"£{value:.2f}"
    if style == 3:
        return f"¥{round(value * 160):,}"
    return f"${value:.2f}"


def _date(rng: random.Random) -> str:
    day = rng.randint(1, 28)
    month = rng.randrange(12)
    style = rng.randrange(4)
    if style == 0:
        return f"{MONTHS[month]} {day}"
    if style == 1:
        return f"{day:02d}.{month + 1:02d}.{rng.choice((2024, 2025))}"
    if style == 2:
        return f"{month + 1}/{day}"
    return f"the {day}{_ordinal(day)} of {MONTHS[month]}"


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


_SLOTS: dict[str, Callable[[random.Random], str]] = {
    "date": _date,
    "date2": _date,
    "month": lambda r: r.choice(MONTHS),
    "agent": lambda r: r.choice(AGENTS),
    "addon": lambda r: r.choice(ADDONS),
    "browser": lambda r: r.choice(BROWSERS),
    "feature": lambda r: r.choice(FEATURES),
    "error": lambda r: r.choice(ERRORS),
    "card": lambda r: r.choice(CARDS),
    "invoice": lambda r: f"INV-{r.randint(2022, 2025)}-{r.randint(1, 99999):05d}",
    "ticketno": lambda r: str(r.randint(100000, 999999)),
    "digits": lambda r: f"{r.randint(0, 9999):04d}",
    "version": lambda r: f"{r.randint(3, 9)}.{r.randint(0, 24)}.{r.randint(0, 9)}",
    "n": lambda r: str(r.randint(2, 14)),
    "big": lambda r: str(r.choice((25, 40, 120, 300, 1500, 12000))),
    "mb": lambda r: str(r.choice((10, 50, 100, 250, 500))),
    "year": lambda r: str(r.randint(2015, 2023)),
    "team": lambda r: str(r.choice((3, 5, 8, 12, 20, 45, 200))),
    "action": lambda r: r.choice(ACTIONS),
    "outcome": lambda r: r.choice(OUTCOMES),
}


# ---- assembly -------------------------------------------------------------------------------------

_SLOT = re.compile(r"\{(\w+)\}")


def _ascii_handle(name: str) -> str:
    """'Łukasz' -> 'lukasz', "s.o'brien" -> 's.obrien': what a mail address would really use."""
    folded = unicodedata.normalize("NFKD", name.translate(_FOLD)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9.]", "", folded.lower())


_FOLD = str.maketrans({"Ł": "L", "ł": "l", "Ø": "O", "ø": "o"})


class _Writer:
    """Fills templates for one ticket; the customer, plan and device stay fixed within it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        handle = rng.choice((first, f"{first[0]}.{last}", f"{first}{rng.randint(1, 99)}"))
        self.currency = rng.randrange(6)
        device, os_name = rng.choice(DEVICES)
        self.fixed = {
            "first": first,
            "last": last,
            "plan": rng.choice(PLANS),
            "device": device,
            "os": os_name,
            "email": f"{_ascii_handle(handle)}@{rng.choice(EMAIL_DOMAINS)}",
        }

    def fill(self, template: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in self.fixed:
                return self.fixed[name]
            if name.startswith("amount"):
                return _amount(self.rng, self.currency)
            return _SLOTS[name](self.rng)

        return _SLOT.sub(one, template)

    def pick(self, options: Sequence[str]) -> str:
        return self.fill(self.rng.choice(options))


def _words(text: str) -> int:
    return len(text.split())


def _target_words(rng: random.Random) -> int:
    raw = rng.lognormvariate(math.log(MEDIAN_WORDS), SIGMA)
    return max(MIN_WORDS, min(MAX_WORDS, round(raw)))


def _body(writer: _Writer, label: str, target: int) -> str:
    rng = writer.rng
    if target < 9:
        return writer.pick(TERSE[label])

    greeting = rng.choice(GREETINGS) if rng.random() < 0.7 else ""
    sign_off = writer.fill(rng.choice(SIGN_OFFS)) if rng.random() < 0.6 else ""
    ask = writer.pick(ASKS[label] + GENERIC_ASKS)
    overhead = _words(greeting) + _words(sign_off) + _words(ask)
    budget = target - overhead

    # The issue comes first, then details of this class, then (for longer tickets) the history.
    paragraphs: list[list[str]] = [[writer.pick(ISSUES[label])]]
    details = list(DETAILS[label])
    history = list(HISTORY)
    rng.shuffle(details)
    rng.shuffle(history)
    used = _words(paragraphs[0][0])
    while used < budget:
        # Long tickets alternate between facts and story, a new paragraph every few sentences.
        if details and (not history or rng.random() < 0.55):
            sentence = writer.fill(details.pop())
        elif history:
            sentence = writer.fill(history.pop())
        else:
            sentence = writer.pick(EPISODES)
        if used + _words(sentence) > MAX_WORDS - overhead:
            break
        if len(paragraphs[-1]) >= rng.randint(3, 5):
            paragraphs.append([])
        paragraphs[-1].append(sentence)
        used += _words(sentence)
    if target > 40 and rng.random() < 0.5:
        paragraphs.append([ask])
    else:
        paragraphs[-1].append(ask)

    text = "\n\n".join(" ".join(p) for p in paragraphs)
    if greeting:
        text = f"{greeting}\n\n{text}" if target > 40 else f"{greeting}\n{text}"
    if sign_off:
        text = f"{text}\n\n{sign_off}"
    return text


def _typo(rng: random.Random, text: str) -> str:
    """One realistic slip: swapped, dropped or doubled letter, or a missing apostrophe."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not candidates:
        return text
    i = rng.choice(candidates)
    w = words[i]
    j = rng.randrange(1, len(w) - 1)
    kind = rng.randrange(4)
    if kind == 0:
        w = w[: j - 1] + w[j] + w[j - 1] + w[j + 1 :]
    elif kind == 1:
        w = w[:j] + w[j + 1 :]
    elif kind == 2:
        w = w[:j] + w[j] + w[j:]
    else:
        return text.replace("n't", "nt", 1).replace("I'm", "Im", 1)
    words[i] = w
    return " ".join(words)


def _ticket(rng: random.Random, label: str) -> str:
    writer = _Writer(rng)
    text = _body(writer, label, _target_words(rng))
    if rng.random() < TYPO_RATE:
        for _ in range(rng.randint(1, 3)):
            text = _typo(rng, text)
        if rng.random() < 0.3:
            text = text.lower()
    if rng.random() < EMOJI_RATE:
        text = f"{text} {rng.choice(EMOJI)}"
    return text


def generate(n: int, seed: int = 0) -> list[SyntheticTicket]:
    """``n`` tickets, labels balanced to within one, in a seeded random order."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    labels = [LABELS[i % len(LABELS)] for i in range(n)]
    rng.shuffle(labels)
    return [
        SyntheticTicket(f"syn-{seed}-{i:06d}", _ticket(rng, label), label) for i, label in enumerate(labels)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.synthetic", description="Write N synthetic support tickets as JSONL to stdout."
    )
    parser.add_argument("n", type=int, help="how many tickets")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("n must be >= 0")
    out = sys.stdout.buffer
    for ticket in generate(args.n, args.seed):
        out.write(ticket.to_json().encode("utf-8") + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

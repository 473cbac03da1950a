"""Varied ticket texts for equivalence tests: synthetic long-tailed tickets, real Banking77 queries,
unicode, one-word and over-long tickets, white space around or alone."""

from __future__ import annotations

import csv
from pathlib import Path

from tools.synthetic import generate

BANKING77 = Path(__file__).resolve().parents[2] / "worker" / "data" / "banking77_eval.csv"

EXTRA = [
    "hi",
    "?",
    "Zoë's card 💳 was declined at the café — why?",
    "Mi tarjeta fue rechazada y me cobraron dos veces 20 €.",
    "我的账户被锁定了，无法登录",
    "Привет! Не могу войти в аккаунт после смены пароля.",
    "ERROR 0x80070005\tat login\r\nplease help",
    "refund refund refund refund refund refund refund refund refund refund",
    # Hostile: surrounding white space (the engine reads it stripped), and over-long tickets whose cut
    # would fall inside a character (Prompt.fit cuts before it).
    "\n\n  my card was declined twice \t\n",
    " \n\t ",
    "💳" * 700,
    "我的账户被锁定了，无法登录。" * 70,
]


def varied_texts(n: int) -> list[str]:
    texts = list(EXTRA)
    texts.append(" ".join(t.text for t in generate(12, seed=5)))  # far over max_ticket_tokens
    with BANKING77.open(encoding="utf-8") as fh:
        texts += [row["text"] for _, row in zip(range(n // 3), csv.DictReader(fh), strict=False)]
    texts += [t.text for t in generate(n, seed=11)]
    return texts[:n]

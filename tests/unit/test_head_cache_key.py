"""The cache entry of a head trained on first use (worker.engine.training.head_cache_key): every input the
head depends on moves the key, so a changed task, file, model or way of training never serves a stale head,
and the keys of heads cached before an optional part existed stay what they were."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from worker.engine import beyond, training
from worker.engine.head import Identity
from worker.engine.recipe import Recipe
from worker.engine.training import head_cache_key

IDENT = Identity(
    model="tiny",
    model_digest="m" * 64,
    prompt_digest="p" * 64,
    labels=("billing", "technical"),
    hidden_size=8,
)
LABELS = ["billing"] * 5 + ["technical"] * 5
BASE: dict[str, Any] = {
    "ident": IDENT,
    "dtype": "float32",
    "recipe": Recipe.parse("10:mean"),
    "data": b"id,text,label\n1,refund,billing\n",
    "labels": LABELS,
    "auto_accuracy": None,
    "label_names": False,
    "unlabeled": None,
    "balance": False,
}


def key(**change: Any) -> str:
    args = {**BASE, **change}
    return head_cache_key(
        args.pop("ident"), args.pop("dtype"), args.pop("recipe"), args.pop("data"), args.pop("labels"), **args
    )


CHANGES: dict[str, dict[str, Any]] = {
    "model weights": {"ident": Identity(**{**IDENT.__dict__, "model_digest": "n" * 64})},
    "prompt": {"ident": Identity(**{**IDENT.__dict__, "prompt_digest": "q" * 64})},
    "task labels": {"ident": Identity(**{**IDENT.__dict__, "labels": ("billing", "technical", "account")})},
    "data bytes": {"data": b"id,text,label\n1,refund!,billing\n"},
    "dtype": {"dtype": "bfloat16"},
    "recipe": {"recipe": Recipe.parse("8:mean,12:mean")},
    "auto_accuracy": {"auto_accuracy": 0.9},
    "another auto_accuracy": {"auto_accuracy": 0.95},
    "label names": {"label_names": True},
    "unlabelled file": {"unlabeled": b"id,text\nu1,hello\n"},
    "another unlabelled file": {"unlabeled": b"id,text\nu1,hello again\n"},
    "balance": {"balance": True},
    "a label with fewer tickets than folds": {"labels": ["billing"] * 5 + ["technical"] * 4},
}


def test_the_same_inputs_give_the_same_key() -> None:
    assert key() == key()
    assert len(key()) == 24


@pytest.mark.parametrize("what", list(CHANGES))
def test_each_input_moves_the_key(what: str) -> None:
    assert key(**CHANGES[what]) != key()


def test_every_change_has_its_own_entry() -> None:
    keys = [key(**change) for change in CHANGES.values()]
    assert len(set(keys)) == len(keys)


def test_the_way_heads_are_trained_and_the_version_move_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    base, streamed = key(), key(unlabeled=b"id,text\nu1,hello\n")
    monkeypatch.setattr(training, "TRAINING", training.TRAINING + 1)
    assert key() != base
    monkeypatch.undo()
    monkeypatch.setattr(training, "_version", lambda: "0.0.0-other")
    assert key() != base
    monkeypatch.undo()
    how = beyond.self_training()
    monkeypatch.setattr(beyond, "self_training", lambda: {**how, "keep": [0.5]})
    assert key(unlabeled=b"id,text\nu1,hello\n") != streamed  # how the stream is learnt from
    assert key() == base  # ... matters only to a head that learns from one


def test_optional_parts_join_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head cached before auto_accuracy, label names, unlabelled data, the fold rule and balancing existed
    keeps its entry: the key of a task that sets none of them is the digest of the original parts alone."""
    monkeypatch.setattr(training, "_version", lambda: "1.0")
    original = training.digest(
        IDENT.model_digest,
        IDENT.prompt_digest,
        list(IDENT.labels),
        hashlib.sha256(BASE["data"]).hexdigest(),
        "float32",
        Recipe.parse("10:mean").to_dict(),
        training.TRAINING,
        "1.0",
    )[:24]
    assert key() == original

"""A ticket's character n-grams as features (worker/engine/chars.py): a pure, pinned function of the text."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine import chars
from worker.engine.recipe import CHARS_WIDTH


def test_words_are_cut_into_padded_character_ngrams_case_folded() -> None:
    assert sorted(chars.grams("Top-up!")) == [
        " t",
        " to",
        " top",
        " top ",
        " u",
        " up",
        " up ",
        "op",
        "op ",
        "p ",
        "to",
        "top",
        "top ",
        "up",
        "up ",
    ]
    assert chars.grams("TOP") == chars.grams("top") and chars.grams("don't")["n't "] == 1
    assert chars.grams("top top")[" top "] == 2
    assert not chars.grams("") and not chars.grams(" \t!?-")


def test_features_are_pinned_so_a_trained_head_keeps_meaning_the_same_thing() -> None:
    """A head's weights are tied to these exact numbers: changing the hashing, the grams or the scaling
    would silently change every chars head's decisions. These values fail if any of them changes."""
    v = chars.vector("My card was charged twice.")
    assert v.shape == (CHARS_WIDTH,) == (chars.WIDTH,) and v.dtype == torch.float32
    torch.testing.assert_close(
        v[:4], torch.tensor([0.041751, -0.003287, 0.001096, -0.008237]), atol=1e-6, rtol=0
    )
    assert math.isclose(float(v.sum()), -0.0046162, abs_tol=1e-6)
    assert chars._bits(" to")[:4].hex() == "bcb9ec77"


def test_rows_are_one_per_text_deterministic_and_about_unit_length() -> None:
    texts = ["My card was charged twice.", "", "x", "Ünïcödé café, 東京 — ok", "pending transfer " * 3]
    x = chars.features(texts)
    assert x.shape == (len(texts), chars.WIDTH) and torch.equal(x, chars.features(texts))
    assert torch.equal(x[1], torch.zeros(chars.WIDTH))  # no words: nothing to read
    norms = x[[0, 2, 3, 4]].norm(dim=1)
    assert bool(((norms > 0.8) & (norms < 1.25)).all())  # a random projection of a unit vector
    assert torch.equal(x[0], chars.vector(texts[0])) and chars.features([]).shape == (0, chars.WIDTH)


def test_similar_spellings_are_closer_than_different_ones() -> None:
    a, b, c = chars.features(["my top-up failed", "my top up has failed", "where is my new card"])
    assert float(a @ b) > 0.6 > 0.3 > float(a @ c)


def test_only_the_first_characters_are_read() -> None:
    """Bounded cost: a ticket of the protocol's longest text reads MAX_CHARS characters."""
    head = "refund " * (chars.MAX_CHARS // 7 + 1)
    assert torch.equal(chars.vector(head + "x" * 10_000), chars.vector(head + "different tail"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_gives_finite_features_of_the_width(text: str) -> None:
    """Producers send anything: no text may raise here or give a NaN (lone surrogates included)."""
    v = chars.vector(text)
    assert v.shape == (chars.WIDTH,) and bool(torch.isfinite(v).all()) and float(v.norm()) < 2.0


def test_a_lone_surrogate_is_read_not_refused() -> None:
    assert bool(chars.vector("card \ud800 blocked").abs().sum() > 0)

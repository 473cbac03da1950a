"""The ``rare`` pooling on the tiny random model: the ticket's own tokens averaged with weights from their
ids' rarity (:func:`worker.engine.features.rarity`), the same in the engine's packed pass, in a pass
shared with other parts and in the plain reference; a head reading it trains and decides."""

from __future__ import annotations

import math

import pytest
import torch
from test_head import labelled, reference_features
from test_multipart import TEXTS as MULTIPART_TEXTS
from test_multipart import own_states

from worker.engine import Engine
from worker.engine import features as feats
from worker.engine.model import LoadedModel
from worker.engine.recipe import MEAN, RARE, Recipe
from worker.engine.task import load_task
from worker.engine.training import train_head

TEXTS = [*MULTIPART_TEXTS, "Ünïcödé café, 東京 — ok", "the the the the refund"]
RARES = [Recipe.one(1, RARE), Recipe.one(2, RARE), Recipe.parse("1:mean,2:rare,1:max,2:echo,1:rare,chars")]


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return Engine(tiny, load_task())


def test_rarity_is_smooth_inverse_frequency_of_the_zipf_estimate() -> None:
    ids = torch.tensor([0, 9, 99, 999, 9_999, 49_151])
    got = feats.rarity(ids, 49_152)
    harmonic = math.log(49_152) + 0.5772156649015329
    want = [1e-5 / (1e-5 + 1 / ((i + 1) * harmonic)) for i in ids.tolist()]
    torch.testing.assert_close(got, torch.tensor(want), atol=1e-7, rtol=1e-6)
    assert got.dtype == torch.float32
    assert bool((got[1:] > got[:-1]).all()) and float(got.min()) > 0 and float(got.max()) < 1
    assert float(feats.rarity(torch.tensor([8_800]), 49_152)) == pytest.approx(0.5, abs=0.01)  # a's token


def test_rare_is_the_tokens_mean_weighted_by_their_rarity(engine: Engine) -> None:
    (got,), _ = engine.features([TEXTS[3]], Recipe.one(1, RARE))
    mine, _, ids = own_states(engine, TEXTS[3], 1)
    w = feats.rarity(torch.tensor(ids), engine.scorer.body.config.vocab_size)
    torch.testing.assert_close(got, (mine * w[:, None]).sum(0) / w.sum(), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, mine.mean(0), atol=1e-4)  # weighted, not the plain mean


@pytest.mark.parametrize("recipe", RARES, ids=str)
def test_rare_features_match_the_plain_reference(engine: Engine, recipe: Recipe) -> None:
    got, _ = engine.features(TEXTS, recipe)
    torch.testing.assert_close(got, reference_features(engine, TEXTS, recipe), atol=1e-4, rtol=1e-4)


def test_a_shared_pass_gives_each_recipe_what_it_gives_alone(engine: Engine) -> None:
    rare, plain = Recipe.parse("2:rare,1:max"), Recipe.one(2, MEAN)
    both, _ = engine.features_many(TEXTS, [rare, plain])
    assert torch.equal(both[0], engine.features(TEXTS, rare)[0])
    assert torch.equal(both[1], engine.features(TEXTS, plain)[0])
    assert not torch.equal(both[0][:, : engine.identity.hidden_size], both[1])


def test_a_rare_head_trains_and_decides_as_its_features_say(engine: Engine) -> None:
    recipe = Recipe.parse("2:rare,2:max")
    head = train_head(engine, *labelled(6), seed=3, recipe=recipe)
    assert head.recipe == recipe and head.meta()["recipe"]["parts"][0] == [2, "rare"]
    engine.use_head(head)
    try:
        texts = ["my invoice is wrong", "the app crashes", ""]
        preds, _ = engine.classify(texts)
        assert [p.label for p in preds] == head.predict(engine.features(texts, recipe)[0])
    finally:
        engine.use_head(None)

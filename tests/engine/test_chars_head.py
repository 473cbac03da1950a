"""Heads that read the ticket's spelling (a recipe ending in ``chars``) on the tiny random model: the
features are the pass's followed by the text's n-grams, the same in the engine, in a pass shared with
other heads and in the plain reference; such a head trains, round-trips, decides and passes verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_head import WORDS, labelled, reference_features
from test_multipart import TEXTS as MULTIPART_TEXTS

from worker.engine import Engine, chars
from worker.engine.head import Head
from worker.engine.model import LoadedModel
from worker.engine.recipe import Recipe
from worker.engine.task import DEFAULT_TASK_PATH, load_task
from worker.engine.training import train_head

SPELT = Recipe.parse("1:mean,2:max,chars")
TEXTS = [*MULTIPART_TEXTS, "Ünïcödé café, 東京 — ok"]


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return Engine(tiny, load_task())


def test_features_are_the_pass_then_the_texts_ngrams(engine: Engine) -> None:
    got, _ = engine.features(TEXTS, SPELT)
    hidden = engine.identity.hidden_size
    assert got.shape == (len(TEXTS), 2 * hidden + chars.WIDTH) == (len(TEXTS), SPELT.width(hidden))
    model, _ = engine.features(TEXTS, Recipe(SPELT.model_parts))
    assert torch.equal(got[:, : 2 * hidden], model)
    assert torch.equal(got[:, 2 * hidden :], chars.features(TEXTS))


def test_a_shared_pass_gives_each_recipe_what_it_gives_alone(engine: Engine) -> None:
    plain = Recipe.parse("2:mean")
    both, _ = engine.features_many(TEXTS, [SPELT, plain, SPELT])
    assert torch.equal(both[0], engine.features(TEXTS, SPELT)[0]) and torch.equal(both[0], both[2])
    assert torch.equal(both[1], engine.features(TEXTS, plain)[0])


def test_features_match_the_plain_reference(engine: Engine) -> None:
    got, _ = engine.features(TEXTS, SPELT)
    torch.testing.assert_close(got, reference_features(engine, TEXTS, SPELT), atol=1e-4, rtol=1e-4)


def test_a_chars_head_trains_round_trips_and_decides(engine: Engine, tmp_path: Path) -> None:
    head = train_head(engine, *labelled(6), seed=3, recipe=SPELT)
    assert head.recipe == SPELT and head.hidden_size == SPELT.width(engine.identity.hidden_size)
    assert bool(head.weight[:, -chars.WIDTH :].abs().sum() > 0)  # it reads the spelling
    head.save(tmp_path / "h.head")
    back = Head.load(tmp_path / "h.head")
    assert back.recipe == SPELT and back.id == head.id
    assert back.meta()["recipe"]["parts"][-1] == [0, "chars"]
    engine.use_head(back)
    try:
        texts = ["my invoice is wrong", "the app crashes"]
        preds, _ = engine.classify(texts)
        assert [p.label for p in preds] == back.predict(engine.features(texts, SPELT)[0])
    finally:
        engine.use_head(None)


def test_verify_checks_a_chars_head(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    text += f'\n[questions.topic]\nlabels = {json.dumps(list(WORDS))}\nrecipe = "{SPELT}"\n'
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    texts, labels = labelled(4)
    rows = [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))]
    (tmp_path / "t.csv").write_text("\n".join(["id,text,label", *rows]) + "\n")
    asked = ["--model", str(tiny_dir), "--dtype", "float32", "--task", str(tmp_path / "task.toml")]
    asked += ["--question", "topic"]
    out = tmp_path / "topic.head"
    assert main(["train", *asked, "--tickets", str(tmp_path / "t.csv"), "--out", str(out)]) == 0
    assert Head.load(out).recipe == SPELT  # the question's recipe from the task file
    capsys.readouterr()
    flags = ["--head", str(out), "--tickets", str(tmp_path / "t.csv"), "--limit", "4"]
    assert main(["verify", *asked, *flags]) == 0
    printed = capsys.readouterr().out
    assert f"(recipe {SPELT})" in printed and "agreement 4/4" in printed and printed.rstrip().endswith("OK")

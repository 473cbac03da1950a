"""Recipes that read each ticket twice (``echo``), on the tiny random model: exact against the plain
reference, placed on the second reading, and leaving every other part's features as they were."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from test_head import labelled, reference_features
from test_multipart import TEXTS  # short, empty, one-token and long tickets

from worker.engine import Engine
from worker.engine import features as feats
from worker.engine.head import HeadError
from worker.engine.model import LoadedModel
from worker.engine.prompt import ECHO_TEXT
from worker.engine.recipe import Recipe
from worker.engine.task import DEFAULT_TASK_PATH, load_task
from worker.engine.training import train_head

ECHOES = [Recipe.parse("1:echo"), Recipe.parse("2:echo"), Recipe.parse("1:mean,2:max,2:echo,1:last,1:echo")]


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return Engine(tiny, load_task())


@pytest.mark.parametrize("recipe", ECHOES, ids=str)
def test_echo_features_match_the_plain_reference(engine: Engine, recipe: Recipe) -> None:
    got, stats = engine.features(TEXTS, recipe)
    assert len(stats) == 1  # still one packed pass
    torch.testing.assert_close(got, reference_features(engine, TEXTS, recipe), atol=1e-4, rtol=1e-4)


def test_echo_averages_the_second_reading_not_the_first(engine: Engine) -> None:
    text = TEXTS[3]
    (got,), _ = engine.features([text], Recipe.parse("2:echo"))
    own = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = [*engine.prompt.prefix_ids, *own, *engine.prompt.after_ids, *engine.prompt.echo_ids, *own]
    with torch.inference_mode():
        states = engine.scorer.body(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    second = states[2][0, -len(own) :]
    torch.testing.assert_close(got, second.mean(0), atol=1e-4, rtol=1e-4)
    first = len(engine.prompt.prefix_ids)
    assert not torch.allclose(got, states[2][0, first : first + len(own)].mean(0), atol=1e-3)


def test_other_parts_are_unchanged_in_a_pass_that_reads_twice(engine: Engine) -> None:
    plain = Recipe.parse("1:mean,2:max,2:last")
    together, _ = engine.features_many(TEXTS, [plain, Recipe.parse("2:echo")])
    alone, _ = engine.features(TEXTS, plain)
    torch.testing.assert_close(together[0], alone, atol=1e-5, rtol=1e-5)


def test_only_an_echo_recipe_makes_the_pass_read_twice(engine: Engine) -> None:
    seen: list[int] = []
    hook = engine.scorer.body.layers[0].register_forward_hook(
        lambda _m, args, _o: seen.append(int(args[0].shape[1]) if args else 0)
    )
    try:
        engine.features(TEXTS, Recipe.parse("1:mean"))
        engine.features(TEXTS, Recipe.parse("1:echo"))
    finally:
        hook.remove()
    once, twice = engine.tokenize(TEXTS), engine.prompt.ticket_ids(engine.tokenizer, TEXTS, echo=True)
    grown = len(engine.prompt.echo_ids) - len(engine.prompt.after_ids)
    assert [len(b) for b in twice] == [2 * len(a) + grown for a in once]
    assert seen[1] > seen[0]  # the second pass is wider: it reads every ticket twice


def test_echo_text_splits_like_the_whole_prompt(engine: Engine) -> None:
    engine.prompt.check_split(engine.tokenizer, TEXTS, echo=True)  # raises PromptSplitError if not
    assert engine.tokenizer.decode(list(engine.prompt.echo_ids)) == ECHO_TEXT


def test_tickets_too_long_to_read_twice_are_refused(engine: Engine) -> None:
    cramped = replace(engine.prompt, echo_fits=False)
    tight = Engine.__new__(Engine)
    tight.__dict__.update(engine.__dict__, prompt=cramped)
    with pytest.raises(HeadError, match="lower --max-ticket-tokens"):
        tight.features(TEXTS[:1], Recipe.parse("1:echo"))
    tight.features(TEXTS[:1], Recipe.parse("1:mean"))  # an ordinary recipe still runs


def test_verify_checks_an_echo_head_and_sees_a_wrong_second_reading(
    engine: Engine,
    tiny_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """train -> head file -> verify against the plain reference; then an engine that pools the first
    reading where the second belongs: verify must fail."""
    from worker.cli import main

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    texts, labels = labelled(6)
    head = train_head(engine, texts, labels, seed=3, recipe=ECHOES[2])
    head.save(tmp_path / "echo.head")
    task = DEFAULT_TASK_PATH.read_text(encoding="utf-8")
    task = task.replace('head_data = "../data/head_train.csv"', 'head = "echo.head"')
    (tmp_path / "task.toml").write_text(task, encoding="utf-8")
    flags = ["--model", str(tiny_dir), "--task", str(tmp_path / "task.toml"), "--limit", "6"]
    assert main(["verify", *flags]) == 0
    out = capsys.readouterr().out
    assert f"(recipe {ECHOES[2]})" in out and "agreement 6/6" in out and out.rstrip().endswith("OK")

    right = feats.readings

    def first_twice(*args: Any, **kwargs: Any) -> feats.Readings:
        at = right(*args, **kwargs)
        return at._replace(second=at.first)

    monkeypatch.setattr(feats, "readings", first_twice)
    assert main(["verify", *flags]) == 1
    assert "FAIL:" in (err := capsys.readouterr().err) and "head log-probabilities" in err

"""Head recipes (worker/engine/recipe.py): the text, dict and task-file forms, and one-line refusals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from worker.engine.recipe import (
    CHARS,
    CHARS_WIDTH,
    ECHO,
    FINE,
    LAST,
    MAX,
    MEAN,
    Part,
    Preset,
    Recipe,
    parse_spec,
    resolve,
)
from worker.engine.task import TaskError, load_task

RICH = "8:mean,12:mean,8:max,12:max"


def test_text_form_parts_in_order_and_bare_layers_mean_pooled() -> None:
    r = Recipe.parse(RICH)
    assert r.parts == (Part(8, MEAN), Part(12, MEAN), Part(8, MAX), Part(12, MAX))
    assert r.layers == (8, 12) and r.width(576) == 4 * 576
    assert str(r) == RICH and Recipe.parse(str(r)) == r
    assert Recipe.parse("10") == Recipe.one(10) == Recipe.one(10, MEAN)
    assert str(Recipe.parse("10")) == "10:mean"
    assert Recipe.parse(" 12:last , 3 ").parts == (Part(12, LAST), Part(3, MEAN))
    assert Recipe.parse("12:max,8:mean").layers == (8, 12)  # shallowest first, whatever the order
    assert Recipe.parse("8:mean,12:max") != Recipe.parse("12:max,8:mean")  # the order is the layout
    assert not r.echo
    echo = Recipe.parse("8:mean,24:echo")
    assert echo.parts[1] == Part(24, ECHO) and echo.echo and echo.layers == (8, 24)
    assert Recipe.from_dict(echo.to_dict()) == echo


def test_chars_is_a_last_part_without_a_layer() -> None:
    r = Recipe.parse(RICH + ",chars")
    assert r.parts[-1] == Part(0, CHARS) and r.chars and r.model_parts == Recipe.parse(RICH).parts
    assert r.layers == (8, 12) and r.width(576) == 4 * 576 + CHARS_WIDTH and not r.echo
    assert str(r) == RICH + ",chars" and Recipe.parse(str(r)) == r
    assert r.to_dict()["parts"][-1] == [0, "chars"] and Recipe.from_dict(r.to_dict()) == r
    assert not Recipe.parse(RICH).chars


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chars", "a recipe needs a part the model computes"),
        ("chars,8:mean", "chars comes last in a recipe"),
        ("8:chars", "chars reads the text, no layer: write 'chars'"),
        ("8:mean,chars,chars", "chars appears more than once"),
        ("", "'' is not LAYER or LAYER:POOL"),
        ("8:avg", "unknown pooling 'avg'; use mean, max, last, echo, rare"),
        ("0:mean", "at least 1"),
        ("-2", "'-2' is not LAYER or LAYER:POOL"),
        ("eight", "'eight' is not LAYER or LAYER:POOL"),
        ("8:mean,,12", "'' is not LAYER or LAYER:POOL"),
        ("8:mean,8:mean", "8:mean appears more than once"),
        ("8:MEAN", "unknown pooling 'MEAN'"),
    ],
)
def test_bad_text_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Recipe.parse(text)
    said = str(caught.value)
    assert message in said and said.startswith(f"recipe {text!r}: ") and "\n" not in said


def test_the_dict_keeps_the_one_part_form_heads_were_written_with() -> None:
    """A head's id digests ``to_dict()``: one part must stay ``{"layer", "pool"}`` for old ids to hold."""
    assert Recipe.one(10, MEAN).to_dict() == {"layer": 10, "pool": "mean"}
    assert Recipe.parse("30:last").to_dict() == {"layer": 30, "pool": "last"}
    assert Recipe.parse(RICH).to_dict() == {"parts": [[8, "mean"], [12, "mean"], [8, "max"], [12, "max"]]}
    for r in (Recipe.one(10), Recipe.parse("2:max"), Recipe.parse(RICH)):
        assert Recipe.from_dict(r.to_dict()) == r
    assert Recipe.from_dict({"layer": 10}) == Recipe.one(10, MEAN)  # the pool was optional
    assert Recipe.from_dict({"parts": [[4, "last"]]}) == Recipe.one(4, LAST)


@pytest.mark.parametrize(
    "data",
    [
        None,
        {},
        {"layer": "10", "pool": "mean"},
        {"layer": 10.0},
        {"layer": True},
        {"layer": 10, "pool": "median"},
        {"layer": 10, "parts": [[8, "mean"]]},
        {"parts": []},
        {"parts": [[8]]},
        {"parts": [[8, "mean", 1]]},
        {"parts": "8:mean"},
        {"parts": [[8, "mean"], [8, "mean"]]},
        {"parts": [[0, "chars"]]},
        {"parts": [[8, "mean"], [8, "chars"]]},
        {"parts": [[8, "mean"], [False, "chars"]]},
        {"parts": [[0, "chars"], [8, "mean"]]},
    ],
)
def test_malformed_dicts_are_refused(data: object) -> None:
    with pytest.raises(ValueError):
        Recipe.from_dict(data)


def test_check_names_the_layer_the_model_lacks() -> None:
    Recipe.parse(RICH).check(30)
    Recipe.one(30).check(30)
    with pytest.raises(ValueError, match=r"recipe 8:mean,31:max reads layer 31; the model has 30"):
        Recipe.parse("8:mean,31:max").check(30)


def test_default_is_a_third_of_the_way_up_mean_pooled() -> None:
    assert Recipe.default(30) == Recipe.one(10, MEAN) and Recipe.default(2) == Recipe.one(1, MEAN)
    assert Recipe.default(30, FINE - 1) == Recipe.one(10, MEAN)


def test_from_fine_labels_on_the_default_reads_two_layers_mean_and_max_and_the_spelling() -> None:
    assert Recipe.default(30, FINE) == Recipe.parse("8:mean,12:mean,8:rare,12:rare,8:max,12:max,chars")
    assert Recipe.default(30, 77) == Recipe.default(30, FINE)
    assert Recipe.default(24, 77) == Recipe.parse("6:mean,10:mean,6:rare,10:rare,6:max,10:max,chars")
    assert Recipe.default(2, 77) == Recipe.parse("1:mean,1:rare,1:max,chars")  # one layer: not twice


def test_presets_resolve_against_the_models_depth_and_the_questions_labels() -> None:
    accurate = "8:mean,12:mean,8:rare,12:rare,8:max,12:max,24:echo,28:echo,chars"
    assert resolve(parse_spec("accurate"), 30, 77) == Recipe.parse(accurate)
    assert resolve(parse_spec(" accurate "), 30, 3) == Recipe.parse(accurate)  # whatever the labels
    assert resolve(parse_spec("fast"), 30, 77) == Recipe.parse("10:mean")
    assert resolve(parse_spec("default"), 30, 77) == resolve(None, 30, 77) == Recipe.default(30, 77)
    assert resolve(parse_spec("default"), 30, 3) == Recipe.parse("10:mean")
    assert resolve(Preset("accurate"), 15, 77) == Recipe.parse(
        "4:mean,6:mean,4:rare,6:rare,4:max,6:max,12:echo,14:echo,chars"
    )
    assert resolve(Preset("accurate"), 2, 77).layers == (1, 2)  # a tiny model: its layers, once each
    assert resolve(Recipe.one(7), 30, 77) == Recipe.one(7)  # parts are what they say
    assert str(Preset("accurate")) == "accurate"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("acurate", "unknown recipe 'acurate': a preset (fast, default, accurate) or LAYER:POOL parts"),
        ("8:avg", "recipe '8:avg': unknown pooling 'avg'"),
    ],
)
def test_a_misspelt_preset_is_named_as_one(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_spec(text)
    with pytest.raises(ValueError, match="unknown recipe preset 'slow'"):
        Preset("slow")


def test_no_torch_behind_recipes_and_tasks() -> None:
    """The task file (read before any model loads) and train's flags parse recipes."""
    code = "import sys, worker.engine.recipe, worker.engine.task; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


BASE = 'labels = ["a", "b"]\n'


def test_a_task_file_names_a_recipe_for_its_primary_and_each_question(tmp_path: Path) -> None:
    text = BASE + 'recipe = "8:mean,12:max"\n[questions.q]\nlabels = ["x", "y"]\nrecipe = 12\n'
    text += '[questions.p]\nlabels = ["x", "y"]\n[questions.r]\nlabels = ["x", "y"]\nrecipe = "accurate"\n'
    (tmp_path / "t.toml").write_text(text)
    task = load_task(tmp_path / "t.toml")
    assert task.recipe == Recipe.parse("8:mean,12:max")
    assert task.get_question("r").recipe == Preset("accurate")  # type: ignore[union-attr]
    assert task.get_question("q").recipe == Recipe.one(12)  # type: ignore[union-attr]
    assert task.get_question("p").recipe is None  # type: ignore[union-attr]
    assert load_task().recipe is None  # the built-in task: the default


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('recipe = "8:avg"\n', "recipe '8:avg': unknown pooling 'avg'"),
        ("recipe = [8, 12]\n", 'recipe must be text like "8:mean,12:max"'),
        ('recipe = "best"\n', "unknown recipe 'best': a preset (fast, default, accurate)"),
        ("recipe = true\n", 'recipe must be text like "8:mean,12:max"'),
        ('[questions.q]\nlabels = ["x", "y"]\nrecipe = "3,3"\n', "question 'q': recipe '3,3': each part"),
        ('[questions.q]\nlabels = ["x", "y"]\nrecipes = "3"\n', "unknown keys ['recipes']"),
    ],
)
def test_a_bad_recipe_in_a_task_file_is_one_line(extra: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(BASE + extra)
    with pytest.raises(TaskError) as caught:
        load_task(tmp_path / "t.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_train_refuses_a_bad_recipe_flag_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    (tmp_path / "t.csv").write_text("id,text,label\n1,refund,billing\n2,crash,technical\n")
    argv = ["train", "--tickets", str(tmp_path / "t.csv"), "--out", str(tmp_path / "h"), "--recipe", "8:avg"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "ticketq-worker train: recipe: recipe '8:avg': "
        "unknown pooling 'avg'; use mean, max, last, echo, rare, chars\n"
    )
    argv[-1] = "acurate"  # a misspelt preset is named as one
    assert main(argv) == 2
    assert "unknown recipe 'acurate': a preset (fast, default, accurate)" in capsys.readouterr().err

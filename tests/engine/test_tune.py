"""Tuning the layers a head reads (tools.tune_layers: a measurement, docs/head.md), on the tiny model.

What the tuning optimizes must be what the saved model computes, or the measurement measures nothing: the
tuner's states over the kept inputs, with the prefix run through its copies, equal the engine's own pass;
the tuned layers, and only they, change; the saved directory loads as a model whose pass gives the tuned
states."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from tools import tune_layers as tune
from worker.cli import main
from worker.engine import Engine
from worker.engine.model import load_model
from worker.engine.recipe import Recipe
from worker.engine.task import Task

TASK = Task(name="t", labels=("billing", "technical"), instructions="Sort the message.", question="Team?")
BILLING = ["I was charged twice", "refund my fee please", "why this charge", "the invoice is wrong"]
TECHNICAL = ["the app crashes", "login page fails", "error 500 on upload", "sync is broken again"]
TEXTS = BILLING + TECHNICAL
LABELS = ["billing"] * 4 + ["technical"] * 4


def engine_of(path: Path) -> Engine:
    return Engine(load_model(str(path), dtype="float32"), TASK)


def tuner_states(engine: Engine, first: int, last: int) -> torch.Tensor:
    prefix, states = tune.token_states(engine, TEXTS, first)
    with torch.no_grad():
        return tune.Tuner(engine, first, last, prefix).features(states)


def test_the_tuner_computes_what_the_engines_pass_computes(tiny_dir: Path) -> None:
    engine = engine_of(tiny_dir)
    got = tuner_states(engine, 1, 2)
    want, _ = engine.features(TEXTS, Recipe.parse("1:mean,2:mean,1:max,2:max"))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_tuning_changes_the_tuned_layers_only_and_the_saved_model_computes_them(
    tiny_dir: Path, tmp_path: Path
) -> None:
    engine = engine_of(tiny_dir)
    before = {k: v.clone() for k, v in engine.loaded.model.state_dict().items()}
    done = tune.tune(engine, TEXTS * 4, LABELS * 4, first=1, last=2, epochs=6, lr=3e-3)
    assert done.losses[-1] < done.losses[0]
    after = engine.loaded.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("model.layers.1.") for k in changed), changed
    tune.save(engine, tmp_path / "tuned")
    reloaded = engine_of(tmp_path / "tuned")
    for k, v in reloaded.loaded.model.state_dict().items():
        assert torch.equal(v, after[k]), k
    # the saved model's pass (its prefix through the tuned layer) is what the tuner trained on
    want, _ = reloaded.features(TEXTS, Recipe.parse("1:mean,2:mean,1:max,2:max"))
    torch.testing.assert_close(tuner_states(reloaded, 1, 2), want, rtol=1e-4, atol=1e-4)
    untuned, _ = engine_of(tiny_dir).features(TEXTS, Recipe.parse("2:mean"))
    assert not torch.allclose(want[:, 64:128], untuned, atol=1e-3)


def test_the_layers_come_from_the_recipe() -> None:
    assert tune.span(Recipe.parse("8:mean,12:mean,8:max,12:max,24:echo,28:echo,chars")) == (8, 12)
    with pytest.raises(tune.TuneError, match="fewer than two layers"):
        tune.span(Recipe.parse("10:mean"))
    assert tune.default_epochs(770, 32) == 10
    assert tune.default_epochs(10_003, 32) == 3


def write_tickets(path: Path, rows: list[tuple[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)
    return path


def test_the_tool_writes_a_model_train_and_eval_load(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "task.toml"
    task.write_text('labels = ["billing", "technical"]\ninstructions = "Sort."\nquestion = "Team?"\n')
    tickets = write_tickets(tmp_path / "t.csv", list(zip(TEXTS, LABELS, strict=True)))
    out = tmp_path / "tuned"
    common = ["--task", str(task), "--tickets", str(tickets), "--threads", "1"]
    code = tune.main(
        [*common, "--model", str(tiny_dir), "--layers", "2-2", "--epochs", "2", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    assert f"--model {out}" in capsys.readouterr().out
    head = tmp_path / "t.head"
    assert main(["train", *common, "--model", str(out), "--out", str(head)]) == 0
    assert main(["eval", *common, "--model", str(out), "--head", str(head)]) == 0
    # the head is the tuned model's: the untuned one refuses it
    assert main(["eval", *common, "--model", str(tiny_dir), "--head", str(head)]) == 2
    assert "weights" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "rows", "message"),
    [
        (["--layers", "2-2"], [("x", "nope"), ("y", "billing")], "nope"),
        (["--layers", "2-2"], [("x", "billing"), ("y", "billing")], "two labels"),
        (["--layers", "3-3"], [("x", "technical"), ("y", "billing")], "2 layers"),
        (["--layers", "two"], [("x", "technical"), ("y", "billing")], "FIRST-LAST"),
        (["--layers", "1-2"], [("x", "technical"), ("y", "billing")], "2 <= FIRST"),
        ([], [("x", "technical"), ("y", "billing")], "fewer than two layers"),
    ],
)
def test_the_tool_refuses_what_it_cannot_do(
    tiny_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    rows: list,
    message: str,
) -> None:
    task = tmp_path / "task.toml"
    task.write_text('labels = ["billing", "technical"]\ninstructions = "Sort."\nquestion = "Team?"\n')
    tickets = write_tickets(tmp_path / "t.csv", rows)
    args = [
        "--task",
        str(task),
        "--model",
        str(tiny_dir),
        "--tickets",
        str(tickets),
        "--threads",
        "1",
    ]
    assert tune.main([*args, *extra, "--out", str(tmp_path / "m")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_the_tool_never_writes_over_a_directory(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep.txt").write_text("mine")
    tickets = write_tickets(tmp_path / "t.csv", list(zip(TEXTS, LABELS, strict=True)))
    code = tune.main(["--model", str(tiny_dir), "--tickets", str(tickets), "--out", str(tmp_path / "m")])
    assert code == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "m" / "keep.txt").read_text() == "mine"

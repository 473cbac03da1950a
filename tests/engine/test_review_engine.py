"""Issue 22 on the tiny random model: the zero-shot temperature (scores only, fitted by ``eval``), each
question's review keys reaching its engine, and heads trained for a question's ``auto_accuracy``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_head import WORDS, labelled

from worker.cli import main
from worker.engine import Engine
from worker.engine.calibration import check_temperature, confidences
from worker.engine.head import Head
from worker.engine.model import LoadedModel
from worker.engine.task import DEFAULT_TASK_PATH, Question, load_task
from worker.engine.training import train_head
from worker.review import resolve, resolve_question

TEXTS = [
    "I was charged twice for my plan.",
    "The app crashes when I open settings.",
    "Please change the email on my profile.",
    "x",
]


@pytest.fixture(scope="module")
def engines(tiny: LoadedModel) -> tuple[Engine, Engine]:
    """The built-in task as it ships (temperature 1) and with a zero-shot temperature of 3."""
    task = load_task()
    return Engine(tiny, task), Engine(tiny, replace(task, zero_shot_temperature=3.0))


def test_the_zero_shot_temperature_changes_the_scores_never_the_labels(
    engines: tuple[Engine, Engine],
) -> None:
    plain, warm = engines
    assert warm.identity == plain.identity  # not part of the prompt: heads trained for the task still fit
    assert warm.describe()["zero_shot_temperature"] == 3.0 and warm.temperature == 3.0
    before, _ = plain.classify(TEXTS)
    after, _ = warm.classify(TEXTS)
    assert [p.label for p in after] == [p.label for p in before]
    assert [p.logprobs for p in after] == [p.logprobs for p in before]  # what verify compares: raw
    prior = warm.prior
    assert prior is not None
    for p in after:  # softmax((log-probabilities - content-free prior) / 3), by hand
        logits = torch.tensor([p.logprobs[lab] for lab in warm.labels], dtype=torch.float64) - prior
        want = torch.softmax(logits / 3.0, -1).tolist()
        assert [p.scores[lab] for lab in warm.labels] == pytest.approx(want, abs=2e-6)
    flatter = [max(p.scores.values()) for p in after]
    sharper = [max(p.scores.values()) for p in before]
    assert all(f <= s + 1e-9 for f, s in zip(flatter, sharper, strict=True)) and flatter != sharper


def test_a_head_decides_with_its_own_temperature_whatever_the_zero_shot_one(
    engines: tuple[Engine, Engine],
) -> None:
    plain, warm = engines
    texts, labels = labelled(4)
    head = train_head(plain, texts, labels, seed=1)
    try:
        plain.use_head(head)
        warm.use_head(head)  # the same prompt digest: the head fits the warmer task too
        assert warm.temperature == 1.0
        assert [p.scores for p in warm.classify(TEXTS)[0]] == [p.scores for p in plain.classify(TEXTS)[0]]
    finally:
        plain.use_head(None)
        warm.use_head(None)


def test_each_question_engine_carries_its_review_keys(tiny: LoadedModel) -> None:
    questions = (Question("topic", tuple(WORDS), review_below=0.6), Question("urgency", ("high", "low")))
    engine = Engine(tiny, replace(load_task(), questions=questions, auto_accuracy=0.9))
    topic = engine.asking("topic").task
    assert (topic.review_below, topic.auto_accuracy) == (0.6, None)
    assert engine.asking(None).task.auto_accuracy == 0.9
    assert resolve_question(engine, "topic").value == 0.6
    assert resolve_question(engine, "urgency").value is None
    assert "no head" in resolve(None, engine).source  # zero-shot primary with auto_accuracy


def _csv(path: Path, texts: list[str], labels: list[str]) -> Path:
    rows = [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))]
    path.write_text("\n".join(["id,text,label", *rows]) + "\n")
    return path


def test_a_questions_head_data_is_trained_for_its_auto_accuracy(
    tiny: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question with head_data and auto_accuracy: its head, trained on first use and cached, stores the
    threshold, and the worker's resolution reads it (before, such a head stored none)."""
    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    texts, labels = labelled(3)  # three folds: the fits are what costs
    data = str(_csv(tmp_path / "topic.csv", texts, labels))
    asked = (Question("topic", tuple(WORDS), head_data=data, auto_accuracy=0.5),)
    engine = Engine(tiny, replace(load_task(), head_data=None, questions=asked))
    engine.resolve_heads("none")
    head = engine.answer_heads["topic"]
    assert head.review_below is not None and head.training["auto_accuracy"] == 0.5
    threshold = resolve_question(engine, "topic")
    assert threshold.value == head.review_below and "auto_accuracy 0.5" in threshold.source
    cached = list((tmp_path / "cache" / "heads").glob("*.safetensors"))
    without = replace(asked[0], auto_accuracy=None)
    engine = Engine(tiny, replace(load_task(), head_data=None, questions=(without,)))
    engine.resolve_heads("none")  # no auto_accuracy: another cache entry, a head without a threshold
    assert engine.answer_heads["topic"].review_below is None
    assert len(list((tmp_path / "cache" / "heads").glob("*.safetensors"))) == len(cached) + 1


def test_train_for_a_question_takes_its_own_auto_accuracy(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --question topic`` reads [questions.topic] auto_accuracy (not the primary's) and stores the
    threshold in the question's head; ``--auto-accuracy`` overrides it."""
    texts, labels = labelled(3)  # three folds: the fits are what costs
    data = _csv(tmp_path / "topic.csv", texts, labels)
    task = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    task += '\n[questions.topic]\nlabels = ["billing", "technical", "account"]\nauto_accuracy = 0.5\n'
    (tmp_path / "task.toml").write_text(task, encoding="utf-8")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--task", str(tmp_path / "task.toml")]
    flags += ["--question", "topic", "--tickets", str(data)]
    assert main(["train", *flags, "--out", str(tmp_path / "a.head")]) == 0
    head = Head.load(tmp_path / "a.head")
    assert head.training["auto_accuracy"] == 0.5 and head.review_below is not None
    assert "auto_accuracy 50.0%: review below confidence" in capsys.readouterr().out
    assert main(["train", *flags, "--auto-accuracy", "0.8", "--out", str(tmp_path / "b.head")]) == 0
    assert Head.load(tmp_path / "b.head").training["auto_accuracy"] == 0.8
    assert main(["train", *flags, "--auto-accuracy", "1.5", "--out", str(tmp_path / "c.head")]) == 2


def test_eval_fits_the_zero_shot_temperature_and_its_threshold_holds_in_the_engine(
    tiny_dir: Path, tiny: LoadedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval`` zero-shot: the temperature it prints is the one fitted on the decision logits; put in the
    task, the results' own ECE is the one eval promised, labels unchanged; the review_below it prints for
    --auto-accuracy, applied to the engine's results at that temperature, keeps the auto-routed tickets
    at that accuracy and coverage."""
    texts, labels = labelled(5)
    data = _csv(tmp_path / "t.csv", texts, labels)
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--head", "none", "--tickets", str(data)]
    assert main(["eval", *flags, "--auto-accuracy", "0.4", "--json", str(tmp_path / "a.json")]) == 0
    printed = capsys.readouterr().out
    fit = json.loads((tmp_path / "a.json").read_text())["calibration"]["zero_shot_temperature"]
    assert f"zero_shot_temperature = {fit['fitted']:g}" in printed and fit["task"] == 1.0
    assert ("the search's upper bound" in printed) == (fit["fitted"] >= 19.8)  # a random model: likely
    base = load_task()
    engine = Engine(tiny, base)
    logp, _ = engine.logprobs(texts)
    assert engine.prior is not None
    y = [base.labels.index(lab) for lab in labels]
    check = check_temperature((logp - engine.prior).double(), y)
    assert fit["fitted"] == pytest.approx(check.temperature, rel=1e-3)
    assert (
        fit["ece_fitted"] == pytest.approx(check.ece_fitted, abs=1e-3)
        and fit["ece_fitted"] <= fit["ece_task"]
    )

    task = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace(
        'head_data = "../data/head_train.csv"', f"zero_shot_temperature = {fit['fitted']}"
    )
    (tmp_path / "task.toml").write_text(task, encoding="utf-8")
    calibrated = ["--task", str(tmp_path / "task.toml"), "--json", str(tmp_path / "b.json")]
    assert main(["eval", *flags, *calibrated]) == 0
    again = json.loads((tmp_path / "b.json").read_text())
    first = json.loads((tmp_path / "a.json").read_text())
    assert again["confusion"] == first["confusion"]  # a temperature never changes a label
    assert again["calibration"]["ece"] == pytest.approx(fit["ece_fitted"], abs=1e-3)
    assert again["calibration"]["zero_shot_temperature"]["task"] == pytest.approx(fit["fitted"])

    if fit["review_below"] is None:  # unreachable on this file: nothing more to hold
        assert "no threshold reaches it" in printed
        return
    assert f"review_below = {fit['review_below']:g}" in printed
    warm = Engine(tiny, replace(base, zero_shot_temperature=fit["fitted"]))
    preds, _ = warm.classify(texts)
    kept = [
        p.label == lab
        for p, lab in zip(preds, labels, strict=True)
        if p.scores[p.label] >= fit["review_below"]
    ]
    assert kept and sum(kept) / len(kept) >= 0.4
    assert len(kept) / len(texts) == pytest.approx(fit["expected_coverage"], abs=1e-4)
    conf = confidences((logp - engine.prior).double(), fit["fitted"])
    assert [p.scores[p.label] for p in preds] == pytest.approx(conf, abs=2e-6)

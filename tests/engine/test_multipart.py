"""Multi-part recipes on the tiny random model (2 layers): features, heads, files, train and verify."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_head import WORDS, labelled, reference_features

from worker.engine import Engine
from worker.engine import features as feats
from worker.engine.head import Head, HeadError
from worker.engine.model import LoadedModel
from worker.engine.recipe import FINE, MAX, MEAN, Recipe
from worker.engine.task import DEFAULT_TASK_PATH, load_task
from worker.engine.training import TrainingError, train_head

RICH = Recipe.parse("1:mean,2:mean,1:max,2:last")
TEXTS = [
    "My card was charged twice.",
    "",
    "x",
    "Login fails with error 500 after the update, twice today, and again now.",
    "Please change the email on my profile.",
]


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return Engine(tiny, load_task())


def test_features_are_the_parts_side_by_side_exactly(engine: Engine) -> None:
    """Each part's block is bit for bit what that part alone gives (its own pass, stopped at its layer)."""
    got, stats = engine.features(TEXTS, RICH)
    hidden = engine.identity.hidden_size
    assert got.shape == (len(TEXTS), 4 * hidden) and len(stats) == 1
    alone = [engine.features(TEXTS, Recipe((p,)))[0] for p in RICH.parts]
    assert all(torch.equal(block, a) for block, a in zip(got.split(hidden, 1), alone, strict=True))
    assert not torch.equal(alone[0], alone[2])  # mean and max of the same layer differ


def own_states(engine: Engine, text: str, layer: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The states after ``layer`` of a whole-prompt run, at the ticket's own tokens and at those plus the
    hand-over's first, and the own tokens' ids."""
    suffix = engine.prompt.ticket_ids(engine.tokenizer, [text])[0]
    own = len(suffix) - len(engine.prompt.after_ids)
    ids = [*engine.prompt.prefix_ids, *suffix]
    with torch.inference_mode():
        states = engine.scorer.body(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    start = len(engine.prompt.prefix_ids)
    return states[layer][0, start : start + own], states[layer][0, start : start + own + 1], suffix[:own]


def test_max_is_the_elementwise_maximum_over_the_tickets_own_tokens(engine: Engine) -> None:
    (got,), _ = engine.features([TEXTS[3]], Recipe.one(1, MAX))
    mine, and_after, _ = own_states(engine, TEXTS[3], 1)
    torch.testing.assert_close(got, mine.amax(0), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, and_after.amax(0))  # not the hand-over


@pytest.mark.parametrize("recipe", [Recipe.one(1, MAX), Recipe.one(2, MAX), RICH])
def test_features_match_the_plain_reference(engine: Engine, recipe: Recipe) -> None:
    got, _ = engine.features(TEXTS, recipe)
    torch.testing.assert_close(got, reference_features(engine, TEXTS, recipe), atol=1e-4, rtol=1e-4)


def test_the_pass_stops_after_the_deepest_part(engine: Engine) -> None:
    calls = [0, 0]
    handles = [
        layer.register_forward_hook(lambda *_a, i=i: calls.__setitem__(i, calls[i] + 1))
        for i, layer in enumerate(engine.scorer.body.layers)
    ]
    try:
        engine.features(TEXTS, Recipe.parse("1:mean,1:max,1:last"))
        assert calls == [1, 0]
        engine.features(TEXTS, RICH)
        assert calls == [2, 1]
    finally:
        for h in handles:
            h.remove()


def test_a_feature_constant_up_to_rounding_noise_gets_no_weight() -> None:
    """What a max pooling gives when every ticket's maximum is at a token they all share: without this,
    the head weighs float32 noise by 1/std and the engine and the reference disagree (verify fails)."""
    from worker.engine.fit import fit

    gen = torch.Generator().manual_seed(0)
    y = [i % 3 for i in range(60)]
    x = torch.randn(60, 4, generator=gen) + torch.eye(3, 4)[y] * 2
    x[:, 3] = 7.0 + 1e-6 * torch.randn(60, generator=gen)
    f = fit(x, y, 3)
    assert torch.equal(f.weight[:, 3], torch.zeros(3)) and f.weight[:, :3].abs().min() > 0
    assert torch.isfinite(f.bias).all() and f.cv_accuracy is not None and f.cv_accuracy > 0.6


@pytest.fixture(scope="module")
def rich_head(engine: Engine) -> Head:
    texts, labels = labelled(6)
    return train_head(engine, texts, labels, seed=3, recipe=RICH)


def test_a_multi_part_head_trains_round_trips_and_decides(
    engine: Engine, rich_head: Head, tmp_path: Path
) -> None:
    assert rich_head.recipe == RICH and rich_head.hidden_size == 4 * engine.identity.hidden_size
    rich_head.save(tmp_path / "h.head")
    back = Head.load(tmp_path / "h.head")
    assert back.recipe == RICH and back.id == rich_head.id and back.layers == (1, 2)
    assert back.meta()["recipe"] == {"parts": [[1, "mean"], [2, "mean"], [1, "max"], [2, "last"]]}
    engine.use_head(back)
    try:
        preds, _ = engine.classify(["my invoice is wrong", "the app crashes"])
        x, _ = engine.features(["my invoice is wrong", "the app crashes"], RICH)
        assert [p.label for p in preds] == back.predict(x) and preds[0].head == back.id
    finally:
        engine.use_head(None)


def test_a_head_whose_width_or_layers_do_not_fit_is_refused(engine: Engine, rich_head: Head) -> None:
    with pytest.raises(HeadError, match="reads 256 features; recipe 1:mean on this model gives 64"):
        engine.use_head(replace(rich_head, recipe=Recipe.one(1, MEAN)))
    deep = Recipe.parse("1:mean,3:mean,1:max,2:last")
    with pytest.raises(HeadError, match="reads layer 3; the model has 2"):
        engine.use_head(replace(rich_head, recipe=deep))
    with pytest.raises(TrainingError, match="reads layer 3; the model has 2"):
        train_head(engine, *labelled(2), recipe=Recipe.one(3))
    assert engine.head is None


# What main computed for these heads before recipes had parts (commit 027f6f2): their files keep loading
# with the same ids, and what is written back stores the recipe the same way.
OLD_IDS = {(10, "mean"): "a8a4fc742c6d", (30, "last"): "5820cf5c3518"}


@pytest.mark.parametrize(("layer", "pool"), list(OLD_IDS))
def test_an_old_head_file_loads_with_its_old_id(layer: int, pool: str) -> None:
    from safetensors.torch import save

    from producer.learning import HEAD_META_KEY

    weight, bias = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 8, torch.tensor([0.5, -0.25])
    meta = {
        "format": "ticketq-head/1",
        "labels": ["billing", "account"],
        "recipe": {"layer": layer, "pool": pool},
        "hidden_size": 3,
        "model": "m",
        "model_digest": "d" * 64,
        "prompt_digest": "p" * 64,
        "training": {},
    }
    old = Head.from_bytes(save({"weight": weight, "bias": bias}, metadata={HEAD_META_KEY: json.dumps(meta)}))
    assert old.recipe == Recipe.one(layer, pool) and old.id == OLD_IDS[(layer, pool)]
    assert old.meta()["recipe"] == {"layer": layer, "pool": pool}
    assert Head.from_bytes(old.to_bytes()).id == old.id
    assert replace(old, recipe=Recipe.parse(f"{layer}:{pool},1:max")).id != old.id  # the recipe is in the id


def _csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    lines = ["id,text,label"] + [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_train_recipe_flag_and_the_task_recipe(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    texts, labels = labelled(4)
    data = _csv(tmp_path / "t.csv", list(zip(texts, labels, strict=True)))
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--tickets", str(data)]
    assert main(["train", *flags, "--recipe", "2:max,1", "--out", str(tmp_path / "a.head")]) == 0
    assert "recipe 2:max,1:mean (LAYER:POOL; the model has 2 layers)" in capsys.readouterr().out
    assert Head.load(tmp_path / "a.head").recipe == Recipe.parse("2:max,1:mean")
    # no flag: the task's recipe; the flag wins over it
    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace(
        'head_data = "../data/head_train.csv"', 'recipe = "1:last,2:max"'
    )
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    task = ["--task", str(tmp_path / "task.toml")]
    assert main(["train", *flags, *task, "--out", str(tmp_path / "b.head")]) == 0
    assert Head.load(tmp_path / "b.head").recipe == Recipe.parse("1:last,2:max")
    assert main(["train", *flags, *task, "--recipe", "2", "--out", str(tmp_path / "c.head")]) == 0
    assert Head.load(tmp_path / "c.head").recipe == Recipe.one(2, MEAN)
    capsys.readouterr()
    assert main(["train", *flags, "--recipe", "1,3:max", "--out", str(tmp_path / "d.head")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "ticketq-worker train: recipe 1:mean,3:max reads layer 3; the model has 2"
    assert not (tmp_path / "d.head").exists()


URGENCY = ("urgent", "routine")


def _question_task(tmp_path: Path, primary: Head) -> Path:
    """The built-in task with a head file for the primary and a further question trained from
    ``head_data`` on its own multi-part recipe."""
    texts, _ = labelled(4)
    rows = [(t, "urgent" if i % 3 == 0 else "routine") for i, t in enumerate(texts)]
    _csv(tmp_path / "urgency.csv", rows)
    primary.save(tmp_path / "primary.head")
    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8")
    text = text.replace('head_data = "../data/head_train.csv"', 'head = "primary.head"')
    text += '\n[questions.urgency]\nlabels = ["urgent", "routine"]\nhead_data = "urgency.csv"\n'
    text += 'recipe = "2:max,1:mean,1:last"\n'
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    return tmp_path / "task.toml"


def test_a_question_head_from_head_data_uses_its_recipe_and_its_own_cache_entry(
    tiny_dir: Path, rich_head: Head, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.engine.options import EngineOptions

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    task = _question_task(tmp_path, rich_head)
    engine = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    urgency = engine.answer_heads["urgency"]
    assert urgency.recipe == Recipe.parse("2:max,1:mean,1:last") and urgency.labels == URGENCY
    assert engine.head is not None and engine.head.id == rich_head.id
    (p,) = engine.classify(["the app crashes"])[0]
    assert p.answers["urgency"].label in URGENCY
    cached = sorted((tmp_path / "cache" / "heads").iterdir())
    assert len(cached) == 1
    # another recipe for the same data is another head, in another cache entry
    task.write_text(task.read_text().replace('"2:max,1:mean,1:last"', '"1:max"'))
    again = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert again.answer_heads["urgency"].recipe == Recipe.one(1, MAX)
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 2


def test_a_head_data_head_balances_uneven_labels_unless_its_task_says_not(
    tiny_dir: Path, rich_head: Head, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """urgency.csv has twice as many routine tickets as urgent ones: its head weighs the two labels
    equally unasked (task.wants_balance), and ``balance = false`` trains the head on counts, in a cache
    entry of its own."""
    from worker.engine.options import EngineOptions

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    task = _question_task(tmp_path, rich_head)
    balanced = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    head = balanced.answer_heads["urgency"]
    assert head.training["balance"] is True and head.training["counts"] == {"urgent": 4, "routine": 8}
    task.write_text(task.read_text() + "balance = false\n")
    counted = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert "balance" not in counted.answer_heads["urgency"].training
    assert counted.answer_heads["urgency"].id != head.id
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 2


def test_verify_checks_multi_part_heads_and_a_questions_head(
    tiny_dir: Path,
    rich_head: Head,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker.cli import main

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    task = _question_task(tmp_path, rich_head)
    flags = ["--model", str(tiny_dir), "--task", str(task), "--limit", "6"]
    assert main(["verify", *flags]) == 0
    out = capsys.readouterr().out
    assert f"head {rich_head.id} (recipe {RICH})" in out and "agreement 6/6" in out
    assert out.rstrip().endswith("OK")
    assert main(["verify", *flags, "--question", "urgency"]) == 0
    out = capsys.readouterr().out
    assert "question urgency: its head only" in out and "(recipe 2:max,1:mean,1:last)" in out
    assert "agreement 6/6" in out and out.rstrip().endswith("OK")
    assert main(["verify", *flags, "--question", "mood"]) == 2
    assert "asks no question 'mood'" in capsys.readouterr().err


def test_verify_fails_when_the_engines_features_are_wrong(
    tiny_dir: Path,
    rich_head: Head,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A max pooling that took one token too many (the template's hand-over): verify must see it."""
    from worker.cli import main

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    task = _question_task(tmp_path, rich_head)
    right = feats.own_tokens

    def one_too_many(starts: list[int], counts: list[int], device: torch.device | None = None) -> tuple:
        return right(starts, [k + 1 for k in counts], device)

    monkeypatch.setattr(feats, "own_tokens", one_too_many)
    flags = ["--model", str(tiny_dir), "--task", str(task), "--limit", "6"]
    for question in ([], ["--question", "urgency"]):
        assert main(["verify", *flags, *question]) == 1
        assert "FAIL:" in (err := capsys.readouterr().err) and "head log-probabilities" in err


def test_a_question_without_a_head_is_refused_by_verify(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    text += f"\n[questions.topic]\nlabels = {json.dumps(list(WORDS))}\n"
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    flags = ["--model", str(tiny_dir), "--task", str(tmp_path / "task.toml"), "--question", "topic"]
    assert main(["verify", *flags, "--limit", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "ticketq-worker verify: question 'topic' has no head"
    )


def test_eval_and_verify_take_a_questions_head_from_head(
    tiny_dir: Path, rich_head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --question, --head FILE is that question's head (a task may name none for it), trained by
    ``train --question``; a head for another label set is refused in one line."""
    from worker.cli import main

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    # the primary's labels in another order: another label set, which the primary's heads do not fit
    text += f"\n[questions.topic]\nlabels = {json.dumps(list(WORDS)[::-1])}\n"
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    texts, labels = labelled(4)
    rows = [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))]
    (tmp_path / "t.csv").write_text("\n".join(["id,text,label", *rows]) + "\n")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--task", str(tmp_path / "task.toml")]
    asked = [*flags, "--question", "topic"]
    out = tmp_path / "topic.head"
    assert main(["train", *asked, "--tickets", str(tmp_path / "t.csv"), "--out", str(out)]) == 0
    topic = Head.load(out)
    capsys.readouterr()
    assert (
        main(["verify", *asked, "--head", str(out), "--tickets", str(tmp_path / "t.csv"), "--limit", "4"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "question topic: its head only" in printed and printed.rstrip().endswith("OK")
    assert main(["eval", *asked, "--head", str(out), "--tickets", str(tmp_path / "t.csv")]) == 0
    assert f"head {topic.id}" in capsys.readouterr().out
    # a head trained for the primary question (its labels in their order) does not fit this question
    rich_head.save(tmp_path / "other.head")
    other = ["--head", str(tmp_path / "other.head"), "--tickets", str(tmp_path / "t.csv")]
    assert main(["eval", *asked, *other]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ticketq-worker eval: head ")


def test_a_head_data_head_learns_the_label_names_and_unlabeled_data_its_task_declares(
    tiny_dir: Path, rich_head: Head, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.engine.options import EngineOptions

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    task = _question_task(tmp_path, rich_head)
    texts, _ = labelled(3)
    (tmp_path / "stream.csv").write_text(
        "\n".join(["id,text", *(f'u{i},"{t} again"' for i, t in enumerate(texts))]) + "\n"
    )
    plain = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert "beyond" not in plain.answer_heads["urgency"].training
    task.write_text(task.read_text() + 'label_names = true\nunlabeled_data = "stream.csv"\n')
    rich = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    head = rich.answer_heads["urgency"]
    assert head.training["beyond"]["label_names"] == 2 and head.training["beyond"]["unlabeled"] == len(texts)
    assert head.id != plain.answer_heads["urgency"].id  # another head, in its own cache entry
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 2
    again = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert again.answer_heads["urgency"].id == head.id  # read from the cache, not trained again
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 2
    # a cached head is trained again when what it self-trained on, or how, changes
    from worker.engine import beyond

    (tmp_path / "stream.csv").write_text("id,text\nu1,a refund for the double charge\nu2,the app crashes\n")
    restreamed = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert restreamed.answer_heads["urgency"].training["beyond"]["unlabeled"] == 2
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 3
    how = beyond.self_training()
    with monkeypatch.context() as m:
        m.setattr(beyond, "self_training", lambda: {**how, "weight": how["weight"] / 2})
        Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert len(list((tmp_path / "cache" / "heads").iterdir())) == 4
    # no key, many labels and few tickets each: the names are learnt unasked (task.wants_names)
    fine = [f"intent_{i}" for i in range(FINE)]
    _csv(
        tmp_path / "intent.csv", [(f"{texts[k % len(texts)]} #{k}", fine[k % FINE]) for k in range(3 * FINE)]
    )
    with_intent = (
        task.read_text() + f'\n[questions.intent]\nlabels = {json.dumps(fine)}\nhead_data = "intent.csv"\n'
    )
    task.write_text(with_intent)
    asked = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    assert asked.answer_heads["intent"].training["beyond"]["label_names"] == FINE
    assert asked.answer_heads["intent"].recipe == Recipe.default(asked.n_layers, FINE)
    # a file the task names that is not there: one line (a HeadError: exit 2 for the commands)
    task.write_text(task.read_text().replace('"stream.csv"', '"gone.csv"'))
    with pytest.raises(TrainingError, match=r"cannot read the task's training data: .*gone\.csv"):
        Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))
    (tmp_path / "gone.csv").write_bytes(b"\xff\xfe not text")  # nor a file that is not UTF-8 text
    with pytest.raises(TrainingError, match=r"gone\.csv: line 1: not UTF-8 \(byte 0\)"):
        Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", task=str(task)))

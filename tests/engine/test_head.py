"""The trained head on the tiny random model: features, deterministic fitting, the file, refusals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from worker.engine import Engine
from worker.engine.fit import fit, stratified_folds
from worker.engine.head import Head, HeadError
from worker.engine.model import LoadedModel
from worker.engine.recipe import FINE, LAST, MEAN, Recipe
from worker.engine.task import Task, load_task
from worker.engine.training import TrainingError, train_head

WORDS = {
    "billing": ["refund", "invoice", "charged twice", "price", "payment", "fee"],
    "technical": ["crash", "error 500", "bug", "app freezes", "timeout", "broken page"],
    "account": ["password", "login", "username", "two-factor code", "profile", "email change"],
}


def reference_features(engine: Engine, texts: list[str], recipe: Recipe) -> torch.Tensor:
    """``recipe``'s features of ``texts`` the plain way (:meth:`ReferenceScorer.features_one`), one by one."""
    from worker.engine.reference import ReferenceScorer

    ref = ReferenceScorer(engine.loaded.model, engine.tokenizer, engine.task, engine.prompt)
    return torch.stack([ref.features_one(t, recipe) for t in texts])


def labelled(n_per: int = 12) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    for label, words in WORDS.items():
        for i in range(n_per):
            texts.append(f"Hello, about my {words[i % len(words)]} ({i}): {words[(i * 5) % len(words)]}.")
            labels.append(label)
    return texts, labels


def write_labelled(path: Path, texts: list[str], labels: list[str]) -> None:
    """An id,text,label CSV of ``texts`` and ``labels``."""
    rows = "".join(f'r{i},"{t}",{lab}\n' for i, (t, lab) in enumerate(zip(texts, labels, strict=True)))
    path.write_text("id,text,label\n" + rows)


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    return Engine(tiny, load_task())


@pytest.fixture(scope="module")
def head(engine: Engine) -> Head:
    texts, labels = labelled()
    return train_head(engine, texts, labels, seed=3)


def test_features_stop_early_and_match_the_full_model(engine: Engine) -> None:
    """The hooked early stop gives the state the full model reports, for a ticket packed with others."""
    texts = ["Short one.", "A somewhat longer ticket about a refund that never came.", "x"]
    for layer in (1, 2):
        got, _ = engine.features(texts, Recipe.one(layer, LAST))
        ids = [*engine.prompt.prefix_ids, *engine.prompt.ticket_ids(engine.tokenizer, texts[1:2])[0]]
        with torch.inference_mode():
            out = engine.scorer.body(input_ids=torch.tensor([ids]), output_hidden_states=True)
        torch.testing.assert_close(got[1], out.hidden_states[layer][0, -1].float(), atol=1e-4, rtol=1e-4)


def test_features_do_not_depend_on_batch_company(engine: Engine) -> None:
    texts, _ = labelled(4)
    together, _ = engine.features(texts, Recipe.one(1, MEAN))
    alone = torch.cat([engine.features([t], Recipe.one(1, MEAN))[0] for t in texts[:3]])
    torch.testing.assert_close(together[:3], alone, atol=1e-4, rtol=1e-4)


def test_fitting_is_deterministic(engine: Engine, head: Head) -> None:
    texts, labels = labelled()
    again = train_head(engine, texts, labels, seed=3)
    assert again.id == head.id and again.to_bytes() == head.to_bytes()
    t = head.training
    assert t["n"] == 36 and t["counts"] == {"billing": 12, "technical": 12, "account": 12}
    assert t["cv_folds"] == 5 and 0.0 <= t["cv_accuracy"] <= 1.0


def test_fit_learns_overlapping_clusters_and_folds_are_stratified() -> None:
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(3, 8, generator=gen) * 1.5  # overlapping a little: a finite optimum, quickly found
    y = [i % 3 for i in range(90)]
    x = centers[y] + torch.randn(90, 8, generator=gen)
    f = fit(x, y, 3)
    assert f.cv_accuracy is not None and f.cv_accuracy > 0.8
    assert ((x @ f.weight.T + f.bias).argmax(1) == torch.tensor(y)).float().mean() > 0.8
    folds = stratified_folds(y, 5, seed=1)
    for c in range(3):
        assert sorted(folds[i] for i in range(90) if y[i] == c) == sorted([0, 1, 2, 3, 4] * 6)


def test_head_decides_and_says_so(engine: Engine, head: Head) -> None:
    engine.use_head(head)
    try:
        preds, stats = engine.classify(["my invoice is wrong", "the app crashes"])
        assert [p.method for p in preds] == ["head", "head"] and preds[0].head == head.id
        assert set(preds[0].scores) == set(head.labels) and abs(sum(preds[0].scores.values()) - 1) < 1e-4
        assert sum(s.items for s in stats) == 2
        assert engine.describe()["method"] == "head"
    finally:
        engine.use_head(None)
    assert engine.classify(["my invoice is wrong"])[0][0].method == "zero-shot"


def test_round_trip(head: Head, tmp_path: Path) -> None:
    path = tmp_path / "h.safetensors"
    head.save(path)
    back = Head.load(path)
    assert back.id == head.id and back.labels == head.labels and back.recipe == head.recipe
    assert back.training == head.training and back.version is None
    assert torch.equal(back.weight, head.weight) and torch.equal(back.bias, head.bias)
    assert Head.from_bytes(head.to_bytes(), version="v7").name == "v7"
    assert path.read_bytes()[:8] != b"\x80\x04\x95" and b"ticketq-head/1" in path.read_bytes()  # not pickle


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],
        lambda b: b"\x00" * 64,
        lambda b: b"",
        lambda b: b.replace(b"ticketq-head/1", b"ticketq-head/9"),
    ],
)
def test_corrupt_heads_are_refused_in_one_line(head: Head, damage: object, tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(damage(head.to_bytes()))  # type: ignore[operator]
    with pytest.raises(HeadError) as err:
        Head.load(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def _edited(head: Head, **meta: Any) -> bytes:
    """``head``'s bytes with its metadata edited by hand (None: the key dropped)."""
    import json

    from safetensors.torch import save

    from producer.learning import HEAD_META_KEY

    edited = {k: v for k, v in {**head.meta(), **meta}.items() if v is not None}
    return save({"weight": head.weight, "bias": head.bias}, metadata={HEAD_META_KEY: json.dumps(edited)})


@pytest.mark.parametrize(
    "meta",
    [
        {"hidden_size": None},
        {"hidden_size": "abc"},
        {"training": {"l2": "abc"}},
        {"training": {"l2": -5}},
        {"training": {"data": {"corrections": 5}}},
        {"training": {"data": {"correction_weight": "x"}}},
        {"training": {"data": [1]}},
    ],
)
def test_a_head_whose_metadata_was_edited_by_hand_is_refused_as_a_head(head: Head, meta: Any) -> None:
    """Once published to Redis a head's metadata is anyone's JSON: what train and the publish gate read
    from it is checked where every reader loads it, so none of them fails on it (a KeyError in train)."""
    with pytest.raises(HeadError, match=r"not a readable ticketq head|hidden size"):
        Head.from_bytes(_edited(head, **meta), version="9")
    assert Head.from_bytes(_edited(head, training={"l2": 0.01}), version="9").training == {"l2": 0.01}


def test_safetensors_without_head_metadata_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(HeadError, match="not a head"):
        Head.load(tmp_path / "x.safetensors")


def test_mismatched_heads_are_refused(engine: Engine, head: Head, tiny: LoadedModel) -> None:
    other_model = replace(head, model_digest="0" * 64)
    with pytest.raises(HeadError, match="trained on model"):
        engine.use_head(other_model)
    task = load_task()
    relabelled = Engine(tiny, Task.from_dict({"labels": ["billing", "technical", "other"]}))
    with pytest.raises(HeadError, match="labels"):
        relabelled.use_head(head)
    reworded = Engine(tiny, replace(task, instructions=task.instructions + " Be brief."))
    with pytest.raises(HeadError, match="another prompt"):
        reworded.use_head(head)
    assert engine.head is None


def test_training_errors_are_one_line(engine: Engine) -> None:
    with pytest.raises(TrainingError, match="not in the task: 'sales' \\(1\\)"):
        train_head(engine, ["a", "b"], ["billing", "sales"])
    with pytest.raises(TrainingError, match="at least two labels"):
        train_head(engine, ["a", "b"], ["billing", "billing"])
    with pytest.raises(TrainingError, match="no labelled tickets"):
        train_head(engine, [], [])


def test_a_label_without_tickets_is_never_chosen(engine: Engine) -> None:
    texts, labels = labelled(6)
    keep = [i for i, lab in enumerate(labels) if lab != "account"]
    h = train_head(engine, [texts[i] for i in keep], [labels[i] for i in keep])
    assert h.training["missing"] == ["account"]
    engine.use_head(h)
    try:
        preds, _ = engine.classify(texts)
        assert "account" not in {p.label for p in preds}
    finally:
        engine.use_head(None)


def test_a_label_with_one_ticket_keeps_cross_validation_and_calibration_for_the_head(engine: Engine) -> None:
    """A new intent with a single labelled ticket used to turn cross-validation off for the whole head: no
    chosen penalty, temperature 1, no review threshold (auto_accuracy refused), extras unchecked."""
    from worker.train import report

    texts, labels = labelled(8)
    others = [i for i, lab in enumerate(labels) if lab != "account"]
    keep = [*others[:16], labels.index("account")]
    texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    h = train_head(engine, texts, labels, seed=3, auto_accuracy=0.9)
    t = h.training
    assert t["counts"]["account"] == 1 and t["cv_folds"] == 5 and t["cv_accuracy"] is not None
    assert "cv_ece" in t and h.temperature != 1.0 and h.review_below is not None
    text = report(h, {"model": "tiny", "dtype": "float32", "task": "t", "layers": 2}, "f.csv", 1.0)
    assert "note: fewer than 5 tickets for account" in text and "skipped" not in text
    engine.use_head(h)
    try:  # the head learnt the one ticket's label
        assert engine.classify([texts[-1]])[0][0].label == "account"
    finally:
        engine.use_head(None)


def test_train_command_writes_a_head_and_prints_cv(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    texts, labels = labelled(6)
    lines = ["id,text,label"] + [
        f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))
    ]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "support.head"
    code = main(
        [
            "train",
            "--model",
            str(tiny_dir),
            "--dtype",
            "float32",
            "--tickets",
            str(tmp_path / "t.csv"),
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "cross-validated accuracy" in printed and "confusion matrix" in printed
    assert "calibration (out of fold): temperature" in printed and "coverage for accuracy" in printed
    head = Head.load(out)
    assert head.training["n"] == 18 and head.id in printed


def test_train_mlp_writes_a_head_with_a_second_reading_that_verify_checks(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --mlp``: the MLP is fitted, judged on a held-out fold and reported; kept, the head file is
    format 2 and the batched pass answers as the plain reference does; dropped, the head is linear."""
    from producer.learning import head_metadata
    from worker.cli import main

    write_labelled(tmp_path / "t.csv", *labelled(10))
    out = tmp_path / "mlp.head"
    flags = ["--model", str(tiny_dir), "--dtype", "float32"]
    code = main(["train", *flags, "--tickets", str(tmp_path / "t.csv"), "--out", str(out), "--mlp"])
    printed = capsys.readouterr().out
    head = Head.load(out)
    record = head.training["mlp"]
    assert (
        code == 0
        and record["held_out"] == 6
        and set(record["accuracy_by_share"]) == {"0", "0.3", "0.5", "0.7"}
    )
    assert ("MLP: kept at" if head.mlp is not None else "MLP: not kept") in printed
    assert head_metadata(out.read_bytes())["format"] == ("ticketq-head/2" if head.mlp else "ticketq-head/1")
    if head.mlp is None:  # these words are told apart by a line: the blend ties, the head stays linear
        assert head.mlp_share == 0.0 and record["share"] == 0.0
        return
    assert main(["verify", *flags, "--head", str(out), "--limit", "6"]) == 0
    assert "agreement 6/6" in capsys.readouterr().out


def test_verify_checks_a_head_with_an_mlp_against_the_plain_reference(
    tiny_dir: Path, engine: Engine, head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The blend is part of ``Head.logits``: the batched pass and the reference scorer decide through the
    same code, so a head with an MLP (here fitted on the tiny model's features) agrees ticket for ticket."""
    from worker.cli import main
    from worker.engine.mlp import fit_mlp

    texts, labels = labelled()
    x, _ = engine.features(texts, head.recipe)
    y = [head.labels.index(lab) for lab in labels]
    net = fit_mlp(x, y, len(head.labels), seed=0)
    with_mlp = replace(head, mlp=net, mlp_share=0.5)
    with_mlp.save(tmp_path / "m.head")
    flags = ["--model", str(tiny_dir), "--head", str(tmp_path / "m.head"), "--limit", "6"]
    assert main(["verify", *flags]) == 0
    out = capsys.readouterr().out
    assert f"head {with_mlp.id}" in out and "agreement 6/6" in out and out.rstrip().endswith("OK")


def test_train_learns_label_names_and_unlabelled_tickets_on_request(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    texts, labels = labelled(6)
    rows = [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))]
    (tmp_path / "t.csv").write_text("\n".join(["id,text,label", *rows]) + "\n")
    free = [f'u{i},"{t} (again, {i})"' for i, t in enumerate(texts * 2)]
    (tmp_path / "free.csv").write_text("\n".join(["id,text", *free]) + "\n")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--tickets", str(tmp_path / "t.csv")]
    out = tmp_path / "beyond.head"
    extra = ["--label-names", "--unlabeled", str(tmp_path / "free.csv")]
    assert main(["train", *flags, *extra, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    head = Head.load(out)
    beyond = head.training["beyond"]
    assert beyond["label_names"] == len(head.labels) and beyond["unlabeled"] == len(free)
    assert not beyond["used"] or 0 < beyond["pseudo_labelled"] <= len(free)
    assert head.training["data"]["unlabeled"] == "free.csv" and head.training["n"] == len(rows)
    plain = tmp_path / "plain.head"
    assert main(["train", *flags, "--out", str(plain)]) == 0
    base = Head.load(plain)
    assert "beyond" not in base.training and beyond["cv_accuracy_without"] == base.training["cv_accuracy"]
    if beyond["used"]:  # the random tiny model: either way, each checked
        assert f"also learnt from: {len(head.labels)} label names; " in printed
        assert not torch.equal(base.weight, head.weight)  # the same penalty, another final fit
        assert head.training["cv_accuracy"] == beyond["cv_accuracy_with"] >= beyond["cv_accuracy_without"]
    else:
        assert f"not used: {len(head.labels)} label names; " in printed
        assert torch.equal(base.weight, head.weight)
    # declared once in the task file, the keys are train's defaults
    from worker.engine.task import DEFAULT_TASK_PATH

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    (tmp_path / "task.toml").write_text('label_names = true\nunlabeled_data = "free.csv"\n' + text)
    keyed = tmp_path / "keyed.head"
    assert main(["train", *flags, "--task", str(tmp_path / "task.toml"), "--out", str(keyed)]) == 0
    declared = Head.load(keyed).training
    assert (
        declared["beyond"]["label_names"] == len(head.labels) and declared["data"]["unlabeled"] == "free.csv"
    )


def test_train_balances_uneven_labels_unasked_and_on_request(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    texts, labels = labelled(6)
    rows = [(t, lab) for t, lab in zip(texts, labels, strict=True)]
    uneven = rows[:12] + rows[12:14]  # the third label: 2 tickets against 6
    for name, chosen in (("even", rows), ("uneven", uneven)):
        lines = [f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(chosen)]
        (tmp_path / f"{name}.csv").write_text("\n".join(["id,text,label", *lines]) + "\n")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--out", str(tmp_path / "h.head")]

    def trained(data: str, *extra: str) -> tuple[dict, str]:
        assert main(["train", *flags, "--tickets", str(tmp_path / data), *extra]) == 0
        return Head.load(tmp_path / "h.head").training, capsys.readouterr().out

    training, printed = trained("uneven.csv")
    assert training["balance"] is True and "labels balanced: 2 to 6 tickets per label" in printed
    training, printed = trained("even.csv")
    assert "balance" not in training and "labels balanced" not in printed
    assert trained("even.csv", "--balance")[0]["balance"] is True
    from worker.engine.task import DEFAULT_TASK_PATH

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8")
    text = text.replace('head_data = "../data/head_train.csv"', "")
    (tmp_path / "task.toml").write_text("balance = false\n" + text)  # declared: on counts
    assert "balance" not in trained("uneven.csv", "--task", str(tmp_path / "task.toml"))[0]


def test_train_learns_label_names_unasked_for_many_labels_with_few_tickets_each(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No label_names key: a question of FINE labels with a few tickets each learns its names (checked out
    of fold as always); ``label_names = false`` turns that off, and plenty of tickets per label needs none."""
    from worker.engine.task import FEW

    trained = fine_question(tiny_dir, tmp_path, capsys, "label_names = false")
    assert trained("task.toml", 3)["beyond"]["label_names"] == FINE
    assert "beyond" not in trained("off.toml", 3)
    assert "beyond" not in trained("task.toml", FEW + 1)


def test_train_fits_an_mlp_unasked_for_many_labels_with_many_tickets_each(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No mlp key: a question of FINE labels whose median label has over SELF_TRAIN_UP_TO tickets also
    fits the MLP (and reports whether it kept it); at SELF_TRAIN_UP_TO it does not; ``mlp = false``
    refuses."""
    from worker.engine.task import SELF_TRAIN_UP_TO

    trained = fine_question(tiny_dir, tmp_path, capsys, "mlp = false")
    assert trained("task.toml", SELF_TRAIN_UP_TO + 1)["mlp"]["held_out"] == (SELF_TRAIN_UP_TO + 1) * FINE // 5
    assert "mlp" not in trained("task.toml", SELF_TRAIN_UP_TO)
    assert "mlp" not in trained("off.toml", SELF_TRAIN_UP_TO + 1)


def fine_question(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], off: str
) -> Callable[[str, int], dict[str, Any]]:
    """``trained(task, per_label)``: the training record of a head ``train`` fits for a question of FINE
    labels (``task.toml``, or ``off.toml`` whose question table adds the line ``off``) from ``per_label``
    tickets per label."""
    import json

    from worker.cli import main
    from worker.engine.task import DEFAULT_TASK_PATH

    intents = [f"intent_{i}" for i in range(FINE)]
    texts, _ = labelled(FINE)
    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    table = f"\n[questions.intent]\nlabels = {json.dumps(intents)}\n"
    (tmp_path / "task.toml").write_text(text + table)
    (tmp_path / "off.toml").write_text(text + table + off + "\n")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--question", "intent"]

    def trained(task: str, per_label: int) -> dict[str, Any]:
        data = tmp_path / f"{per_label}.csv"
        out = [f'{k},"{texts[k % len(texts)]} #{k}",{intents[k % FINE]}' for k in range(per_label * FINE)]
        data.write_text("\n".join(["id,text,label", *out]) + "\n")
        head = tmp_path / f"{task}-{per_label}.head"
        args = ["--task", str(tmp_path / task), "--tickets", str(data), "--out", str(head)]
        assert main(["train", *flags, *args]) == 0
        capsys.readouterr()
        return Head.load(head).training

    return trained


def blobs(engine: Engine, n: int, seed: int) -> tuple[torch.Tensor, list[str], torch.Tensor]:
    """Features of ``n`` tickets per label around one centre per label (the task's labels, in order),
    their labels, and the centres."""
    labels = list(engine.task.labels)
    d = int(engine.loaded.model.config.hidden_size)
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(len(labels), d, generator=g)
    x = torch.cat([c + torch.randn(n, d, generator=g) * 2.0 for c in centres])
    return x, [lab for lab in labels for _ in range(n)], centres


def test_label_names_are_kept_when_they_help_out_of_fold_and_calibrate_the_head(engine: Engine) -> None:
    """Names at the labels' true centres: the cross-validation with them is at least as accurate, so the
    head learns from them and its out-of-fold numbers and temperature are the procedure's with them."""
    x, labels, centres = blobs(engine, 4, 0)
    texts = [f"t{i}" for i in range(len(labels))]
    plain = train_head(engine, texts, labels, features=x, seed=1)
    named = train_head(engine, texts, labels, features=x, seed=1, names=centres)
    b = named.training["beyond"]
    assert b["used"] is True and b["label_names"] == len(centres)
    assert b["cv_accuracy_without"] == plain.training["cv_accuracy"]
    assert b["cv_accuracy_with"] == named.training["cv_accuracy"] >= plain.training["cv_accuracy"]
    assert not torch.equal(named.weight, plain.weight)
    assert named.training["l2"] == plain.training["l2"]  # the penalty is the labelled tickets' choice


def test_label_names_that_hurt_out_of_fold_are_not_used(engine: Engine) -> None:
    """Names at the wrong labels' centres (each one a neighbour's): the cross-validation says so, and the
    head is exactly the labelled tickets' own, calibration included."""
    x, labels, centres = blobs(engine, 4, 0)
    texts = [f"t{i}" for i in range(len(labels))]
    plain = train_head(engine, texts, labels, features=x, seed=1)
    wrong = 20.0 * centres.roll(1, dims=0)  # far out: each weighs like many tickets of the wrong label
    head = train_head(engine, texts, labels, features=x, seed=1, names=wrong)
    b = head.training["beyond"]
    assert b["used"] is False and b["cv_accuracy_with"] < b["cv_accuracy_without"]
    assert torch.equal(head.weight, plain.weight) and torch.equal(head.bias, plain.bias)
    assert head.temperature == plain.temperature
    assert head.training["cv_accuracy"] == plain.training["cv_accuracy"]


@pytest.mark.parametrize("pool", [MEAN, LAST])
def test_features_match_the_plain_reference(engine: Engine, pool: str) -> None:
    """Packed, prefix-cached, stopped early: the same numbers as the whole prompt run alone."""
    texts = ["My card was charged twice.", "", "Login fails with error 500 after the update, twice today."]
    got, _ = engine.features(texts, Recipe.one(1, pool))
    torch.testing.assert_close(
        got, reference_features(engine, texts, Recipe.one(1, pool)), atol=1e-4, rtol=1e-4
    )


def test_eval_with_a_head_reports_both_methods(
    tiny_dir: Path, head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from worker.cli import main

    texts, labels = labelled(3)
    lines = ["id,text,label"] + [
        f'{i},"{t}",{lab}' for i, (t, lab) in enumerate(zip(texts, labels, strict=True))
    ]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    head.save(tmp_path / "h.head")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--tickets", str(tmp_path / "t.csv")]
    assert main(["eval", *flags, "--head", str(tmp_path / "h.head"), "--json", str(tmp_path / "e.json")]) == 0
    printed = capsys.readouterr().out
    assert "zero-shot" in printed and f"head {head.id}" in printed
    report = json.loads((tmp_path / "e.json").read_text())
    assert report["method"] == "head" and report["head"]["id"] == head.id
    assert 0 <= report["zero_shot"]["accuracy"] <= 1 and report["n"] == report["zero_shot"]["n"] == 9
    assert "ECE" in printed and "coverage for accuracy" in printed and "length-stratified" not in printed
    cal = report["calibration"]
    assert (
        0 <= cal["ece"] <= 1 and cal["bins"] == 15 and set(cal["accuracy_at"]) == {"1", "0.9", "0.8", "0.7"}
    )
    # zero-shot scores every label of every ticket (minutes for dozens of labels): a sample, or none
    sampled = [
        "--head",
        str(tmp_path / "h.head"),
        "--zero-shot-sample",
        "4",
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert main(["eval", *flags, *sampled]) == 0
    assert "zero-shot on a length-stratified sample of 4 of the 9 tickets" in capsys.readouterr().out
    again = json.loads((tmp_path / "s.json").read_text())
    assert again["zero_shot"]["n"] == 4 and again["n"] == 9 and again["accuracy"] == report["accuracy"]
    skipped = [
        "--head",
        str(tmp_path / "h.head"),
        "--zero-shot-sample",
        "0",
        "--json",
        str(tmp_path / "n.json"),
    ]
    assert main(["eval", *flags, *skipped]) == 0
    assert "the zero-shot speed" not in capsys.readouterr().out
    assert "zero_shot" not in json.loads((tmp_path / "n.json").read_text())


def test_a_mismatched_head_stops_eval_and_the_worker_with_exit_2(
    tiny_dir: Path, head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    replace(head, labels=("a", "b", "c")).save(tmp_path / "other.head")
    (tmp_path / "corrupt.head").write_bytes(b"not a head at all")
    (tmp_path / "t.csv").write_text("id,text,label\n1,refund,billing\n")
    for bad in ("other.head", "corrupt.head", "missing.head"):
        flags = ["--model", str(tiny_dir), "--dtype", "float32", "--head", str(tmp_path / bad)]
        assert main(["eval", *flags, "--tickets", str(tmp_path / "t.csv")]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' loading bar
        assert last.startswith("ticketq-worker eval: ") and "head" in last
        assert main(["run", *flags, "--redis-url", "redis://127.0.0.1:1/0", "--burst"]) == 2


def test_a_task_naming_heads_not_trained_yet_trains_them_one_by_one_from_text_label_files(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's order: write the task file naming both head files, then ``train`` each one, from CSVs a
    spreadsheet exports (``text,label``, no id). Neither head exists while the first trains (``--dtype
    auto`` judges the recipes the heads will read, not the missing files); the worker still refuses a
    head file that is named and missing."""
    import json

    from worker.cli import main
    from worker.engine.task import DEFAULT_TASK_PATH

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path / "cache"))
    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8").replace('head_data = "../data/head_train.csv"', "")
    text = 'head = "team.head"\n' + text
    text += f'\n[questions.topic]\nlabels = {json.dumps(list(WORDS))}\nhead = "topic.head"\n'
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    texts, topics = labelled(4)
    teams = [list(WORDS)[i % 3] for i in range(len(texts))]
    for name, labels in (("team", teams), ("topic", topics)):
        rows = [f'"{t}",{lab}' for t, lab in zip(texts, labels, strict=True)]
        (tmp_path / f"{name}.csv").write_text("\n".join(["text,label", *rows]) + "\n")
    flags = ["--model", str(tiny_dir), "--dtype", "auto", "--task", str(tmp_path / "task.toml")]
    team = ["--tickets", str(tmp_path / "team.csv"), "--out", str(tmp_path / "team.head")]
    assert main(["train", *flags, *team]) == 0
    assert f"use it with --head {tmp_path / 'team.head'}" in capsys.readouterr().out
    topic = ["--question", "topic", "--tickets", str(tmp_path / "topic.csv")]
    assert main(["train", *flags, *topic, "--out", str(tmp_path / "topic.head")]) == 0
    assert "in the task's [questions.topic] table" in capsys.readouterr().out
    assert main(["eval", *flags, *topic]) == 0  # the task's own head for the question
    assert "accuracy:" in capsys.readouterr().out
    (tmp_path / "topic.head").unlink()
    assert main(["run", *flags, "--redis-url", "redis://127.0.0.1:1/0", "--burst"]) == 2
    assert "topic.head" in capsys.readouterr().err


def test_verify_checks_the_head_path_against_the_plain_reference(
    tiny_dir: Path, head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    head.save(tmp_path / "h.head")
    flags = ["--model", str(tiny_dir), "--head", str(tmp_path / "h.head"), "--limit", "6"]
    assert main(["verify", *flags]) == 0
    out = capsys.readouterr().out
    assert f"head {head.id}" in out and "agreement 6/6" in out and out.rstrip().endswith("OK")


def test_verify_sets_aside_tickets_that_carry_special_token_strings(
    tiny_dir: Path, head: Head, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine reads ``<|im_end|>`` in a ticket as text, the reference's one-string prompt as markup: a
    ticket that carries it would fail verify on every correct engine. It is set aside, and said so."""
    from worker.cli import main

    head.save(tmp_path / "h.head")
    rows = ["refund please", "my card <|im_end|> was declined", "cannot log in", "<|im_start|>system"]
    (tmp_path / "t.csv").write_text("id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(rows)))
    flags = [
        "--model",
        str(tiny_dir),
        "--head",
        str(tmp_path / "h.head"),
        "--tickets",
        str(tmp_path / "t.csv"),
    ]
    assert main(["verify", *flags]) == 0
    out = capsys.readouterr().out
    assert "set aside 2 tickets" in out and "'<|im_end|>'" in out
    assert "agreement: 2/2" in out and "agreement 2/2" in out and out.rstrip().endswith("OK")
    (tmp_path / "t.csv").write_text("id,text\n1,<|im_end|>\n")
    assert main(["verify", *flags]) == 2
    assert "no ticket left to compare" in capsys.readouterr().err


def test_bench_head_mode_reports_speed_and_accuracy_against_zero_shot(
    tiny_dir: Path, head: Head, tmp_path: Path
) -> None:
    import json

    from worker.cli import main

    head.save(tmp_path / "h.head")
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--head", str(tmp_path / "h.head")]
    args = [
        "bench",
        *flags,
        "--quick",
        "--modes",
        "engine,head",
        "--retries",
        "0",
        "--json",
        str(tmp_path / "b.json"),
    ]
    assert main(args) == 0
    modes = {m["name"]: m for m in json.loads((tmp_path / "b.json").read_text())["modes"]}
    assert modes["head"]["tickets"] == modes["engine"]["tickets"] == 48
    notes = " ".join(modes["head"]["notes"])
    assert "zero-shot speed, same run" in notes and "accuracy against the tickets' labels" in notes


@pytest.mark.redis
def test_train_from_redis_corrections_and_publish(
    tiny_dir: Path, redis_url: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Corrections in P:labels (as label.lua writes them), added to the task's base data (issue 24) ->
    train -> a published head a worker can load, recording what it learnt from."""
    import redis

    from producer.client import Client
    from producer.learning import Correction
    from producer.protocol import Keys
    from worker.cli import main

    texts, labels = labelled(4)
    r = redis.Redis.from_url(redis_url)
    for i, (t, lab) in enumerate(zip(texts, labels, strict=True)):
        r.hset(Keys(prefix).labels, f"c{i}", Correction(f"c{i}", lab, t, at=float(i)).to_json())
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--redis-url", redis_url, "--prefix", prefix]
    assert main(["train", *flags, "--from-redis", "--publish"]) == 0
    assert "12 corrections from Redis + " in capsys.readouterr().out  # added to the base data
    current = Client(r, prefix).current_head()
    assert current is not None
    version, data = current
    published = Head.from_bytes(data, version=version)
    learnt = published.training["data"]
    assert learnt["base_rows"] > 0 and sorted(learnt["corrections"]) == sorted(f"c{i}" for i in range(12))
    assert published.training["n"] == learnt["base_rows"] + 12 and published.name == version
    # label names are learnt from corrections too (checked out of fold as always), and the publish gate
    # refits each side with the names it learnt
    assert main(["train", *flags, "--from-redis", "--label-names", "--out", str(tmp_path / "n.head")]) == 0
    printed = capsys.readouterr().out
    named = Head.load(tmp_path / "n.head").training
    assert named["beyond"]["label_names"] == len(published.labels) and "publish gate" in printed
    assert named["data"]["unlabeled"] is None
    # and self-trains on unlabelled tickets as train does anywhere (it was refused: a head published from
    # corrections lost the self-training of the head it replaced); the gate compares both sides
    (tmp_path / "free.csv").write_text(
        "id,text\n" + "".join(f'u{i},"{t} (seen again)"\n' for i, t in enumerate(texts))
    )
    extra = ["--label-names", "--unlabeled", str(tmp_path / "free.csv")]
    assert main(["train", *flags, "--from-redis", *extra, "--out", str(tmp_path / "u.head")]) == 0
    printed = capsys.readouterr().out
    free = Head.load(tmp_path / "u.head").training
    assert free["data"]["unlabeled"] == "free.csv" and free["beyond"]["unlabeled"] == len(texts)
    assert "publish gate" in printed and free["gate"]["candidate"] is not None
    # a candidate whose check kept the extras is judged by that check's out-of-fold predictions, not rerun
    assert free["gate"]["candidate_from_training"] is free["beyond"]["used"]
    # a head in use that self-trained is not compared like for like with a candidate that did not: refused
    in_use = Head.load(tmp_path / "u.head")
    in_use.training["beyond"] = {**in_use.training["beyond"], "used": True}  # as a real model keeps them
    Client(r, prefix).publish_head(in_use.to_bytes())
    assert main(["train", *flags, "--from-redis", "--publish"]) == 7
    captured = capsys.readouterr()
    assert f"self-trained on {len(texts)} unlabelled tickets" in captured.out
    assert "not published" in captured.err
    # offered them: judged, the head in use refitted per fold with the self-training it learnt
    assert main(["train", *flags, "--from-redis", *extra, "--publish"]) == 0
    printed = capsys.readouterr().out
    assert "self-training in every fold, as its head learnt:" in printed
    assert "in use" in printed.split("self-training in every fold, as its head learnt:")[1].splitlines()[0]


@pytest.mark.redis
def test_a_label_with_one_ticket_in_the_evidence_is_judged_by_the_gate_not_refused_as_incomparable(
    tiny_dir: Path, redis_url: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Base data with one ticket of a label, plus a correction: the gate used to refuse every candidate
    ("a label has a single ticket"); now both heads are judged on the same five folds."""
    import redis

    from producer.client import Client
    from producer.learning import Correction
    from producer.protocol import Keys
    from worker.cli import main

    texts, labels = labelled(6)
    keep = [i for i, lab in enumerate(labels) if lab != "account"] + [labels.index("account")]
    rows = "".join(f'b{i},"{texts[i]}",{labels[i]}\n' for i in keep)
    (tmp_path / "base.csv").write_text("id,text,label\n" + rows)
    r = redis.Redis.from_url(redis_url)
    r.hset(Keys(prefix).labels, "c0", Correction("c0", "billing", "my refund is late", at=1.0).to_json())
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--redis-url", redis_url, "--prefix", prefix]
    base = ["--tickets", str(tmp_path / "base.csv")]
    code = main(["train", *flags, *base, "--from-redis", "--publish", "--force"])
    captured = capsys.readouterr()
    assert code == 0 and "cannot compare" not in captured.out + captured.err
    current = Client(r, prefix).current_head()
    assert current is not None
    gate = Head.from_bytes(current[1], version=current[0]).training["gate"]
    assert gate["method"] in ("refit", "direct") and gate["n"] == len(keep) + 1
    assert gate["candidate"]["recall"]["account"] is not None  # its one ticket judged, out of fold


@pytest.mark.redis
def test_train_from_redis_weights_corrections_and_records_it(
    tiny_dir: Path, redis_url: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--correction-weight: each correction counts as that many base rows; the head records it, so the
    publish gate can refit it the same way when it is the head in use."""
    import redis

    from producer.client import Client
    from producer.learning import Correction
    from producer.protocol import Keys
    from worker.cli import main

    texts, labels = labelled(2)
    r = redis.Redis.from_url(redis_url)
    for i, (t, lab) in enumerate(zip(texts, labels, strict=True)):
        r.hset(Keys(prefix).labels, f"c{i}", Correction(f"c{i}", lab, t, at=float(i)).to_json())
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--redis-url", redis_url, "--prefix", prefix]
    heads = {}
    for run in (["--correction-weight", "1"], ["--correction-weight", "5"], ["--l2", "cv"]):
        out = tmp_path / f"{run[1]}.head"
        assert main(["train", *flags, "--from-redis", *run, "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert ("each correction weighted 5" in printed) == (run[1] == "5")
        assert ("the head in use's)" in printed) == (run[1] != "cv")
        assert "publish gate" in printed  # judged against the task's head, weights and all
        heads[run[1]] = Head.load(out)
    assert heads["5"].training["data"]["correction_weight"] == 5.0
    assert heads["1"].training["data"]["correction_weight"] == 1.0
    assert not torch.equal(heads["5"].weight, heads["1"].weight)  # the weight changed the fit
    # by default the penalty is the head in use's (the task's head, trained by cross-validation); --l2 cv
    # chooses it again
    assert heads["1"].training["data"]["l2_from"] == "in-use"
    assert heads["1"].training["l2"] == heads["5"].training["l2"]
    assert heads["cv"].training["data"]["l2_from"] == "cv"
    # other base rows than the head in use learnt from: its penalty was chosen for those, so it is chosen
    # again, and said; once a head trained on those rows is in use, its penalty is kept again
    other = tmp_path / "other.csv"
    write_labelled(other, *labelled(4))
    for published in (False, True):
        out = tmp_path / f"other-{published}.head"
        assert main(["train", *flags, "--from-redis", "--tickets", str(other), "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert (
            "L2 chosen again by cross-validation: the head in use learnt from other base data" in printed
        ) != (published)
        assert ("the head in use's)" in printed) == published
        assert Head.load(out).training["data"]["l2_from"] == ("in-use" if published else "cv")
        Client(r, prefix).publish_head(out.read_bytes())
    assert main(["train", *flags, "--tickets", "x.csv", "--correction-weight", "2", "--out", "y"]) == 2
    assert "--correction-weight needs --from-redis" in capsys.readouterr().err


@pytest.mark.redis
def test_train_from_redis_self_trains_on_the_tickets_the_workers_classified_where_it_pays(
    tiny_dir: Path, redis_url: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Few labelled tickets per label and no unlabelled file: the texts the workers kept (P:text:<id>) are
    self-trained on, checked out of fold as a file's would be; --stream-tickets 0 and an --unlabeled file
    turn that off, and plenty of labels per label does not ask for it."""
    import redis

    from producer.client import Client
    from producer.protocol import Keys, Result
    from worker.cli import main
    from worker.engine.task import SELF_TRAIN_UP_TO

    keys = Keys(prefix)
    r = redis.Redis.from_url(redis_url)
    texts, labels = labelled(4)
    base = tmp_path / "base.csv"
    write_labelled(base, texts, labels)
    for i, t in enumerate([*texts, texts[0]]):  # the last one repeats a training row's text: not learnt twice
        r.hset(keys.results, f"s{i}", Result(f"s{i}", "billing", {"billing": 1.0}, "m", "d").to_json())
        r.set(keys.text(f"s{i}"), f"{t} (seen again)" if i < len(texts) else t, ex=60)
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--redis-url", redis_url, "--prefix", prefix]
    flags += ["--from-redis", "--tickets", str(base)]

    def trained(*extra: str) -> tuple[dict[str, Any], str]:
        out = tmp_path / "h.head"
        assert main(["train", *flags, *extra, "--out", str(out)]) == 0
        return Head.load(out).training, capsys.readouterr().out

    got, printed = trained()
    assert f"self-training on {len(texts)} tickets the workers classified" in printed
    assert got["data"]["unlabeled"] == "stream" and got["beyond"]["unlabeled"] == len(texts)
    assert "used" in got["beyond"]  # judged out of fold like any other extras
    got, printed = trained("--stream-tickets", "5")
    assert got["beyond"]["unlabeled"] == 5
    got, printed = trained("--stream-tickets", "0")
    assert got["data"]["unlabeled"] is None and "beyond" not in got
    assert "workers classified" not in printed and "self-train on" not in printed
    (tmp_path / "free.csv").write_text("id,text\nu1,a refund please\nu2,the app crashes\n")
    got, _ = trained("--unlabeled", str(tmp_path / "free.csv"))
    assert got["data"]["unlabeled"] == "free.csv" and got["beyond"]["unlabeled"] == 2
    # the median label has more tickets than self-training measured a gain at: no stream asked for
    many, many_labels = labelled(SELF_TRAIN_UP_TO + 1)
    write_labelled(base, many, many_labels)
    got, printed = trained()
    assert got["data"]["unlabeled"] is None and "workers classified" not in printed
    # unless the head in use self-trained: a head published from corrections keeps doing so, and the
    # publish gate judges it like for like instead of refusing it (exit 7)
    trained("--unlabeled", str(tmp_path / "free.csv"))  # on these rows
    self_taught = Head.load(tmp_path / "h.head")
    self_taught.training["beyond"] = {**self_taught.training["beyond"], "used": True}
    Client(r, prefix).publish_head(self_taught.to_bytes())
    got, printed = trained("--publish")
    assert (
        got["data"]["unlabeled"] == "stream" and "self-training in every fold, as its head learnt:" in printed
    )
    # the workers kept no texts: said, and then the gate cannot compare like with like (exit 7)
    Client(r, prefix).publish_head(self_taught.to_bytes())  # in use again, whatever the last one learnt
    with r.pipeline() as pipe:
        for i in range(len(texts) + 1):
            pipe.delete(keys.text(f"s{i}"))
        pipe.execute()
    assert main(["train", *flags, "--publish"]) == 7
    captured = capsys.readouterr()
    assert "no texts of classified tickets kept in Redis" in captured.out and "--keep-text-s" in captured.out
    assert "not published" in captured.err
    assert main(["train", *flags, "--stream-tickets", "-1", "--out", str(tmp_path / "x")]) == 2
    assert "stream" in capsys.readouterr().err


def test_a_redis_error_while_the_stream_is_read_fails_train_with_redis_s_exit_code(
    tiny_dir: Path, redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Redis lost half-way through the kept texts: one clear line and the Redis exit code, no head."""
    import redis

    from producer.client import Client
    from producer.exitcodes import Exit
    from worker.cli import main

    def half_read(self: Client, limit: int, skip: Any = (), accept: Any = None) -> Any:
        yield "s0", "a refund for a double charge"
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(Client, "kept_texts", half_read)
    texts, labels = labelled(4)
    write_labelled(tmp_path / "base.csv", texts, labels)
    out = tmp_path / "h.head"
    flags = ["--model", str(tiny_dir), "--dtype", "float32", "--redis-url", redis_url, "--prefix", prefix]
    code = main(["train", *flags, "--from-redis", "--tickets", str(tmp_path / "base.csv"), "--out", str(out)])
    assert code == Exit.REDIS_ACCESS
    assert "Redis: ConnectionError: Connection closed by server." in capsys.readouterr().err
    assert not out.exists()


def test_a_task_file_names_its_head_relative_to_itself(tiny_dir: Path, head: Head, tmp_path: Path) -> None:
    from worker.engine.options import EngineOptions
    from worker.engine.task import DEFAULT_TASK_PATH

    text = DEFAULT_TASK_PATH.read_text(encoding="utf-8")
    text = text.replace('head_data = "../data/head_train.csv"', 'head = "heads/support.head"')
    (tmp_path / "task.toml").write_text(text, encoding="utf-8")
    head.save(tmp_path / "heads" / "support.head")
    options = EngineOptions(model=str(tiny_dir), dtype="float32", task=str(tmp_path / "task.toml"))
    engine = Engine.load(options)
    assert engine.head is not None and engine.head.id == head.id
    assert Engine.load(replace(options, head="none")).head is None


def test_temperature_and_review_threshold_round_trip_and_scale_scores(head: Head, tmp_path: Path) -> None:
    warm = replace(head, temperature=2.5, review_below=0.6)
    assert warm.id != head.id  # what the scores mean is part of the head's identity
    warm.save(tmp_path / "w.head")
    back = Head.load(tmp_path / "w.head")
    assert back.temperature == 2.5 and back.review_below == 0.6 and back.id == warm.id
    x = torch.randn(4, head.hidden_size, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(back.log_probs(x), torch.log_softmax(head.logits(x) / 2.5, -1))
    torch.testing.assert_close(back.probabilities(x).sum(-1), torch.ones(4))
    assert back.predict(x) == head.predict(x)  # a temperature never changes a decision
    assert back.layers == head.recipe.layers == (1,)  # the default on the tiny model's 2 layers
    with pytest.raises(HeadError, match="temperature"):
        replace(head, temperature=0.0)
    with pytest.raises(HeadError, match="review_below"):
        replace(head, review_below=1.5)


def test_a_head_file_without_temperature_loads_with_one(head: Head) -> None:
    """Files written before calibration existed: no temperature or review_below in the metadata."""
    import json

    from safetensors.torch import save

    from producer.learning import HEAD_META_KEY

    meta = {k: v for k, v in replace(head, temperature=1.0).meta().items()}
    meta.pop("temperature"), meta.pop("review_below")
    old = save({"weight": head.weight, "bias": head.bias}, metadata={HEAD_META_KEY: json.dumps(meta)})
    back = Head.from_bytes(old)
    assert back.temperature == 1.0 and back.review_below is None
    assert back.id == replace(head, temperature=1.0, review_below=None).id


def test_training_fits_a_temperature_and_picks_the_review_threshold(engine: Engine) -> None:
    from worker.engine.calibration import threshold_for_accuracy
    from worker.engine.fit import fit as fit_features

    texts, labels = labelled()
    h = train_head(engine, texts, labels, seed=3, auto_accuracy=0.9)
    t = h.training
    assert (
        h.temperature > 0
        and 0.0 <= t["cv_ece"] <= 1.0
        and set(t["cv_accuracy_at"]) == {"1", "0.9", "0.8", "0.7"}
    )
    # recompute the threshold from the same out-of-fold logits: it is what the head stored
    x, _ = engine.features(texts, h.recipe)
    present = [lab for lab in engine.task.labels if lab in labels]
    y = [present.index(lab) for lab in labels]
    oof = fit_features(x, y, len(present), seed=3).cv_logits
    assert oof is not None
    probs = torch.softmax(oof / h.temperature, -1)
    conf, right = probs.max(1).values.tolist(), (probs.argmax(1) == torch.tensor(y)).tolist()
    threshold, coverage = threshold_for_accuracy(conf, right, 0.9)
    assert h.review_below == (1.0 if threshold is None else threshold)
    assert t["auto_accuracy"] == 0.9 and t["expected_coverage"] == (
        None if coverage is None else round(coverage, 4)
    )
    with pytest.raises(TrainingError, match="auto_accuracy"):
        train_head(engine, texts, labels, auto_accuracy=1.5)


def test_a_head_whose_finite_numbers_would_overflow_the_scores_is_refused(head: Head) -> None:
    """Finite but absurd: weights of 3e38 overflow the logits, a temperature of 1e-300 is 0 in float32;
    either made every score NaN, and a published one dead-lettered every ticket as an unwritable result.
    Refused (HeadError: the worker keeps its head and logs head_rejected); a head at the bounds still
    gives finite scores."""
    from worker.engine.head import MAX_MAGNITUDE, TEMPERATURES

    for bad in (
        {"weight": head.weight * 0 + 3e38},
        {"bias": head.bias * 0 - 3e38},
        {"temperature": 1e-300},
        {"temperature": 1e300},
    ):
        with pytest.raises(HeadError, match=r"weights reach|temperature must lie"):
            replace(head, **bad)
    edge = replace(
        head,
        weight=head.weight.sign() * MAX_MAGNITUDE,
        bias=head.bias * 0 + MAX_MAGNITUDE,
        temperature=TEMPERATURES[0],
    )
    x = 1e3 * torch.randn(8, head.hidden_size, generator=torch.Generator().manual_seed(2))
    assert torch.isfinite(edge.probabilities(x)).all() and torch.isfinite(edge.log_probs(x)).all()


def test_the_gate_judges_against_the_last_good_head_while_the_published_one_is_refused(
    engine: Engine, head: Head
) -> None:
    """Workers refusing the current head serve the last good one (P:head:good, worker.headwatch): the
    publish gate compares a new head with that one, and says why, not with the task's own."""
    from worker.gate import head_in_use

    found = head_in_use(engine, ("3", b"not a head"), ("2", head.to_bytes()))
    assert found is not None
    in_use, name, from_head_data = found
    assert (in_use.id, in_use.version, from_head_data) == (head.id, "2", False)
    assert name.startswith("version 2, the last good head (published version 3 is refused: ")
    own = "the task's head (head_data) (published version 3 is refused"
    assert head_in_use(engine, ("3", b"not a head"), None)[1].startswith(own)  # type: ignore[index]
    assert head_in_use(engine, ("3", b"not a head"), ("3", head.to_bytes()))[1].startswith(own)  # type: ignore[index]
    assert head_in_use(engine, ("3", head.to_bytes()), ("2", b"junk"))[1] == "version 3"  # type: ignore[index]

"""beyond.cross_refit: out-of-fold logits on given folds, from a chosen subset of training rows and the extras
its head learnt (label names, self-training); the publish gate refits each side with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch

from worker.engine.beyond import cross_refit
from worker.engine.fit import stratified_folds

if TYPE_CHECKING:
    from worker.gate import Comparison

pytestmark = pytest.mark.model


def clusters(n: int = 30) -> tuple[torch.Tensor, list[int]]:
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    x = torch.cat([c + torch.randn(n, 3, generator=gen) for c in centres])
    return x, [c for c in range(3) for _ in range(n)]


def compared(x: torch.Tensor, truth: list[str], rows: list[bool], beyond: dict, **kw: Any) -> Comparison:
    """gate.compare_with on evidence ``x`` labelled ``truth``, whose candidate and head in use (its
    ``training["beyond"]`` record as given) both learnt ``rows``, at L2 1e-3; ``kw``: the extras."""
    from types import SimpleNamespace

    from worker import gate

    labels = sorted(set(truth))
    head = SimpleNamespace(training={"l2": 1e-3, "beyond": beyond}, recipe=None)
    engine = SimpleNamespace(task=SimpleNamespace(labels=labels))
    in_use = gate.InUse(head, "version 1", rows)
    return gate.compare_with(
        in_use, engine, truth, x, None, truth, [], candidate_rows=rows, l2=1e-3, seed=0, **kw
    )


def against(
    in_use: Any, engine: Any, x: torch.Tensor, truth: list[str], l2: float, candidate: dict, **kw: Any
) -> Comparison:
    """gate.compare_with of a candidate (its ``training`` record) trained on every row of evidence ``x``
    labelled ``truth``, none corrected, at ``l2``, against ``in_use``; ``kw``: the extras, progress..."""
    from worker import gate

    return gate.compare_with(
        in_use, engine, truth, x, None, truth, [], l2=l2, seed=0, candidate=candidate, **kw
    )


def test_out_of_fold_predictions_of_separable_classes_are_right() -> None:
    x, y = clusters()
    fold = stratified_folds(y, 5, seed=0)
    predicted = cross_refit(x, y, 3, 1e-3, fold=fold).argmax(1).tolist()
    assert len(predicted) == len(y)
    assert sum(p == t for p, t in zip(predicted, y, strict=True)) >= 0.95 * len(y)


def test_rows_left_out_of_training_are_never_learnt() -> None:
    x, y = clusters()
    fold = stratified_folds(y, 5, seed=0)
    train = [t != 2 for t in y]  # a head that never saw class 2: it cannot predict it
    predicted = cross_refit(x, y, 3, 1e-3, fold=fold, train=train).argmax(1).tolist()
    assert 2 not in predicted
    assert sum(p == t for p, t in zip(predicted, y, strict=True) if t != 2) >= 0.95 * 60
    with pytest.raises(ValueError, match="no training rows"):
        cross_refit(x, y, 3, 1e-3, fold=[0] * 45 + [1] * 45, train=[i < 45 for i in range(90)])
    with pytest.raises(ValueError, match="folds for"):
        cross_refit(x, y, 3, 1e-3, fold=[0, 1] * 10)


def test_label_names_are_learnt_in_every_fold_and_never_judged() -> None:
    """Rows that are not evidence (the label names) join every fold's training: a class the training rows
    never show is learnt from them alone; the predictions stay one per evidence row."""
    x, y = clusters()
    fold = stratified_folds(y, 5, seed=0)
    train = [t != 2 for t in y]
    centres = torch.tensor([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    predicted = cross_refit(x, y, 3, 1e-3, fold=fold, train=train, names=centres).argmax(1).tolist()
    assert len(predicted) == len(y)
    assert sum(p == 2 for p, t in zip(predicted, y, strict=True) if t == 2) >= 0.9 * 30
    with pytest.raises(ValueError, match="label-name rows"):
        cross_refit(x, y, 3, 1e-3, fold=fold, names=centres[:2])


def test_the_publish_gate_refits_each_side_with_the_label_names_it_learnt() -> None:
    """The candidate's folds learn the names when it did; the head in use's when its record says so
    (gate.learnt_names). Evidence without class 2 among the training rows: only names teach it."""
    from worker import gate

    x, y = clusters()
    names = torch.tensor([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    labels = ["a", "b", "c"]
    truth, rows = [labels[t] for t in y], [t != 2 for t in y]

    def compare(candidate_names: bool, beyond: dict) -> gate.Comparison:
        learnt = {"beyond": {"label_names": 3, "used": True}} if candidate_names else {}
        return compared(x, truth, rows, beyond, names=names, candidate=learnt)

    plain = compare(False, {})
    assert plain.method == "refit" and plain.candidate.recall["c"] == plain.current.recall["c"] == 0.0
    named = compare(True, {"label_names": 3, "used": True})
    assert (named.candidate.recall["c"] or 0.0) >= 0.9 and (named.current.recall["c"] or 0.0) >= 0.9
    dropped = compare(True, {"label_names": 3, "used": False})  # tried by its train, not kept
    assert (dropped.candidate.recall["c"] or 0.0) >= 0.9 and dropped.current.recall["c"] == 0.0
    assert gate.learnt_names({"beyond": {"label_names": 3}})  # too few tickets to check: learnt as is
    assert not gate.learnt_names({}) and not gate.learnt_names({"beyond": {"unlabeled": 5, "used": True}})


def test_a_candidate_without_the_self_training_of_the_head_in_use_is_not_judged_like_for_like() -> None:
    """Offered no unlabelled tickets, the gate has none to refit the head in use with: both sides are
    refitted from labelled tickets and names only, and a candidate that drops the head in use's
    self-training looks as good as it there (the banking example: called better, 2.4 points worse)."""
    from worker import gate

    used = {"beyond": {"unlabeled": 9229, "used": True}}
    lost = gate.self_training_lost(used, {"beyond": {"label_names": 77, "used": True}})
    assert lost and "self-trained on 9229 unlabelled tickets" in lost and "--unlabeled FILE" in lost
    assert gate.self_training_lost(used, {}) == lost
    assert gate.self_training_lost(used, {"beyond": {"unlabeled": 50, "used": False}}) is None  # offered
    assert gate.self_training_lost({"beyond": {"unlabeled": 9229, "used": False}}, {}) is None  # not kept
    assert gate.self_training_lost({"beyond": {"label_names": 3}}, {}) is None
    assert gate.self_training_lost({}, {}) is None


def test_a_candidate_without_the_mlp_of_the_head_in_use_is_not_judged_like_for_like() -> None:
    """The gate refits the head in use by its linear reading per fold: the half point its MLP adds is
    invisible there, and a head published from corrections cannot carry an MLP. Refused with a way out,
    unless the head in use was judged by what it ships (direct) or the candidate has an MLP too. Whether a
    head has one is the loaded head's (checked); its training record, anyone's JSON, only adds figures."""
    from types import SimpleNamespace

    from worker import gate

    mlp = {"share": 0.7, "held_out": 2001, "accuracy_by_share": {"0": 0.922, "0.3": 0.925, "0.7": 0.929}}
    lost = gate.mlp_lost(True, False, "refit", mlp)
    assert lost and "92.2% linear, 92.9% blended" in lost and "--mlp --out FILE" in lost
    assert gate.mlp_lost(True, False, "direct", mlp) is None  # judged with its MLP
    assert gate.mlp_lost(True, True, "refit", mlp) is None  # the candidate has one
    assert gate.mlp_lost(False, False, "refit", mlp) is None  # a record claiming one: the head has none
    tried = gate.mlp_lost(True, False, "refit", mlp, tried=True)
    assert tried and "did not add on its held-out fold" in tried and "--mlp --out" not in tried
    plain = (
        "the head in use blends an MLP with its linear reading, which this comparison of linear readings "
        "cannot see and a head published through Redis cannot carry: train with --mlp --out FILE (not "
        "--publish) and serve that file, or --force"
    )
    for junk in (None, [1], {"share": "x"}, {"share": True, "accuracy_by_share": {"1": 1}}, {"share": 0.5}):
        assert gate.mlp_lost(True, False, "refit", junk) == plain  # figures left out, never a traceback
    assert (
        gate.mlp_lost(True, False, "refit", {"share": 0.7, "accuracy_by_share": {"0": "a", "0.7": 1}})
        == plain
    )

    def head(training: dict, has_mlp: bool) -> SimpleNamespace:
        return SimpleNamespace(training=training, mlp=object() if has_mlp else None)

    both = head({"mlp": mlp, "beyond": {"unlabeled": 9229, "used": True}}, True)
    assert gate.lost_unseen(both, head({}, False), "refit") == [
        gate.self_training_lost(both.training, {}),
        lost,
    ]
    assert gate.lost_unseen(head({}, False), head({}, False), "refit") == []


def bands() -> tuple[torch.Tensor, list[int], list[bool], torch.Tensor]:
    """Two long clusters side by side (x = -1 and +1, long in y). The rows a head learns from show each
    class at one end only (class 0 at the top, class 1 at the bottom), so they separate it by height; the
    other evidence rows and the unlabelled tickets cover the whole clusters, which only self-training sees."""
    gen = torch.Generator().manual_seed(0)

    def cluster(c: int, n: int, low: float, high: float) -> torch.Tensor:
        across = (2 * c - 1) + 0.3 * torch.randn(n, generator=gen)
        return torch.stack([across, low + (high - low) * torch.rand(n, generator=gen)], 1)

    learnt = [cluster(0, 20, 3, 6), cluster(1, 20, -6, -3)]
    judged = [cluster(0, 20, -6, 6), cluster(1, 20, -6, 6)]
    free = torch.cat([cluster(0, 300, -6, 6), cluster(1, 300, -6, 6)])
    y = [0] * 20 + [1] * 20 + [0] * 20 + [1] * 20
    return torch.cat(learnt + judged), y, [True] * 40 + [False] * 40, free


def test_self_training_in_every_fold_learns_what_the_labelled_rows_cannot_show() -> None:
    x, y, rows, free = bands()
    fold = stratified_folds(y, 5, seed=0)

    def accuracy(logits: torch.Tensor) -> float:
        return sum(p == t for p, t in zip(logits.argmax(1).tolist(), y, strict=True)) / len(y)

    plain = accuracy(cross_refit(x, y, 2, 1e-3, fold=fold, train=rows))
    self_trained = accuracy(cross_refit(x, y, 2, 1e-3, fold=fold, train=rows, unlabeled=free))
    assert plain <= 0.92 and self_trained == 1.0


def test_the_publish_gate_self_trains_each_side_that_self_trained() -> None:
    """Each side's folds self-train on the unlabelled tickets when its head's training record says it did
    (gate.self_trained), so a head that ships self-trained is judged as it ships. Here self-training is
    worth 10 points: whichever side lacks it loses them, and a candidate that drops the head in use's
    self-training is refused."""
    from worker import gate

    x, y, rows, free = bands()
    truth = [["a", "b"][t] for t in y]
    steps: list[tuple[int, int]] = []

    def compare(candidate: bool, in_use: dict, unlabeled: torch.Tensor | None = free) -> gate.Comparison:
        steps.clear()
        return compared(
            x,
            truth,
            rows,
            in_use,
            unlabeled=unlabeled,
            candidate={"beyond": {"unlabeled": 600, "used": True}} if candidate else {},
            progress=lambda done, total: steps.append((done, total)),
        )

    used = {"unlabeled": 600, "used": True}
    both = compare(True, used)
    assert both.self_training == ["candidate", "in use"] and not both.refused
    assert both.candidate.accuracy == both.current.accuracy == 1.0
    assert "self-training in every fold, as its head learnt: candidate and in use" in "\n".join(both.lines())
    assert both.to_dict()["self_training"] == ["candidate", "in use"]
    assert steps == [(i, 10) for i in range(1, 11)]  # five folds per side, both sides refitted
    gained = compare(True, {})
    assert (
        gained.self_training == ["candidate"] and gained.candidate.accuracy > gained.current.accuracy + 0.05
    )
    lost = compare(False, used)
    assert lost.self_training == ["in use"] and lost.refused and "below the head in use" in lost.reasons[0]
    assert compare(False, {"unlabeled": 600, "used": False}).self_training == []  # offered, not kept
    assert gate.self_trained({"beyond": {"unlabeled": 5}})  # too few tickets to check: learnt as is
    assert not gate.self_trained({}) and not gate.self_trained({"beyond": {"label_names": 3, "used": True}})
    # no unlabelled tickets to refit with: both sides without, and train refuses by self_training_lost
    blind = compare(False, used, None)
    assert blind.self_training == [] and blind.candidate.accuracy == blind.current.accuracy


def test_the_gate_takes_the_candidates_own_out_of_fold_check_when_it_ran_the_same_procedure() -> None:
    """train's check of its extras runs the candidate's whole procedure (labelled rows + self-training) out
    of fold, on the folds the gate draws: the gate takes those predictions instead of running it again.
    They must be exactly what the gate's own refit gives; a candidate that did not learn every evidence
    row was checked on other folds and is refitted."""
    from types import SimpleNamespace

    from worker import gate
    from worker.engine.recipe import Recipe
    from worker.engine.training import train_head

    gen = torch.Generator().manual_seed(1)
    x, y = clusters()
    x = x / 2.5 + torch.randn(x.shape, generator=gen)  # overlapping: some rows predicted wrong
    free = torch.cat([c / 2.5 + torch.randn(200, 3, generator=gen) for c in torch.eye(3) * 4])
    labels = ["a", "b", "c"]
    truth = [labels[t] for t in y]
    identity = SimpleNamespace(model="m", model_digest="d", prompt_digest="p")
    engine = SimpleNamespace(
        task=SimpleNamespace(labels=labels, recipe=None),
        n_layers=4,
        identity=identity,
        loaded=SimpleNamespace(dtype_name="float32"),
    )
    head = train_head(engine, truth, truth, seed=0, recipe=Recipe.one(1), features=x, unlabeled=free)
    assert head.training["beyond"]["used"] is True and head.out_of_fold is not None
    l2 = head.training["l2"]
    fold = gate.folds_for(y, 0)
    assert head.out_of_fold.folds == tuple(fold)
    again = cross_refit(x, y, 3, l2, fold=fold, unlabeled=free).argmax(1).tolist()
    assert list(head.out_of_fold.predicted) == again and again != y  # the same, and not trivially right

    in_use = gate.InUse(
        SimpleNamespace(training={"l2": l2, "beyond": {"unlabeled": 600, "used": True}}, recipe=None),
        "version 1",
        [True] * len(y),
    )
    steps: list[tuple[int, int]] = []

    def compare(**kw: Any) -> Comparison:
        steps.clear()
        return against(
            in_use,
            engine,
            x,
            truth,
            l2,
            head.training,
            unlabeled=free,
            progress=lambda done, total: steps.append((done, total)),
            **kw,
        )

    rerun = compare()
    assert not rerun.candidate_from_training and len(steps) == 2 * len(set(fold))
    reused = compare(candidate_out_of_fold=head.out_of_fold)
    assert reused.candidate_from_training and steps == [(i, 5) for i in range(1, 6)]  # the head in use's
    assert reused.candidate == rerun.candidate and reused.current == rerun.current
    assert reused.self_training == rerun.self_training == ["candidate", "in use"]
    assert "its training's own out-of-fold check" in "\n".join(reused.lines())
    assert reused.to_dict()["candidate_from_training"] is True
    partial = compare(
        candidate_out_of_fold=head.out_of_fold, candidate_rows=[i % 9 != 0 for i in range(len(y))]
    )
    assert not partial.candidate_from_training


def test_the_publish_gate_refits_a_side_that_balanced_its_labels_balanced() -> None:
    """A head trained with ``balance`` learnt every fold with its labels weighed equally; the gate refits
    it the same way (gate.as_learnt), for the candidate and for a head in use whose record says so: the
    refit gives what the candidate's own training gave out of fold, and a head in use trained the same
    way scores the same, where one refitted on counts recalls the rare label less."""
    from types import SimpleNamespace

    from worker import gate
    from worker.engine.recipe import Recipe
    from worker.engine.training import train_head

    gen = torch.Generator().manual_seed(2)
    centres = torch.eye(3) * 4
    sizes = (40, 40, 6)  # label c is rare: on counts a head seldom chooses it
    x = torch.cat([c / 2.2 + torch.randn(n, 3, generator=gen) for c, n in zip(centres, sizes, strict=True)])
    y = [c for c, n in enumerate(sizes) for _ in range(n)]
    labels = ["a", "b", "c"]
    truth = [labels[t] for t in y]
    engine = SimpleNamespace(
        task=SimpleNamespace(labels=labels, recipe=None),
        n_layers=4,
        identity=SimpleNamespace(model="m", model_digest="d", prompt_digest="p"),
        loaded=SimpleNamespace(dtype_name="float32"),
    )
    names = centres / 2.2
    head = train_head(
        engine, truth, truth, seed=0, recipe=Recipe.one(1), features=x, names=names, balance=True
    )
    assert head.training["balance"] is True
    assert head.training["beyond"]["used"] is True and head.out_of_fold is not None
    l2 = head.training["l2"]
    learnt = {"label_names": 3, "used": True}

    def compare(in_use_training: dict[str, Any], **kw: Any) -> Comparison:
        in_use = gate.InUse(SimpleNamespace(training=in_use_training, recipe=None), "v1", [True] * len(y))
        return against(in_use, engine, x, truth, l2, head.training, names=names, **kw)

    same = compare({"l2": l2, "beyond": learnt, "balance": True})
    assert same.candidate == same.current  # both sides refitted balanced, as both were trained
    reused = compare({"l2": l2, "beyond": learnt, "balance": True}, candidate_out_of_fold=head.out_of_fold)
    assert reused.candidate_from_training and reused.candidate == same.candidate
    counted = compare({"l2": l2, "beyond": learnt})  # a head in use trained on counts
    assert counted.candidate == same.candidate
    assert (counted.current.recall["c"] or 0) < (same.candidate.recall["c"] or 0)
    unweighed = gate.as_learnt({}, y, None, None)
    assert unweighed is None and gate.as_learnt({"balance": True}, y, None, [2.0] * len(y)) == pytest.approx(
        [2 * 172 / 3 / 80] * 80 + [2 * 172 / 3 / 12] * 6
    )

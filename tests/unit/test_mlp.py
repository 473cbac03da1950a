"""The nonlinear second reading (worker.engine.mlp) and a head that carries it: it learns what a linear head
cannot, is kept only where it adds on a held-out fold, is calibrated there, and its file says what it is."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from producer.learning import HEAD_META_KEY, head_metadata
from worker.engine import mlp
from worker.engine.fit import ABSENT
from worker.engine.head import FORMAT, FORMAT_MLP, Head, HeadError, Identity
from worker.engine.recipe import Recipe
from worker.engine.task import Task, TaskError, tomllib, wants_mlp
from worker.engine.training import head_cache_key, train_head

LABELS = ("even", "odd", "never")  # "never": a task label without a ticket


def xor(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Two labels no line separates: the sign of x0 times the sign of x1, plus six noise features, on
    scales and offsets far from standardized."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    x[:, :2] = x[:, :2].sign() * (x[:, :2].abs() + 0.5)  # a margin around the axes
    y = ["even" if (a > 0) == (b > 0) else "odd" for a, b in x[:, :2].tolist()]
    return x * torch.tensor([3.0, 0.5, 1, 1, 1, 1, 1, 1]) + 7.0, y


def engine() -> Any:
    """What train_head reads of an engine when it is given the features."""
    return SimpleNamespace(
        task=SimpleNamespace(labels=LABELS),
        n_layers=4,
        identity=Identity("tiny", "m" * 64, "p" * 64, LABELS, 8),
        loaded=SimpleNamespace(dtype_name="float32"),
    )


def train(x: torch.Tensor, y: list[str], **kw: Any) -> Head:
    texts = [f"t{i}" for i in range(len(y))]
    return train_head(engine(), texts, y, recipe=Recipe.parse("1:mean"), features=x, seed=1, **kw)


@pytest.fixture(scope="module")
def heads() -> tuple[Head, Head]:
    x, y = xor(600, 0)
    return train(x, y), train(x, y, mlp=True)


def accuracy(head: Head, x: torch.Tensor, y: list[str]) -> float:
    return sum(p == t for p, t in zip(head.predict(x), y, strict=True)) / len(y)


def test_the_mlp_learns_what_the_linear_head_cannot_and_is_kept(heads: tuple[Head, Head]) -> None:
    linear, both = heads
    x, y = xor(400, 1)  # tickets neither saw
    assert linear.mlp is None and accuracy(linear, x, y) < 0.7
    assert both.mlp is not None and both.mlp_share in mlp.SHARES
    assert accuracy(both, x, y) > 0.9
    record = both.training["mlp"]
    assert record["share"] == both.mlp_share and record["held_out"] == 120  # the first of five folds
    assert record["accuracy_by_share"]["0"] < 0.7 < record["accuracy_by_share"][f"{both.mlp_share:g}"]
    # the label without tickets is never chosen, and every score stays finite
    assert "never" not in both.predict(x) and torch.isfinite(both.log_probs(x)).all()
    assert both.probabilities(x)[:, 2].max() < 1e-3


def test_a_head_with_an_mlp_is_calibrated_on_its_held_out_fold(heads: tuple[Head, Head]) -> None:
    """The temperature and the out-of-fold calibration of a head with an MLP are the blend's, fitted on
    the held-out fold: the linear reading's would be those of a head that guesses on XOR."""
    linear, both = heads
    t = both.training
    assert t["cv_ece"] < 0.1 and t["cv_accuracy_at"]["1"] > 0.85
    assert linear.training["cv_accuracy_at"]["1"] < 0.7
    x, y = xor(400, 2)
    confidence = both.probabilities(x).max(1).values.mean().item()
    assert abs(confidence - accuracy(both, x, y)) < 0.1  # calibrated on tickets it never saw


def test_the_mlp_is_dropped_where_it_does_not_add() -> None:
    """Labels a line separates: the blend cannot beat the linear head on the held-out fold, the smaller
    share wins ties, and the head ships linear (format 1), calibrated on every fold as before."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 8, generator=g)
    y = ["even" if v > 0 else "odd" for v in (x[:, 0] * 4).tolist()]
    head = train(x, y, mlp=True)
    assert head.mlp is None and head.mlp_share == 0.0 and head.training["mlp"]["share"] == 0.0
    assert head_metadata(head.to_bytes())["format"] == FORMAT
    assert head.temperature == train(x, y).temperature


def test_fitting_is_deterministic_and_leaves_the_global_generator_alone() -> None:
    x, y = xor(200, 4)
    target = [0 if v == "even" else 1 for v in y]
    state = torch.get_rng_state()
    first = mlp.fit_mlp(x, target, 2, seed=5)
    assert torch.equal(state, torch.get_rng_state())
    second = mlp.fit_mlp(x, target, 2, seed=5)
    for name, t in first.tensors().items():
        assert torch.equal(t, second.tensors()[name]), name
    assert first.w_in.shape == (mlp.HIDDEN * mlp.SEEDS, 8) and first.w_out.shape == (
        2,
        mlp.HIDDEN * mlp.SEEDS,
    )


def test_the_standardization_is_folded_into_the_first_layer() -> None:
    """Features shifted and scaled per column standardize to the same inputs: the network for the raw
    features gives the same logits on either (the folding is exact up to rounding)."""
    x, y = xor(200, 6)
    target = [0 if v == "even" else 1 for v in y]
    shift, scale = torch.linspace(-50, 50, 8), torch.logspace(-2, 2, 8)
    a = mlp.fit_mlp(x, target, 2, seed=2)
    b = mlp.fit_mlp(x * scale + shift, target, 2, seed=2)
    torch.testing.assert_close(a.logits(x), b.logits(x * scale + shift), atol=2e-3, rtol=1e-3)


def test_blend_mixes_probabilities_in_log_space() -> None:
    g = torch.Generator().manual_seed(7)
    linear, other = 5 * torch.randn(6, 4, generator=g), 5 * torch.randn(6, 4, generator=g)
    other[:, 3] = ABSENT
    torch.testing.assert_close(mlp.blend(linear, other, 0.0), torch.log_softmax(linear, -1))
    mixed = mlp.blend(linear, other, 0.3)
    expected = 0.7 * torch.softmax(linear, -1) + 0.3 * torch.softmax(other, -1)
    torch.testing.assert_close(mixed.exp(), expected)
    assert torch.isfinite(mlp.blend(torch.full((2, 3), ABSENT), torch.full((2, 3), ABSENT), 0.5)).all()
    # a tie goes to the smaller share: the MLP is kept only where it adds
    assert mlp.choose_share(linear, linear.clone(), [0, 1, 2, 3, 0, 1])[0] == 0.0


def test_a_head_with_an_mlp_round_trips_and_says_format_2(heads: tuple[Head, Head]) -> None:
    linear, both = heads
    back = Head.from_bytes(both.to_bytes())
    x, _ = xor(50, 8)
    assert back.id == both.id != linear.id and back.mlp_share == both.mlp_share
    torch.testing.assert_close(back.log_probs(x), both.log_probs(x))
    assert head_metadata(both.to_bytes())["format"] == FORMAT_MLP
    assert head_metadata(linear.to_bytes())["format"] == FORMAT
    other = 0.5 if both.mlp_share != 0.5 else 0.3
    assert replace(both, mlp_share=other).id != both.id


def test_damaged_mlp_heads_are_refused_in_one_line(heads: tuple[Head, Head]) -> None:
    from safetensors.torch import load, save

    _, both = heads
    assert both.mlp is not None
    data = both.to_bytes()
    meta = head_metadata(data)
    tensors = load(data)
    missing = {k: v for k, v in tensors.items() if k != "mlp_out"}
    with pytest.raises(HeadError, match="without tensor 'mlp_out'"):
        Head.from_bytes(save(missing, metadata={HEAD_META_KEY: json.dumps(meta)}))
    for share in (0.0, 1.0, -0.5, float("nan")):
        with pytest.raises(HeadError, match="mlp_share"):
            Head.from_bytes(save(tensors, metadata={HEAD_META_KEY: json.dumps({**meta, "mlp_share": share})}))
    wrong = {**tensors, "mlp_out": tensors["mlp_out"][:2]}
    with pytest.raises(HeadError, match="does not fit"):
        Head.from_bytes(save(wrong, metadata={HEAD_META_KEY: json.dumps(meta)}))
    hollow = {  # no hidden units at all: refused as such, not through a torch error further on
        **tensors,
        "mlp_in": tensors["mlp_in"][:0],
        "mlp_in_bias": tensors["mlp_in_bias"][:0],
        "mlp_out": tensors["mlp_out"][:, :0],
    }
    with pytest.raises(HeadError, match="no network"):
        Head.from_bytes(save(hollow, metadata={HEAD_META_KEY: json.dumps(meta)}))
    for flat in (
        {**tensors, "mlp_in": tensors["mlp_in"][0, 0]},
        {**tensors, "mlp_out": tensors["mlp_out"][None]},
    ):
        with pytest.raises(HeadError, match="is not a matrix"):  # 0-d and 3-d: no IndexError on the way
            Head.from_bytes(save(flat, metadata={HEAD_META_KEY: json.dumps(meta)}))
    huge = {**tensors, "mlp_in": tensors["mlp_in"] * 0 + 3e38}
    with pytest.raises(HeadError, match="MLP weights reach"):
        Head.from_bytes(save(huge, metadata={HEAD_META_KEY: json.dumps(meta)}))
    with pytest.raises(HeadError, match="holds no MLP"):
        replace(both, mlp=None)


@pytest.mark.parametrize(
    ("declared", "per_label", "classes", "wanted"),
    [
        (None, 51, 10, True),
        (None, 50, 10, False),  # up to 50 per label: self-training's range, where it measured nothing
        (None, 200, 9, False),  # few labels: the default recipe's coarse range
        (False, 200, 77, False),
        (True, 5, 2, True),
    ],
)
def test_the_mlp_is_wanted_for_many_labels_with_many_tickets_each(
    declared: bool | None, per_label: int, classes: int, wanted: bool
) -> None:
    labels = [f"l{i}" for i in range(classes) for _ in range(per_label)]
    assert wants_mlp(declared, labels, classes) is wanted


def parse(text: str) -> Task:
    return Task.from_dict(tomllib.loads(text))


def test_the_task_and_its_questions_declare_mlp() -> None:
    base = 'labels = ["a", "b"]\nhead_data = "x.csv"\n'
    task = parse(base + 'mlp = true\n[questions.q]\nlabels = ["c", "d"]\nhead_data = "y.csv"\nmlp = false\n')
    assert task.mlp is True and task.questions[0].mlp is False
    assert parse(base).mlp is None
    with pytest.raises(TaskError, match="mlp must be true or false"):
        parse(base + 'mlp = "yes"\n')


def test_the_cache_key_of_a_head_with_an_mlp_is_its_own() -> None:
    ident = Identity("tiny", "m" * 64, "p" * 64, ("a", "b"), 8)
    args: dict[str, Any] = {
        "auto_accuracy": None,
        "label_names": False,
        "unlabeled": None,
        "balance": False,
    }
    plain = head_cache_key(ident, "float32", Recipe.parse("1:mean"), b"d", ["a", "b"], **args)
    assert plain == head_cache_key(
        ident, "float32", Recipe.parse("1:mean"), b"d", ["a", "b"], **args, mlp=False
    )
    assert plain != head_cache_key(
        ident, "float32", Recipe.parse("1:mean"), b"d", ["a", "b"], **args, mlp=True
    )

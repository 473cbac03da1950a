"""``ticketq-worker train`` refuses bad training data in one line with exit 2, before loading a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.cli import main


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "id,text,label\n1,refund please,billing\n2,big sale,sales\n",
            "labels not in the task: 'sales' (1), on ids '2'",
        ),
        ("id,text,label\n", "no tickets"),
        ("", ""),  # an empty file: the reader's message, still one line
        ("id,text,label\n1,refund please,billing\n2,charged twice,billing\n", "two labels or more"),
        ("id,text,label\n1,refund please,billing\n2,app crash,\n", "have no label"),
    ],
)
def test_bad_training_data_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    tickets = tmp_path / "t.csv"
    tickets.write_text(content)
    code = main(["train", "--tickets", str(tickets), "--out", str(tmp_path / "h.safetensors")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("ticketq-worker train: ")
    assert not (tmp_path / "h.safetensors").exists()
    if "labels not in the task" in message:  # which file holds them
        assert err.startswith(f"ticketq-worker train: {tickets}: labels not in the task")


def test_missing_file_and_bad_task_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--tickets", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "h")]) == 2
    (tmp_path / "t.toml").write_text('labels = ["only"]\n')
    (tmp_path / "t.csv").write_text("id,text,label\n1,a,only\n")
    args = ["train", "--task", str(tmp_path / "t.toml"), "--tickets", str(tmp_path / "t.csv"), "--out", "h"]
    assert main(args) == 2
    assert all(line.startswith("ticketq-worker train: ") for line in capsys.readouterr().err.splitlines())


def test_mlp_with_publish_is_refused_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A head with an MLP is tens of MB: copied within the shared Redis it held it for a large fraction of
    a second, so it is used from its file, never published."""
    (tmp_path / "t.csv").write_text("id,text,label\n1,refund please,billing\n2,app crash,technical\n")
    args = ["train", "--tickets", str(tmp_path / "t.csv"), "--publish", "--mlp", "--redis-url", "redis://x:1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("ticketq-worker train: --mlp with --publish") and err.count("\n") == 1


def test_a_confusion_matrix_of_long_labels_numbers_its_columns() -> None:
    from worker.evaluate import confusion_table

    short = confusion_table(["billing", "account"], [[9, 1], [0, 7]])
    assert short[1].split() == ["billing", "account"] and short[2].split() == ["billing", "9", "1"]
    labels = ["card_arrival", "transfer_not_received_by_recipient"]
    long = confusion_table(labels, [[35, 5], [2, 1234]], note=", out of fold")
    assert long[0].startswith("confusion matrix, out of fold") and "numbered as the rows" in long[0]
    assert long[1].split() == ["1", "2"] and long[3].split() == ["2", *labels[1:], "2", "1234"]
    assert max(map(len, long[1:])) < len(labels[1]) + 20  # as wide as the row names and two counts, no wider
    assert len({len(line) for line in long[1:]}) == 1  # the columns line up


def test_a_matrix_too_wide_for_a_terminal_gives_way_to_the_most_confused_pairs() -> None:
    from worker.evaluate import WIDEST, confusion_lines

    def diagonal(n: int) -> list[list[int]]:
        m = [[9 if i == j else 0 for j in range(n)] for i in range(n)]
        m[1][0] = 4  # intent_1 taken for intent_0, four times
        return m

    few = [f"intent_{i}" for i in range(WIDEST)]
    lines = confusion_lines(few, diagonal(WIDEST), note=", out of fold")
    assert lines[0].startswith("confusion matrix, out of fold (rows") and len(lines) > WIDEST
    many = [f"intent_{i}" for i in range(WIDEST + 1)]
    lines = confusion_lines(many, diagonal(WIDEST + 1), stored="the head file")
    assert lines[0] == f"confusion matrix: {WIDEST + 1} labels, too wide to print (in the head file)"
    assert lines[2:] == ["most confused (true -> predicted: tickets)", "  intent_1 -> intent_0: 4"]


def test_train_from_an_unreachable_redis_exits_3_like_the_producer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--from-redis", "--redis-url", "redis://127.0.0.1:1/0", "--out", str(tmp_path / "h")]
    assert main(argv) == 3  # nothing listens on port 1: refused at once, before any model loads
    err = capsys.readouterr().err
    assert err.startswith("ticketq-worker train: Redis: ConnectionError") and err.count("\n") == 1


def test_a_fine_grained_head_on_the_default_recipe_is_told_what_measured_better() -> None:
    from types import SimpleNamespace

    from worker.engine.recipe import FINE, Recipe
    from worker.train import hints

    RICH = str(Recipe.default(30, FINE))  # the hint names the fine-grained default

    def head(labels: int, per_label: int, recipe: Recipe, **training: object) -> SimpleNamespace:
        counts = {f"intent_{i}": per_label for i in range(labels)}
        return SimpleNamespace(labels=tuple(counts), recipe=recipe, training={"counts": counts, **training})

    default = Recipe.default(30)
    lines = hints(head(FINE, 10, default), 30)
    assert any(RICH in line for line in lines) and any("--label-names" in line for line in lines)
    assert hints(head(FINE - 1, 10, default), 30) == []  # a coarse label set: nothing to say
    assert hints(head(FINE, 200, Recipe.parse(RICH)), 30) == []  # already rich, and plenty of tickets
    named = hints(head(FINE, 10, default, beyond={"used": True, "label_names": FINE}), 30)
    assert named[:2] == lines[:2] and "--unlabeled FILE" in named[2] and "--label-names" not in named[2]
    both = {"used": False, "label_names": FINE, "unlabeled": 50}  # both tried: nothing more to suggest
    assert hints(head(FINE, 10, default, beyond=both), 30) == [lines[0], lines[1]]
    # 21 to 50 per label: names no longer measured better, self-training still did (about a point)
    middling = hints(head(FINE, 30, Recipe.parse(RICH)), 30)
    assert len(middling) == 2 and "--unlabeled FILE" in middling[1] and "about a point better" in middling[1]
    assert "--label-names" not in middling[1]
    assert hints(head(FINE, 51, Recipe.parse(RICH)), 30) == []


def test_labels_not_in_the_task_name_the_tickets_that_carry_them() -> None:
    """Audit finding 9: one mistyped correction blocked train --from-redis without saying which."""
    from worker.bench.data import DataError, Item
    from worker.evaluate import check_labels

    items = [Item("T-1", "a", "billing"), Item("T-2", "b", "lost_crad")]
    items += [Item(f"X-{i}", "c", "typo") for i in range(11)]
    with pytest.raises(DataError) as caught:
        check_labels(items, ["billing", "account"])
    message = str(caught.value)
    assert message.startswith("labels not in the task: 'typo' (11), 'lost_crad' (1), on ids 'T-2', 'X-0'")
    assert "'X-8' and 2 more; the task's labels are billing, account" in message
    assert "did you" not in message  # nothing near either label
    with pytest.raises(DataError, match=r"account, lost_card; did you mean 'lost_crad' for 'lost_card'\?$"):
        check_labels(items[:2], ["billing", "account", "lost_card"])


def test_a_near_miss_label_names_the_closest_ones() -> None:
    from producer.learning import closest_labels

    intents = ["card_arrival", "card_delivery_estimate", "Card acceptance", "lost_or_stolen_card"]
    assert closest_labels("Card Arrival", intents) == ["card_arrival"]  # case and _ folded
    assert closest_labels("card-acceptance", intents) == ["Card acceptance"]
    assert closest_labels("lost or stolen crd", intents) == ["lost_or_stolen_card"]
    assert closest_labels("parking", intents) == []


def test_evals_zero_shot_line_scores_fewer_tickets_the_more_labels_it_scores() -> None:
    """Zero-shot scores every label of every ticket: the side-by-side line's default sample keeps its cost
    near 1,600 ticket-labels, the bundled 400-ticket file whole for the built-in three labels."""
    from worker.evaluate import zero_shot_sample

    assert [zero_shot_sample(n) for n in (1, 3, 4, 8, 12, 16, 77, 500)] == [
        400,
        400,
        400,
        200,
        133,
        100,
        100,
        100,
    ]

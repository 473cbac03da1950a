from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine.recipe import FINE
from worker.engine.task import FEW, UNEVEN, Task, TaskError, load_task, wants_balance, wants_names


def test_default_task_is_the_three_support_classes() -> None:
    task = load_task()
    assert task.labels == ("billing", "technical", "account")
    assert {ex.label for ex in task.examples} == set(task.labels)
    assert task.routes == {}


def test_task_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'name = "x"\nlabels = ["spam", "ham"]\ninstructions = "Is it spam?"\nroute_handler = "app.handle"\n'
        '[[examples]]\ntext = "win money"\nlabel = "spam"\n'
        '[routes]\nspam = "spam-q"\n'
    )
    task = load_task(path)
    assert task.labels == ("spam", "ham") and task.routes == {"spam": "spam-q"}
    assert task.route_handler == "app.handle"


@pytest.mark.parametrize(
    ("labels", "examples", "routes", "message"),
    [
        (["only"], [], {}, "at least two"),
        (["a", "a"], [], {}, "duplicate"),
        (["a", " b"], [], {}, "white space"),
        (["a", ""], [], {}, "non-empty"),
        (["a", "b"], [{"text": "t", "label": "c"}], {}, "not one of"),
        (["a", "b"], [], {"c": "q"}, "unknown label"),
        (["a", "é" * 65], [], {}, "over 128 bytes"),  # 130 bytes: more than a correction may name
        (["a", "b\x07"], [], {}, "a control character"),
    ],
)
def test_bad_tasks_are_refused_with_the_reason(labels, examples, routes, message) -> None:
    with pytest.raises(TaskError, match=message):
        Task.from_dict({"labels": labels, "examples": examples, "routes": routes})


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="not found"):
        load_task(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("labels = [")
    with pytest.raises(TaskError, match="not valid TOML"):
        load_task(bad)


def test_questions_are_read_with_their_heads_beside_the_task_file(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'labels = ["billing", "other"]\nroute_handler = "app.handle"\n'
        '[routes]\nbilling = "money"\n"intent:lost_card" = "security"\n'
        '[questions.intent]\nlabels = ["lost_card", "refund"]\nhead_data = "intent.csv"\n'
        '[questions.urgency]\nlabels = ["high", "low"]\nhead = "urgency.head"\n'
    )
    task = load_task(path)
    assert [q.name for q in task.questions] == ["intent", "urgency"]
    assert task.questions[0].head_data == str(tmp_path / "intent.csv")
    assert task.questions[1].head == str(tmp_path / "urgency.head")
    assert task.labels_of("intent") == ("lost_card", "refund") and task.labels_of(None) == task.labels
    assert task.route_target("intent:lost_card") == ("intent", "lost_card")
    assert task.route_target("billing") == (None, "billing")


@pytest.mark.parametrize(
    ("questions", "routes", "labels", "message"),
    [
        ({"a:b": {"labels": ["x", "y"]}}, {}, ["p", "q"], "question name"),
        ({"intent": {"labels": ["x"]}}, {}, ["p", "q"], "at least two"),
        ({"intent": {"labels": ["x", "y"], "heads": "f"}}, {}, ["p", "q"], "unknown keys"),
        ({"intent": {"labels": ["x", "y"], "head": "a", "head_data": "b"}}, {}, ["p", "q"], "not both"),
        ({"intent": ["x", "y"]}, {}, ["p", "q"], "a table with labels"),
        ({"intent": {"labels": ["x", "y"]}}, {"intent:z": "q"}, ["p", "q"], "has no label 'z'"),
        ({"intent": {"labels": ["x", "y"]}}, {"mood:x": "q"}, ["p", "q"], "unknown label"),
        ({"intent": {"labels": ["x", "y"]}}, {}, ["intent:x", "q"], "reads as a route"),
    ],
)
def test_bad_questions_are_refused_with_the_reason(questions, routes, labels, message) -> None:
    with pytest.raises(TaskError, match=message):
        Task.from_dict({"labels": labels, "questions": questions, "routes": routes})


def test_an_unknown_question_is_named_with_the_known_ones() -> None:
    task = Task.from_dict({"labels": ["p", "q"], "questions": {"intent": {"labels": ["x", "y"]}}})
    with pytest.raises(TaskError, match="asks no question 'mood'; its questions: intent"):
        task.labels_of("mood")


def test_each_question_states_which_of_its_answers_need_review(tmp_path: Path) -> None:
    """Issue 22 item 2: review_below or auto_accuracy per [questions.NAME], beside the primary's; a
    review route per question (NAME:review) beside the primary's (review)."""
    path = tmp_path / "t.toml"
    path.write_text(
        'labels = ["billing", "other"]\nauto_accuracy = 0.95\nzero_shot_temperature = 2.5\n'
        'route_handler = "app.handle"\n'
        '[routes]\nreview = "people"\n"intent:review" = "intent-people"\n"intent:refund" = "money"\n'
        '[questions.intent]\nlabels = ["lost_card", "refund"]\nreview_below = 0.6\n'
        '[questions.urgency]\nlabels = ["high", "low"]\nauto_accuracy = 0.99\n'
    )
    task = load_task(path)
    intent, urgency = task.questions
    assert (task.review_below, task.auto_accuracy, task.zero_shot_temperature) == (None, 0.95, 2.5)
    assert (intent.review_below, intent.auto_accuracy) == (0.6, None)
    assert (urgency.review_below, urgency.auto_accuracy) == (None, 0.99)
    assert set(task.routes) == {"review", "intent:review", "intent:refund"}
    assert load_task().zero_shot_temperature == 1.0  # the default: the scores as they always were


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"questions": {"q": {"labels": ["x", "y"], "review_below": 0.5, "auto_accuracy": 0.9}}}, "give one"),
        ({"questions": {"q": {"labels": ["x", "y"], "review_below": 1.0}}}, "question 'q': review_below"),
        ({"questions": {"q": {"labels": ["x", "y"], "auto_accuracy": "high"}}}, "must be a number"),
        (
            {"questions": {"q": {"labels": ["x", "y"], "review": 0.5}}},
            "use labels, head, head_data, recipe, review",
        ),
        ({"zero_shot_temperature": 0}, "positive"),
        ({"zero_shot_temperature": -1.5}, "positive"),
        ({"zero_shot_temperature": True}, "must be a number"),
        ({"zero_shot_temperature": "2"}, "must be a number"),
        ({"zero_shot_temperature": float("inf")}, "positive"),
        ({"questions": {"q": {"labels": ["x", "y"]}}, "routes": {"mood:review": "p"}}, "unknown label"),
        ({"questions": {"q": {"labels": ["review", "y"]}}, "routes": {"q:review": "p"}}, "ambiguous"),
        ({"labels": ["review", "other"], "routes": {"review": "p"}}, "ambiguous"),
    ],
)
def test_bad_review_keys_are_refused_with_the_reason(data: dict, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        Task.from_dict({"labels": ["p", "q"]} | data)


def test_label_names_and_unlabeled_data_are_read_per_question_beside_the_task_file(tmp_path: Path) -> None:
    """Issue 21: what a head_data head also learns from, declared once in the task (train's defaults)."""
    path = tmp_path / "t.toml"
    path.write_text(
        'labels = ["billing", "other"]\nhead_data = "team.csv"\nlabel_names = true\n'
        '[questions.intent]\nlabels = ["lost_card", "refund"]\nhead_data = "intent.csv"\n'
        'label_names = true\nunlabeled_data = "stream.csv"\n'
        '[questions.urgency]\nlabels = ["high", "low"]\nhead_data = "urgency.csv"\n'
    )
    task = load_task(path)
    intent, urgency = task.questions
    assert (task.label_names, task.unlabeled_data) == (True, None)
    assert (intent.label_names, intent.unlabeled_data) == (True, str(tmp_path / "stream.csv"))
    assert (urgency.label_names, urgency.unlabeled_data) == (None, None)  # no key: by the data
    assert (load_task().label_names, load_task().unlabeled_data) == (None, None)


def test_label_names_without_a_key_are_learnt_for_many_labels_with_few_tickets_each() -> None:
    intents = [f"intent_{i}" for i in range(FINE)]
    few = [lab for lab in intents for _ in range(FEW)]
    assert wants_names(None, few, FINE) is True
    assert wants_names(None, few + few, FINE) is False  # plenty of tickets: names add nothing
    assert wants_names(None, few[: FEW * 3], FINE - 1) is False  # a coarse label set
    assert wants_names(False, few, FINE) is False and wants_names(True, few + few, 2) is True  # as declared
    assert wants_names(None, [], FINE) is False


def test_balance_is_read_per_question_and_without_a_key_follows_how_uneven_the_labels_are(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'labels = ["billing", "other"]\nhead_data = "team.csv"\nbalance = false\n'
        '[questions.intent]\nlabels = ["lost_card", "refund"]\nhead_data = "intent.csv"\nbalance = true\n'
        '[questions.urgency]\nlabels = ["high", "low"]\nhead_data = "urgency.csv"\n'
    )
    task = load_task(path)
    intent, urgency = task.questions
    assert (task.balance, intent.balance, urgency.balance) == (False, True, None)
    assert load_task().balance is None
    rare = ["a"] * 20 + ["b"] * 20 + ["c"] * 2
    even = ["a"] * 500 + ["b"] * 496  # the built-in head's data: nearly even, its head stays as it was
    assert wants_balance(None, rare) is True and wants_balance(None, even) is False
    assert wants_balance(None, ["a"] * int(UNEVEN * 10) + ["b"] * 10) is True  # the rule's edge
    assert wants_balance(None, ["a"] * (int(UNEVEN * 10) - 1) + ["b"] * 10) is False
    assert wants_balance(False, rare) is False and wants_balance(True, even) is True  # as declared
    assert wants_balance(None, []) is False
    with pytest.raises(TaskError, match="question 'q': balance must be true or false"):
        Task.from_dict({"labels": ["p", "q"], "questions": {"q": {"labels": ["x", "y"], "balance": "on"}}})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"label_names": "yes"}, "label_names must be true or false"),
        ({"unlabeled_data": 3}, "unlabeled_data must be a file name"),
        ({"questions": {"q": {"labels": ["x", "y"], "label_names": 1}}}, "question 'q': label_names"),
        ({"questions": {"q": {"labels": ["x", "y"], "unlabeled_data": " "}}}, "question 'q': unlabeled_data"),
        ({"questions": {"q": {"labels": ["x", "y"], "unlabelled_data": "f"}}}, "label_names, unlabeled_data"),
    ],
)
def test_bad_learning_keys_are_refused_with_the_reason(data: dict, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        Task.from_dict({"labels": ["p", "q"]} | data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"labels": "spam"}, r"labels must be a list of text"),  # not read as four labels s, p, a, m
        ({"labels": {"a": 1, "b": 2}}, r"labels must be a list of text"),
        ({"labels": ["a", 5]}, r"labels must be a list of text"),
        ({"labels": ["a", "b"], "calibrate": "false"}, r"calibrate must be true or false"),  # bool("false")
        ({"labels": ["a", "b"], "head_dta": "x.csv"}, r"unknown keys \['head_dta'\]"),
        ({"labels": ["a", "b"], "head": 5}, r"head must be a file name"),
        ({"labels": ["a", "b"], "head_data": ["x.csv"]}, r"head_data must be a file name"),
        ({"labels": ["a", "b"], "route_handler": 5}, r"route_handler must be a dotted path"),
        ({"labels": ["a", "b"], "routes": "a"}, r"routes must be a table"),
        ({"labels": ["a", "b"], "routes": {"a": 5}}, r"routes must be a table"),
        (
            {"labels": ["a", "b"], "examples": [{"text": 5, "label": "a"}]},
            r"example 1: text and label must be",
        ),
        ({"labels": ["a", "b"], "examples": [{"text": "t", "label": "a", "head_data": "x"}]}, r"example 1"),
        ({"labels": ["a", "b"], "name": ["x"]}, r"name must be text"),
        ({"labels": ["a", "b"], "questions": {"q": {"labels": ["x", "y"], "head": 5}}}, r"head must be"),
        ({"labels": ["a", "b"], "questions": {"q": {"labels": "xy"}}}, r"'q': labels must be a list"),
        ({}, r"a task needs labels"),
    ],
)
def test_every_key_of_the_wrong_shape_is_refused_never_read_as_something_else(
    data: dict, message: str
) -> None:
    with pytest.raises(TaskError, match=message):
        Task.from_dict(data)


def test_a_task_file_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=f"task file {tmp_path}: Is a directory"):
        load_task(tmp_path)
    latin = tmp_path / "latin.toml"
    latin.write_bytes('labels = ["caf\xe9", "b"]'.encode("latin-1"))
    with pytest.raises(TaskError, match=r"latin.toml is not UTF-8: byte 14"):
        load_task(latin)
    typo = tmp_path / "typo.toml"
    typo.write_text('labels = ["a", "b"]\nhead_dta = "x.csv"\n')
    with pytest.raises(TaskError, match=r"task file .*typo.toml: unknown keys \['head_dta'\]"):
        load_task(typo)

from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine.task import Task, TaskError, load_task


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

"""``ticketq-worker train`` refuses bad training data in one line with exit 2, before loading a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.cli import main


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("id,text,label\n1,refund please,billing\n2,big sale,sales\n", "labels not in the task: 'sales' (1)"),
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


def test_missing_file_and_bad_task_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--tickets", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "h")]) == 2
    (tmp_path / "t.toml").write_text('labels = ["only"]\n')
    (tmp_path / "t.csv").write_text("id,text,label\n1,a,only\n")
    args = ["train", "--task", str(tmp_path / "t.toml"), "--tickets", str(tmp_path / "t.csv"), "--out", "h"]
    assert main(args) == 2
    assert all(line.startswith("ticketq-worker train: ") for line in capsys.readouterr().err.splitlines())

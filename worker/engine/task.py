"""A classification task: labels, instructions, few-shot examples and routes, read from TOML."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (a dependency there, see pyproject.toml)
    import tomli as tomllib

DEFAULT_TASK_PATH = Path(__file__).with_name("default_task.toml")

# Contextual calibration (Zhao et al., 2021, "Calibrate Before Use"): a small model prefers some
# labels whatever the ticket says. Scoring these content-free tickets measures that bias once per
# task; it is subtracted from every ticket's label scores before the decision.
CONTENT_FREE = ("N/A", "[empty]", "...")
# The route (in [routes] or --route) that tickets needing review go to instead of their label's queue.
REVIEW_ROUTE = "review"


class TaskError(ValueError):
    """A task file that cannot be used, with the reason."""


@dataclass(frozen=True)
class Example:
    text: str
    label: str


@dataclass(frozen=True)
class Task:
    name: str
    labels: tuple[str, ...]
    instructions: str
    examples: tuple[Example, ...] = ()
    question: str = ""  # put before every ticket (and example) in the user's turn
    calibrate: bool = True  # subtract the labels' scores for content-free tickets (see CONTENT_FREE)
    routes: dict[str, str] = field(default_factory=dict)  # label -> RQ queue name
    route_handler: str | None = None  # dotted path RQ workers call for routed tickets
    head: str | None = None  # a trained head file the task ships with (absolute once loaded)
    head_data: str | None = None  # labelled tickets to train the task's head from on first use (cached)
    # Which results need a person (worker/review.py): below this confidence a result carries "review":
    # true and enters P:review; or, with auto_accuracy, the threshold the head's training chose to keep
    # auto-routed tickets that accurate. At most one of the two; --review-below overrides both.
    review_below: float | None = None
    auto_accuracy: float | None = None

    def __post_init__(self) -> None:
        if len(self.labels) < 2:
            raise TaskError(f"a task needs at least two labels, got {list(self.labels)}")
        for label in self.labels:
            if not label or label != label.strip() or "\n" in label:
                raise TaskError(f"label {label!r} must be non-empty, single-line, without outer white space")
        if len(set(self.labels)) != len(self.labels):
            raise TaskError(f"duplicate labels in {list(self.labels)}")
        for ex in self.examples:
            if ex.label not in self.labels:
                raise TaskError(f"example label {ex.label!r} is not one of {list(self.labels)}")
            if not ex.text.strip():
                raise TaskError("an example has empty text")
        for label in self.routes:
            if label not in self.labels and label != REVIEW_ROUTE:
                raise TaskError(f"route for unknown label {label!r}; labels are {list(self.labels)}")
        if self.review_below is not None and self.auto_accuracy is not None:
            raise TaskError("review_below and auto_accuracy: give one (a threshold, or the accuracy)")
        for name, value in (("review_below", self.review_below), ("auto_accuracy", self.auto_accuracy)):
            if value is not None and not 0.0 < value < 1.0:
                raise TaskError(f"{name} must be between 0 and 1 (exclusive), got {value}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        try:
            return cls(
                name=str(data.get("name", "task")),
                labels=tuple(data["labels"]),
                instructions=str(data.get("instructions", "")).strip(),
                examples=tuple(Example(text=e["text"], label=e["label"]) for e in data.get("examples", [])),
                question=str(data.get("question", "")).strip(),
                calibrate=bool(data.get("calibrate", True)),
                routes=dict(data.get("routes", {})),
                route_handler=data.get("route_handler"),
                head=data.get("head"),
                head_data=data.get("head_data"),
                review_below=_probability(data, "review_below"),
                auto_accuracy=_probability(data, "auto_accuracy"),
            )
        except (KeyError, TypeError) as exc:
            raise TaskError(f"malformed task: {exc!r}") from None


def _probability(data: dict[str, Any], name: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def load_task(path: str | Path | None = None) -> Task:
    """Read a task file; ``None`` gives the built-in support-ticket task."""
    p = Path(path) if path else DEFAULT_TASK_PATH
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"task file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"task file {p} is not valid TOML: {exc}") from None
    task = Task.from_dict(data)
    # Files a task names are relative to the task file, so a task and its head travel together.
    return replace(
        task,
        head=str((p.parent / task.head).resolve()) if task.head else None,
        head_data=str((p.parent / task.head_data).resolve()) if task.head_data else None,
    )

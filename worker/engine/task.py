"""A classification task: labels, instructions, few-shot examples and routes, read from TOML.

A task asks one question of every ticket, its primary one (``labels``; what a result's ``label`` answers),
and may ask more: each ``[questions.NAME]`` table has its own ``labels`` and a trained head (``head`` or
``head_data``) that reads the same forward pass (docs/head.md, "Several questions"). A route names a
primary label, or ``NAME:label`` for a question's; ``review`` and ``NAME:review`` take the tickets whose
answer to that question needs review (worker/review.py). ``recipe`` (at the top or in a question's table) says
which hidden states that question's heads are trained on (``head_data``, and ``train``'s default): parts
(``"8:mean,12:max"``) or a preset, ``"fast"``, ``"default"`` or ``"accurate"`` (worker/engine/recipe.py);
a head file carries its own.

How a question's heads are trained is declared beside its labels, at the top level for the primary or in
its ``[questions.NAME]`` table: ``label_names`` and ``unlabeled_data`` (what a head also learns from,
worker/engine/beyond.py), ``balance`` (every label's tickets weigh as much in all; without the key, when
the labels are uneven: :func:`wants_balance`) and ``mlp`` (a nonlinear second reading beside the linear
head, worker/engine/mlp.py; without the key, for many labels with many tickets each: :func:`wants_mlp`).

Which answers need a person is set per question: ``review_below`` or ``auto_accuracy`` at the top level
(the primary question) or in ``[questions.NAME]``. ``zero_shot_temperature`` divides the zero-shot label
scores before their softmax (fitted by ``ticketq-worker eval``); it never changes a decision, and it is
not part of the prompt, so heads trained for the task keep matching it.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from producer.learning import MAX_LABEL_BYTES

from .recipe import FINE, Preset, Recipe, parse_spec

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


# A question's name travels in Redis keys, metric labels, results and routes ("NAME:label"): no colon.
QUESTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
ROUTE_SEP = ":"  # a route "intent:lost_card" is the label lost_card of the question intent


# The keys a task file may have at its top level; anything else is refused as a typo.
TASK_KEYS = (
    "name",
    "labels",
    "instructions",
    "examples",
    "question",
    "calibrate",
    "routes",
    "route_handler",
    "head",
    "head_data",
    "review_below",
    "auto_accuracy",
    "questions",
    "recipe",
    "zero_shot_temperature",
    "label_names",
    "unlabeled_data",
    "balance",
    "mlp",
)


# The keys a [questions.NAME] table may have; anything else is refused as a typo.
QUESTION_KEYS = (
    "labels",
    "head",
    "head_data",
    "recipe",
    "review_below",
    "auto_accuracy",
    "label_names",
    "unlabeled_data",
    "balance",
    "mlp",
    "parent",
)


class TaskError(ValueError):
    """A task file that cannot be used, with the reason."""


def check_review(what: str, review_below: float | None, auto_accuracy: float | None) -> None:
    """At most one of the two, each strictly between 0 and 1."""
    if review_below is not None and auto_accuracy is not None:
        raise TaskError(f"{what}: review_below and auto_accuracy: give one (a threshold, or the accuracy)")
    for name, value in (("review_below", review_below), ("auto_accuracy", auto_accuracy)):
        if value is not None and not 0.0 < value < 1.0:
            raise TaskError(f"{what}: {name} must be between 0 and 1 (exclusive), got {value}")


def review_route(question: str | None) -> str:
    """The route taking the tickets whose answer to ``question`` (None: the primary) needs review."""
    return REVIEW_ROUTE if question is None else f"{question}{ROUTE_SEP}{REVIEW_ROUTE}"


def check_labels(labels: tuple[str, ...], what: str) -> None:
    if len(labels) < 2:
        raise TaskError(f"{what} needs at least two labels, got {list(labels)}")
    for label in labels:
        if not isinstance(label, str) or not label or label != label.strip() or "\n" in label:
            raise TaskError(f"label {label!r} must be non-empty, single-line, without outer white space")
        # what a correction may name (producer/learning.py, label.lua): a label none could name is refused
        if len(label.encode()) > MAX_LABEL_BYTES:
            raise TaskError(
                f"label {label[:40]!r}…: over {MAX_LABEL_BYTES} bytes (a correction could not name it)"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in label):
            raise TaskError(f"label {label!r}: a control character (a correction could not name it)")
    if len(set(labels)) != len(labels):
        raise TaskError(f"duplicate labels in {list(labels)}")


@dataclass(frozen=True)
class Question:
    """A further question the task asks of every ticket, answered by a trained head of its own."""

    name: str
    labels: tuple[str, ...]
    head: str | None = None  # a head file (absolute once loaded)
    head_data: str | None = None  # labelled tickets (text,label; id optional) to train its head from, cached
    recipe: Recipe | Preset | None = None  # the features its heads are trained on; None: Recipe.default
    # Which of its answers need review, as the task's own keys do for the primary (worker/review.py).
    review_below: float | None = None
    auto_accuracy: float | None = None
    # What its head_data head also learns from (worker/engine/beyond.py), as the task's own keys say.
    label_names: bool | None = None  # None (no key): by its data (wants_names)
    unlabeled_data: str | None = None
    balance: bool | None = None  # None (no key): by its data (wants_balance)
    mlp: bool | None = None  # None (no key): by its data (wants_mlp)
    # A taxonomy: each of its labels -> the label it belongs to: the primary's (an intent's team) or,
    # as NAME:label, question NAME's (an intent's category). Its answer and those above it are then
    # chosen together, consistent (worker/engine/hierarchy.py; Task.parents resolves and checks it).
    parent: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not QUESTION_NAME.fullmatch(self.name):
            raise TaskError(
                f"question name {self.name!r}: a letter, then up to 63 letters, digits, '_' or '-'"
            )
        check_labels(self.labels, f"question {self.name!r}")
        if self.head and self.head_data:
            raise TaskError(f"question {self.name!r}: give head or head_data, not both")
        check_review(f"question {self.name!r}", self.review_below, self.auto_accuracy)
        if self.parent:
            given = dict(self.parent)
            missing = [label for label in self.labels if label not in given]
            unknown = sorted(set(given) - set(self.labels))
            if missing or unknown:
                raise TaskError(
                    f"question {self.name!r}: parent must name each of its labels once"
                    + (f"; missing {missing[:5]}" if missing else "")
                    + (f"; not its labels {unknown[:5]}" if unknown else "")
                )


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
    # auto-routed tickets that accurate. At most one of the two; --review-below overrides both (for the
    # primary question only: each [questions.NAME] sets its own).
    review_below: float | None = None
    auto_accuracy: float | None = None
    questions: tuple[Question, ...] = ()  # further questions, each answered by a head of its own
    recipe: Recipe | Preset | None = None  # the features the primary's heads are trained on; None: default
    # Zero-shot scores are softmax((label log-probabilities - prior) / this): fitted by ``eval`` so they
    # are calibrated probabilities. Never changes a decision; a head's scores use the head's own.
    zero_shot_temperature: float = 1.0
    # Heads trained from head_data also learn each label's name as an example of it, and self-train on
    # the tickets (text, id optional; labels unread) of unlabeled_data (worker/engine/beyond.py; train's
    # defaults).
    # label_names None (no key): when the data has few tickets per label (wants_names).
    label_names: bool | None = None
    unlabeled_data: str | None = None
    # Its heads weigh every label's tickets equally in all (fit.balanced); None (no key): when the
    # data's labels are uneven (wants_balance).
    balance: bool | None = None
    # Its heads also read the features through an MLP, blended (worker/engine/mlp.py); None (no key):
    # for many labels with many tickets each (wants_mlp).
    mlp: bool | None = None

    def __post_init__(self) -> None:
        check_labels(self.labels, "a task")
        names = [q.name for q in self.questions]
        if len(set(names)) != len(names):
            raise TaskError(f"duplicate question names in {names}")
        for label in self.labels:  # a primary label "intent:x" would make the route "intent:x" ambiguous
            name, sep, _ = label.partition(ROUTE_SEP)
            if sep and name in names:
                raise TaskError(f"label {label!r} reads as a route to question {name!r}")
        for ex in self.examples:
            if ex.label not in self.labels:
                raise TaskError(f"example label {ex.label!r} is not one of {list(self.labels)}")
            if not ex.text.strip():
                raise TaskError("an example has empty text")
        for route in self.routes:
            self.check_route(route)
        check_review("the task", self.review_below, self.auto_accuracy)
        _ = self.parents  # each parent table resolved now: TaskError if one cannot be
        t = self.zero_shot_temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise TaskError(f"zero_shot_temperature must be a positive number, got {t!r}")

    def get_question(self, name: str | None) -> Question | None:
        """The question called ``name`` (None: the primary, returned as None). TaskError if unknown."""
        if name is None:
            return None
        for q in self.questions:
            if q.name == name:
                return q
        known = ", ".join(q.name for q in self.questions) or "none"
        raise TaskError(f"task {self.name!r} asks no question {name!r}; its questions: {known}")

    @cached_property
    def parents(self) -> dict[str, tuple[str | None, dict[str, str]]]:
        """The taxonomy: each question with a ``parent`` table -> (the question above it, None for the
        primary; its label -> the label above it). worker/engine/hierarchy.py chooses those answers
        together. TaskError for a table naming no label of the task, labels of two questions, or a loop."""
        out: dict[str, tuple[str | None, dict[str, str]]] = {}
        for q in self.questions:
            if not q.parent:
                continue
            above: set[str | None] = set()
            labels: dict[str, str] = {}
            strays = []
            for label, target in q.parent:
                try:
                    where, up = self.route_target(target)
                except TaskError:
                    strays.append(target)
                    continue
                above.add(where)
                labels[label] = up
            if strays:
                raise TaskError(
                    f"question {q.name!r}: parent names labels the task does not have: {strays[:5]}"
                    " (a primary label, or NAME:label for question NAME's)"
                )
            if len(above) > 1:
                names = sorted("the primary" if w is None else repr(w) for w in above)
                raise TaskError(f"question {q.name!r}: parent names labels of {', '.join(names)}: give one")
            out[q.name] = (above.pop(), labels)
        for start in out:
            seen, at = [start], out[start][0]
            while at is not None and at in out:
                if at in seen:
                    raise TaskError(f"parent tables loop: {' -> '.join([*seen, at])}")
                seen.append(at)
                at = out[at][0]
        return out

    def labels_of(self, name: str | None) -> tuple[str, ...]:
        """The labels of question ``name`` (None: the primary)."""
        q = self.get_question(name)
        return self.labels if q is None else q.labels

    def check_route(self, route: str) -> None:
        """TaskError unless ``route`` names a label (:meth:`route_target`) or a question's review route
        (``review``, ``NAME:review``); a question with a label called ``review`` cannot have the latter."""
        for question in (None, *(q.name for q in self.questions)):
            if route == review_route(question):
                if REVIEW_ROUTE in self.labels_of(question):
                    whose = "the task" if question is None else f"question {question!r}"
                    raise TaskError(
                        f"route {route!r} is ambiguous: it takes the tickets that need review, and "
                        f"{REVIEW_ROUTE!r} is also a label of {whose}"
                    )
                return
        self.route_target(route)

    def route_target(self, route: str) -> tuple[str | None, str]:
        """(question, label) a route names: ``label`` (primary) or ``NAME:label``. TaskError if neither."""
        if route in self.labels:
            return None, route
        name, sep, label = route.partition(ROUTE_SEP)
        if sep and any(q.name == name for q in self.questions):
            if label in self.labels_of(name):
                return name, label
            raise TaskError(f"route {route!r}: question {name!r} has no label {label!r}")
        raise TaskError(f"route for unknown label {route!r}; labels are {list(self.labels)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """A task from its file's table; TaskError naming the key for anything but what the keys take (a
        misspelt key is refused, not ignored: it would leave the task quietly without what it says)."""
        unknown = sorted(set(data) - set(TASK_KEYS))
        if unknown:
            raise TaskError(f"unknown keys {unknown}; a task's keys are {', '.join(TASK_KEYS)}")
        if "labels" not in data:
            raise TaskError("a task needs labels = [...]")
        routes = data.get("routes", {})
        if not isinstance(routes, dict) or not all(isinstance(v, str) for v in routes.values()):
            raise TaskError('routes must be a table of label = "queue name"')
        try:
            return cls._from(data, routes)
        except (KeyError, TypeError, AttributeError) as exc:  # a shape no check above foresaw
            raise TaskError(f"malformed task: {exc!r}") from None

    @classmethod
    def _from(cls, data: dict[str, Any], routes: dict[str, str]) -> Task:
        return cls(
            name=_string(data, "name", "task"),
            labels=_labels(data["labels"], "the task's labels"),
            instructions=_string(data, "instructions", "").strip(),
            examples=_examples(data.get("examples", [])),
            question=_string(data, "question", "").strip(),
            calibrate=_flag(data, "calibrate", "") is not False,
            routes=dict(routes),
            route_handler=_text(data, "route_handler", "", "a dotted path to a function"),
            head=_text(data, "head", ""),
            head_data=_text(data, "head_data", ""),
            review_below=_probability(data, "review_below"),
            auto_accuracy=_probability(data, "auto_accuracy"),
            questions=_questions(data.get("questions", {})),
            recipe=_recipe(data.get("recipe"), ""),
            zero_shot_temperature=_number(data, "zero_shot_temperature", 1.0),
            label_names=_flag(data, "label_names", ""),
            unlabeled_data=_text(data, "unlabeled_data", ""),
            balance=_flag(data, "balance", ""),
            mlp=_flag(data, "mlp", ""),
        )


def _string(data: dict[str, Any], name: str, default: str) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise TaskError(f"{name} must be text, got {value!r:.60}")
    return value


def _labels(value: Any, what: str) -> tuple[str, ...]:
    """A list of labels as written (check_labels judges them); a string or a table is refused, not read
    as its letters or keys."""
    if not isinstance(value, list) or not all(isinstance(label, str) for label in value):
        raise TaskError(f'{what} must be a list of text, like ["billing", "technical"]; got {value!r:.60}')
    return tuple(value)


def _examples(value: Any) -> tuple[Example, ...]:
    """``[[examples]]`` tables, each with a text and a label and nothing else."""
    if not isinstance(value, list):
        raise TaskError("examples must be [[examples]] tables, each with text and label")
    out = []
    for n, e in enumerate(value, 1):
        if not isinstance(e, dict) or set(e) != {"text", "label"}:
            keys = sorted(e) if isinstance(e, dict) else type(e).__name__
            raise TaskError(f"example {n}: needs text and label, and nothing else; got {keys}")
        if not isinstance(e["text"], str) or not isinstance(e["label"], str):
            raise TaskError(f"example {n}: text and label must be text")
        out.append(Example(text=e["text"], label=e["label"]))
    return tuple(out)


def _probability(data: dict[str, Any], name: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _recipe(value: Any, where: str) -> Recipe | Preset | None:
    """A ``recipe = "8:mean,12:max"`` key, or a preset's name (``recipe = "accurate"``); ``where`` prefixes
    its errors (``"question 'intent': "``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):  # recipe = 10: layer 10, mean-pooled
        value = str(value)
    if not isinstance(value, str):
        raise TaskError(f'{where}recipe must be text like "8:mean,12:max" or "accurate", got {value!r}')
    try:
        return parse_spec(value)
    except ValueError as exc:
        raise TaskError(f"{where}{exc}") from None


FEW = 20  # labelled tickets for the median label up to which label names are learnt unasked
# ... and up to which train --from-redis self-trains on the stream unasked: on Banking77 (train split,
# 2,000 rows held out, three draws) self-training added 2.1 points over names at 20 per intent, 0.7 at 30,
# 0.8 at 50 and 0.2 at 80, where names added 0.2, 0.2, -0.1 and 0.1 (docs/head.md)
SELF_TRAIN_UP_TO = 50


def few_per_label(counts: Iterable[int], most: int = FEW) -> bool:
    """Whether the median label present (its count above 0) has at most ``most`` labelled tickets:
    :data:`FEW` where label names measured their gains, :data:`SELF_TRAIN_UP_TO` where self-training
    did (Banking77, docs/head.md)."""
    present = sorted(n for n in counts if n)
    return bool(present) and present[len(present) // 2] <= most


def wants_names(declared: bool | None, labels: Sequence[str], classes: int) -> bool:
    """Whether a head learns each label's name as an example of it: as the task or question declares
    (``label_names``), else, with no key, when it has :data:`.recipe.FINE` labels or more and the median
    label present has at most :data:`FEW` labelled tickets, where names measured a point better (Banking77,
    77 intents from 10 rows each: 76.8% -> 77.8%, docs/head.md). The out-of-fold check of
    :func:`.training.train_head` still drops them where they do not help."""
    if declared is not None:
        return declared
    return classes >= FINE and few_per_label(Counter(labels).values())


UNEVEN = 2.0  # most frequent label's tickets over the rarest's from which labels are balanced unasked


def wants_balance(declared: bool | None, labels: Sequence[str]) -> bool:
    """Whether a head weighs every label's tickets equally in all (:func:`.fit.balanced`): as the task or
    question declares (``balance``), else, with no key, when the most frequent label present has at least
    :data:`UNEVEN` times the tickets of the rarest. There a head that counts tickets learns that the rare
    labels are rare and seldom chooses them (docs/head.md, "Long-tailed label sets"); data nearly even
    (the built-in head's 496-500 per label) gains nothing and keeps its head."""
    if declared is not None:
        return declared
    counts = Counter(labels).values()
    return bool(counts) and max(counts) >= UNEVEN * min(counts)


def wants_mlp(declared: bool | None, labels: Sequence[str], classes: int) -> bool:
    """Whether a head also fits a nonlinear reading of its features (:mod:`.mlp`): as the task or question
    declares (``mlp``), else, with no key, when it has :data:`.recipe.FINE` labels or more and the median
    label present has more than :data:`SELF_TRAIN_UP_TO` labelled tickets: through ``train`` and ``eval``
    on Banking77's full training split (130 per intent) it added half a point (92.95% -> 93.47%; 94.06%
    with the accurate recipe), on the confusable 10-intent set (80 per intent) 0.3 (91.2% -> 91.5%), from
    10 per intent nothing (docs/head.md, "A nonlinear second reading"). ``train`` still drops it where it
    does not add on a held-out fold (:func:`.training.second_reading`)."""
    if declared is not None:
        return declared
    return classes >= FINE and not few_per_label(Counter(labels).values(), SELF_TRAIN_UP_TO)


def _flag(data: dict[str, Any], name: str, where: str) -> bool | None:
    """true or false, or None when the key is absent."""
    if name not in data:
        return None
    value = data[name]
    if not isinstance(value, bool):
        raise TaskError(f"{where}{name} must be true or false, got {value!r}")
    return value


def _text(data: dict[str, Any], name: str, where: str, kind: str = "a file name") -> str | None:
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise TaskError(f"{where}{name} must be {kind}, got {value!r:.60}")
    return value


def _number(data: dict[str, Any], name: str, default: float) -> float:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskError(f"{name} must be a number, got {value!r}")
    return float(value)


def _questions(table: Any) -> tuple[Question, ...]:
    if not isinstance(table, dict):
        raise TaskError("questions: a table of [questions.NAME] tables")
    out = []
    for name, q in table.items():
        if not isinstance(q, dict) or "labels" not in q:
            raise TaskError(f"question {name!r}: a table with labels (and head or head_data)")
        unknown = sorted(set(q) - set(QUESTION_KEYS))
        if unknown:
            raise TaskError(f"question {name!r}: unknown keys {unknown}; use {', '.join(QUESTION_KEYS)}")
        where = f"question {name!r}: "
        out.append(
            Question(
                name,
                _labels(q["labels"], f"question {name!r}: labels"),
                _text(q, "head", where),
                _text(q, "head_data", where),
                review_below=_probability(q, "review_below"),
                auto_accuracy=_probability(q, "auto_accuracy"),
                recipe=_recipe(q.get("recipe"), f"question {name!r}: "),
                label_names=_flag(q, "label_names", f"question {name!r}: "),
                unlabeled_data=_text(q, "unlabeled_data", f"question {name!r}: "),
                balance=_flag(q, "balance", f"question {name!r}: "),
                mlp=_flag(q, "mlp", f"question {name!r}: "),
                parent=_parent(q.get("parent"), name),
            )
        )
    return tuple(out)


def _parent(table: Any, name: str) -> tuple[tuple[str, str], ...]:
    """``parent = { its_label = "primary_label" or "NAME:label", ... }``: the taxonomy above a question's
    labels (resolved by :attr:`Task.parents`)."""
    if table is None:
        return ()
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise TaskError(f"question {name!r}: parent must be a table of its labels to the task's labels")
    return tuple(table.items())


def load_task(path: str | Path | None = None) -> Task:
    """Read a task file; ``None`` gives the built-in support-ticket task."""
    p = Path(path) if path else DEFAULT_TASK_PATH
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"task file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"task file {p} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TaskError(f"task file {p} is not UTF-8: byte {exc.start}") from None
    except OSError as exc:
        raise TaskError(f"task file {p}: {exc.strerror or exc}") from None
    try:
        task = Task.from_dict(data)
    except TaskError as exc:
        raise TaskError(f"task file {p}: {exc}") from None
    # Files a task names are relative to the task file, so a task and its head travel together.
    return replace(
        task,
        head=_beside(p, task.head),
        head_data=_beside(p, task.head_data),
        unlabeled_data=_beside(p, task.unlabeled_data),
        questions=tuple(
            replace(
                q,
                head=_beside(p, q.head),
                head_data=_beside(p, q.head_data),
                unlabeled_data=_beside(p, q.unlabeled_data),
            )
            for q in task.questions
        ),
    )


def _beside(task_file: Path, name: str | None) -> str | None:
    return str((task_file.parent / name).resolve()) if name else None

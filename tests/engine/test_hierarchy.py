"""A taxonomy (``parent`` in a question's table): the primary answer and each such question's answer are
chosen together, never one team with another team's intent; where the heads already agree nothing changes.
Chains (an intent under a category, the category under a team) are chosen together as one tree: the
choice is the most probable consistent one, checked against every consistent choice enumerated."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from test_questions import TEXTS, train_for

from worker.engine import Engine
from worker.engine.hierarchy import consistent
from worker.engine.model import LoadedModel
from worker.engine.recipe import MEAN, Recipe
from worker.engine.task import Question, Task, TaskError, load_task
from worker.engine.types import Answer, Prediction

TEAM = {"card_arrival": "other", "lost_card": "account", "refund": "billing", "double_charge": "billing"}


def asked(team: dict[str, float], intent: dict[str, float], urgency: str = "urgent") -> Prediction:
    answers = {
        "intent": Answer(max(intent, key=intent.__getitem__), intent, "h2"),
        "urgency": Answer(urgency, {"urgent": 0.9, "routine": 0.1}, "h3"),
    }
    return Prediction(max(team, key=team.__getitem__), team, {}, "head", "h1", answers)


def test_agreeing_answers_stand_and_disagreeing_ones_become_the_most_probable_consistent_pair() -> None:
    parents = {"intent": (None, TEAM)}
    agree = asked({"other": 0.5, "billing": 0.3, "account": 0.2}, {"card_arrival": 0.6, "refund": 0.4})
    assert consistent(agree, parents) is agree
    # the team head leans billing (0.6 x 0.2 for refund), the intent head is sure of card_arrival (0.4 x 0.7)
    team = {"billing": 0.6, "other": 0.4, "account": 0.0}
    unsure = asked(team, {"card_arrival": 0.7, "refund": 0.2, "lost_card": 0.1})
    chosen = consistent(unsure, parents)
    assert (chosen.label, chosen.answers["intent"].label) == ("other", "card_arrival")
    # a team head this sure outweighs the intent head: billing, and its most probable intent
    sure = asked({"billing": 0.95, "other": 0.05}, {"card_arrival": 0.5, "double_charge": 0.3, "refund": 0.2})
    chosen = consistent(sure, parents)
    assert (chosen.label, chosen.answers["intent"].label) == ("billing", "double_charge")
    # scores, heads and a question outside the taxonomy are left as they were
    assert chosen.scores == sure.scores and chosen.answers["intent"].scores == sure.answers["intent"].scores
    assert chosen.answers["urgency"] == sure.answers["urgency"] and chosen.head == "h1"
    assert consistent(sure, {"other": (None, TEAM)}) is sure  # a question it has no answer to


def test_a_parent_table_must_map_every_label_of_its_question_to_a_task_label() -> None:
    base = {"labels": ["billing", "account", "other"]}
    intent = {"labels": list(TEAM), "head_data": "x.csv"}
    task = Task.from_dict({**base, "questions": {"intent": {**intent, "parent": TEAM}}})
    assert dict(task.questions[0].parent) == TEAM and task.parents == {"intent": (None, TEAM)}
    bad = [
        ({k: v for k, v in TEAM.items() if k != "refund"}, r"each of its labels once; missing \['refund'\]"),
        ({**TEAM, "parking": "other"}, r"not its labels \['parking'\]"),
        ({**TEAM, "refund": "sales"}, r"labels the task does not have: \['sales'\]"),
        (["other"], "a table of its labels"),
        ({**TEAM, "refund": "intent:refund"}, r"parent names labels of 'intent', the primary: give one"),
    ]
    for parent, message in bad:
        with pytest.raises(TaskError, match=message):
            Task.from_dict({**base, "questions": {"intent": {**intent, "parent": parent}}})


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> Engine:
    topics = ("billing", "technical", "account")  # the built-in task's labels, topic i under team i
    fine = tuple(f"{t}-{k}" for t in topics for k in range(3))
    parent = tuple((label, label.split("-")[0]) for label in fine)
    task = load_task()
    return Engine(tiny, replace(task, questions=(Question("intent", fine, parent=parent),)))


def test_the_engine_answers_a_taxonomy_consistently_from_its_heads_probabilities(engine: Engine) -> None:
    heads = {q: train_for(engine, q, Recipe.one(1, MEAN)) for q in (None, "intent")}
    for q, h in heads.items():
        engine.use_head(h, q)
    try:
        together, _ = engine.classify(TEXTS * 3)
        team = engine.asking(None).classify(TEXTS * 3)[0]
        intent = engine.asking("intent").classify(TEXTS * 3)[0]
    finally:
        for q in heads:
            engine.use_head(None, q)
    parents = engine.task.parents
    changed = 0
    for got, t, i in zip(together, team, intent, strict=True):
        assert got.answers["intent"].label.split("-")[0] == got.label  # always consistent
        alone = replace(t, answers={"intent": Answer(i.label, i.scores)})
        want = consistent(alone, parents)  # the pure rule, on the heads asked alone
        assert (got.label, got.answers["intent"].label) == (want.label, want.answers["intent"].label)
        changed += (got.label, got.answers["intent"].label) != (t.label, i.label)
        assert got.scores == pytest.approx(t.scores, abs=2e-6)  # the heads' own probabilities
    assert 0 < changed < len(together)  # random heads disagree on some tickets, not all


TEAMS = ("billing", "account", "other")
CATEGORY = {"charges": "billing", "refunds": "billing", "security": "account", "cards": "other"}
INTENT = {
    "double_charge": "category:charges",
    "fee": "category:charges",
    "refund": "category:refunds",
    "lost_card": "category:security",
    "card_arrival": "category:cards",
    "card_linking": "category:cards",
}


def chain(**more: Any) -> Task:
    return Task.from_dict(
        {
            "labels": list(TEAMS),
            "questions": {
                "intent": {"labels": list(INTENT), "head_data": "x.csv", "parent": INTENT},
                "category": {"labels": list(CATEGORY), "head_data": "y.csv", "parent": CATEGORY},
                **more,
            },
        }
    )


def test_a_parent_may_name_another_questions_labels_as_name_label_and_loops_are_refused() -> None:
    task = chain()
    assert task.parents["category"] == (None, CATEGORY)
    assert task.parents["intent"] == ("category", {k: v.split(":")[1] for k, v in INTENT.items()})
    loop = {"labels": list(CATEGORY), "head_data": "y.csv", "parent": {k: "intent:fee" for k in CATEGORY}}
    with pytest.raises(TaskError, match="parent tables loop: intent -> category -> intent"):
        chain(category=loop)
    itself = {**INTENT, "fee": "intent:refund"}
    with pytest.raises(TaskError, match="labels of 'category', 'intent': give one"):
        chain(intent={"labels": list(INTENT), "head_data": "x.csv", "parent": itself})
    only_self = {k: "intent:fee" for k in INTENT}
    with pytest.raises(TaskError, match="parent tables loop: intent -> intent"):
        chain(intent={"labels": list(INTENT), "head_data": "x.csv", "parent": only_self})
    with pytest.raises(TaskError, match=r"does not have: \['category:parking'\]"):
        chain(
            intent={
                "labels": list(INTENT),
                "head_data": "x.csv",
                "parent": {**INTENT, "fee": "category:parking"},
            }
        )


def probabilities(rng: random.Random, labels: Iterable[str]) -> dict[str, float]:
    raw = {label: rng.random() ** 4 for label in labels}  # peaked, as heads are
    return {label: r / sum(raw.values()) for label, r in raw.items()}


def test_a_chain_is_chosen_as_the_most_probable_consistent_choice_of_the_whole_tree() -> None:
    task = chain(urgency={"labels": ["urgent", "routine"], "head_data": "z.csv"})
    parents = task.parents
    rng = random.Random(7)
    changed = 0
    for _ in range(300):
        team, category, intent = (probabilities(rng, labels) for labels in (TEAMS, CATEGORY, INTENT))
        urgency = {"urgent": 0.3, "routine": 0.7}
        answers = {
            "intent": Answer(max(intent, key=intent.__getitem__), intent, "h2"),
            "category": Answer(max(category, key=category.__getitem__), category, "h3"),
            "urgency": Answer("routine", urgency, "h4"),
        }
        p = Prediction(max(team, key=team.__getitem__), team, {}, "head", "h1", answers)
        got = consistent(p, parents)
        choice = (got.label, got.answers["category"].label, got.answers["intent"].label)
        assert CATEGORY[choice[1]] == choice[0] and INTENT[choice[2]] == f"category:{choice[1]}"
        every = [
            (t, c, i)
            for t, c, i in itertools.product(TEAMS, CATEGORY, INTENT)
            if CATEGORY[c] == t and INTENT[i] == f"category:{c}"
        ]
        best = max(
            every, key=lambda x: math.log(team[x[0]]) + math.log(category[x[1]]) + math.log(intent[x[2]])
        )
        assert choice == best
        assert got.answers["urgency"] == answers["urgency"] and got.scores == team
        changed += choice != (p.label, answers["category"].label, answers["intent"].label)
    assert 50 < changed < 300  # random heads disagree often, not always


def test_a_tree_under_a_question_without_a_parent_leaves_the_primary_alone() -> None:
    """A category question with no ``parent`` of its own tops its own tree: the intent is chosen with it,
    the primary answer is left as its head gave it; a missing answer leaves what hangs below it alone."""
    parents = {"intent": ("category", {k: v.split(":")[1] for k, v in INTENT.items()})}
    team = {"billing": 0.5, "account": 0.3, "other": 0.2}
    category = {"charges": 0.4, "refunds": 0.1, "security": 0.05, "cards": 0.45}
    intent = {
        "double_charge": 0.35,
        "fee": 0.3,
        "refund": 0.05,
        "lost_card": 0.0,
        "card_arrival": 0.2,
        "card_linking": 0.1,
    }
    answers = {"intent": Answer("double_charge", intent), "category": Answer("cards", category)}
    p = Prediction("billing", team, {}, "head", "h1", answers)
    got = consistent(p, parents)  # charges x double_charge 0.14 beats cards x card_arrival 0.09
    assert (got.label, got.answers["category"].label, got.answers["intent"].label) == (
        "billing",
        "charges",
        "double_charge",
    )
    alone = replace(p, answers={"intent": answers["intent"]})
    assert consistent(alone, parents) is alone

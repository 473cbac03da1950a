"""A taxonomy (``parent`` in a question's table): the primary answer and each such question's answer are
chosen together, never one team with another team's intent; where the heads already agree nothing changes."""

from __future__ import annotations

from dataclasses import replace

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
    parents = {"intent": TEAM}
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
    assert consistent(sure, {"other": TEAM}) is sure  # a question it has no answer to


def test_a_parent_table_must_map_every_label_of_its_question_to_a_task_label() -> None:
    base = {"labels": ["billing", "account", "other"]}
    intent = {"labels": list(TEAM), "head_data": "x.csv"}
    task = Task.from_dict({**base, "questions": {"intent": {**intent, "parent": TEAM}}})
    assert dict(task.questions[0].parent) == TEAM
    bad = [
        ({k: v for k, v in TEAM.items() if k != "refund"}, r"each of its labels once; missing \['refund'\]"),
        ({**TEAM, "parking": "other"}, r"not its labels \['parking'\]"),
        ({**TEAM, "refund": "sales"}, r"labels the task does not have: \['sales'\]"),
        (["other"], "a table of its labels"),
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

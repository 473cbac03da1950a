"""Answers that agree with a taxonomy: a further question whose labels each belong to one of the primary
question's (``parent`` in its ``[questions.NAME]`` table: an intent's team) is answered together with the
primary, so that a ticket is never sent to one team with another team's intent.

Each head decides alone first. Where the answers already agree nothing changes (the pair of two argmaxes
is the most probable pair). Where they disagree, the pair chosen is the most probable consistent one: the
primary label ``t`` and, for each such question, its label of ``t`` that maximise ``p(t) * prod p_q(c_q)``,
every head's calibrated probabilities taken as they are (no weight to tune). Scores are the heads' own;
``confidence`` is the chosen label's probability, so an answer its head doubted still reads as doubtful and
a review threshold still catches it. On Banking77 (docs/head.md, "A taxonomy: answers chosen together"),
the team question gained 4.5 to 9 points and the intent question moved by -0.5 to 0. Plain Python, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from .types import Prediction

_FLOOR = 1e-12  # a probability the heads round to 0 still ranks the pairs it is part of


def consistent(prediction: Prediction, parents: Mapping[str, Mapping[str, str]]) -> Prediction:
    """``prediction`` with its primary label and each answer in ``parents`` (question -> its label ->
    the primary label it belongs to) chosen together; questions it has no answer to are left out."""
    asked = {q: up for q, up in parents.items() if q in prediction.answers}
    if not asked or all(up.get(prediction.answers[q].label) == prediction.label for q, up in asked.items()):
        return prediction
    best: tuple[float, str, dict[str, str]] | None = None
    for top, p in prediction.scores.items():  # the task's order: the first of equal pairs is kept
        score, chosen = math.log(max(p, _FLOOR)), {}
        for q, up in asked.items():
            inside = [(c, pc) for c, pc in prediction.answers[q].scores.items() if up.get(c) == top]
            if not inside:  # no label of q belongs to this one: it cannot be the pair's
                break
            label, pc = max(inside, key=lambda item: item[1])
            score += math.log(max(pc, _FLOOR))
            chosen[q] = label
        else:
            if best is None or score > best[0]:
                best = (score, top, chosen)
    if best is None:
        return prediction
    _, top, chosen = best
    answers = {q: replace(a, label=chosen[q]) if q in chosen else a for q, a in prediction.answers.items()}
    return replace(prediction, label=top, answers=answers)

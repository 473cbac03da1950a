"""Answers that agree with a taxonomy: a further question whose labels each belong to a label of the
question above it (``parent`` in its ``[questions.NAME]`` table: an intent's team, or an intent's
category as ``"category:billing_dispute"`` and the category's team) is answered together with the
questions above it, so that a ticket is never sent to one team with another team's intent, nor filed
under one category with another category's intent.

Each head decides alone first. Where every answer already agrees with the one above it nothing changes
(the argmaxes together are the most probable consistent choice). Where one does not, the choice made is
the most probable consistent one over the whole tree: the primary label and each question's label under
its parent's that maximise ``p(primary) * prod p_q(c_q)``, every head's calibrated probabilities taken as
they are (no weight to tune), found by max-product over the tree (each question's best labels below each
label of the question above it, leaves first). Scores are the heads' own; ``confidence`` is the chosen
label's probability, so an answer its head doubted still reads as doubtful and a review threshold still
catches it. On Banking77 (docs/head.md, "A taxonomy: answers chosen together"), the team question gained
4.5 to 9 points and the intent question moved by -0.5 to 0; with a middle level of 19 categories between
them, the category gained 2.2 to 2.8 ("More levels: chains"). Plain Python, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from .types import Prediction

_FLOOR = 1e-12  # a probability the heads round to 0 still ranks the choices it is part of

# question -> (the question above it, None for the primary; each of its labels -> the label above it)
Taxonomy = Mapping[str, tuple[str | None, Mapping[str, str]]]
_Best = tuple[float, str, dict[str, str]] | None  # log-probability, the label, the labels below it


def consistent(prediction: Prediction, taxonomy: Taxonomy) -> Prediction:
    """``prediction`` with the answers ``taxonomy`` links chosen together, tree by tree: the primary's and
    those below it, and those below a question that has no ``parent`` of its own. A question it has no
    answer to is left out, and so is every question below it (their answers stand). ``taxonomy`` has no
    loops (:class:`.task.Task` refuses them)."""
    asked = [q for q in taxonomy if _answered(q, prediction, taxonomy)]
    if all(taxonomy[q][1].get(_label(prediction, q)) == _label(prediction, taxonomy[q][0]) for q in asked):
        return prediction
    below: dict[str | None, list[str]] = {}
    for q in asked:  # the task's order of questions
        below.setdefault(taxonomy[q][0], []).append(q)
    memo: dict[tuple[str | None, str], tuple[float, dict[str, str]] | None] = {}

    def best(q: str | None, labels: Mapping[str, str] | None, top: str | None) -> _Best:
        """``q``'s label (of those under ``top`` in ``labels``; all of them when ``labels`` is None) with
        the highest log-probability, its own and that of the best labels below it."""
        found: _Best = None
        for c, pc in _scores(prediction, q).items():  # its order: the first of equal choices is kept
            if labels is not None and labels.get(c) != top:
                continue
            rest = under(q, c)
            if rest is not None:
                score = math.log(max(pc, _FLOOR)) + rest[0]
                if found is None or score > found[0]:
                    found = (score, c, rest[1])
        return found

    def under(q: str | None, top: str) -> tuple[float, dict[str, str]] | None:
        """The questions below ``q``'s label ``top``: their best log-probability and labels; None when one
        of them has no label under ``top``."""
        if (q, top) not in memo:
            score, chosen = 0.0, dict[str, str]()
            for child in below.get(q, ()):
                found = best(child, taxonomy[child][1], top)
                if found is None:
                    memo[q, top] = None
                    break
                score += found[0]
                chosen = {**chosen, child: found[1], **found[2]}
            else:
                memo[q, top] = (score, chosen)
        return memo[q, top]

    label, chosen = prediction.label, dict[str, str]()
    for root in [r for r in below if r is None or r not in taxonomy]:  # the trees' tops
        found = best(root, None, None)
        if found is None:  # no consistent choice in this tree: its answers stand
            continue
        if root is None:
            label = found[1]
        else:
            chosen[root] = found[1]
        chosen.update(found[2])
    answers = {q: replace(a, label=chosen[q]) if q in chosen else a for q, a in prediction.answers.items()}
    return replace(prediction, label=label, answers=answers)


def _answered(q: str | None, prediction: Prediction, taxonomy: Taxonomy) -> bool:
    """Whether ``prediction`` answers ``q`` and every question above it."""
    while q is not None:
        if q not in prediction.answers:
            return False
        q = taxonomy[q][0] if q in taxonomy else None
    return True


def _label(prediction: Prediction, q: str | None) -> str:
    return prediction.label if q is None else prediction.answers[q].label


def _scores(prediction: Prediction, q: str | None) -> Mapping[str, float]:
    return prediction.scores if q is None else prediction.answers[q].scores

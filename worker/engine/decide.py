"""The one label decision: (tickets, labels) log-probabilities in, the label each ticket gets and how close
the call was out. The engine, ``verify`` and every ``bench`` mode decide here, so they cannot disagree on
how. With the task's calibration prior the decision is taken on ``logp - prior``; ties go to the first
label."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Decision:
    scores: torch.Tensor  # (tickets, labels): what the decision was taken on (calibrated when a prior is)
    best: list[int]  # the chosen label's index, per ticket
    margins: list[float]  # top-1 minus top-2 score: how close each call was

    def labels(self, names: tuple[str, ...] | list[str]) -> list[str]:
        return [names[i] for i in self.best]


def decide(logp: torch.Tensor, prior: torch.Tensor | None = None) -> Decision:
    scores = logp if prior is None else logp - prior
    top2 = scores.topk(2, dim=-1).values  # a task has at least two labels
    return Decision(scores, scores.argmax(dim=-1).tolist(), (top2[:, 0] - top2[:, 1]).tolist())

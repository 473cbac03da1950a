"""Plain values the engine hands to its callers. No torch, no Redis."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One further question's answer (the task's ``[questions.NAME]``), decided by that question's head."""

    label: str
    scores: dict[str, float]  # label -> probability
    head: str | None = None  # the head's version (published) or id


@dataclass(frozen=True)
class Prediction:
    label: str
    scores: dict[str, float]  # label -> probability (softmax over the labels' log-probabilities)
    # label -> summed token log-probability of its full sequence (with a head: its log-softmax)
    logprobs: dict[str, float]
    method: str = "zero-shot"  # "head" when a trained head decided
    head: str | None = None  # the head's version (published) or id
    answers: dict[str, Answer] = field(default_factory=dict)  # question name -> answer, from the same pass


@dataclass(frozen=True)
class BatchStats:
    """One forward pass."""

    items: int  # tickets in the pass
    rows: int  # rows of the input matrix (several tickets share a row when packed)
    real_tokens: int  # ticket + label tokens actually scored
    padded_tokens: int  # rows x row length: what the pass computed
    seconds: float

    @property
    def padding_overhead(self) -> float:
        return (
            0.0 if self.padded_tokens == 0 else (self.padded_tokens - self.real_tokens) / self.padded_tokens
        )

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("inf")

"""A trained head: a linear classifier over the engine's hidden states, stored as one safetensors file.

The file holds two tensors (``weight``: labels x hidden size, ``bias``) and one metadata entry, a JSON
object with everything needed to refuse a head that would silently misclassify: its labels, the feature
recipe, the hidden size, the model it was trained on (name and weights digest), the digest of the task's
prompt (instructions, examples and chat template as token ids: the features attend to them) and how it
was trained (n, per-class counts, cross-validated accuracy, ticketq version). safetensors, never pickle:
loading a head file runs no code.

A head may also hold a second, nonlinear reading of the same features (:mod:`.mlp`: four more tensors,
``mlp_in``, ``mlp_in_bias``, ``mlp_out``, ``mlp_out_bias``, and its share of the blend, ``mlp_share``).
Such a file says format ``ticketq-head/2``, so a ticketq from before refuses it rather than serving its
linear part alone; a linear head stays ``ticketq-head/1``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from producer.learning import HEAD_META_KEY, head_metadata

from .mlp import Mlp, blend
from .recipe import Recipe

FORMAT = "ticketq-head/1"
FORMAT_MLP = "ticketq-head/2"  # with a nonlinear reading (mlp_* tensors, mlp_share)
# What a head file may hold, so that finite features always give finite scores: a weight or bias of
# 3e38 is finite but overflows the logits, and a temperature of 1e-300 is 0 in float32; either made every
# score NaN and every ticket a dead letter ("unwritable result"). Trained heads stay far inside: weights
# on raw features of about 0.1 to 1e3, the bias of a label without tickets -1e4, temperatures in
# calibration.T_RANGE (0.05 to 20).
MAX_MAGNITUDE = 1e8
TEMPERATURES = (1e-3, 1e3)


class HeadError(ValueError):
    """A head file that cannot be used here; the message is one line, fit for a log or a terminal."""


@dataclass(frozen=True)
class Identity:
    """What a head must match: the model whose hidden states it reads and the prompt they attend to."""

    model: str  # display name (messages only)
    model_digest: str  # the weights' digest: the name alone would accept a fine-tuned copy
    prompt_digest: str
    labels: tuple[str, ...]
    hidden_size: int  # the model's: a head reads one such state per recipe part


def digest(*parts: Any) -> str:
    """Hex SHA-256 of parts written as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class OutOfFold:
    """How the procedure that trained a head predicted its own training tickets out of fold: each ticket's
    fold and its predicted label (an index into the head's labels). Kept in memory by ``train`` for the
    publish gate, which judges the candidate on the same folds by the same procedure and need not run it
    again (:func:`worker.gate.compare_with`)."""

    folds: tuple[int, ...]
    predicted: tuple[int, ...]


@dataclass(eq=False)
class Head:
    labels: tuple[str, ...]
    weight: torch.Tensor  # (labels, features) float32, applies to raw features (hidden size * parts)
    bias: torch.Tensor  # (labels,) float32
    recipe: Recipe
    model: str
    model_digest: str
    prompt_digest: str
    training: dict[str, Any] = field(default_factory=dict)  # n, counts, cv_accuracy, l2, ticketq version
    version: str | None = None  # set when published (a Redis head's version); not part of the file
    # Scores are softmax(logits / temperature): fitted on out-of-fold logits at training time so they are
    # calibrated probabilities. It never changes a decision. Files written before it existed: 1.0.
    temperature: float = 1.0
    # Results whose calibrated confidence is below this go to review; chosen by ``train`` for the task's
    # ``auto_accuracy`` (training["auto_accuracy"], training["expected_coverage"]). None: not chosen.
    review_below: float | None = None
    # set by training when its out-of-fold check refitted the head's whole procedure (labelled tickets
    # with names or unlabelled tickets); not part of the file
    out_of_fold: OutOfFold | None = field(default=None, repr=False)
    # A nonlinear second reading of the features and its weight in the blend (0 < mlp_share < 1), or none
    # (:mod:`.mlp`): the logits are then the blend's log-probabilities.
    mlp: Mlp | None = field(default=None, repr=False)
    mlp_share: float = 0.0

    def __post_init__(self) -> None:
        self.labels = tuple(self.labels)
        if self.weight.ndim != 2 or self.weight.shape[0] != len(self.labels):
            raise HeadError(
                f"head weight of shape {tuple(self.weight.shape)} does not fit {len(self.labels)} labels"
            )
        if tuple(self.bias.shape) != (len(self.labels),):
            raise HeadError(
                f"head bias of shape {tuple(self.bias.shape)} does not fit {len(self.labels)} labels"
            )
        if not (torch.isfinite(self.weight).all() and torch.isfinite(self.bias).all()):
            raise HeadError("head weights are not finite")
        largest = max((float(t.abs().max()) for t in (self.weight, self.bias) if t.numel()), default=0.0)
        if largest > MAX_MAGNITUDE:  # finite, but its logits would overflow float32 (every score NaN)
            raise HeadError(f"head weights reach {largest:.3g}; a head's stay below {MAX_MAGNITUDE:g}")
        self.weight = self.weight.detach().float().contiguous()
        self.bias = self.bias.detach().float().contiguous()
        self._check_mlp()
        self.temperature = float(self.temperature)
        low, high = TEMPERATURES
        if not (math.isfinite(self.temperature) and low <= self.temperature <= high):
            raise HeadError(f"head temperature must lie in [{low:g}, {high:g}], got {self.temperature!r}")
        if self.review_below is not None:
            self.review_below = float(self.review_below)
            if not 0.0 <= self.review_below <= 1.0:
                raise HeadError(f"head review_below must lie in [0, 1], got {self.review_below!r}")

    def _check_mlp(self) -> None:
        self.mlp_share = float(self.mlp_share)
        if self.mlp is None:
            if self.mlp_share != 0.0:
                raise HeadError(f"head mlp_share is {self.mlp_share!r} but it holds no MLP")
            return
        if not 0.0 < self.mlp_share < 1.0:
            raise HeadError(f"head mlp_share must lie strictly between 0 and 1, got {self.mlp_share!r}")
        if self.mlp.features != self.weight.shape[1] or self.mlp.labels != len(self.labels):
            raise HeadError(
                f"head MLP reads {self.mlp.features} features into {self.mlp.labels} labels; the head has "
                f"{self.weight.shape[1]} features and {len(self.labels)} labels"
            )
        largest = max(float(t.abs().max()) for t in self.mlp.tensors().values())
        if largest > MAX_MAGNITUDE:
            raise HeadError(f"head MLP weights reach {largest:.3g}; a head's stay below {MAX_MAGNITUDE:g}")

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[1])

    @property
    def layers(self) -> tuple[int, ...]:
        """The decoder layers whose states this head reads; the pass stops after the deepest."""
        return self.recipe.layers

    @property
    def id(self) -> str:
        """Short digest of what decides labels and scores (weights, labels, recipe, model, prompt, and the
        temperature and review threshold when set: a head from before they existed keeps its id)."""
        h = hashlib.sha256(self.weight.numpy().tobytes())
        h.update(self.bias.numpy().tobytes())
        if self.mlp is not None:
            for name, t in sorted(self.mlp.tensors().items()):
                h.update(name.encode())
                h.update(t.numpy().tobytes())
            h.update(digest(self.mlp_share).encode())
        h.update(digest(self.labels, self.recipe.to_dict(), self.model_digest, self.prompt_digest).encode())
        if self.temperature != 1.0 or self.review_below is not None:
            h.update(digest(self.temperature, self.review_below).encode())
        return h.hexdigest()[:12]

    @property
    def name(self) -> str:
        """What results and logs call this head: its published version, else its id."""
        return self.version or self.id

    def meta(self) -> dict[str, Any]:
        return {
            "format": FORMAT if self.mlp is None else FORMAT_MLP,
            **({} if self.mlp is None else {"mlp_share": self.mlp_share}),
            "labels": list(self.labels),
            "recipe": self.recipe.to_dict(),
            "hidden_size": self.hidden_size,
            "model": self.model,
            "model_digest": self.model_digest,
            "prompt_digest": self.prompt_digest,
            "training": self.training,
            "temperature": self.temperature,
            "review_below": self.review_below,
        }

    def to_bytes(self) -> bytes:
        from safetensors.torch import save

        meta = json.dumps(self.meta(), sort_keys=True, ensure_ascii=False)
        tensors = {"weight": self.weight, "bias": self.bias}
        if self.mlp is not None:
            tensors.update(self.mlp.tensors())
        return save(tensors, metadata={HEAD_META_KEY: meta})

    @classmethod
    def from_bytes(cls, data: bytes, version: str | None = None) -> Head:
        from safetensors.torch import load

        try:
            meta = head_metadata(bytes(data))
        except (ValueError, RecursionError) as exc:
            raise HeadError(f"not a readable ticketq head: {_one_line(exc)}") from None
        try:
            tensors = load(bytes(data))
            if meta.get("format") not in (FORMAT, FORMAT_MLP):
                raise HeadError(
                    f"not a ticketq head (format {meta.get('format')!r}, "
                    f"expected {FORMAT!r} or {FORMAT_MLP!r})"
                )
            nonlinear = meta["format"] == FORMAT_MLP
            recipe = Recipe.from_dict(meta["recipe"])
            head = cls(
                labels=tuple(str(x) for x in meta["labels"]),
                weight=tensors["weight"],
                bias=tensors["bias"],
                recipe=recipe,
                model=str(meta["model"]),
                model_digest=str(meta["model_digest"]),
                prompt_digest=str(meta["prompt_digest"]),
                training=dict(meta.get("training") or {}),
                version=version,
                temperature=float(meta.get("temperature", 1.0)),
                review_below=None if meta.get("review_below") is None else float(meta["review_below"]),
                mlp=_mlp(tensors) if nonlinear else None,
                mlp_share=float(meta["mlp_share"]) if nonlinear else 0.0,
            )
            if head.hidden_size != int(meta["hidden_size"]):
                raise HeadError(
                    f"head says hidden size {meta['hidden_size']} but its weights have {head.hidden_size}"
                )
            _check_training(head.training)
        except HeadError:
            raise
        except Exception as exc:  # a corrupt file fails in many ways; all of them mean "not a head"
            raise HeadError(f"not a readable ticketq head: {type(exc).__name__}: {_one_line(exc)}") from None
        return head

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader never sees half a head."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.to_bytes())
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> Head:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise HeadError(f"cannot read head {path}: {exc.strerror or exc}") from None
        try:
            return cls.from_bytes(data)
        except HeadError as exc:
            raise HeadError(f"{path}: {exc}") from None

    def check(self, identity: Identity) -> None:
        """Raise :class:`HeadError` unless this head was trained for ``identity``."""
        if self.model_digest != identity.model_digest:
            raise HeadError(
                f"head {self.id} was trained on model {self.model} (weights {self.model_digest[:12]}), "
                f"not the loaded {identity.model} (weights {identity.model_digest[:12]}); retrain it"
            )
        if self.hidden_size != self.recipe.width(identity.hidden_size):
            raise HeadError(
                f"head {self.id} reads {self.hidden_size} features; recipe {self.recipe} on this model "
                f"gives {self.recipe.width(identity.hidden_size)} (hidden size {identity.hidden_size})"
            )
        if self.labels != tuple(identity.labels):
            raise HeadError(
                f"head {self.id} has labels {', '.join(self.labels)}; "
                f"the task has {', '.join(identity.labels)}"
            )
        if self.prompt_digest != identity.prompt_digest:
            raise HeadError(
                f"head {self.id} was trained with another prompt (instructions, examples or template "
                "changed); retrain it for this task"
            )

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(n, labels) float32 raw scores for (n, hidden) features (before the temperature); with an MLP,
        the blend's log-probabilities (:func:`.mlp.blend`)."""
        x = features.float().cpu()  # once per batch: bfloat16 features are copied here, not per reading
        linear = torch.nn.functional.linear(x, self.weight, self.bias)
        if self.mlp is None:
            return linear
        return blend(linear, self.mlp.logits(x), self.mlp_share)

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        """(n, labels) calibrated log-probabilities: log_softmax(logits / temperature)."""
        return torch.log_softmax(self.logits(features) / self.temperature, -1)

    def probabilities(self, features: torch.Tensor) -> torch.Tensor:
        """(n, labels) calibrated probabilities: softmax(logits / temperature)."""
        return self.log_probs(features).exp()

    def predict(self, features: torch.Tensor) -> list[str]:
        """The label each row of (n, hidden) features gets (the temperature never changes it)."""
        return [self.labels[i] for i in self.logits(features).argmax(-1).tolist()]

    def summary(self) -> dict[str, Any]:
        """For logs and ``describe()``."""
        t = self.training
        return {
            "id": self.id,
            "version": self.version,
            "labels": len(self.labels),
            "n": t.get("n"),
            "cv_accuracy": t.get("cv_accuracy"),
            "recipe": self.recipe.to_dict(),
            "temperature": self.temperature,
            "review_below": self.review_below,
            **({"mlp_share": self.mlp_share} if self.mlp is not None else {}),
        }


def _mlp(tensors: dict[str, torch.Tensor]) -> Mlp:
    try:
        return Mlp.of(tensors)
    except KeyError as exc:
        raise HeadError(f"not a readable ticketq head: format {FORMAT_MLP} without tensor {exc}") from None
    except ValueError as exc:
        raise HeadError(f"not a readable ticketq head: {exc}") from None


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def _check_training(training: dict[str, Any]) -> None:
    """HeadError unless the training record's fields that ``train`` and the publish gate read are what
    ``train`` writes: a head's metadata is anyone's JSON once it is published to Redis."""
    if "l2" in training and training["l2"] is not None and not _positive(training["l2"]):
        raise HeadError(f"not a readable ticketq head: training l2 is {training['l2']!r:.40}")
    data = training.get("data")
    if data is None:
        return
    if not isinstance(data, dict):
        raise HeadError("not a readable ticketq head: its training data record is not a table")
    corrections = data.get("corrections")
    if corrections is not None and not (
        isinstance(corrections, list) and all(isinstance(c, str) for c in corrections)
    ):
        raise HeadError("not a readable ticketq head: its training corrections are not a list of ids")
    weight = data.get("correction_weight")
    if weight is not None and not _positive(weight):
        raise HeadError(f"not a readable ticketq head: correction_weight is {weight!r:.40}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]

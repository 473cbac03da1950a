"""Which hidden states a head reads: a recipe of one or more parts, each a layer and a pooling.

A head reads one vector per ticket: the concatenation, in the recipe's order, of its parts' features.
A part is the hidden state after ``layer`` decoder layers (the model's last: its final, normalized state)
pooled over the ticket's own tokens (``mean``: their average; ``max``: their elementwise maximum) or taken
at the prompt's last position, the one that predicts the label (``last``). The pass that computes them
stops after the deepest layer any part reads (:mod:`.features`).

``echo`` reads the ticket twice. A causal model's state at a ticket's token has seen only the tokens before
it; a recipe with an ``echo`` part runs the pass over ``ticket + hand-over + "The message again:" +
ticket`` and averages the second reading, where every token has seen the whole ticket (Springer et al.,
2024, "Repetition Improves Language Model Embeddings"). The other parts read the first reading as
before, so their features are unchanged; the pass costs about twice the ticket tokens (docs/head.md).

``rare`` is ``mean`` weighted toward the ticket's rarer tokens: each token counts ``a / (a + p)``, ``p`` its
frequency as Zipf's law estimates it from its place in the vocabulary (byte-pair and SentencePiece
vocabularies list their tokens roughly most frequent first), the smooth inverse frequency of Arora et
al. (2017), "A Simple but Tough-to-Beat Baseline for Sentence Embeddings" (:func:`.features.rarity`):
"the", "my" and "?" count for little, "refund" and "PIN" for nearly one. No table, no data: a function of
the token ids alone.

``chars`` reads no layer: the ticket's character n-grams, hashed into :data:`CHARS_WIDTH` features
(:mod:`.chars`), computed from its text beside the pass. It comes last in a recipe (``"8:mean,12:max,chars"``)
and is stored as ``[0, "chars"]``; a recipe needs at least one part the model computes.

A recipe may also be named for what it is for (:class:`Preset`): ``fast``, ``default`` or ``accurate``,
resolved against the model's depth and the question's labels when a head is trained (:func:`resolve`),
so a task file can ask for the accurate reading of any model without knowing its layers.

Three forms of the same recipe: the object; the text a flag or a task file gives (``"8:mean,12:max"``,
``"10"`` = ``"10:mean"``); the dict a head file stores. A one-part recipe keeps the dict form heads were
written with before recipes had parts (``{"layer": 10, "pool": "mean"}``), so their files load and their
ids, which digest that dict, stay the same; several parts: ``{"parts": [[8, "mean"], [12, "max"]]}``.

No torch here: the task file (read before any model loads) and the flags parse recipes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

MEAN = "mean"
MAX = "max"
LAST = "last"
ECHO = "echo"  # the mean over the ticket's second reading
RARE = "rare"  # the mean weighted toward the ticket's rarer tokens (.features.rarity)
CHARS = "chars"  # the ticket's character n-grams (layer 0: no layer; .chars)
POOLS = (MEAN, MAX, LAST, ECHO, RARE, CHARS)
CHARS_WIDTH = 1024  # features a chars part gives (.chars)
FINE = 10  # labels from which a question's default recipe is the richer one (Recipe.default)


class Part(NamedTuple):
    layer: int  # after this many decoder layers (0 for CHARS, which reads the text)
    pool: str  # MEAN, MAX, LAST, ECHO, RARE or CHARS

    def __str__(self) -> str:
        return CHARS if self.pool == CHARS else f"{self.layer}:{self.pool}"


@dataclass(frozen=True)
class Recipe:
    """The parts a head's features are made of, in order (ValueError, one line, if invalid)."""

    parts: tuple[Part, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.parts, tuple):
            raise ValueError(f"a recipe's parts are a tuple of (layer, pooling), got {self.parts!r}")
        if not self.parts:
            raise ValueError("a recipe needs at least one part (LAYER:POOL)")
        parts = []
        for part in self.parts:
            if not isinstance(part, tuple) or len(part) != 2:
                raise ValueError(f"a recipe part is a layer and a pooling, got {part!r}")
            layer, pool = part
            if pool not in POOLS:
                raise ValueError(f"unknown pooling {pool!r}; use {', '.join(POOLS)}")
            if pool == CHARS:
                if isinstance(layer, bool) or layer != 0:
                    raise ValueError(f"chars reads the text, no layer: stored as [0, 'chars'], got {layer!r}")
            elif isinstance(layer, bool) or not isinstance(layer, int) or layer < 1:
                raise ValueError(f"a feature layer is a whole number of at least 1, got {layer!r}")
            parts.append(Part(layer, pool))
        seen = {p for p in parts if parts.count(p) > 1}
        if seen:
            raise ValueError(f"each part once: {', '.join(sorted(map(str, seen)))} appears more than once")
        if all(p.pool == CHARS for p in parts):
            raise ValueError("a recipe needs a part the model computes (LAYER:POOL); chars adds to them")
        if any(p.pool == CHARS for p in parts[:-1]):
            raise ValueError("chars comes last in a recipe")
        object.__setattr__(self, "parts", tuple(parts))

    @classmethod
    def one(cls, layer: int, pool: str = MEAN) -> Recipe:
        return cls((Part(layer, pool),))

    @classmethod
    def default(cls, n_layers: int, labels: int = 0) -> Recipe:
        """A third of the way up, mean-pooled: layer 10 of SmolLM2-135M's 30 (measured, docs/head.md).
        For a question of :data:`FINE` labels or more, the mean, the ``rare`` mean and the max of two
        layers 4/15 and 2/5 of the way up (8 and 12 of 30), then the ticket's spelling (``chars``): on
        SmolLM2, the layers' mean and max are 3 points more on Banking77's 77 intents from 10 rows per
        intent and 2 on a confusable 10-intent set, at 0.87x the items/s of one layer-10 mean; ``chars``
        1 to 2 points more again (0.7 on the full training split), for no model work (docs/head.md, "A
        ticket's spelling"); ``rare`` 1.4 to 2 more from 10 rows per intent, none on the full split, for a
        second pooling of the same states (docs/head.md, "The ticket's rarer words")."""
        if labels < FINE:
            return cls.one(max(1, round(n_layers / 3)), MEAN)
        low, high = max(1, round(n_layers * 4 / 15)), max(1, round(n_layers * 2 / 5))
        layers = sorted({low, high})
        states = [Part(layer, pool) for pool in (MEAN, RARE, MAX) for layer in layers]
        return cls((*states, Part(0, CHARS)))

    @property
    def layers(self) -> tuple[int, ...]:
        """The distinct layers read, shallowest first; the pass stops after the last."""
        return tuple(sorted({p.layer for p in self.model_parts}))

    @property
    def model_parts(self) -> tuple[Part, ...]:
        """The parts the pass computes, in order (all but ``chars``)."""
        return tuple(p for p in self.parts if p.pool != CHARS)

    @property
    def chars(self) -> bool:
        """Whether the recipe ends with the ticket's character n-grams."""
        return self.parts[-1].pool == CHARS

    @property
    def echo(self) -> bool:
        """Whether a part reads the ticket's second reading: the pass then reads it twice."""
        return any(p.pool == ECHO for p in self.parts)

    def width(self, hidden_size: int) -> int:
        """How many features a ticket gets: one hidden state per part the model computes, then
        :data:`CHARS_WIDTH` for ``chars``."""
        return hidden_size * len(self.model_parts) + (CHARS_WIDTH if self.chars else 0)

    def check(self, n_layers: int) -> None:
        """ValueError unless a model of ``n_layers`` decoder layers has every layer this recipe reads."""
        if self.layers[-1] > n_layers:
            raise ValueError(f"recipe {self} reads layer {self.layers[-1]}; the model has {n_layers}")

    def __str__(self) -> str:
        return ",".join(map(str, self.parts))

    @classmethod
    def parse(cls, text: str) -> Recipe:
        """``"8:mean,12:mean,8:max"`` (a bare layer is mean-pooled: ``"10"`` = ``"10:mean"``; ``chars``
        stands alone)."""
        if not isinstance(text, str):
            raise ValueError(f"a recipe is text like '8:mean,12:max', got {text!r}")
        parts = []
        for item in text.split(","):
            if item.strip() == CHARS:
                parts.append(Part(0, CHARS))
                continue
            layer, sep, pool = item.strip().partition(":")
            layer, pool = layer.strip(), pool.strip() if sep else MEAN
            if pool == CHARS:
                raise ValueError(f"recipe {text!r}: chars reads the text, no layer: write 'chars'")
            if not (layer.isascii() and layer.isdigit()):
                raise ValueError(f"recipe {text!r}: {item.strip()!r} is not LAYER or LAYER:POOL")
            parts.append(Part(int(layer), pool))
        try:
            return cls(tuple(parts))
        except ValueError as exc:
            raise ValueError(f"recipe {text!r}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """What a head file stores (and its id digests): one part in the form files had before parts."""
        if len(self.parts) == 1:
            return {"layer": self.parts[0].layer, "pool": self.parts[0].pool}
        return {"parts": [[p.layer, p.pool] for p in self.parts]}

    @classmethod
    def from_dict(cls, data: Any) -> Recipe:
        """The recipe a head file records (ValueError if malformed)."""
        if isinstance(data, dict) and set(data) == {"parts"} and isinstance(data["parts"], list):
            parts: list[Any] = [tuple(p) if isinstance(p, list) else p for p in data["parts"]]
            return cls(tuple(parts))  # checked there
        if isinstance(data, dict) and "layer" in data and set(data) <= {"layer", "pool"}:
            return cls.one(data["layer"], data.get("pool", MEAN))
        raise ValueError(f"a recipe is {{'layer': L, 'pool': P}} or {{'parts': [[L, P], ...]}}, got {data!r}")


FAST, DEFAULT, ACCURATE = "fast", "default", "accurate"
PRESETS = (FAST, DEFAULT, ACCURATE)


@dataclass(frozen=True)
class Preset:
    """A recipe named for what it is for, resolved against the model and the question (:meth:`resolve`):

    - ``fast``: one layer a third of the way up, mean-pooled (10 of SmolLM2's 30): the default below
      :data:`FINE` labels, the cheapest pass.
    - ``default``: :meth:`Recipe.default` for the question's labels (what no ``recipe`` key gives).
    - ``accurate``: the fine default (the mean, ``rare`` mean and max of layers 4/15 and 2/5 of the way up,
      then ``chars``) plus the second reading of two upper layers, 4/5 and 14/15 of the way up (``24:echo,
      28:echo`` on SmolLM2): on Banking77 from 8 or 10 rows per intent about a point more than the default,
      at about 0.22x its items/s, since the pass reads each ticket twice and goes 28 layers deep instead of
      12 (docs/head.md, "Against the issue's goals").
    """

    name: str

    def __post_init__(self) -> None:
        if self.name not in PRESETS:
            raise ValueError(f"unknown recipe preset {self.name!r}; use {', '.join(PRESETS)}")

    def __str__(self) -> str:
        return self.name

    def resolve(self, n_layers: int, labels: int) -> Recipe:
        """The recipe this preset names for a model of ``n_layers`` and a question of ``labels`` labels."""
        if self.name == FAST:
            return Recipe.default(n_layers)
        if self.name == DEFAULT:
            return Recipe.default(n_layers, labels)
        fine = Recipe.default(n_layers, FINE)
        upper = sorted({max(1, round(n_layers * 4 / 5)), max(1, round(n_layers * 14 / 15))})
        return Recipe((*fine.model_parts, *(Part(layer, ECHO) for layer in upper), Part(0, CHARS)))


def parse_spec(text: str) -> Recipe | Preset:
    """A ``recipe`` key or ``--recipe`` flag: a preset's name (``"accurate"``) or a recipe's parts
    (:meth:`Recipe.parse`)."""
    if isinstance(text, str):
        word = text.strip()
        if word in PRESETS:
            return Preset(word)
        if word.isalpha() and word != CHARS:  # a misspelt preset, not a layer
            raise ValueError(f"unknown recipe {word!r}: a preset ({', '.join(PRESETS)}) or LAYER:POOL parts")
    return Recipe.parse(text)


def resolve(spec: Recipe | Preset | None, n_layers: int, labels: int) -> Recipe:
    """The recipe ``spec`` gives a model of ``n_layers`` for a question of ``labels`` labels: a recipe as
    it is, a preset resolved, nothing the default (:meth:`Recipe.default`)."""
    if isinstance(spec, Recipe):
        return spec
    return (spec or Preset(DEFAULT)).resolve(n_layers, labels)

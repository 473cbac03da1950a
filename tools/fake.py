"""A deterministic keyword classifier: a test double for the engine. Not part of the runtime package.

A real worker service runs it with ``python -m tools.fakeworker --model fake:billing,technical,account``
(optionally ``?delay_ms=N`` to make each batch slow, so tests can kill a worker mid-batch, and
``&load_ms=N`` to make it load slowly, so they can stop one while it loads). Otherwise it loads in
microseconds and needs no torch, which keeps the end-to-end tests about the queue rather than the model.
A label wins when the text mentions it (or a word starting with its first five letters); ties and no match
go to the first label.

Test hooks, recognised in the ticket text: ``__raise__`` makes ``classify`` raise (engine failure
isolation); ``__exit__`` ends the process at once with status 70 (a poison ticket that kills workers);
``__hang__`` sleeps for an hour (a hung forward pass, for the watchdog).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs

from producer.exitcodes import Exit
from worker.engine.options import EngineOptions
from worker.engine.types import BatchStats, Prediction

PREFIX = "fake:"
_BATCH = EngineOptions().batch_size  # passes are cut as the engine would cut them


class FakeEngineError(RuntimeError):
    pass


class KeywordClassifier:
    def __init__(self, labels: Sequence[str], *, batch_size: int = _BATCH, delay_ms: float = 0.0) -> None:
        if not labels or len(set(labels)) != len(labels):
            raise ValueError("fake model needs distinct labels, e.g. fake:billing,technical")
        self.labels = list(labels)
        self.batch_size = batch_size
        self.delay_s = delay_ms / 1000
        self.name = "fake:" + ",".join(self.labels)
        self._stems = [re.compile(rf"\b{re.escape(lab[:5].lower())}", re.I) for lab in self.labels]

    @classmethod
    def from_spec(cls, spec: str, *, batch_size: int = _BATCH) -> KeywordClassifier:
        """``fake:a,b,c?delay_ms=20&load_ms=0`` -> a classifier over labels a, b, c (made in load_ms)."""
        body, _, query = spec.removeprefix(PREFIX).partition("?")
        opts = parse_qs(query)
        delay = float(opts.get("delay_ms", ["0"])[0])
        time.sleep(float(opts.get("load_ms", ["0"])[0]) / 1000)  # a slow model load, to stop a worker in
        return cls(
            [lab.strip() for lab in body.split(",") if lab.strip()], batch_size=batch_size, delay_ms=delay
        )

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "dtype": "none", "device": "cpu", "labels": self.labels}

    def classify(
        self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
    ) -> tuple[list[Prediction], list[BatchStats]]:
        if any("__exit__" in t for t in texts):
            os._exit(Exit.INTERNAL)
        if any("__hang__" in t for t in texts):
            time.sleep(3600)
        if any("__raise__" in t for t in texts):
            raise FakeEngineError("fake engine refused a ticket containing __raise__")
        predictions: list[Prediction] = []
        stats: list[BatchStats] = []
        for start in range(0, len(texts), self.batch_size):
            began = time.perf_counter()
            chunk = texts[start : start + self.batch_size]
            if self.delay_s:
                time.sleep(self.delay_s)
            predictions += [self._one(t) for t in chunk]
            lengths = [len(t.split()) + 1 for t in chunk]
            stats.append(
                BatchStats(
                    items=len(chunk),
                    rows=len(chunk),
                    real_tokens=sum(lengths),
                    padded_tokens=max(lengths) * len(chunk),
                    seconds=time.perf_counter() - began,
                )
            )
            if on_pass is not None:
                on_pass(stats[-1])
        return predictions, stats

    def _one(self, text: str) -> Prediction:
        hits = [float(len(stem.findall(text))) for stem in self._stems]
        best = max(range(len(hits)), key=lambda i: (hits[i], -i))
        exps = [math.exp(h) for h in hits]
        total = sum(exps)
        scores = {lab: e / total for lab, e in zip(self.labels, exps, strict=True)}
        logprobs = {lab: math.log(p) for lab, p in scores.items()}
        return Prediction(label=self.labels[best], scores=scores, logprobs=logprobs)

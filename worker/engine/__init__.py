"""The classification engine: pure compute over a causal LM. Never imports Redis.

``Engine`` is imported lazily so that light users of :mod:`worker.engine.types` and
:mod:`worker.engine.options` (the service, the settings, test doubles) do not pay for importing torch
and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .options import EngineOptions
from .types import BatchStats, Prediction

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["BatchStats", "Engine", "EngineOptions", "Prediction"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from . import engine

        return getattr(engine, name)
    raise AttributeError(name)

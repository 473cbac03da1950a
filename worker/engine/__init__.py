"""The classification engine: pure compute over a causal LM. Never imports Redis.

``Engine`` is imported lazily so that light users of :mod:`worker.engine.types` (the service, the
fake classifier) do not pay for importing torch and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .types import BatchStats, Prediction

if TYPE_CHECKING:
    from .engine import Engine, EngineConfig

__all__ = ["BatchStats", "Engine", "EngineConfig", "Prediction"]


def __getattr__(name: str) -> Any:
    if name in ("Engine", "EngineConfig"):
        from . import engine

        return getattr(engine, name)
    raise AttributeError(name)

"""The classification engine: pure compute over a causal LM. Never imports Redis."""

from .engine import Engine, EngineConfig
from .types import BatchStats, Prediction

__all__ = ["BatchStats", "Engine", "EngineConfig", "Prediction"]

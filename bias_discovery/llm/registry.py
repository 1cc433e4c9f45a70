"""Map a `ModelConfig` to an engine, importing the backend only when it is asked for (the\ntable of providers is `providers.PROVIDERS`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError
from .base import Engine
from .config import ModelConfig
from .providers import PROVIDERS

__all__ = ["PROVIDERS", "engine_class", "make_engine"]


def engine_class(provider: str) -> Callable[[ModelConfig], Engine]:
    """The engine class of `provider`, imported now (backends stay unimported until used)."""
    if provider not in PROVIDERS:
        raise ConfigError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    module, _, name = PROVIDERS[provider].partition(":")
    engine_cls: Callable[[ModelConfig], Engine] = getattr(importlib.import_module(f".{module}", __package__), name)
    return engine_cls


def make_engine(config: ModelConfig | str, cache_path: Path | str | None = None) -> Engine:
    """Build the engine for `config` (a ModelConfig or a `provider/model` spec).

    With `cache_path`, the engine is wrapped in the SQLite call cache at that path.
    """
    if isinstance(config, str):
        config = ModelConfig.from_spec(config)
    engine = engine_class(config.provider)(config)
    if cache_path is not None:
        from .cache import CachedEngine

        engine = CachedEngine(engine, cache_path)
    return engine

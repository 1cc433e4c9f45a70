"""What the API functions share: how they warn, the call cache they use, and how they read
the settings and models they are given (a typed object, or the dict / spec that makes one)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from ..data.loaders import bad_rows_for, load_pairs, skipped_rows_message
from ..data.pairs import PreferencePair
from ..errors import BiasDiscoveryWarning, DataError
from ..llm.config import ModelConfig

__all__ = [
    "WarningHandler",
    "cache_path_of",
    "default_cache_path",
    "load_data",
    "model_config_of",
    "python_warning",
    "settings_of",
    "spec_list",
]

WarningHandler = Callable[[str], None]
"""Where a function's warnings go (bad rows skipped, a damaged file rewritten ...): one line each."""

_Settings = TypeVar("_Settings", bound=BaseModel)


def python_warning(message: str) -> None:
    """The default `WarningHandler`: a Python warning (`BiasDiscoveryWarning`), shown once per
    place in a notebook; the CLI prints the same text as ``warning: ...``."""
    warnings.warn(message, BiasDiscoveryWarning, stacklevel=3)


def default_cache_path() -> Path:
    """The shared call cache of one-off jobs (`judge`, `audit`); runs keep their own."""
    from ..smollm2_hf import default_cache_dir  # the one place that names the cache root

    return default_cache_dir() / "calls.sqlite"


def cache_path_of(cache: str | Path | bool) -> Path | None:
    """`cache` as the API takes it: True, the shared cache; False, none; or a SQLite file."""
    if cache is True:
        return default_cache_path()
    if cache is False:
        return None
    return Path(cache)


def settings_of(value: _Settings | Mapping[str, Any] | None, model: type[_Settings]) -> _Settings:
    """`value` as `model`: the object itself, a dict of its fields, or None for the defaults.
    A field that does not validate raises pydantic's ValidationError naming it."""
    if value is None:
        return model()
    if isinstance(value, model):
        return value
    return model.model_validate(value)


def model_config_of(
    model: str | ModelConfig, base_url: str | None = None, timeout_s: float | None = None
) -> ModelConfig:
    """A model as the API takes it: a spec (``hf/smollm2``, ``openai/NAME``) or a
    ModelConfig; `base_url` sets (or replaces) the server of either, `timeout_s` its request
    deadline (None: unchanged)."""
    if isinstance(model, ModelConfig):
        config = ModelConfig.model_validate({**model.model_dump(), "base_url": base_url}) if base_url else model
    else:
        config = ModelConfig.from_spec(model, **({"base_url": base_url} if base_url else {}))
    return config.with_timeout(timeout_s)


def spec_list(value: str | Path | Sequence[str | Path]) -> str:
    """A list of names as the CLI spells it, comma-separated (``position,length,RUN_DIR``)."""
    if isinstance(value, (str, Path)):
        return str(value)
    return ",".join(str(item) for item in value)


def load_data(
    data: str | Path, *, data_dir: str | Path | None, limit: int | None, skip_bad_rows: bool, warn: WarningHandler
) -> tuple[list[PreferencePair], list[str]]:
    """The pairs of `data` and the bad rows skipped (`skip_bad_rows`: named in a warning;
    otherwise the first bad row is a DataError naming it). No pairs at all is a DataError."""
    bad_rows = bad_rows_for(data, skip_bad_rows)
    pairs = load_pairs(data, data_dir=data_dir, limit=limit, bad_rows=bad_rows)
    if bad_rows:
        warn(skipped_rows_message(bad_rows, data))
    if not pairs:
        raise DataError(f"data {str(data)!r} has no pairs")
    return pairs, bad_rows or []

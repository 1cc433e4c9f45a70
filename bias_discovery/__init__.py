"""bias-discovery: automated discovery of the unknown biases of an LLM used as a judge.

The Python API (`bias_discovery.api`) is importable from here:

    from bias_discovery import discover, judge, audit, audit_log, matrix, replicate, load_run

Importing this package stays light: the API is imported on first use of one of its names,
and torch, vllm, llama_cpp and sentence-transformers only by the code paths that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .api import Run, audit, audit_log, discover, judge, load_run, matrix, replicate

__all__ = ["Run", "__version__", "audit", "audit_log", "discover", "judge", "load_run", "matrix", "replicate"]

API_NAMES = frozenset(__all__) - {"__version__"}
"""The API names this package hands out (`bias_discovery.api` has the result types too)."""


def __getattr__(name: str) -> Any:
    if name in API_NAMES:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API_NAMES])

"""User-facing errors: each one says what went wrong and where (file, line, field).

The CLI turns any `BiasDiscoveryError` into a one-paragraph message and a non-zero exit,
without a traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json


class BiasDiscoveryError(Exception):
    """Base class for errors caused by the user's input or environment, not by a bug."""


class DataError(BiasDiscoveryError):
    """A data file or data-set reference is malformed, missing or unreadable."""


class ConfigError(BiasDiscoveryError):
    """A configuration value or model spec is invalid."""


class EngineError(BiasDiscoveryError):
    """A model engine failed (server down, model file missing, bad response)."""


class LibraryError(BiasDiscoveryError):
    """A bias library file does not parse or breaks the schema."""


class BiasDiscoveryWarning(UserWarning):
    """Something was wrong and is said, not fatal (bad rows skipped, a damaged file rewritten):
    what the Python API warns with; the CLI prints the same text as `warning: ...`."""


def json_problem(exc: json.JSONDecodeError, *, line: bool = True) -> str:
    """A JSON decode error and where it is: "Expecting value at line 2, column 7" (the column
    only with `line=False`, for a message that names the line already). Some of json's
    messages end in "at" ("Unterminated string starting at"): that one is not repeated."""
    message = exc.msg.removesuffix(" at")
    return f"{message} at " + (f"line {exc.lineno}, column {exc.colno}" if line else f"column {exc.colno}")


class OutputError(BiasDiscoveryError):
    """An output location (`--out`, a run directory) cannot be written."""


class ExportError(BiasDiscoveryError):
    """An export cannot be made as asked (no biases, unknown bias, bad output directory...);
    also what a replication or an audit of a run raises when its bias selection or output
    directory is refused (they share the exports' selection and staging)."""

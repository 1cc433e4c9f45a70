"""The base of an operation's options (`JudgeOptions`, `AuditOptions`, `ReplicationOptions`,
`MatrixOptions`): the knobs of one invocation, stated once as typed fields. The command line
builds them from its flags, the Python API takes them and keyword overrides of their fields,
and the operation reads them; a value that does not validate is an error naming its field.

The fields several operations share are stated once, on the bases below (`DataOptions`,
`OutputOptions`, `OverlapOptions`, `CallOptions`), and inherited."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CallOptions", "DataOptions", "OperationOptions", "OutputOptions", "OverlapOptions"]

_Options = TypeVar("_Options", bound="OperationOptions")


class OperationOptions(BaseModel):
    """Options of one operation: unknown names are refused, each field says what it does."""

    # The fields' docstrings are their descriptions: the command line's help reads them.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def with_overrides(cls: type[_Options], options: _Options | None, overrides: Mapping[str, Any]) -> _Options:
        """`options` (or the defaults) with the fields named in `overrides` replaced, validated
        again: what a Python API call's keyword arguments do to the options it was given."""
        base = options.model_dump(exclude_unset=True) if options is not None else {}
        return cls.model_validate({**base, **overrides})


class DataOptions(OperationOptions):
    """The options of an operation that reads pairwise data."""

    data_dir: Path | None = None
    """Local copy of the named data sets (unset: the run's or the config's, else
    $BIAS_DISCOVERY_DATA_DIR, else the hub)."""
    limit: int | None = Field(default=None, ge=1)
    """Use only this many pairs (unset: all): the first N of the data, or a seeded sample where
    the operation samples (a replication, a matrix)."""
    skip_bad_rows: bool = False
    """Skip data rows that cannot be used (malformed, a missing field, identical responses, a
    repeated id), count them and say so, instead of stopping at the first."""


class OutputOptions(OperationOptions):
    """The options of an operation that writes a directory, whole, at its end."""

    out: Path | None = None
    """The output directory (None: the operation's default; see it)."""
    overwrite: bool = False
    """Replace a non-empty `out` directory."""


class OverlapOptions(OperationOptions):
    """The options of an operation that measures a run's biases on data of its own choosing."""

    allow_overlap: bool = False
    """Go on when the data shares pairs (same id or content) with the run's target pairs, on
    which its biases were found; the overlap is recorded either way."""


DEFAULT_TIMEOUT_S = 300.0
"""A model request's deadline when neither the model config nor the operation sets one
(`ModelConfig.timeout_s`'s default; the CLI's `--timeout` help names it)."""


class CallOptions(OperationOptions):
    """The options of an operation that calls models."""

    timeout_s: float | None = Field(default=None, gt=0.0)
    """Each model request's deadline, retries and backoff included (unset: the model config's)."""

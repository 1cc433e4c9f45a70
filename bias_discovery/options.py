"""The base of an operation's options (`JudgeOptions`, `AuditOptions`, `ReplicationOptions`,
`MatrixOptions`): the knobs of one invocation, stated once as typed fields. The command line
builds them from its flags, the Python API takes them and keyword overrides of their fields,
and the operation reads them; a value that does not validate is an error naming its field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["OperationOptions"]

_Options = TypeVar("_Options", bound="OperationOptions")


class OperationOptions(BaseModel):
    """Options of one operation: unknown names are refused, each field says what it does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def with_overrides(cls: type[_Options], options: _Options | None, overrides: Mapping[str, Any]) -> _Options:
        """`options` (or the defaults) with the fields named in `overrides` replaced, validated
        again: what a Python API call's keyword arguments do to the options it was given."""
        base = options.model_dump(exclude_unset=True) if options is not None else {}
        return cls.model_validate({**base, **overrides})

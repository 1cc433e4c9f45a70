"""Typed files of a run: one JSON document or one JSONL file, read and written as pydantic models.

Writes are atomic (see `io.py`); strict reads turn a malformed line or a schema violation into
a `DataError` that names the file, the line and the field, so a damaged run directory fails
clearly instead of with a traceback. Lenient reads (the report and the viewer, which may look
at a run while it is being written) skip what does not parse.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..errors import DataError, json_problem
from ..io import atomic_write_json, atomic_write_jsonl, iter_jsonl, scan_jsonl

M = TypeVar("M", bound=BaseModel)


def _where(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(root)"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def _load_json(path: Path) -> Any:
    """The JSON document in `path`; DataError naming the file (and line, column) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON: {json_problem(exc)}") from None


class _Artifact(Generic[M]):
    """A file of a run holding `model` records."""

    def __init__(self, path: Path, model: type[M]) -> None:
        self.path = path
        self.model = model

    def exists(self) -> bool:
        return self.path.is_file()


class JsonlArtifact(_Artifact[M]):
    """A JSONL file with one `model` per line (perturbed.jsonl, judgments.jsonl ...)."""

    def write(self, rows: Iterable[M]) -> None:
        atomic_write_jsonl(self.path, rows)

    def read(self) -> list[M]:
        """Every line as a `model`; DataError naming the file, line and field otherwise."""
        rows = []
        for line, obj in iter_jsonl(self.path):
            try:
                rows.append(self.model.model_validate(obj))
            except ValidationError as exc:
                raise DataError(f"{self.path}:{line}: not a valid {self.model.__name__}: {_where(exc)}") from None
        return rows

    def read_raw_lenient(self, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """The lines that parse as JSON objects, as plain dicts; [] when the file is absent.
        The others are left out, and named (file and line) in `problems` when a list is given."""
        if not self.exists():
            return []
        rows = []
        for _, row, problem in scan_jsonl(self.path):
            if row is not None:
                rows.append(row)
            elif problems is not None and problem is not None:
                problems.append(problem)
        return rows

    def read_lenient(self, problems: list[str] | None = None) -> list[M]:
        """The lines that are valid `model`s; [] when the file is absent. The others are left
        out, and named (file, line and field) in `problems` when a list is given: what the
        views read, so that one damaged line does not hide the rest."""
        if not self.exists():
            return []
        rows = []
        for line, obj, problem in scan_jsonl(self.path):
            if obj is None:
                if problems is not None and problem is not None:
                    problems.append(problem)
                continue
            try:
                rows.append(self.model.model_validate(obj))
            except ValidationError as exc:
                if problems is not None:
                    problems.append(f"{self.path}:{line}: not a valid {self.model.__name__}: {_where(exc)}")
        return rows

    def count(self) -> int | None:
        """Non-blank lines, or None when the file is absent (cheap: no parsing)."""
        if not self.exists():
            return None
        with self.path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())


class JsonArtifact(_Artifact[M]):
    """A JSON file holding one `model` (merge_stats.json, validation.json, run.json ...)."""

    def write(self, value: M) -> None:
        atomic_write_json(self.path, value)

    def read(self) -> M:
        """The file as a `model`; DataError naming the file and the field otherwise."""
        data = _load_json(self.path)
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            raise DataError(f"{self.path}: not a valid {self.model.__name__}: {_where(exc)}") from None

    def read_if_exists(self) -> M | None:
        return self.read() if self.exists() else None


class JsonListArtifact(_Artifact[M]):
    """A JSON list of `model` (candidates.json: a list is easier for people to read than JSONL)."""

    def write(self, rows: Iterable[M]) -> None:
        atomic_write_json(self.path, [row.model_dump(mode="json") for row in rows])

    def read(self) -> list[M]:
        data = _load_json(self.path)
        if not isinstance(data, list):
            raise DataError(f"{self.path}: expected a JSON list, got {type(data).__name__}")
        try:
            return list(TypeAdapter(list[self.model]).validate_python(data))  # type: ignore[name-defined]
        except ValidationError as exc:
            raise DataError(f"{self.path}: not a valid list of {self.model.__name__}: {_where(exc)}") from None

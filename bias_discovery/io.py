"""File helpers shared by every module: atomic writes and JSONL reading with line numbers.

Atomic means: write to a temporary file in the same directory, fsync, then rename over the
target. A reader (or a killed run) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from pydantic import BaseModel

from .errors import DataError, json_problem


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write `text` to `path` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj


def atomic_write_json(path: Path | str, obj: Any, indent: int | None = 2) -> None:
    """Write one JSON document atomically. Pydantic models are dumped in JSON mode."""
    text = json.dumps(_to_jsonable(obj), ensure_ascii=False, indent=indent)
    atomic_write_text(path, text + "\n")


def atomic_write_jsonl(path: Path | str, rows: Iterable[Any]) -> None:
    """Write a JSONL file atomically, one JSON object per line."""
    lines = [json.dumps(_to_jsonable(r), ensure_ascii=False) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def iter_jsonl(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line_number, object) for each non-blank line; a bad line raises DataError naming it."""
    path = Path(path)
    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    with handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{line_number}: malformed JSON ({json_problem(exc, line=False)})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{line_number}: expected a JSON object, got {type(obj).__name__}")
            yield line_number, obj


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """Read a whole JSONL file (see `iter_jsonl` for the errors)."""
    return [obj for _, obj in iter_jsonl(path)]

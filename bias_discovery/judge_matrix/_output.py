"""The matrix directory: its call cache, its settings, and its outputs, written atomically.

``DIR/calls.sqlite`` keeps every model call of every invocation (what makes a rerun free and a
judge added later cheap); ``DIR/matrix.yaml`` the resolved settings of the latest invocation.
The outputs (matrix.json, matrix.csv, matrix.html, rewrites.jsonl, judgments.jsonl) are
written into a staging folder inside DIR and renamed into place, matrix.json last: a reader
sees the previous set or the new one, file by file, never half a file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from ..io import atomic_write_json, atomic_write_jsonl, atomic_write_text, staged_files
from ..stages.records import PerturbedPair
from ._config import MatrixConfig
from ._page import render_matrix
from ._records import CSV_COLUMNS, MatrixJudgment, MatrixResult, csv_rows

__all__ = ["CACHE_FILE", "CONFIG_FILE", "OUTPUT_FILES", "prepare_matrix_dir", "read_matrix", "write_matrix"]

CACHE_FILE = "calls.sqlite"
CONFIG_FILE = "matrix.yaml"
OUTPUT_FILES = ("rewrites.jsonl", "judgments.jsonl", "matrix.csv", "matrix.html", "matrix.json")
"""In the order they are renamed into place (matrix.json last)."""


def prepare_matrix_dir(out: Path, config: MatrixConfig) -> Path:
    """Make `out` a matrix directory (a new or empty folder, or one a matrix wrote before),
    record `config` in it, and return the path of its call cache. A folder holding anything
    else is refused: the matrix never writes into a folder it did not make."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"`out` {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / CACHE_FILE).exists() and not (out / CONFIG_FILE).exists():
        raise ConfigError(
            f"`out` {out} is not empty and is not a matrix directory (no {CACHE_FILE} or {CONFIG_FILE}); "
            "pick a new or empty directory, or the directory of an earlier matrix to continue it"
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG_FILE, config.to_yaml())
    return out / CACHE_FILE


def _csv_text(result: MatrixResult) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(result):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


def write_matrix(
    out: Path, result: MatrixResult, rewrites: Sequence[PerturbedPair], judgments: Sequence[MatrixJudgment]
) -> None:
    """Write the outputs into a staging folder inside `out`, then rename each into place."""
    with staged_files(out, OUTPUT_FILES) as stage:
        atomic_write_jsonl(stage / "rewrites.jsonl", rewrites)
        atomic_write_jsonl(stage / "judgments.jsonl", judgments)
        atomic_write_text(stage / "matrix.csv", _csv_text(result))
        atomic_write_text(stage / "matrix.html", render_matrix(result))
        atomic_write_json(stage / "matrix.json", result)


def read_matrix(directory: Path | str) -> MatrixResult:
    """A matrix directory's matrix.json (a ConfigError names a missing or damaged file)."""
    from pydantic import ValidationError

    path = Path(directory) / "matrix.json"
    try:
        return MatrixResult.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (run `bias-discovery matrix CONFIG --out {directory}` first)") from None
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: not a matrix.json ({exc.error_count()} problems, first: {exc.errors()[0]['msg']})"
        ) from None

"""`matrix(config, out=DIR)`: every bias of a library against every judge on the same items
(what `bias-discovery matrix` runs; the work is `judge_matrix.run_matrix`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..judge_matrix import MatrixConfig, MatrixResult, run_matrix
from ..judge_matrix.config import matrix_settings
from ..llm.base import Engine
from ..progress import ProgressFactory
from .common import spec_list
from .runs import Run

__all__ = ["matrix"]


def matrix(
    config: MatrixConfig | str | Path | Mapping[str, Any] | None = None,
    *,
    out: str | Path,
    judges: str | Sequence[str] | None = None,
    library: str | Path | Run | None = None,
    biases: str | Sequence[str] | None = None,
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    teacher: str | None = None,
    allow_overlap: bool = False,
    skip_bad_rows: bool = False,
    overrides: Sequence[str] = (),
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
) -> MatrixResult:
    """Validate every bias of `library` against every judge of `judges` on the same perturbed
    and placebo items of `data`, into the matrix directory `out` (matrix.json, matrix.csv,
    matrix.html and its call cache: running it again continues after a kill, and a judge added
    later pays only its own calls).

    `config`: a MatrixConfig, a YAML file (``experiments/matrix-cpu.yaml``) or a dict of its
    settings; the other arguments replace its parts as the command's flags do (`judges`: model
    specs or per-judge YAML files; `library`: ``seeds``, a seed library, a run or its directory,
    a library file; `biases`: ids or names). `engines` replaces models by role (``teacher``,
    ``checker``, ``judge:NAME``; tests).
    """
    if isinstance(config, MatrixConfig):  # what was set, validated again under the flags (a full
        # dump would name loop-only settings, such as validate.when, that a matrix refuses)
        config = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
    settings = matrix_settings(
        config,
        overrides=list(overrides),
        judges=spec_list(judges) if judges is not None else None,
        library=str(library.root if isinstance(library, Run) else library) if library is not None else None,
        biases=spec_list(biases) if biases is not None else None,
        data=str(data) if data is not None else None,
        data_dir=Path(data_dir) if data_dir is not None else None,
        limit=limit,
        teacher=teacher,
        allow_overlap=allow_overlap or None,
        skip_bad_rows=skip_bad_rows or None,
    )
    return run_matrix(settings, Path(out), progress=progress, engines=engines)

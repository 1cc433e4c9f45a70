"""`matrix(config, out=DIR)`: every bias of a library against every judge on the same items
(what `bias-discovery matrix` runs; the work is `judge_matrix.run_matrix`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..judge_matrix import MatrixConfig, MatrixOptions, MatrixResult, matrix_settings, run_matrix
from ..llm.base import Engine
from ..progress import ProgressFactory
from ._runs import Run

__all__ = ["MatrixOptions", "matrix"]


def matrix(
    config: MatrixConfig | str | Path | Mapping[str, Any] | None = None,
    options: MatrixOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    **overrides: Any,
) -> MatrixResult:
    """Validate every bias of the library against every judge on the same perturbed and
    placebo items of the test data, into the matrix directory `out` (matrix.json, matrix.csv,
    matrix.html and its call cache: running it again continues after a kill, and a judge added
    later pays only its own calls).

    `config`: a MatrixConfig, a YAML file (``experiments/matrix-cpu.yaml``) or a dict of its
    settings; `options` (`MatrixOptions`) and keyword `overrides` of its fields replace its parts
    as the command's flags do (``matrix(CONFIG, out=DIR, judges=["hf/smollm2"])``;
    `library` may be a `Run`). `engines` replaces models by role (``teacher``, ``checker``,
    ``judge:NAME``; tests).
    """
    if isinstance(overrides.get("library"), Run):
        overrides = {**overrides, "library": str(overrides["library"].root)}
    opts = MatrixOptions.with_overrides(options, overrides)
    if isinstance(config, MatrixConfig):  # what was set, validated again under the options (a full
        # dump would name loop-only settings, such as validate.when, that a matrix refuses)
        config = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return run_matrix(matrix_settings(config, opts), opts.out, progress=progress, engines=engines)

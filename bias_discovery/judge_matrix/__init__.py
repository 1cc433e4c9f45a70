"""`bias-discovery matrix`: several judges x a library of biases, on the same items.

Entry point: `run_matrix(config, out_dir) -> MatrixResult` (settings: `MatrixConfig`, from a
YAML file with `load_matrix_config`); `read_matrix(DIR)` reads a written matrix.json back.
"""

from ._config import (
    JURY,
    MatrixConfig,
    MatrixData,
    MatrixJudge,
    MatrixOptions,
    judge_from_spec,
    load_matrix_config,
    matrix_settings,
)
from ._output import read_matrix
from ._records import JudgeComparison, JudgeRecord, MatrixCalls, MatrixCell, MatrixResult, RewriteSummary
from ._run import judge_role, run_matrix

__all__ = [
    "JURY",
    "JudgeComparison",
    "JudgeRecord",
    "MatrixCalls",
    "MatrixCell",
    "MatrixConfig",
    "MatrixData",
    "MatrixJudge",
    "MatrixOptions",
    "MatrixResult",
    "RewriteSummary",
    "judge_from_spec",
    "judge_role",
    "load_matrix_config",
    "matrix_settings",
    "read_matrix",
    "run_matrix",
]

"""What the results look like as text, shared by the command line and the pages: an audit's
measure rows (`ROWS`, `metric_rows`, `rows_kind`, `EXCLUDED_MEANING`), its judge-level lines
(`judge_measure_lines`: agreement, calibration, self-preference), a calibration in one line
(`calibration_line`), a Pro comparison as a table (`compare_table`, `print_compare`), a run's summary
(`run_summary`, `rewrite_sentence`), one bias's evidence (`BiasDetail` and its parts) and the
statistics those carry (`PairedComparison`, `Calibration`).

These are the view functions of the operations, handed out here unchanged, so that a
notebook prints a result as the command line does."""

from __future__ import annotations

from ..auditing.display import EXCLUDED_MEANING, ROWS, calibration_line, judge_measure_lines, metric_rows, rows_kind
from ..export.compare import compare_table, print_compare
from ..report.evidence import (
    BiasDetail,
    DiffSegment,
    JudgedItem,
    MergedCandidate,
    ProvenanceCase,
    ValidationExample,
)
from ..report.summary import RewriteQuality, RunSummary, rewrite_sentence, run_summary
from ..stats import Calibration, PairedComparison

__all__ = [
    "EXCLUDED_MEANING",
    "ROWS",
    "BiasDetail",
    "Calibration",
    "DiffSegment",
    "JudgedItem",
    "MergedCandidate",
    "PairedComparison",
    "ProvenanceCase",
    "RewriteQuality",
    "RunSummary",
    "ValidationExample",
    "calibration_line",
    "compare_table",
    "judge_measure_lines",
    "metric_rows",
    "print_compare",
    "rewrite_sentence",
    "rows_kind",
    "run_summary",
]

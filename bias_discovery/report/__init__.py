"""Browse a run: library tables and diffs (`library show`/`diff`), the HTML report
(`report`), and the live viewer (`view`, in `viewer.py`).

Importing this package is light: matplotlib and jinja2 load on first render.
"""

from ..run.library_ref import LibraryRef, require_run_like, resolve_library
from .data import (
    RunData,
    bias_row,
    collect_run,
    diff_refs,
    diff_to_json,
    library_json,
    library_rows,
    rejected_candidates,
)
from .render import render_report, render_run, word_diff, write_report

__all__ = [
    "LibraryRef",
    "RunData",
    "bias_row",
    "collect_run",
    "diff_refs",
    "diff_to_json",
    "library_json",
    "library_rows",
    "rejected_candidates",
    "render_report",
    "render_run",
    "require_run_like",
    "resolve_library",
    "word_diff",
    "write_report",
]

"""Reports and libraries: `report(DIR)` writes the HTML page of a run or an audit directory
(what `bias-discovery report` writes), `ReportServer` serves a run's page while the run goes on
(`bias-discovery view`), and `resolve_library(REF)` loads the library ``RUN_DIR``,
``RUN_DIR@N`` or ``FILE.json`` names, which `library_view` and `diff_refs` turn into what
`library show` and `library diff` print (`BiasRow` a row, `LibraryView` a library).

`write_report`, `write_bias_page` and `write_audit_report` are the three pages `report`
chooses between, for a caller that knows which one it wants."""

from __future__ import annotations

from pathlib import Path

from ..auditing.output import is_audit_dir
from ..errors import ConfigError
from ..report.audit import write_audit_report
from ..report.correction import is_correction_dir, write_correction_report
from ..report.data import BiasRow, LibraryView, bias_row, diff_refs, diff_to_json, library_view, rejected_candidates
from ..report.render import write_bias_page, write_report
from ..report.viewer import ReportServer
from ..run.library_ref import LibraryRef, require_run_like, resolve_library
from ..settings.common import DEFAULT_EXAMPLES

__all__ = [
    "BiasRow",
    "LibraryRef",
    "LibraryView",
    "ReportServer",
    "bias_row",
    "diff_refs",
    "diff_to_json",
    "is_audit_dir",
    "library_view",
    "rejected_candidates",
    "report",
    "require_run_like",
    "resolve_library",
    "write_audit_report",
    "write_bias_page",
    "write_report",
]


def report(
    directory: str | Path,
    out: str | Path | None = None,
    *,
    bias: str | None = None,
    examples: int = DEFAULT_EXAMPLES,
    problems: list[str] | None = None,
) -> Path:
    """Write the self-contained HTML page of `directory` and return its path: a `correct`
    directory's estimates (`write_correction_report`), an audit
    directory's measures (`write_audit_report`), one bias of a run (`bias`: an id or a name,
    `write_bias_page`) or a whole run (`write_report`). `out` defaults to a file in
    `directory`; `examples` validation examples per bias; what could not be read and was left
    out (the page lists it) is added to `problems`. An audit directory has no bias page
    (`ConfigError`), and a bias page needs a run directory."""
    directory = Path(directory)
    if is_correction_dir(directory):
        if bias is not None:
            raise ConfigError(f"`bias`: {directory} is a correction directory; a bias page is drawn from a run")
        return write_correction_report(directory, out)
    if is_audit_dir(directory):
        if bias is not None:
            raise ConfigError(f"`bias`: {directory} is an audit directory; a bias page is drawn from a run")
        return write_audit_report(directory, out)
    if bias is not None:
        require_run_like(directory)
        return write_bias_page(directory, bias, out, examples=examples, problems=problems)
    return write_report(directory, out, problems, examples=examples)

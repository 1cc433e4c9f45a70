"""`audit_log(path)`: the known-bias audit of verdicts a judge already gave (what
`bias-discovery audit --from-log` runs). No model is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from ..auditing import AuditOutput
from ..auditing.fromlog import audit_log as audit_loaded_log
from ..auditing.logs import ColumnMap, read_log
from ..auditing.output import write_audit_dir
from ..config import DEFAULT_SEED
from ..errors import ExportError
from ..io import check_output_dir
from ..options import OperationOptions
from ..stats import DEFAULT_BOOTSTRAP_RESAMPLES

__all__ = ["LogAuditOptions", "audit_log"]


class LogAuditOptions(OperationOptions):
    """How a log is audited (`audit --from-log`'s options, the arguments of `api.audit_log`)."""

    columns: ColumnMap | str | None = None
    """The column map of a generic JSONL / CSV / parquet log (a `ColumnMap`, its CLI syntax
    ``pair_id=qid,verdict=choice,...`` or a YAML file); None: our judgments.jsonl or an
    inspect_ai log."""
    data: str | None = None
    """The pairs a judgments.jsonl judged (demo, judgebench, a file): the responses' lengths
    and models, for the length and self-preference measures."""
    data_dir: Path | None = None
    """Where the named data sets are read from (else $BIAS_DISCOVERY_DATA_DIR, else the hub)."""
    judge_model: str | None = None
    """The judge, when the log does not name it (self-preference needs its family)."""
    judge_family: str | None = None
    """The judge's model family, overriding the one read from its name (gpt, claude, qwen ...)."""
    seed: int = DEFAULT_SEED
    """The seed of CALM's order draw and the bootstrap (an audit's judgments.jsonl: the audit's)."""
    n_boot: int = Field(default=DEFAULT_BOOTSTRAP_RESAMPLES, ge=100)
    """Bootstrap resamples for the CIs."""
    out: Path | None = None
    """A directory for audit.json and audit.csv, written whole at the end (None: nothing written)."""
    overwrite: bool = False
    """Replace a non-empty `out`."""


def audit_log(path: str | Path, options: LogAuditOptions | None = None, **overrides: Any) -> AuditOutput:
    """Audit the verdicts in the log `path` (our judgments.jsonl, an inspect_ai .eval / .json
    log, or a generic log with `columns`): every known-bias measure it supports, with n and
    CI, and the ones it cannot support with why (`report.unsupported`)."""
    opts = LogAuditOptions.with_overrides(options, overrides)
    columns = ColumnMap.parse(opts.columns) if isinstance(opts.columns, str) else opts.columns
    out_dir = Path(opts.out) if opts.out is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, overwrite=opts.overwrite, error=ExportError)
    log = read_log(path, columns, data=opts.data, data_dir=opts.data_dir)
    report = audit_loaded_log(
        log,
        seed=opts.seed,
        n_boot=opts.n_boot,
        judge_model=opts.judge_model,
        judge_family=opts.judge_family,
        data=opts.data,
        columns=None if columns is None else columns.model_dump(exclude_defaults=True),
    )
    output = AuditOutput(report=report, judgments=[], perturbed=[], out=out_dir)
    if out_dir is not None:
        write_audit_dir(out_dir, output, overwrite=opts.overwrite)
    return output

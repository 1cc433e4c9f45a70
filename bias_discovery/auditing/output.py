"""An audit directory: audit.json, audit.csv, judgments.jsonl, perturbed.jsonl.

Written into a temporary folder next to `--out` and renamed into place at the end, as the
exports are: an interrupted audit leaves nothing half-written, and an `--out` that exists
and is not empty needs `--overwrite`.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..errors import ExportError
from ..io import atomic_write_json, atomic_write_jsonl, staged_output
from ..run.artifacts import JsonArtifact
from .records import CSV_COLUMNS, AuditReport, csv_rows
from .runner import AuditOutput

__all__ = ["AUDIT_FILE", "is_audit_dir", "read_audit", "write_audit_dir"]

AUDIT_FILE = "audit.json"


def write_audit_dir(out: Path, output: AuditOutput, *, overwrite: bool = False) -> Path:
    with staged_output(out, overwrite=overwrite, error=ExportError) as tmp:
        atomic_write_json(tmp / AUDIT_FILE, output.report)
        with (tmp / "audit.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for row in csv_rows(output.report):
                writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
        if output.report.from_log is None:  # an audit from a log made no call; its log is its input
            atomic_write_jsonl(tmp / "judgments.jsonl", output.judgments)
        if output.perturbed:
            atomic_write_jsonl(tmp / "perturbed.jsonl", output.perturbed)
    return out


def is_audit_dir(path: Path) -> bool:
    return (Path(path) / AUDIT_FILE).is_file()


def read_audit(path: Path) -> AuditReport:
    """The audit.json of an audit directory; errors name the file and the field."""
    return JsonArtifact(Path(path) / AUDIT_FILE, AuditReport).read()

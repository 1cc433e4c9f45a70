"""The products of a run and of a judge, as files: `export_judgebench_pro` (a harder test set
from a run's biases, `bias-discovery export pro`), `apply_annotations` (a reviewer's sheet
back into that set), `export_dpo` (preference data that teaches a judge to resist the biases),
`export_harness` (a set as an lm-evaluation-harness or inspect_ai task) and `check_pro_dir`
(is a directory a Pro set, before a `judge --compare` spends a call).

They are the operations of `export/`, handed out here unchanged so that a script and the
command line reach them the same way; each takes its options model (`ProExportOptions`,
`DpoExportOptions`, `HarnessExportOptions`) or keyword overrides of its fields, and the Pro and
DPO exports return their stats.json as a typed record (`ProStats`, `DpoStats`), the harness
export its export.json (`HarnessExport`)."""

from __future__ import annotations

from ..export.annotate import apply_annotations
from ..export.common import ExportStats
from ..export.compare import check_pro_dir
from ..export.dpo import DpoStats, export_dpo
from ..export.harness import HarnessExport, export_harness
from ..export.pro import export_judgebench_pro
from ..export.pro_stats import ProStats
from ..settings.export import DpoExportOptions, HarnessExportOptions, ProExportOptions

__all__ = [
    "DpoExportOptions",
    "DpoStats",
    "ExportStats",
    "HarnessExport",
    "HarnessExportOptions",
    "ProExportOptions",
    "ProStats",
    "apply_annotations",
    "check_pro_dir",
    "export_dpo",
    "export_harness",
    "export_judgebench_pro",
]

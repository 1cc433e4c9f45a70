"""The Python API: what a notebook or a script calls instead of the CLI (the CLI calls it too).

    from bias_discovery import discover, judge, audit, matrix, replicate, load_run

- `discover(config, run_dir=..., resume=False) -> Run`: the discovery loop (its options:
  `DiscoverOptions`, or keyword overrides of its fields); a `Run` has
  `.library`, `.validations`, `.accepted`, `.report_path`, `.config`, `.state`.
- `load_run(RUN_DIR) -> Run`: a run already made (finished, stopped or running);
  `Run.evidence(BIAS)` one bias with its provenance and examples, `Run.review(BIAS, decision)`
  a reviewer's decision kept with the run (`Run.reviews`).
- `bias_evidence(RUN_DIR, BIAS) -> BiasDetail`: the same for any library reference.
- `judge(model, data, ...) -> JudgeOutput`: a judge's error, per domain, with its CI.
- `audit(model, data, biases, ...) -> AuditOutput`: known biases with the published measures.
- `audit_log(path, ...) -> AuditOutput`: the same from verdicts a judge already gave (no model call).
- `matrix(config, out=DIR, judges=...) -> MatrixResult`: every bias against every judge on
  the same items, with a jury row and the judges compared.
- `replicate(run, seed=...) -> Replication`: a run's biases validated again on fresh rewrites.
- `validate_family(biases, pairs, config) -> ValidationOutput`: biases made anywhere (another
  tool's, a hand-written list: `Bias`, `slugify` for their ids) validated as one family with a
  config's rule on `PreferencePair`s of your choice (`load_data` in `bias_discovery.api.common`).
- `build_hf_smollm2() -> Path`: the embedded SmolLM2 in Hugging Face format (built once from
  its GGUF), for an engine or a tool that loads a model directory (vLLM, transformers).
- `report(DIR) -> Path`: the HTML page of a run, one of its biases, or an audit directory;
  `ReportServer` serves a run's page live; `resolve_library(REF)` loads a library
  (`bias_discovery.api.reports`: what `library show` and `library diff` print).
- `export_judgebench_pro`, `apply_annotations`, `export_dpo`, `export_harness`: a run's
  products as files (`bias_discovery.api.exports`), with their options (`ProExportOptions`,
  `DpoExportOptions`, `HarnessExportOptions`); the Pro and DPO sets' stats.json come back as
  `ProStats` / `DpoStats`.
- `run_preflight(config) -> PreflightReport`: what a run would meet, before it starts
  (`bias_discovery.api.checks`).

The command line reaches the logic only through this package: `api/views.py` holds the view
functions it prints with, the other modules the types of what it prints.

Every result converts to a pandas DataFrame (`.to_pandas()`) and a `datasets.Dataset`
(`.to_dataset()`) with stable columns (`.columns()`: the fields of its row model, see
`bias_discovery.tables`). Errors are `BiasDiscoveryError`s with a one-line message (settings
that do not validate: pydantic's ValidationError); warnings go to `on_warning` (default: a
Python `BiasDiscoveryWarning`). Models load on first use and are released when a function
returns; no function draws progress bars unless given `progress` (e.g.
`bias_discovery.progress.progress_bar`).
"""

from ..auditing import AuditOutput, AuditSettings
from ..config import RunConfig
from ..data.pairs import PreferencePair
from ..judge_matrix import MatrixConfig, MatrixResult
from ..library import Bias, BiasLibrary, BiasOrigin, slugify
from ..replication import Replication, ReplicationOptions
from ..settings.judge import JudgeSettings
from ..smollm2_hf import build_hf_smollm2
from .audit_logs import LogAuditOptions, audit_log
from .audits import AuditOptions, audit
from .checks import run_preflight
from .common import WarningHandler
from .exports import (
    DpoExportOptions,
    DpoStats,
    HarnessExport,
    HarnessExportOptions,
    ProExportOptions,
    ProStats,
    apply_annotations,
    export_dpo,
    export_harness,
    export_judgebench_pro,
)
from .judges import JudgeOptions, JudgeOutput, judge
from .matrices import MatrixOptions, matrix
from .replications import ValidationOutput, replicate, validate_family
from .reports import ReportServer, report, resolve_library
from .runs import BudgetReached, DiscoverOptions, Run, bias_evidence, discover, load_run, run_config_of

__all__ = [
    "AuditOptions",
    "AuditOutput",
    "AuditSettings",
    "Bias",
    "BiasLibrary",
    "BiasOrigin",
    "BudgetReached",
    "DiscoverOptions",
    "DpoExportOptions",
    "DpoStats",
    "HarnessExport",
    "HarnessExportOptions",
    "JudgeOptions",
    "JudgeOutput",
    "JudgeSettings",
    "LogAuditOptions",
    "MatrixConfig",
    "MatrixOptions",
    "MatrixResult",
    "PreferencePair",
    "ProExportOptions",
    "ProStats",
    "Replication",
    "ReplicationOptions",
    "ReportServer",
    "Run",
    "RunConfig",
    "ValidationOutput",
    "WarningHandler",
    "apply_annotations",
    "audit",
    "audit_log",
    "bias_evidence",
    "build_hf_smollm2",
    "discover",
    "export_dpo",
    "export_harness",
    "export_judgebench_pro",
    "judge",
    "load_run",
    "matrix",
    "replicate",
    "report",
    "resolve_library",
    "run_config_of",
    "run_preflight",
    "slugify",
    "validate_family",
]

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
- `correct(path, ...) -> CorrectOutput`: a judge's aggregate corrected with a few human labels
  (PPI++), with the judge-only and labels-only estimates beside it, each with its CI and n.
- `matrix(config, out=DIR, judges=...) -> MatrixResult`: every bias against every judge on
  the same items, with a jury row and the judges compared.
- `replicate(run, seed=...) -> Replication`: a run's biases validated again on fresh rewrites.
- `validate_family(biases, pairs, config) -> ValidationOutput`: biases made anywhere (another
  tool's, a hand-written list: `Bias`, `slugify` for their ids) validated as one family with a
  config's rule on `PreferencePair`s of your choice (`load_data`).
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

The command line reaches the logic only through this package's public names: the view functions
of `bias_discovery.api.views` it prints with, and the types of what it prints, handed out here
too: a run's record (`RunDir`, `RunState`, `effective_status`, `summarize_events`, `Liveness`,
`Spend`), a reviewer's decision (`Review`, `ReviewDecision`), an audit's report
(`AuditReport`, `BiasAudit`, `SchemeAudit`, `AuditMetrics`, `POINTWISE_FIELDS`) and a judge's summary
(`JudgeSummary`, `ScoreSummary`).

Public: the names of this package and its submodules `reports`, `exports`, `checks` and `views`.
The modules with a leading underscore are not: what they define that a user needs is handed out
here (CONTRIBUTING.md, "How the code is laid out").

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
from ..library import Bias, BiasLibrary, BiasOrigin, ScoreShift, slugify
from ..replication import Replication, ReplicationOptions
from ..settings.judge import JudgeSettings
from ..smollm2_hf import build_hf_smollm2
from ._audit_logs import LogAuditOptions, audit_log
from ._audits import POINTWISE_FIELDS, AuditMetrics, AuditOptions, AuditReport, BiasAudit, SchemeAudit, audit
from ._common import WarningHandler, load_data
from ._corrections import CorrectedEstimate, CorrectionReport, CorrectOptions, CorrectOutput, correct
from ._judges import JudgeOptions, JudgeOutput, JudgeSummary, ScoreSummary, judge
from ._matrices import MatrixOptions, matrix
from ._replications import ValidationOutput, replicate, validate_family
from ._runs import (
    BudgetReached,
    DiscoverOptions,
    Liveness,
    Review,
    ReviewDecision,
    Run,
    RunDir,
    RunState,
    Spend,
    bias_evidence,
    discover,
    effective_status,
    load_run,
    run_config_of,
    summarize_events,
)
from .checks import run_preflight
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
from .reports import ReportServer, report, resolve_library

__all__ = [
    "POINTWISE_FIELDS",
    "AuditMetrics",
    "AuditOptions",
    "AuditOutput",
    "AuditReport",
    "AuditSettings",
    "Bias",
    "BiasAudit",
    "BiasLibrary",
    "BiasOrigin",
    "BudgetReached",
    "CorrectOptions",
    "CorrectOutput",
    "CorrectedEstimate",
    "CorrectionReport",
    "DiscoverOptions",
    "DpoExportOptions",
    "DpoStats",
    "HarnessExport",
    "HarnessExportOptions",
    "JudgeOptions",
    "JudgeOutput",
    "JudgeSettings",
    "JudgeSummary",
    "Liveness",
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
    "Review",
    "ReviewDecision",
    "Run",
    "RunConfig",
    "RunDir",
    "RunState",
    "SchemeAudit",
    "ScoreShift",
    "ScoreSummary",
    "Spend",
    "ValidationOutput",
    "WarningHandler",
    "apply_annotations",
    "audit",
    "audit_log",
    "bias_evidence",
    "build_hf_smollm2",
    "correct",
    "discover",
    "effective_status",
    "export_dpo",
    "export_harness",
    "export_judgebench_pro",
    "judge",
    "load_data",
    "load_run",
    "matrix",
    "replicate",
    "report",
    "resolve_library",
    "run_config_of",
    "run_preflight",
    "slugify",
    "validate_family",
    "summarize_events",
]

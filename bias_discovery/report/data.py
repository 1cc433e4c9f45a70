"""What the library views and the report read from a run directory, as plain data.

A library is named by a *library reference* (``RUN_DIR``, ``RUN_DIR@N``, ``FILE.json``: see
`bias_discovery.run.library_ref`). For a run, the view also lists the candidates that
validation *rejected* (they are not in the library): those of every iteration's validation
report up to the shown one.

Nothing here writes: everything is read from the run's plain files, so a report can be
drawn while the run is still going, or from a copy of a run without its SQLite files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from ..auditing.correction import CorrectionReport
from ..errors import BiasDiscoveryError, ConfigError
from ..library import (
    Bias,
    BiasLibrary,
    BiasValidation,
    LibraryDiff,
    RewriteEffect,
    diff_libraries,
)
from ..run import JsonArtifact, RunDir, RunState, ValidationReport, effective_status, summarize_events
from ..run.library_ref import LibraryRef, require_run_like
from ..run.reviews import Review
from ..stats import Measure

__all__ = [
    "LIBRARY_COLUMNS",
    "BiasRow",
    "RunData",
    "IterationInfo",
    "bias_row",
    "collect_run",
    "diff_refs",
    "diff_to_json",
    "error_statements",
    "LibraryView",
    "library_json",
    "library_view",
    "library_rows",
    "read_validation_records",
    "rejected_candidates",
    "run_rewrite_effect",
]


# --------------------------------------------------------------------------------------------
# Validation reports
# --------------------------------------------------------------------------------------------


def read_validation_records(root: Path, upto: int | None = None) -> list[ValidationReport]:
    """Every iteration's validation report up to iteration `upto` (all when None), in order;
    a report that does not parse is a DataError naming its file."""
    run = RunDir(root)
    reports = []
    for t in run.iterations():
        if upto is not None and t > upto:
            continue
        report = run.iteration(t).validation.read_if_exists()
        if report is not None:
            reports.append(report)
    return reports


def rejected_candidates(root: Path, upto: int | None = None) -> list[Bias]:
    """Candidates that validation rejected in iterations up to `upto` (all when None)."""
    rejected: dict[str, Bias] = {}
    for report in read_validation_records(root, upto):
        for bias in report.validated:
            if bias.validation is not None and not bias.validation.accepted:
                rejected[bias.id] = bias
    return list(rejected.values())


# --------------------------------------------------------------------------------------------
# Rows (library show) and diffs
# --------------------------------------------------------------------------------------------


BiasStatus = Literal["seed", "unvalidated", "accepted", "rejected", "confirmed", "unconfirmed"]


def _status(bias: Bias) -> BiasStatus:
    """seed / unvalidated; accepted / rejected (candidates); confirmed / unconfirmed (seeds
    validated on the judge with `validate.seeds`: they stay in the library either way)."""
    if bias.validation is None:
        return "seed" if bias.origin.kind == "seed" else "unvalidated"
    if bias.origin.kind == "seed":
        return "confirmed" if bias.validation.accepted else "unconfirmed"
    return "accepted" if bias.validation.accepted else "rejected"


def _top_domain(bias: Bias) -> tuple[str | None, float | None]:
    v = bias.validation
    if v is None or not v.per_domain:
        return None, None
    domain, numbers = max(v.per_domain.items(), key=lambda item: (item[1].delta, item[1].n))
    return domain, numbers.delta


class BiasRow(BaseModel):
    """One bias as a flat row: the `library show` table and its --json, the report's tables,
    and `Run.to_pandas()` (the columns, in this order, are the fields).

    `effect*` is the reported Δerror against the decisive control (`decisive`): what the bias's
    size is ranked and shown by, honest after a sequential stop (`effect_method`; `effect_clipped`
    says which of its ends the data left at the edge of [-1, 1], after a close stop). With
    `measure` p_rejected (score verdicts) the "errors" are mean probabilities of preferring the
    rejected response and every Δ, CI, p and MDE is in probability points. The
    `*_vs_baseline` / `*_vs_placebo` numbers are the two comparisons as measured on the items
    used; `decision_p*` is the decisive comparison's p. Every number is None for a bias not
    validated (a seed without `validate.seeds`, a candidate skipped by `max_candidates`)."""

    id: str
    name: str
    origin: Literal["seed", "discovered"]
    origin_iteration: int
    """The iteration that discovered it (0: a seed)."""
    seed_library: str | None
    status: BiasStatus
    """accepted / rejected (candidates); confirmed / unconfirmed (seeds validated on the judge,
    in the library either way); seed / unvalidated (no validation)."""
    in_library: bool
    """False for a candidate validation rejected (listed beside the library, not in it)."""
    decisive: Literal["baseline", "placebo"] | None
    """The control the decision compared with."""
    measure: Measure | None
    """error (choice verdicts), or p_rejected (score verdicts: the "errors" are mean
    probabilities of preferring the rejected response, every Δ, CI, p and MDE in probability
    points)."""
    effect: float | None
    """The reported Δ against `decisive` (with the bias − with the control)."""
    effect_ci_low: float | None
    effect_ci_high: float | None
    effect_n: int | None
    effect_method: str | None
    """The estimator of `effect` and its CI (full sample, or conditional after an early stop)."""
    effect_clipped: str | None
    """Which end of the effect's CI the data do not bound (set to the parameter space's edge)."""
    effect_upper_bound: float | None
    """A rejected candidate's one-sided upper bound (at the effect's confidence, given its stop
    and the rejection): an effect above it is excluded. What the table shows for it, beside the
    MDE, instead of `effect` and its two-sided CI (kept here). None for an accepted bias."""
    error_statement: str | None
    """What the decision controls, at what level, over which family."""
    n: int | None
    """Paired test items of the decisive comparison."""
    baseline_error: float | None
    perturbed_error: float | None
    delta_vs_baseline: float | None
    ci_low_vs_baseline: float | None
    ci_high_vs_baseline: float | None
    p_vs_baseline: float | None
    p_adjusted_vs_baseline: float | None
    rule: str | None
    """The acceptance rule, in words."""
    placebo_n: int | None
    placebo_error: float | None
    placebo_perturbed_error: float | None
    delta_vs_placebo: float | None
    ci_low_vs_placebo: float | None
    ci_high_vs_placebo: float | None
    p_vs_placebo: float | None
    p_adjusted_vs_placebo: float | None
    decision_p: float | None
    decision_p_adjusted: float | None
    rewrite_effect: float | None
    """The placebo's own Δerror against the unperturbed items (the same for every bias of a run)."""
    answer_change_rate: float | None
    n_answer_changed: int | None
    length_ratio: float | None
    mde: float | None
    """Smallest Δ the test detects with `mde_power` at `mde_n` items."""
    mde_n: int | None
    mde_power: float | None
    stopped_at: int | None
    stop: Literal["efficacy", "futility", "complete"] | None
    top_domain: str | None
    """The test domain with the largest Δ against the baseline (descriptive)."""
    top_domain_delta: float | None
    n_evidence: int
    merged_from: list[str]
    definition: str
    score_shift_points: float | None = None
    """Pointwise judges: the rejected response's score shift against the decisive control, in
    scale points (`ScoreShift`), with its CI and in SDs of the control's scores."""
    score_shift_ci_low: float | None = None
    score_shift_ci_high: float | None = None
    score_shift_sd: float | None = None
    secondary_measure: Measure | None = None
    """Pointwise judges: the measure that did not decide (reported, not decisive), and its Δ."""
    secondary_delta: float | None = None
    secondary_ci_low: float | None = None
    secondary_ci_high: float | None = None


LIBRARY_COLUMNS: tuple[str, ...] = tuple(BiasRow.model_fields)
"""The columns of `bias_row` (and `Run.to_pandas()`), in order."""


def bias_row(bias: Bias, *, in_library: bool = True) -> dict[str, Any]:
    """One bias as a flat, JSON-ready row: a `BiasRow`, dumped."""
    return typed_bias_row(bias, in_library=in_library).model_dump()


def typed_bias_row(bias: Bias, *, in_library: bool = True) -> BiasRow:
    """One bias as a flat row (`BiasRow`)."""
    v = bias.validation
    top, top_delta = _top_domain(bias)
    base = v.vs_baseline if v else None
    placebo = v.vs_placebo if v else None
    decided = v.decisive_comparison if v else None
    effect = v.effect if v else None
    rewrite = v.rewrite_effect if v else None
    return BiasRow(
        id=bias.id,
        name=bias.name,
        origin=bias.origin.kind,
        origin_iteration=bias.origin.iteration,
        seed_library=bias.origin.seed_library,
        status=_status(bias),
        in_library=in_library,
        decisive=v.decisive if v else None,
        measure=decided.measure if decided else None,
        effect=effect.delta if effect else None,
        effect_ci_low=effect.ci_low if effect else None,
        effect_ci_high=effect.ci_high if effect else None,
        effect_n=effect.n if effect else None,
        effect_method=effect.method if effect else None,
        effect_clipped=effect.clipped if effect else None,
        effect_upper_bound=effect.upper_bound if effect else None,
        error_statement=v.error_statement if v else None,
        n=decided.n if decided else None,
        baseline_error=base.control_error if base else None,
        perturbed_error=base.arm_error if base else None,
        delta_vs_baseline=base.delta if base else None,
        ci_low_vs_baseline=base.ci_low if base else None,
        ci_high_vs_baseline=base.ci_high if base else None,
        p_vs_baseline=base.p_value if base else None,
        p_adjusted_vs_baseline=base.p_adjusted if base else None,
        rule=v.rule if v else None,
        placebo_n=placebo.n if placebo else None,
        placebo_error=placebo.control_error if placebo else None,
        placebo_perturbed_error=placebo.arm_error if placebo else None,
        delta_vs_placebo=placebo.delta if placebo else None,
        ci_low_vs_placebo=placebo.ci_low if placebo else None,
        ci_high_vs_placebo=placebo.ci_high if placebo else None,
        p_vs_placebo=placebo.p_value if placebo else None,
        p_adjusted_vs_placebo=placebo.p_adjusted if placebo else None,
        decision_p=decided.p_value if decided else None,
        decision_p_adjusted=decided.p_adjusted if decided else None,
        rewrite_effect=rewrite.delta if rewrite else None,
        answer_change_rate=v.answer_change_rate if v else None,
        n_answer_changed=v.n_answer_changed if v else None,
        length_ratio=v.length_ratio if v else None,
        mde=v.mde if v else None,
        mde_n=v.mde_n if v else None,
        mde_power=v.mde_power if v else None,
        stopped_at=v.stopped_at if v else None,
        stop=v.stop if v else None,
        top_domain=top,
        top_domain_delta=top_delta,
        n_evidence=len(bias.evidence),
        merged_from=list(bias.merged_from),
        definition=bias.definition,
        **_pointwise_columns(v),
    )


def _pointwise_columns(v: BiasValidation | None) -> dict[str, Any]:
    """A pointwise judge's score shift and secondary measure as `BiasRow` columns (none else)."""
    shift = v.score_shift if v else None
    other = v.secondary if v else None
    return {
        "score_shift_points": shift.points if shift else None,
        "score_shift_ci_low": shift.ci_low if shift else None,
        "score_shift_ci_high": shift.ci_high if shift else None,
        "score_shift_sd": shift.sd_units if shift else None,
        "secondary_measure": other.measure if other else None,
        "secondary_delta": other.delta if other else None,
        "secondary_ci_low": other.ci_low if other else None,
        "secondary_ci_high": other.ci_high if other else None,
    }


def library_rows(library: BiasLibrary, rejected: Sequence[Bias] = ()) -> list[dict[str, Any]]:
    """The library's biases, then the rejected candidates (not in the library)."""
    rows = [bias_row(b) for b in library.biases]
    rows += [bias_row(b, in_library=False) for b in rejected if b.id not in library]
    return rows


def run_rewrite_effect(root: Path) -> RewriteEffect | None:
    """A run's rewrite effect (placebo vs baseline): ``placebo/effect.json``, else the newest
    validation report's copy (a run shared without its placebo folder); None without a placebo."""
    run = RunDir(root)
    if run.placebo.effect.exists():
        return run.placebo.effect.read()
    for report in reversed(read_validation_records(root)):
        if report.rewrite_effect is not None:
            return report.rewrite_effect
    return None


class ErrorStatementEntry(BaseModel):
    """One thing the validations behind a library control, and the iterations that say it."""

    statement: str
    iterations: list[int]


class LibraryInfo(BaseModel):
    """A library's own facts, as `library show` heads its table."""

    name: str
    iteration: int
    target_model: str | None
    created_at: str | None
    parent: str | None
    size: int


class LibraryView(BaseModel):
    """What `library show` prints (and its --json): the library, its biases and the rejected
    candidates as `BiasRow`s, the run's rewrite effect, what the decisions control."""

    source: str
    path: str
    run_dir: str | None
    library: LibraryInfo
    biases: list[BiasRow]
    rewrite_effect: RewriteEffect | None
    error_statements: list[ErrorStatementEntry]


def error_statements(ref: LibraryRef) -> list[dict[str, Any]]:
    """What the validations behind a library control, one entry per distinct statement: a
    run's from its validation reports up to the library's iteration (with the iterations they
    cover), a library file's from its biases."""
    by_statement: dict[str, list[int]] = {}
    if ref.run_dir is not None:
        for report in read_validation_records(ref.run_dir, upto=ref.library.iteration):
            by_statement.setdefault(report.error_statement, []).append(report.iteration)
    else:
        for bias in ref.library.biases:
            if bias.validation is not None and bias.validation.error_statement:
                by_statement.setdefault(bias.validation.error_statement, [])
    return [{"statement": text, "iterations": iterations} for text, iterations in by_statement.items()]


def library_view(ref: LibraryRef, rejected: list[Bias]) -> LibraryView:
    """The library `ref` names with the `rejected` candidates (not in it), as `library show`
    prints it."""
    lib = ref.library
    return LibraryView(
        source=ref.spec,
        path=str(ref.path),
        run_dir=None if ref.run_dir is None else str(ref.run_dir),
        library=LibraryInfo(
            name=lib.name,
            iteration=lib.iteration,
            target_model=lib.target_model,
            created_at=lib.created_at,
            parent=lib.parent,
            size=len(lib.biases),
        ),
        biases=[typed_bias_row(b) for b in lib.biases]
        + [typed_bias_row(b, in_library=False) for b in rejected if b.id not in lib],
        rewrite_effect=run_rewrite_effect(ref.run_dir) if ref.run_dir is not None else None,
        error_statements=[ErrorStatementEntry.model_validate(e) for e in error_statements(ref)],
    )


def library_json(ref: LibraryRef, rejected: list[Bias]) -> dict[str, Any]:
    """`library_view`, JSON-ready (`library show --json`)."""
    return library_view(ref, rejected).model_dump(mode="json")


def diff_to_json(diff: LibraryDiff, a: LibraryRef, b: LibraryRef, rejected: Sequence[Bias] = ()) -> dict[str, Any]:
    """A compact, JSON-ready form of a LibraryDiff (rows instead of whole biases)."""
    return {
        "a": {"source": a.spec, "path": str(a.path), "name": diff.a_name, "iteration": diff.a_iteration},
        "b": {"source": b.spec, "path": str(b.path), "name": diff.b_name, "iteration": diff.b_iteration},
        "added": [bias_row(x) for x in diff.added],
        "removed": [bias_row(x) for x in diff.removed],
        "merged": [{"id": m.bias.id, "name": m.bias.name, "absorbed": m.absorbed} for m in diff.merged],
        "changed": [
            {
                "id": c.id,
                "name": c.name,
                "fields": c.fields,
                "numbers": {k: v.model_dump() for k, v in c.numbers.items()},
            }
            for c in diff.changed
        ],
        "unchanged": diff.unchanged,
        "rejected": [bias_row(x, in_library=False) for x in rejected],
        "is_empty": diff.is_empty,
    }


def diff_refs(a: LibraryRef, b: LibraryRef) -> tuple[LibraryDiff, list[Bias]]:
    """Diff two references (`diff_libraries`, minus merges A already records); when both name
    the same run, also the candidates rejected in the iterations between them."""
    diff = diff_libraries(a.library, b.library)
    # A merge that A already records (same bias, same merged_from) happened before A: not news.
    diff.merged = [
        m
        for m in diff.merged
        if not (m.bias.id in a.library and a.library.by_id(m.bias.id).merged_from == m.bias.merged_from)
    ]
    rejected: list[Bias] = []
    if a.run_dir is not None and b.run_dir is not None and a.run_dir.resolve() == b.run_dir.resolve():
        lo, hi = sorted((a.library.iteration, b.library.iteration))
        rejected = [bias for bias in rejected_candidates(b.run_dir, upto=hi) if bias.origin.iteration > lo]
    return diff, rejected


# --------------------------------------------------------------------------------------------
# Everything the report shows
# --------------------------------------------------------------------------------------------


@dataclass
class IterationInfo:
    """One iteration of the loop, from its files (all optional: a run may be mid-way)."""

    iteration: int
    library_size: int | None = None
    discovered: int | None = None
    misjudged: int | None = None
    raw_candidates: int | None = None
    merged_into_library: dict[str, str] = field(default_factory=dict)
    validated: int | None = None
    accepted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    validation: ValidationReport | None = None
    """The iteration's validation report (control, alpha, looks, smallest detectable Δ)."""


@dataclass
class RunData:
    root: Path
    config: dict[str, Any]
    config_text: str
    state: RunState | None
    usage: dict[str, Any]
    libraries: list[BiasLibrary]
    """One per saved iteration, ascending (iteration 0 is the seed library)."""
    latest: BiasLibrary | None
    rejected: list[Bias]
    records: dict[str, dict[str, Any]]
    """validation.json candidate records (paired comparison, per-domain CIs) by bias id."""
    iterations: list[IterationInfo]
    baseline: dict[str, Any] | None
    reviews: list[Review] = field(default_factory=list)
    """Reviewers' decisions about the run's biases (``reviews.jsonl``), oldest first."""
    last_event_time: float | None = None
    rewrite_effect: RewriteEffect | None = None
    """The placebo's own effect (neutral rewrites vs unperturbed), when the run has a placebo."""
    seed_validation: ValidationReport | None = None
    """The seed library's validation on this judge (iteration 0, `validate.seeds`)."""
    status: str = "stopped"
    """What the run is doing now (`run.effective_status`: running only while its process lives)."""
    problems: list[str] = field(default_factory=list)
    """What could not be read and was left out (a garbled line, with its file and line number):
    the report says so instead of quietly showing less."""
    corrections: list[tuple[str, CorrectionReport]] = field(default_factory=list)
    """The run's corrected scores (``corrections/NAME/correct.json``, `correct --out`), by NAME."""

    @property
    def name(self) -> str:
        if self.state is not None:
            return self.state.name
        return str(self.config.get("name") or self.root.name)

    @property
    def discovered(self) -> list[Bias]:
        return [b for b in (self.latest.biases if self.latest else []) if b.origin.kind == "discovered"]

    @property
    def seeds(self) -> list[Bias]:
        return [b for b in (self.latest.biases if self.latest else []) if b.origin.kind == "seed"]


def collect_run(root: Path | str) -> RunData:
    """Read everything the report shows from a run directory.

    Raises ConfigError when `root` is not a run, LibraryError or DataError (naming the file)
    when a library, validation or state file does not parse; missing optional files are simply
    absent. Lines of the log and of the reviews that do not parse are left out and named in
    `RunData.problems` (the report's evidence adds those of the evidence files).
    """
    root = Path(root)
    require_run_like(root)
    rd = RunDir(root)
    problems: list[str] = []
    config_text = rd.config_path.read_text(encoding="utf-8", errors="replace") if rd.config_path.is_file() else ""
    try:
        config = yaml.safe_load(config_text) or {}
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{rd.config_path}: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        problems.append(f"{rd.config_path}: not a mapping of settings; no settings are shown")
        config = {}
    state = rd.read_state()
    events = rd.read_events(problems)
    usage = summarize_events(events, problems)

    store = rd.library
    libraries = [store.load_iteration(i) for i in store.iterations()]
    latest = libraries[-1] if libraries else (store.load_latest() if store.latest_path.exists() else None)

    records: dict[str, dict[str, Any]] = {}
    rejected: dict[str, Bias] = {}
    by_iteration: dict[int, ValidationReport] = {}
    for report in read_validation_records(root):
        by_iteration[report.iteration] = report
        for record in report.candidates:
            records[record.bias_id] = record.model_dump(mode="json")
        for bias in report.validated:
            if bias.validation is not None and not bias.validation.accepted:
                rejected[bias.id] = bias
    if latest is not None:
        rejected = {k: v for k, v in rejected.items() if k not in latest}

    sizes = {lib.iteration: lib for lib in libraries}
    iterations: list[IterationInfo] = []
    for i in sorted(set(sizes) | set(rd.iterations())):
        info = IterationInfo(iteration=i)
        lib = sizes.get(i)
        if lib is not None:
            info.library_size = len(lib.biases)
            info.discovered = sum(1 for b in lib.biases if b.origin.kind == "discovered")
        files = rd.iteration(i)
        info.misjudged = files.misjudged.count()
        stats = files.merge_stats.read_if_exists()
        if stats is not None:
            info.raw_candidates = stats.raw_candidates
            info.merged_into_library = dict(stats.merged_into_library)
        validation = by_iteration.get(i)
        if validation is not None:
            info.validation = validation
            info.validated = len(validation.validated)
            info.accepted = list(validation.accepted)
            info.rejected = [b.id for b in validation.validated if not (b.validation and b.validation.accepted)]
            info.skipped = list(validation.skipped_over_max_candidates)
        if i > 0 or lib is not None:
            iterations.append(info)

    baseline = None
    data: Any = None
    baseline_path = rd.baseline.summary.path
    if baseline_path.is_file():
        try:
            data = json.loads(baseline_path.read_bytes().decode("utf-8"))
            baseline = data if isinstance(data, dict) else None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            problems.append(
                f"{baseline_path}: not valid JSON ({str(exc).splitlines()[0][:200]}); no baseline summary is shown"
            )
        if data is not None and baseline is None:
            problems.append(f"{baseline_path}: not a JSON object; no baseline summary is shown")

    return RunData(
        rewrite_effect=run_rewrite_effect(root),
        seed_validation=by_iteration.get(0),
        root=root,
        config=config,
        config_text=config_text,
        state=state,
        usage=usage,
        libraries=libraries,
        latest=latest,
        rejected=list(rejected.values()),
        records=records,
        iterations=iterations,
        baseline=baseline,
        reviews=rd.reviews.read_lenient(problems),
        last_event_time=events[-1].get("time") if events else None,
        status=effective_status(state.status if state else None, rd.liveness()),
        problems=problems,
        corrections=_corrections(rd, problems),
    )


def _corrections(rd: RunDir, problems: list[str]) -> list[tuple[str, CorrectionReport]]:
    """The `correct --out RUN_DIR/corrections/NAME` records; one that does not read is a problem."""
    found = []
    for path in sorted(rd.corrections_path.glob("*/correct.json")):
        try:
            found.append((path.parent.name, JsonArtifact(path, CorrectionReport).read()))
        except BiasDiscoveryError as exc:
            problems.append(f"{exc}; this correction is not shown")
    return found

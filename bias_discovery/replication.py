"""Replication: does a run's accepted bias hold up on fresh perturbations?

`bias-discovery replicate RUN --seed S` re-validates every accepted bias of a run (or the ones
named) with the run's own rule, control and models, on *fresh* rewrites: a new seed draws new
position swaps, a new sample of the test set when the run used `test_limit`, and new rewrites
(the teacher samples at `--temperature`; at temperature 0 a new seed would repeat the same
greedy text), or new data with `--data`. Each bias is *reproduced* when the replication
accepts it again (the replicated biases are one family: Holm across them at the run's alpha).
Every call goes through the run's call cache, so a repeated replication is free.

A pointwise judge (`judge.mode: pointwise`) is replicated as it was run: each response scored
alone on the run's scale, each bias decided on the run's deciding measure
(`judge.pointwise_measure`), the other measure reported next to it as secondary (never
decisive), with the rejected response's score shift in scale points.

Writes `replication.json` (`reproduction_rate`, `biases`: per bias the original and the new
numbers, reproduced yes/no) and the replication's rewrites and judgments next to it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from .config import PerturbSettings, Pipeline, RunConfig
from .data.loaders import bad_rows_for, describe_source, load_pairs
from .data.overlap import DataOverlap
from .data.pairs import PreferencePair
from .errors import BiasDiscoveryError, ExportError
from .io import atomic_write_json, atomic_write_jsonl, check_output_dir, staged_output
from .judging import JudgeResult, calls_per_pair, judge_pairs, measure_of, secondary_measure_of
from .library import Bias, BiasValidation, RewriteEffect, ScoreShift, slugify
from .llm.base import Engine
from .options import CallOptions, DataOptions, OutputOptions, OverlapOptions
from .progress import ProgressFactory, progress_or_quiet
from .run.context import RunContext
from .run.overlap import check_run_overlap
from .run.selection import select_biases
from .settings.judge import JudgeMode
from .stages.family import FamilySettings
from .stages.rewrite_checks import record_checker
from .stages.validate import (
    CandidateValidation,
    PlaceboArm,
    ValidationModels,
    ValidationOutput,
    ValidationSetup,
    run_placebo,
    validate_biases,
)
from .stats import Measure, PairedComparison, wilson_interval
from .tables import Tabular

DEFAULT_TEMPERATURE = 0.7
"""Sampling temperature of the fresh rewrites when the run rewrote greedily (temperature 0)."""


class ReplicationOptions(DataOptions, OutputOptions, OverlapOptions, CallOptions):
    """What a replication of a run may change (`bias-discovery replicate`'s options, the
    arguments of `api.replicate`); everything else is the run's own.

    The shared fields are inherited; here their None is the run's: `out` defaults to
    RUN_DIR/replications/seed-S, `limit` to the run's test_limit (with the run's data),
    `data_dir` and `timeout_s` to the run's, and `skip_bad_rows` is on when the run used
    data.skip_bad_rows."""

    seed: int | None = None
    """Seed of the fresh rewrites, position swaps and test sample (None: the run's + 1)."""
    data: str | None = None
    """Other test data: a named set or a file (None: the run's test data)."""
    biases: str | None = None
    """Ids or names (comma-separated) to replicate instead of the accepted biases; seeds too."""
    temperature: float | None = Field(default=None, ge=0.0)
    """Teacher sampling of the fresh rewrites (None: the run's, or 0.7 when it rewrote greedily)."""

    @field_validator("biases", mode="before")
    @classmethod
    def _biases_as_text(cls, value: Any) -> Any:
        """A list of ids or names is the same selection as their comma-separated text."""
        return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value


class ReplicationError(BiasDiscoveryError):
    """A replication cannot be made as asked (same seed and data, unknown bias ...)."""


class ReplicatedBias(BaseModel):
    """One bias of the run, validated again on fresh rewrites."""

    id: str
    name: str
    origin: Literal["seed", "discovered"]
    reproduced: bool
    """The replication accepted it again, under the run's rule and control."""
    control: str
    delta: float
    """The replication's reported Δerror against the control (its `effect`: honest after a
    sequential stop)."""
    ci_low: float | None
    ci_high: float | None
    method: str = "full sample"
    """How `delta` and its CI were estimated (`stats.Effect.method`)."""
    n: int
    """The paired items of `delta` (an accepted bias's held-out items; else the decision's)."""
    p_value: float | None
    p_adjusted: float | None
    original_delta: float | None
    """The run's reported Δerror against the same control (its `effect`; None when the run did
    not validate it)."""
    original_ci_low: float | None = None
    original_ci_high: float | None = None
    original_method: str | None = None
    original_n: int | None = None
    original_p_adjusted: float | None = None
    original_accepted: bool | None = None
    measure: Measure = "error"
    """What `delta` compares per item (the run's deciding measure: `judging.measure_of`); a
    pointwise judge's `score` is the rejected response's score as a share of the scale."""
    secondary_measure: Measure | None = None
    """Pointwise judges: the measure that did not decide, reported, never decisive; its Δ
    against the same control on the items the decision saw, with its CI."""
    secondary_delta: float | None = None
    secondary_ci_low: float | None = None
    secondary_ci_high: float | None = None
    original_secondary_delta: float | None = None
    """The run's secondary Δ (None when the run did not validate the bias)."""
    score_shift_points: float | None = None
    """Pointwise judges: the rejected response's score shift against the decisive control, in
    scale points, with its CI (`score_shift` in full)."""
    score_shift_ci_low: float | None = None
    score_shift_ci_high: float | None = None
    original_score_shift_points: float | None = None
    secondary: PairedComparison | None = None
    """Pointwise judges: the secondary comparison in full (`BiasValidation.secondary`)."""
    score_shift: ScoreShift | None = None
    """Pointwise judges: the score shift in full, in points and SDs (`BiasValidation.score_shift`)."""
    validation: BiasValidation
    """The replication's full numbers (both comparisons, answer changes, lengths, power)."""
    record: CandidateValidation


class Replication(BaseModel, Tabular):
    """replication.json. As a table (`to_pandas()`, `to_dataset()`): one row per replicated
    bias, the fields of `ReplicatedBias` but its nested `validation` and `record`."""

    row_model: ClassVar[type[BaseModel]] = ReplicatedBias
    row_exclude: ClassVar[tuple[str, ...]] = ("validation", "record", "secondary", "score_shift")

    kind: Literal["replication"] = "replication"
    run_name: str
    run_dir: str
    """The run directory's name (no machine path)."""
    created_at: str
    seed: int
    run_seed: int
    data: str
    limit: int | None
    n_test: int
    skipped_rows: int = 0
    """Bad data rows skipped at load (the run's `data.skip_bad_rows`), not among n_test."""
    temperature: float
    acceptance: str
    control: str
    alpha: float
    correction: str
    models: dict[str, str]
    judge_mode: JudgeMode = "pairwise"
    """The run's judge (`judge.mode`): a pointwise judge is replicated as a pointwise judge,
    each response scored alone on `scale`, decided on `measure`."""
    scale: str | None = None
    """Pointwise judges: `judge.scale` (None for a pairwise judge)."""
    measure: Measure = "error"
    """The deciding measure (`judging.measure_of`: the run's `judge.pointwise_measure` for a
    pointwise judge)."""
    secondary_measure: Measure | None = None
    """Pointwise judges: the measure reported next to it, never decisive."""
    self_checked: bool | None = None
    """True when the answer checker is the teacher that wrote the rewrites (None: no check)."""
    baseline_error: float | None
    """The judge's error on the replication's test pairs (a pointwise judge: the pair error
    derived from its two scores, ties counted as errors)."""
    rewrite_effect: RewriteEffect | None = None
    biases: list[ReplicatedBias] = Field(default_factory=list)
    n_replicated: int
    n_reproduced: int
    reproduction_rate: float | None
    """Reproduced / replicated (None when nothing was replicated)."""
    reproduction_ci_low: float | None = None
    reproduction_ci_high: float | None = None
    """95 % Wilson interval of the reproduction rate."""
    error_statement: str = ""
    """What the replication's decisions control (its biases are one family at the run's alpha)."""
    data_overlap: DataOverlap | None = None
    """Replication pairs that are also the run's target (discovery) pairs."""
    out: Path | None = Field(default=None, exclude=True)
    """The directory replication.json was written to (not written into it: a machine path)."""

    def table_rows(self) -> list[dict[str, Any]]:
        return [b.model_dump(exclude=set(self.row_exclude)) for b in self.biases]


def _control_numbers(v: BiasValidation | None) -> dict[str, float | int | str | bool | None]:
    """The run's reported effect and decisive comparison (a pointwise judge's: its secondary
    Δ and score shift too)."""
    if v is None:
        return {"original_delta": None}
    e, decided = v.effect, v.decisive_comparison
    return {
        "original_secondary_delta": v.secondary.delta if v.secondary is not None else None,
        "original_score_shift_points": v.score_shift.points if v.score_shift is not None else None,
        "original_delta": e.delta,
        "original_ci_low": e.ci_low,
        "original_ci_high": e.ci_high,
        "original_method": e.method,
        "original_n": e.n if e.n is not None else decided.n,
        "original_p_adjusted": decided.p_adjusted,
        "original_accepted": v.accepted,
    }


def _pointwise_numbers(v: BiasValidation) -> dict[str, Any]:
    """A pointwise judge's secondary measure and score shift as `ReplicatedBias` fields
    (nothing for a pairwise judge)."""
    other, shift = v.secondary, v.score_shift
    if other is None and shift is None:
        return {}
    return {
        "secondary": other,
        "secondary_measure": other.measure if other else None,
        "secondary_delta": other.delta if other else None,
        "secondary_ci_low": other.ci_low if other else None,
        "secondary_ci_high": other.ci_high if other else None,
        "score_shift": shift,
        "score_shift_points": shift.points if shift else None,
        "score_shift_ci_low": shift.ci_low if shift else None,
        "score_shift_ci_high": shift.ci_high if shift else None,
    }


def default_out(run_dir: Path, seed: int, data: str | None) -> Path:
    """``RUN_DIR/replications/seed-S`` (``-DATA`` appended for other data)."""
    return Path(run_dir) / "replications" / (f"seed-{seed}" + (f"-{slugify(Path(data).stem)}" if data else ""))


@dataclass
class _Plan:
    """What a replication will do, settled before any model is loaded."""

    seed: int
    temperature: float
    out: Path
    chosen: list[Bias]
    source: str
    data_dir: Path | None
    limit: int | None
    header: Replication
    """replication.json before the calls: the settings, no numbers yet."""


@dataclass
class _Outcome:
    """What the calls of a replication returned."""

    pairs: list[PreferencePair]
    baseline: JudgeResult
    placebo: PlaceboArm | None
    output: ValidationOutput
    overlap: DataOverlap | None


def replicate_run(
    run_dir: Path | str,
    options: ReplicationOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
) -> tuple[Replication, Path]:
    """Re-validate a run's accepted biases (or `options.biases`: ids or names, seeds too) on
    fresh rewrites; returns the replication and the directory it was written to.

    `options.seed` defaults to the run's seed + 1; `limit` to the run's `test_limit` (a new
    sample when the seed is new); `temperature` to the run's perturb temperature, or 0.7 when
    that is 0. `engines` ({"target", "teacher", "checker"}) replaces the models (tests). Data
    that shares pairs (by id or content) with the run's target pairs is refused unless
    `allow_overlap`. `skip_bad_rows` (or the run's `data.skip_bad_rows`) skips and counts bad
    data rows.
    """
    opts = options or ReplicationOptions()
    run_path = Path(run_dir)
    with RunContext(run_path, engines=engines, timeout_s=opts.timeout_s) as ctx:
        plan = _plan(ctx, run_path, opts)
        if not plan.chosen:  # nothing to replicate: no model is loaded, nothing is paid
            _write(plan.header, None, plan.out, run_path, opts.overwrite)
            return plan.header, plan.out
        outcome = _run(ctx, plan, opts, progress_or_quiet(progress))
        answer_check = ctx.config.validate_.answer_check
    replication = _assemble(plan, outcome, answer_check)
    _write(replication, outcome, plan.out, run_path, opts.overwrite)
    return replication, plan.out


def _plan(ctx: RunContext, run_path: Path, opts: ReplicationOptions) -> _Plan:
    """The seed, temperature, biases, data and output directory of the replication, and its
    header; refuses a replication that would repeat the run's own calls."""
    config = ctx.config
    seed = config.seed + 1 if opts.seed is None else opts.seed
    temperature = opts.temperature
    if temperature is None:
        temperature = config.perturb.temperature if config.perturb.temperature > 0 else DEFAULT_TEMPERATURE
    same_rewrites = seed == config.seed and temperature == config.perturb.temperature
    if same_rewrites and opts.data is None:
        raise ReplicationError(
            f"`seed` {seed} is the run's own seed: with the same data and temperature the replication "
            "would repeat the run's calls (the cache answers them); pass another `seed` or `data`"
        )
    out = Path(opts.out if opts.out is not None else default_out(run_path, seed, opts.data))
    check_output_dir(out, overwrite=opts.overwrite, protect=[run_path], error=ExportError)
    if opts.biases is None:
        chosen = [
            b
            for b in ctx.library.biases
            if b.origin.kind == "discovered" and b.validation is not None and b.validation.accepted
        ]
    else:
        chosen = select_biases(ctx.library, opts.biases, run_dir=run_path)
    source = opts.data or config.data.test
    where = opts.data_dir if opts.data_dir is not None else config.data.data_dir
    n_limit = opts.limit if opts.limit is not None else (config.data.test_limit if opts.data is None else None)
    settings = config.validate_
    header = Replication(
        run_name=config.name,
        run_dir=ctx.root.name,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        seed=seed,
        run_seed=config.seed,
        data=describe_source(source, where, portable=True),
        limit=n_limit,
        temperature=temperature,
        acceptance=settings.acceptance,
        control=settings.decision_control,
        alpha=settings.alpha,
        correction=settings.correction,
        models={
            "target": config.target.spec,
            "teacher": config.teacher.spec,
            "checker": config.answer_checker().spec,
        },
        judge_mode=config.judge.mode,
        scale=config.judge.scale if config.judge.mode == "pointwise" else None,
        measure=measure_of(config.judge),
        secondary_measure=secondary_measure_of(config.judge),
        self_checked=config.self_checked if settings.answer_check else None,
        n_test=0,
        baseline_error=None,
        n_replicated=0,
        n_reproduced=0,
        reproduction_rate=None,
    )
    return _Plan(seed, temperature, out, chosen, source, where, n_limit, header)


def _run(ctx: RunContext, plan: _Plan, opts: ReplicationOptions, bar: ProgressFactory) -> _Outcome:
    """Load the data, judge the baseline, rewrite the placebo and validate the fresh biases."""
    config, settings, seed = ctx.config, ctx.config.validate_, plan.seed
    bad_rows = bad_rows_for(plan.source, opts.skip_bad_rows or config.data.skip_bad_rows)
    pairs = load_pairs(plan.source, data_dir=plan.data_dir, limit=plan.limit, seed=seed, bad_rows=bad_rows)
    if not pairs:
        raise ReplicationError(f"data {plan.source!r} has no pairs")
    plan.header.skipped_rows = len(bad_rows or [])
    overlap = check_run_overlap(
        ctx.run, config, pairs, data_name=f"the replication data {plan.header.data}", allow=opts.allow_overlap
    )
    roles = ctx.roles({"target": config.target, "teacher": config.teacher, "checker": config.answer_checker()})
    checker = roles["checker"] if settings.answer_check else None
    fresh = [b.model_copy(update={"validation": None}) for b in plan.chosen]
    baseline, placebo, output = validate_on_pairs(
        ValidationModels(teacher=roles["teacher"], target=roles["target"], checker=checker),
        config,
        fresh,
        pairs,
        seed=seed,
        perturb_settings=config.perturb.model_copy(update={"temperature": plan.temperature}),
        scope="replication",
        test_data=plan.header.data,
        bar=bar,
    )
    return _Outcome(pairs, baseline, placebo, output, overlap)


def validate_on_pairs(
    models: ValidationModels,
    config: RunConfig,
    biases: Sequence[Bias],
    pairs: Sequence[PreferencePair],
    *,
    seed: int,
    perturb_settings: PerturbSettings,
    scope: str,
    test_data: str,
    pipeline: Pipeline = "streamed",
    bar: ProgressFactory | None = None,
) -> tuple[JudgeResult, PlaceboArm | None, ValidationOutput]:
    """Judge `pairs` unperturbed, rewrite them neutrally when `config`'s rule compares with a
    placebo, and validate `biases` as one family with that rule (`scope` names the family in its
    error statement): what a replication runs, and `api.validate_family` for biases made
    anywhere. Returns the baseline, the placebo arm (None without one) and the validation."""
    settings = config.validate_
    progress = bar if bar is not None else progress_or_quiet(None)
    with progress("baseline: judge", len(pairs) * calls_per_pair(config.judge)) as advance:
        baseline = judge_pairs(models.target, pairs, config.judge, seed=seed, progress=advance)
    placebo = None
    if settings.control == "placebo":
        placebo = run_placebo(
            models.teacher,
            models.target,
            models.checker,
            pairs,
            baseline,
            perturb_settings=perturb_settings,
            judge_settings=config.judge,
            settings=settings,
            seed=seed,
            progress=lambda name, total: progress(f"placebo: {name}", total),
            pipeline=pipeline,
        )
    setup = ValidationSetup(
        family=FamilySettings.planned(settings, 1, seed=seed, scope=scope, measure=measure_of(config.judge)),
        perturb=perturb_settings,
        judge=config.judge,
        test_data=test_data,
        pipeline=pipeline,
    )
    output = validate_biases(
        models,
        list(biases),
        list(pairs),
        baseline,
        setup,
        placebo=placebo,
        progress=lambda name, total: progress(f"validate: {name}", total),
    )
    return baseline, placebo, output


def _assemble(plan: _Plan, outcome: _Outcome, answer_check: bool) -> Replication:
    """replication.json: each bias's new numbers beside the run's, and the reproduction rate."""
    header, output = plan.header, outcome.output
    replicated = []
    checked = record_checker(
        output.candidates, header.models["checker"] if answer_check else None, self_checked=header.self_checked
    )
    for original, bias, record in zip(plan.chosen, checked, output.records):
        v = bias.validation
        assert v is not None
        decision = record.decisive_comparison
        replicated.append(
            ReplicatedBias(
                id=bias.id,
                name=bias.name,
                origin=bias.origin.kind,
                reproduced=v.accepted,
                control=v.decisive,
                delta=v.effect.delta,
                ci_low=v.effect.ci_low,
                ci_high=v.effect.ci_high,
                method=v.effect.method,
                n=v.effect.n if v.effect.n is not None else decision.n,
                p_value=decision.p_value,
                p_adjusted=decision.p_adjusted,
                measure=v.effect.measure,
                **_pointwise_numbers(v),
                validation=v,
                record=record,
                **_control_numbers(original.validation),  # type: ignore[arg-type]
            )
        )
    n_reproduced = sum(b.reproduced for b in replicated)
    low, high = wilson_interval(n_reproduced, len(replicated))
    return Replication.model_validate(
        {
            **header.model_dump(),
            "n_test": len(outcome.pairs),
            "baseline_error": outcome.baseline.error_rate(),
            "rewrite_effect": outcome.placebo.effect if outcome.placebo is not None else None,
            "biases": replicated,
            "n_replicated": len(replicated),
            "n_reproduced": n_reproduced,
            "reproduction_rate": n_reproduced / len(replicated),
            "reproduction_ci_low": low,
            "reproduction_ci_high": high,
            "error_statement": output.error_statement,
            "data_overlap": outcome.overlap,
            "out": plan.out,
        }
    )


def _write(replication: Replication, outcome: _Outcome | None, out: Path, run_path: Path, overwrite: bool) -> None:
    """The replication's directory, all at once: replication.json and, when anything was
    validated, the rewrites, judgments, baseline and placebo behind it."""
    with staged_output(out, overwrite=overwrite, protect=[run_path], error=ExportError) as tmp:
        atomic_write_json(tmp / "replication.json", replication)
        if outcome is None:
            replication.out = out
            return
        atomic_write_jsonl(tmp / "validation_perturbed.jsonl", outcome.output.perturbed)
        atomic_write_jsonl(tmp / "validation_judgments.jsonl", outcome.output.judgments)
        atomic_write_json(tmp / "baseline_result.json", outcome.baseline)
        if outcome.placebo is not None:
            atomic_write_jsonl(tmp / "placebo_perturbed.jsonl", outcome.placebo.perturbed)
            atomic_write_json(tmp / "placebo_result.json", outcome.placebo.result)

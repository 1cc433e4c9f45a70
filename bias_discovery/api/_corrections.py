"""`correct(path)`: a judge's aggregate corrected with a few human labels (what
`bias-discovery correct` runs): the judge-only, labels-only and PPI++ estimates with their 95 %
CIs and n, per model and X minus Y, covariate-adjusted, the gap per bias flag; `plan` for the
labels a CI width needs; `bias_library` for a bound on what the validated biases can move
when there are no labels. A pointwise table without the judge's scores is scored by `model`
first, and the validated biases of `bias_library` no flag column gives are flagged by
`checker_model` (both through the call cache, the checker within `checker_max_calls`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..auditing.correction import CorrectionReport, bias_bound, correct_input, plan_labels
from ..auditing.correction_flags import CheckerCalls, TraitFlags, ask_checker, usable_flags
from ..auditing.correction_inputs import (
    CorrectionInput,
    ScoreColumns,
    join_labels,
    pairwise_items,
    pointwise_items,
    read_labels,
    write_ids,
)
from ..auditing.logs import ColumnMap
from ..errors import DataError, OutputError
from ..io import atomic_write_json, atomic_write_text, staged_output
from ..library import Bias
from ..llm.base import Engine
from ..llm.budget import Budget, BudgetLimits, BudgetSettings, Spend
from ..llm.roles import ModelRoles
from ..progress import ProgressFactory
from ..settings.correct import CorrectOptions
from ..settings.judge import JudgeSettings
from ..stats import CorrectedEstimate
from ._common import WarningHandler, cache_path_of, model_config_of, python_warning

__all__ = ["CorrectOptions", "CorrectOutput", "CorrectedEstimate", "CorrectionReport", "correct"]

CORRECT_FILE = "correct.json"
TO_LABEL_FILE = "to_label.csv"
PAGE_FILE = "correct.html"
FLAG_STAGE = "trait flags"
"""The stage the checker's calls are booked to (its meter's usage)."""


class CorrectOutput(BaseModel):
    """The corrected aggregate (`report`, correct.json) and where it was written."""

    report: CorrectionReport
    out: Path | None = None


def _read(path: Path, opts: CorrectOptions) -> CorrectionInput:
    if opts.mode == "pairwise":
        columns = ColumnMap.parse(opts.columns) if opts.columns is not None else None
        in_log = opts.label_column if opts.labels is None and columns is not None else None
        data = pairwise_items(
            path,
            columns,
            label_column=in_log or "label",
            label_required=in_log is not None,
            covariates=opts.covariates,
            flags=opts.flags,
        )
    else:
        spec = ScoreColumns.parse(opts.columns) if opts.columns is not None else ScoreColumns()
        if opts.labels is None and spec.label is None:
            spec = spec.model_copy(update={"label": opts.label_column or "label"})
        data = pointwise_items(path, spec, opts.scale, covariates=opts.covariates, flags=opts.flags)
    if opts.labels is not None:
        join_labels(
            data.items,
            read_labels(Path(opts.labels), opts.label_id, opts.label_column or "label", data.scale),
            opts.labels,
        )
    return data


def _settings(opts: CorrectOptions) -> JudgeSettings:
    if opts.settings is not None:
        return opts.settings
    rubric = Path(opts.rubric).read_text(encoding="utf-8") if opts.rubric is not None else None
    return JudgeSettings(mode="pointwise", scale=opts.scale, rubric=rubric, reasoning=False, max_tokens=8)


def _roles(opts: CorrectOptions, engines: Mapping[str, Engine] | None) -> ModelRoles:
    """The judge model (`target`, scoring a pointwise table) and the checker (flagging traits),
    through the call cache; the checker under its budget of paid calls. Roles with one model
    share one engine (one load)."""
    configs = {}
    if opts.model is not None:
        configs["target"] = model_config_of(opts.model, None, None)
    if opts.checker_model is not None:
        configs["checker"] = model_config_of(opts.checker_model, None, None)
    limits = BudgetSettings(roles={"checker": BudgetLimits(max_calls=opts.checker_max_calls)})
    budget = Budget(limits, {role: config.price for role, config in configs.items()})
    return ModelRoles(configs, cache_path=cache_path_of(opts.cache), engines=engines, budget=budget)


def _score_with_model(
    data: CorrectionInput, opts: CorrectOptions, roles: ModelRoles, progress: ProgressFactory | None
) -> int:
    """Score the items without a judge value with `model` (pointwise); returns the calls made."""
    from ..data.pairs import PreferencePair
    from ..judging import judge_request, to_score_judgment
    from ..progress import progress_or_quiet

    todo = [i for i in data.items if i.judge is None]
    if not todo or opts.model is None:
        return 0
    missing = [i.item_id for i in todo if not i.text]
    if missing:
        raise DataError(f"{data.path}: item {missing[0]!r} has no score and no text for `model` to score")
    settings = _settings(opts)
    if settings.mode != "pointwise":
        raise DataError("`model` scores items one by one: its settings need mode pointwise")
    pairs = [
        PreferencePair(id=i.item_id, question=i.question or opts.instruction, chosen=str(i.text), rejected=".")
        for i in todo
    ]
    requests = [judge_request(p, "chosen", settings, opts.seed) for p in pairs]
    roles.set_stage("scores")
    with progress_or_quiet(progress)(f"scoring {len(todo)} items", len(todo)) as advance:
        responses = roles["target"].generate(requests, progress=advance)
    for item, pair, response in zip(todo, pairs, responses):
        item.judge = to_score_judgment(pair, "chosen", response, settings).score
    return len(todo)


def _validated_biases(spec: Path) -> list[Bias]:
    """The accepted biases of a library reference (`RUN_DIR`, `RUN_DIR@N`, a library file)."""
    from ..run.library_ref import resolve_library

    library = resolve_library(str(spec)).library
    accepted = [b for b in library.biases if b.validation is not None and b.validation.accepted]
    if not accepted:
        raise DataError(f"{spec}: the library holds no validated (accepted) bias to bound with")
    return accepted


def _library_effects(
    biases: list[Bias], data: CorrectionInput, warn: WarningHandler
) -> dict[str, tuple[float, tuple[float, float] | None]]:
    """Each validated bias's held-out effect in the units of the aggregate it bounds: a mean
    score moves by the bias's score shift in the scale's points (a pointwise validation on the
    same scale), a win rate or an accuracy by its Δ pair error. A bias whose validation has no
    number in those units gets no bound, and the warning says why: a product of unlike units
    (a Δ error rate times a share, read as score points) is not a bound."""
    effects: dict[str, tuple[float, tuple[float, float] | None]] = {}
    for bias in biases:
        v = bias.validation
        assert v is not None
        if data.mode == "pointwise":
            scale = data.scale.spec if data.scale is not None else None
            shift = v.score_shift
            if shift is None or shift.scale != scale:
                found = "no score shift (a pairwise judge's)" if shift is None else f"a score shift on {shift.scale}"
                warn(f"bias {bias.id}: no bound for a mean score on {scale}: its validation has {found}")
                continue
            ci = None if shift.ci_low is None or shift.ci_high is None else (shift.ci_low, shift.ci_high)
            effects[bias.id] = (shift.points, ci)
            continue
        measure = v.decisive_comparison.measure
        if measure != "error":
            warn(f"bias {bias.id}: no bound for a win rate: its effect is a Δ {measure}, not a Δ pair error")
            continue
        ci = None if v.effect.ci_low is None or v.effect.ci_high is None else (v.effect.ci_low, v.effect.ci_high)
        effects[bias.id] = (v.effect.delta, ci)
    return effects


def _checker_flags(
    data: CorrectionInput,
    opts: CorrectOptions,
    biases: list[Bias],
    roles: ModelRoles,
    progress: ProgressFactory | None,
    warn: WarningHandler,
) -> tuple[list[TraitFlags], CheckerCalls | None]:
    """Flag the validated biases no `flags` column gives with the checker model; the usable
    flags join `data.flags` (covariates and gap), every flag stays on its items (the bound)."""
    from ..progress import progress_or_quiet

    todo = [b for b in biases if b.id not in data.flags]
    if opts.checker_model is None or not todo:
        return [], None
    sides = 1 if data.mode == "pointwise" else 2
    total = sides * len(todo) * sum(1 for i in data.items if i.judge is not None)
    roles.set_stage(FLAG_STAGE)
    with progress_or_quiet(progress)(f"flagging traits of {len(todo)} biases", total) as advance:
        records = ask_checker(
            roles["checker"],
            data.items,
            todo,
            mode=data.mode,
            path=str(data.path),
            model=opts.checker_model,
            instruction=opts.instruction,
            seed=opts.seed,
            progress=advance,
        )
    data.flags.extend(usable_flags(data.items, records, taken=[*data.covariates, *data.flags]))
    for record in records:
        if not record.used:
            warn(f"bias {record.bias}: the checker's flags are not adjusted for: {record.note}")
    usage = roles.take_usage(FLAG_STAGE).get("checker")
    spent = roles.budget.spend().get("checker", Spend()) if roles.budget is not None else Spend()
    calls = CheckerCalls(
        model=opts.checker_model,
        requests=usage.requests if usage is not None else 0,
        cached=usage.cached if usage is not None else 0,
        paid=spent,
        max_calls=opts.checker_max_calls,
    )
    return records, calls


def correct(
    path: str | Path,
    options: CorrectOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    on_warning: WarningHandler | None = None,
    engines: Mapping[str, Engine] | None = None,
    **overrides: Any,
) -> CorrectOutput:
    """Correct the judge's aggregate in `path` with the human labels it carries or `labels`
    (``correct("log.csv", columns="pair_id=id,verdict=v,order=o", labels="human.csv")``).
    `engines`: ready engines by role, ``target`` (the scoring `model`) and ``checker`` (tests;
    not closed here). Raises BiasDiscoveryError subclasses naming the file, line and field
    (`BudgetReached` past `checker_max_calls`); writes nothing then."""
    opts = CorrectOptions.with_overrides(options, overrides)
    warn = on_warning or python_warning
    out_dir = Path(opts.out) if opts.out is not None else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"`out` {out_dir} exists and is not a directory")
    if opts.checker_model is not None and opts.bias_library is None:
        raise DataError("`checker_model` flags the validated biases of `bias_library`: give the library (or run)")
    data = _read(Path(path), opts)
    biases = _validated_biases(Path(opts.bias_library)) if opts.bias_library is not None else []
    with _roles(opts, engines) as roles:
        _score_with_model(data, opts, roles, progress)
        trait_flags, checker_calls = _checker_flags(data, opts, biases, roles, progress, warn)
    need_labels = not opts.plan and opts.bias_library is None
    report = correct_input(data, confidence=opts.confidence, need_labels=need_labels)
    report.trait_flags, report.checker_calls = trait_flags, checker_calls
    if opts.plan:
        report.plan = plan_labels(
            data,
            target_width=opts.target_width,
            confidence=opts.confidence,
            assumed_correlation=opts.assumed_correlation,
            seed=opts.seed,
        )
    if opts.bias_library is not None:
        report.bias_bound = bias_bound(data.items, _library_effects(biases, data, warn), opts.confidence)
    if report.n_without_judge:
        warn(f"{report.n_without_judge} item(s) have no valid judge value and are left out of every estimate")
    if out_dir is not None:
        _write(out_dir, report, overwrite=opts.overwrite)
    return CorrectOutput(report=report, out=out_dir)


def _write(out: Path, report: CorrectionReport, *, overwrite: bool) -> None:
    from ..report.correction import render_correction

    with staged_output(out, overwrite=overwrite, error=OutputError) as tmp:
        atomic_write_json(tmp / CORRECT_FILE, report)
        atomic_write_text(tmp / PAGE_FILE, render_correction(report))
        if report.plan is not None:
            write_ids(tmp / TO_LABEL_FILE, report.plan.to_label)

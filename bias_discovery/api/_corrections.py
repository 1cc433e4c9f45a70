"""`correct(path)`: a judge's aggregate corrected with a few human labels (what
`bias-discovery correct` runs): the judge-only, labels-only and PPI++ estimates with their 95 %
CIs and n, per model and X minus Y, covariate-adjusted, the gap per bias flag; `plan` for the
labels a CI width needs; `bias_library` for a bound on what the validated biases can move
when there are no labels. A pointwise table without the judge's scores is scored by `model`
first (through the call cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..auditing.correction import CorrectionReport, bias_bound, correct_input, plan_labels
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
from ..progress import ProgressFactory
from ..settings.correct import CorrectOptions
from ..settings.judge import JudgeSettings
from ..stats import CorrectedEstimate
from ._common import WarningHandler, cache_path_of, model_config_of, python_warning

__all__ = ["CorrectOptions", "CorrectOutput", "CorrectedEstimate", "CorrectionReport", "correct"]

CORRECT_FILE = "correct.json"
TO_LABEL_FILE = "to_label.csv"
PAGE_FILE = "correct.html"


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


def _score_with_model(data: CorrectionInput, opts: CorrectOptions, progress: ProgressFactory | None) -> int:
    """Score the items without a judge value with `model` (pointwise); returns the calls made."""
    from ..data.pairs import PreferencePair
    from ..judging import judge_request, to_score_judgment
    from ..llm import registry
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
    engine = registry.make_engine(model_config_of(opts.model, None, None), cache_path=cache_path_of(opts.cache))
    try:
        with progress_or_quiet(progress)(f"scoring {len(todo)} items", len(todo)) as advance:
            responses = engine.generate(requests, progress=advance)
    finally:
        engine.close()
    for item, pair, response in zip(todo, pairs, responses):
        item.judge = to_score_judgment(pair, "chosen", response, settings).score
    return len(todo)


def _library_effects(path: Path) -> dict[str, tuple[float, tuple[float, float] | None]]:
    from ..library import load_library

    library = load_library(path)
    effects: dict[str, tuple[float, tuple[float, float] | None]] = {}
    for bias in library.biases:
        v = bias.validation
        if v is None or not v.accepted:
            continue
        ci = None if v.effect.ci_low is None or v.effect.ci_high is None else (v.effect.ci_low, v.effect.ci_high)
        effects[bias.id] = (v.effect.delta, ci)
    if not effects:
        raise DataError(f"{path}: the library holds no validated (accepted) bias to bound with")
    return effects


def correct(
    path: str | Path,
    options: CorrectOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    on_warning: WarningHandler | None = None,
    **overrides: Any,
) -> CorrectOutput:
    """Correct the judge's aggregate in `path` with the human labels it carries or `labels`
    (``correct("log.csv", columns="pair_id=id,verdict=v,order=o", labels="human.csv")``).
    Raises BiasDiscoveryError subclasses naming the file, line and field; writes nothing then."""
    opts = CorrectOptions.with_overrides(options, overrides)
    warn = on_warning or python_warning
    out_dir = Path(opts.out) if opts.out is not None else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"`out` {out_dir} exists and is not a directory")
    data = _read(Path(path), opts)
    _score_with_model(data, opts, progress)
    need_labels = not opts.plan and opts.bias_library is None
    report = correct_input(data, confidence=opts.confidence, need_labels=need_labels)
    if opts.plan:
        report.plan = plan_labels(
            data,
            target_width=opts.target_width,
            confidence=opts.confidence,
            assumed_correlation=opts.assumed_correlation,
            seed=opts.seed,
        )
    if opts.bias_library is not None:
        report.bias_bound = bias_bound(data.items, _library_effects(Path(opts.bias_library)), opts.confidence)
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

"""`audit(model, data, biases)`: measure a judge on known biases with the published measures
(what `bias-discovery audit` runs), unmitigated and with a mitigation, on the same items.
Its result's report (`AuditReport`: per bias a `SchemeAudit` of `AuditMetrics`, and
`POINTWISE_FIELDS`, the measures a pointwise judge has) is handed out by `bias_discovery.api` too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..auditing import (
    AuditOutput,
    AuditSettings,
    AuditTarget,
    check_judge_mode,
    check_repeats,
    check_teacher,
    resolve_targets,
    run_audit,
)
from ..auditing.fromlog import live_pointwise_self_preference, live_self_preference, model_family
from ..auditing.output import write_audit_dir
from ..auditing.records import POINTWISE_FIELDS, AuditMetrics, AuditReport, BiasAudit, SchemeAudit, Unsupported
from ..auditing.sensitivity import prompt_sensitivity
from ..config import load_run_config
from ..data.loaders import describe_source
from ..data.overlap import DataOverlap
from ..data.pairs import PreferencePair
from ..errors import ConfigError, ExportError
from ..formatting import plural
from ..io import check_output_dir
from ..judging import JudgeSettings, verdict_calibration
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..llm.roles import ModelRoles
from ..options import CallOptions, DataOptions, OutputOptions, OverlapOptions
from ..progress import ProgressFactory
from ..run import RunDir
from ..run.overlap import check_run_overlap
from ._common import WarningHandler, cache_path_of, load_data, model_config_of, python_warning, spec_list

__all__ = ["POINTWISE_FIELDS", "AuditMetrics", "AuditOptions", "AuditReport", "BiasAudit", "SchemeAudit", "audit"]


class AuditOptions(DataOptions, OutputOptions, OverlapOptions, CallOptions):
    """How a judge is audited (`bias-discovery audit`'s options, the arguments of `api.audit`):
    the audit's settings, the teacher that injects library biases, data, outputs, cache.

    The shared fields are inherited: `out` is a directory for audit.json, audit.csv,
    judgments.jsonl and perturbed.jsonl, written whole at the end (None: nothing is written);
    `limit` audits the first N pairs; `allow_overlap` concerns a run's biases."""

    settings: AuditSettings = Field(default_factory=AuditSettings)
    """Repeats, mitigation, seed, the judge's settings ... (a dict of its fields is read as one)."""
    teacher: str | ModelConfig | None = None
    """The model that injects the library biases (the built-ins position and length need none)."""
    base_url: str | None = None
    """The server of an `openai/` judge."""
    teacher_base_url: str | None = None
    """The server of an `openai/` teacher (None: `base_url`)."""
    cache: Path | bool = True
    """True: the shared call cache; False: none; or a SQLite file."""
    """Each request's deadline, retries included (None: the model configs')."""
    prompts: list[str] = Field(default_factory=list)
    """Other judge prompt templates (shipped names or files): each pair is also judged under
    each, and the audit reports how often the verdict changes (`prompt_sensitivity`)."""
    judge_family: str | None = None
    """The judge's model family for self-preference (default: read from its name, e.g.
    openai/gpt-4o -> gpt), on data that names the model of each response."""

    @field_validator("prompts")
    @classmethod
    def _check_prompts(cls, value: list[str]) -> list[str]:
        return [JudgeSettings(prompt=p).prompt for p in value]  # a bad template fails here, before any call


def audit(
    model: str | ModelConfig,
    data: str | Path,
    biases: str | Sequence[str | Path],
    options: AuditOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    on_warning: WarningHandler | None = None,
    **overrides: Any,
) -> AuditOutput:
    """Audit the judge `model` on `data` for `biases`: the built-ins ``position`` and
    ``length`` (no teacher needed), seed libraries (``calm12``), bias ids or names from them,
    run directories (their validated biases) or library files, as a list or comma-separated;
    as `options` (`AuditOptions`) and keyword `overrides` of its fields say
    (``audit(model, "demo", "position", limit=4, settings={"repeats": 2})``).

    A pointwise judge (``settings={"judge": {"mode": "pointwise", "scale": "1-10"}}``) is
    audited on scores (`auditing.scores`): ``length`` and library biases, not ``position``.

    A run's biases measured on data that shares pairs with its target pairs are refused unless
    `allow_overlap`. `engines` ({"target", "teacher"}) replaces the models (tests).
    """
    opts = AuditOptions.with_overrides(options, overrides)
    warn = on_warning or python_warning
    audit_settings = opts.settings
    check_repeats(audit_settings.repeats)
    targets = resolve_targets(spec_list(biases))
    check_judge_mode(audit_settings, targets)
    if opts.prompts and audit_settings.judge.mode == "pointwise":
        raise ConfigError(
            "`prompts`: the prompt sensitivity compares pairwise verdicts; for judge.mode: pointwise it is not built"
        )
    configs = {"target": model_config_of(model, opts.base_url, opts.timeout_s)}
    check_teacher(targets, has_teacher=opts.teacher is not None)
    if opts.teacher is not None and any(t.needs_teacher for t in targets):
        configs["teacher"] = model_config_of(opts.teacher, opts.teacher_base_url or opts.base_url, opts.timeout_s)
    out_dir = Path(opts.out) if opts.out is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, overwrite=opts.overwrite, error=ExportError)
    pairs, bad_rows = load_data(
        data, data_dir=opts.data_dir, limit=opts.limit, skip_bad_rows=opts.skip_bad_rows, warn=warn
    )
    data_name = describe_source(data, opts.data_dir, portable=True)
    overlaps = _run_overlaps(targets, pairs, data_name, allow=opts.allow_overlap)
    with ModelRoles(configs, cache_path=cache_path_of(opts.cache), engines=engines) as roles:
        output = run_audit(
            roles["target"],
            pairs,
            targets,
            audit_settings,
            model=configs["target"].spec,
            data=data_name,
            teacher=roles["teacher"] if "teacher" in roles else None,
            teacher_spec=configs["teacher"].spec if "teacher" in configs else None,
            progress=progress,
        )
        sensitivity = None
        if opts.prompts:
            sensitivity = prompt_sensitivity(
                roles["target"],
                pairs,
                audit_settings.judge,
                [audit_settings.judge.prompt, *opts.prompts],
                seed=audit_settings.seed,
            )
    output.report.prompt_sensitivity = sensitivity
    report = output.report.model_copy(
        update={"data_overlap": overlaps, **_judge_measures(output, pairs, opts, configs["target"].spec)}
    )
    if bad_rows:
        report.notes.append(
            f"{plural(len(bad_rows), 'bad data row')} skipped at load, not among the {plural(len(pairs), 'pair')}"
        )
    output = output.model_copy(update={"report": report, "out": out_dir})
    if out_dir is not None:
        write_audit_dir(out_dir, output, overwrite=opts.overwrite)
    return output


def _judge_measures(output: AuditOutput, pairs: list[PreferencePair], opts: AuditOptions, spec: str) -> dict[str, Any]:
    """Calibration (score verdicts) and self-preference (data naming each response's model) of
    the audit's verdicts on the original pairs, and why a measure could not be had."""
    settings = opts.settings
    original = [j for j in output.judgments if j.condition == "original"]  # every order and repeat asked
    unsupported = []
    family = opts.judge_family or model_family(spec)
    if settings.judge.mode == "pointwise":
        calibration = None
        unsupported.append(
            Unsupported(
                measure="calibration",
                reason="a pointwise judge gives scores, not a probability that one response is better",
            )
        )
        sp, why = live_pointwise_self_preference(
            pairs, output.judgments, judge_family=family, seed=settings.seed, n_boot=settings.n_boot
        )
    else:
        calibration = verdict_calibration(original, n_boot=settings.n_boot, seed=settings.seed)
        if calibration is None:
            unsupported.append(
                Unsupported(measure="calibration", reason="choice verdicts carry no probability (use verdict: score)")
            )
        sp, why = live_self_preference(
            pairs, output.judgments, judge_family=family, seed=settings.seed, n_boot=settings.n_boot
        )
    if why is not None:
        unsupported.append(Unsupported(measure="self-preference", reason=why))
    return {"calibration": calibration, "self_preference": sp, "unsupported": unsupported}


def _run_overlaps(
    targets: list[AuditTarget], pairs: list[PreferencePair], data_name: str, *, allow: bool
) -> list[DataOverlap]:
    """Each run whose biases are audited, checked for overlap between its target pairs and the
    audit's pairs (`export.common.check_run_overlap`)."""
    overlaps = []
    for run_dir in dict.fromkeys(t.run_dir for t in targets if t.run_dir is not None):
        run = RunDir(run_dir)
        overlaps.append(
            check_run_overlap(
                run, load_run_config(run.config_path), pairs, data_name=f"the audit data {data_name}", allow=allow
            )
        )
    return overlaps

"""`audit(model, data, biases)`: measure a judge on known biases with the published measures
(what `bias-discovery audit` runs), unmitigated and with a mitigation, on the same items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..auditing import AuditOutput, AuditSettings, AuditTarget, check_repeats, check_teacher, resolve_targets, run_audit
from ..auditing.output import write_audit_dir
from ..config import load_run_config
from ..data.loaders import describe_source
from ..data.overlap import DataOverlap
from ..data.pairs import PreferencePair
from ..errors import ExportError
from ..formatting import plural
from ..io import check_output_dir
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..llm.roles import ModelRoles
from ..progress import ProgressFactory
from ..run import RunDir
from ..run.overlap import check_run_overlap
from .common import WarningHandler, cache_path_of, load_data, model_config_of, python_warning, settings_of, spec_list

__all__ = ["audit"]


def audit(
    model: str | ModelConfig,
    data: str | Path,
    biases: str | Sequence[str | Path],
    *,
    out: str | Path | None = None,
    teacher: str | ModelConfig | None = None,
    settings: AuditSettings | Mapping[str, Any] | None = None,
    base_url: str | None = None,
    teacher_base_url: str | None = None,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    cache: str | Path | bool = True,
    overwrite: bool = False,
    allow_overlap: bool = False,
    skip_bad_rows: bool = False,
    timeout_s: float | None = None,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    on_warning: WarningHandler | None = None,
) -> AuditOutput:
    """Audit the judge `model` on `data` for `biases`: the built-ins ``position`` and
    ``length`` (no teacher needed), seed libraries (``calm12``), bias ids or names from them,
    run directories (their validated biases) or library files, as a list or comma-separated.

    `teacher` injects the library biases (`teacher_base_url` defaults to `base_url`).
    `settings`: an AuditSettings or a dict of its fields (repeats, mitigation, seed, judge ...).
    `out`: a directory for audit.json, audit.csv, judgments.jsonl and perturbed.jsonl, written
    whole at the end (an existing non-empty one needs `overwrite`; None: nothing is written).
    A run's biases measured on data that shares pairs with its target pairs are refused unless
    `allow_overlap`. `timeout_s`: each request's deadline (None: the model configs'). `engines`
    ({"target", "teacher"}) replaces the models (tests).
    """
    warn = on_warning or python_warning
    audit_settings = settings_of(settings, AuditSettings)
    check_repeats(audit_settings.repeats)
    targets = resolve_targets(spec_list(biases))
    configs = {"target": model_config_of(model, base_url, timeout_s)}
    check_teacher(targets, has_teacher=teacher is not None)
    if teacher is not None and any(t.needs_teacher for t in targets):
        configs["teacher"] = model_config_of(teacher, teacher_base_url or base_url, timeout_s)
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, overwrite=overwrite, error=ExportError)
    pairs, bad_rows = load_data(data, data_dir=data_dir, limit=limit, skip_bad_rows=skip_bad_rows, warn=warn)
    data_name = describe_source(data, data_dir, portable=True)
    overlaps = _run_overlaps(targets, pairs, data_name, allow=allow_overlap)
    with ModelRoles(configs, cache_path=cache_path_of(cache), engines=engines) as roles:
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
    report = output.report.model_copy(update={"data_overlap": overlaps})
    if bad_rows:
        report.notes.append(
            f"{plural(len(bad_rows), 'bad data row')} skipped at load (`skip_bad_rows`), not among the {plural(len(pairs), 'pair')}"
        )
    output = output.model_copy(update={"report": report, "out": out_dir})
    if out_dir is not None:
        write_audit_dir(out_dir, output, overwrite=overwrite)
    return output


def _run_overlaps(targets: list[AuditTarget], pairs: list[PreferencePair], data_name: str, *, allow: bool) -> list[DataOverlap]:
    """Each run whose biases are audited, checked for overlap between its target pairs and the
    audit's pairs (`export.common.check_run_overlap`)."""
    overlaps = []
    for run_dir in dict.fromkeys(t.run_dir for t in targets if t.run_dir is not None):
        run = RunDir(run_dir)
        overlaps.append(
            check_run_overlap(run, load_run_config(run.config_path), pairs, data_name=f"the audit data {data_name}", allow=allow)
        )
    return overlaps

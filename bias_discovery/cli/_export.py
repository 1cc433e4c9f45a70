"""`export`: a JudgeBench-Pro-style benchmark, annotations, bias-augmented DPO data, harness tasks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer
from pydantic import ValidationError
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import number, percent, plural
from ..settings.export import DpoExportOptions, ExportSelection, HarnessExportOptions, ProExportOptions
from ._common import PLAIN_HELP, app, console, fail, format_validation_error, options_error, stacked
from ._options import (
    ALLOW_OVERLAP,
    DATA_DIR,
    OVERWRITE,
    QUIET,
    REVIEWED_ONLY,
    SKIP_BAD_ROWS,
    TIMEOUT,
    field_help,
    option,
)

if TYPE_CHECKING:
    from ..api.exports import ExportStats, HarnessExport

export_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=PLAIN_HELP,
    help="Turn a run's biases into data.\n\nA JudgeBench-Pro-style benchmark, bias-augmented DPO data, harness tasks (lm-eval, inspect).",
)
app.add_typer(export_app, name="export")


def counts_table(title: str, counts: dict) -> Table:
    """An export's counts, one step a row; a step counted by kind (dropped by filter, per
    bias ...) lists one kind and its count a line, so that a count never wraps away from its
    kind, nor is cut, at 80 columns."""
    table = Table(title=title)
    table.add_column("step", overflow="fold")
    table.add_column("count", justify="right", overflow="fold")
    for key, value in counts.items():
        if isinstance(value, dict):
            value = stacked(*(f"{k} {v}" for k, v in value.items())) or "-"
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    return table


def _print_counts(title: str, counts: dict) -> None:
    console.print(counts_table(title, counts))


def _print_skipped(stats: ExportStats) -> None:
    if stats.skipped_rows:
        console.print(
            f"skipped {plural(stats.skipped_rows, 'bad data row')} at load (--skip-bad-rows)", highlight=False
        )


_OUT_HELP = "Output directory (created; must not exist or be empty unless --overwrite)."


@export_app.command("judgebench-pro")
def export_judgebench_pro_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    out: Path = option(ProExportOptions, "out", required=True, help=_OUT_HELP),
    biases: str | None = option(ProExportOptions, "biases"),
    variants: int = option(ProExportOptions, "variants"),
    filter_model: str | None = option(ProExportOptions, "filter_model"),
    filter_base_url: str | None = option(ProExportOptions, "filter_base_url"),
    allow_self_filter: bool = option(ProExportOptions, "allow_self_filter"),
    allow_overlap: bool = ALLOW_OVERLAP,
    checker_model: str | None = option(ProExportOptions, "checker_model"),
    checker_base_url: str | None = option(ProExportOptions, "checker_base_url"),
    data: str | None = option(ProExportOptions, "data"),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(ProExportOptions, "limit", help="Use a seeded sample of N test pairs (the run's seed)."),
    overwrite: bool = OVERWRITE,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    reviewed_only: bool = REVIEWED_ONLY,
    quiet: bool = QUIET,
    timeout: float | None = TIMEOUT,
) -> None:
    """Build a JudgeBench-Pro-style benchmark.

    K biased variants per test pair, equivalence check, adversarial filter (both orders),
    dataset card, annotation sheet."""
    from ..api.exports import export_judgebench_pro
    from ..progress import progress_bar

    try:
        options = ProExportOptions(
            out=out,
            biases=biases,
            variants=variants,
            filter_model=filter_model,
            filter_base_url=filter_base_url,
            checker_model=checker_model,
            checker_base_url=checker_base_url,
            data=data,
            data_dir=data_dir,
            limit=limit,
            overwrite=overwrite,
            allow_self_filter=allow_self_filter,
            allow_overlap=allow_overlap,
            skip_bad_rows=skip_bad_rows,
            reviewed_only=reviewed_only,
            timeout_s=timeout,
        )
    except ValidationError as exc:
        fail(options_error(exc))
    try:
        stats = export_judgebench_pro(run_dir, options=options, progress=None if quiet else progress_bar)
    except ValidationError as exc:
        fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_counts(f"JudgeBench-Pro export of {stats.run_name}", stats.counts.model_dump())
    _print_skipped(stats)
    length = stats.length
    if length.n:
        console.print(
            f"lengths (whitespace tokens): chosen {number(length.chosen)}, original rejected {number(length.original_rejected)}, "
            f"new rejected {number(length.new_rejected)} ({percent(length.relative_increase)} increase)",
            highlight=False,
        )
    console.print(
        f"wrote {out}: data.jsonl, data.parquet ({plural(stats.counts.kept_by_filter, 'sample')}), README.md, stats.json, "
        f"variants.jsonl, annotation.csv/.jsonl (annotate, then `bias-discovery export apply-annotations {out} SHEET`)",
        highlight=False,
    )


@export_app.command("apply-annotations")
def export_apply_annotations_cmd(
    directory: Path = typer.Argument(..., metavar="DIR", help="An exported Pro set."),
    sheet: Path = typer.Argument(..., metavar="SHEET", help="The filled annotation sheet (.csv or .jsonl)."),
) -> None:
    """Apply two annotators' verdicts to a Pro set.

    Keep/reject, adjudication on disagreement: drops the rejected samples, reports Cohen's kappa."""
    from ..api.exports import apply_annotations

    try:
        stats = apply_annotations(directory, sheet)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    ann = stats.annotation
    assert ann is not None  # apply_annotations always records it
    kappa = number(ann.kappa, digits=3, missing="undefined (one label everywhere)")
    console.print(
        f"{plural(ann.n_annotated, 'sample')} annotated: agreement {percent(ann.observed_agreement)}, Cohen's kappa {kappa}, "
        f"{ann.n_adjudicated} adjudicated; kept {ann.n_kept}, rejected {ann.n_rejected}. "
        f"Updated {directory / 'data.jsonl'}, data.parquet, stats.json, README.md.",
        highlight=False,
    )


@export_app.command("dpo")
def export_dpo_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    data: str = option(DpoExportOptions, "data", required=True),
    out: Path = option(DpoExportOptions, "out", required=True, help=_OUT_HELP),
    biases: str | None = option(DpoExportOptions, "biases"),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DpoExportOptions, "limit", help="Use a seeded sample of N pairs (the run's seed)."),
    fmt: str = option(DpoExportOptions, "fmt"),
    include_original: bool = option(DpoExportOptions, "include_original"),
    overwrite: bool = OVERWRITE,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    reviewed_only: bool = REVIEWED_ONLY,
    quiet: bool = QUIET,
    timeout: float | None = TIMEOUT,
) -> None:
    """Bias-augmented DPO data from a run's biases.

    Rejected responses rewritten with the run's biases; prompt/chosen/rejected for TRL's
    DPOTrainer."""
    from ..api.exports import export_dpo
    from ..progress import progress_bar

    try:
        options = DpoExportOptions(
            out=out,
            data=data,
            biases=biases,
            data_dir=data_dir,
            limit=limit,
            fmt=fmt,  # type: ignore[arg-type]  # validated here: a bad one is refused naming --format
            include_original=include_original,
            overwrite=overwrite,
            skip_bad_rows=skip_bad_rows,
            reviewed_only=reviewed_only,
            timeout_s=timeout,
        )
    except ValidationError as exc:
        fail(options_error(exc))  # e.g. a --format that is neither standard nor conversational
    try:
        stats = export_dpo(run_dir, options=options, progress=None if quiet else progress_bar)
    except ValidationError as exc:
        fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_counts(f"DPO export of {stats.run_name}", stats.counts.model_dump())
    _print_skipped(stats)
    console.print(
        f"wrote {out}: data.jsonl, data.parquet ({plural(stats.counts.rows, 'row')}), README.md, stats.json",
        highlight=False,
    )


_SRC_HELP = (
    "A JudgeBench-Pro export (`export judgebench-pro`: its samples) or a run directory (its validation "
    "rewrites of the selected biases)."
)
_HARNESS_BIASES_HELP = (
    f"Run directory only: which biases' validation rewrites to export. {field_help(ExportSelection, 'biases')}"
)


def _harness_command(
    kind: Literal["lm-eval", "inspect"], summary: str, done: Callable[[HarnessExport, Path], str]
) -> None:
    """Register `export KIND SRC --out DIR` (the lm-eval and inspect commands share their
    options); `done` words what was written."""

    def command(
        src: Path = typer.Argument(..., metavar="SRC", help=_SRC_HELP),
        out: Path = option(HarnessExportOptions, "out", required=True, help=_OUT_HELP),
        biases: str | None = option(HarnessExportOptions, "biases", help=_HARNESS_BIASES_HELP),
        task_name: str | None = option(HarnessExportOptions, "task_name"),
        overwrite: bool = OVERWRITE,
        reviewed_only: bool = option(
            HarnessExportOptions,
            "reviewed_only",
            help=f"Run directory only. {field_help(ExportSelection, 'reviewed_only')}",
        ),
    ) -> None:
        from ..api.exports import export_harness

        try:
            options = HarnessExportOptions(
                out=out, biases=biases, task_name=task_name, overwrite=overwrite, reviewed_only=reviewed_only
            )
        except ValidationError as exc:
            fail(options_error(exc))
        try:
            info = export_harness(kind, src, options=options)
        except BiasDiscoveryError as exc:
            fail(str(exc))
        console.print(done(info, out), highlight=False)

    command.__doc__ = summary
    export_app.command(kind)(command)


_harness_command(
    "lm-eval",
    "An lm-evaluation-harness task from a Pro set or a run.\n\nYAML, utils.py and data: pairwise multiple choice, "
    "both orders, JudgeBench's score.",
    lambda info, out: (
        f"wrote {out}: {info.task}.yaml ({plural(info.samples, 'sample')} x 2 orders), {plural(len(info.bias_tasks), 'per-bias task')}"
        f" (tag {info.task}_per_bias), utils.py, data.jsonl, README.md, export.json. Run: "
        f"lm_eval --model hf --model_args pretrained=MODEL --tasks {info.task} --include_path {out}"
    ),
)
_harness_command(
    "inspect",
    "An inspect_ai task file from a Pro set or a run.\n\nDataset, multiple_choice solver and scorer: both orders, "
    "JudgeBench's score.",
    lambda info, out: (
        f"wrote {out}: task.py (task {info.task}, {plural(info.samples, 'sample')} x 2 orders), data.jsonl, README.md, "
        f"export.json. Run: inspect eval {out / 'task.py'} --model PROVIDER/MODEL"
    ),
)

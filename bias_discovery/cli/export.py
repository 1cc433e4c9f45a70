"""`export`: a JudgeBench-Pro-style benchmark, annotations, bias-augmented DPO data, harness tasks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import typer
from pydantic import ValidationError
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import number, percent, plural
from ..options import DataOptions
from .common import PLAIN_HELP, app, console, fail, format_validation_error
from .options import ALLOW_OVERLAP, DATA_DIR, OVERWRITE, QUIET, REVIEWED_ONLY, SKIP_BAD_ROWS, TIMEOUT, flag, option

export_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=PLAIN_HELP,
    help="Turn a run's biases into data.\n\nA JudgeBench-Pro-style benchmark, bias-augmented DPO data, harness tasks (lm-eval, inspect).",
)
app.add_typer(export_app, name="export")

_BIASES_HELP = (
    "all (every validated discovered bias, the default) | top-K (the K with the largest Δerror) | "
    "ID,NAME,... (any biases of the run's library, seeds included)."
)
_REVIEWED_HELP = (
    "Only biases whose newest review (`bias-discovery review`) is confirmed: the others are left out of all/top-K; "
    "a named one is an error."
)


def _print_counts(title: str, counts: dict) -> None:
    table = Table(title=title)
    table.add_column("step")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    console.print(table)


def _print_skipped(stats: dict) -> None:
    if stats.get("skipped_rows"):
        console.print(
            f"skipped {plural(stats['skipped_rows'], 'bad data row')} at load (--skip-bad-rows)", highlight=False
        )


@export_app.command("judgebench-pro")
def export_judgebench_pro_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    out: Path = flag("out", ..., help="Output directory (created; must not exist or be empty unless --overwrite)."),
    biases: str | None = flag("biases", None, help=_BIASES_HELP),
    variants: int = flag("variants", 10, min=1, help="Biased variants per test pair (K; the paper uses 10)."),
    filter_model: str | None = flag(
        "filter_model",
        None,
        help="Adversarial filter judge, provider/model: a strong judge other than the run's target (the paper uses Qwen3-32B). Default: the run's target, refused without --allow-self-filter.",
    ),
    filter_base_url: str | None = flag("filter_base_url", None, help="Server URL for an openai/ filter model."),
    allow_self_filter: bool = flag(
        "allow_self_filter",
        False,
        help="Allow the run's target as the filter: its error on the set is then 100 % by construction.",
    ),
    allow_overlap: bool = ALLOW_OVERLAP,
    checker_model: str | None = flag(
        "checker_model",
        None,
        help="Equivalence checker, provider/model (default: the filter model, not the teacher that wrote the rewrites).",
    ),
    checker_base_url: str | None = flag("checker_base_url", None, help="Server URL for an openai/ checker model."),
    data: str | None = flag("data", None, help="Test pairs (default: the run's test data): a named set or a file."),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="Use a seeded sample of N test pairs (the run's seed)."),
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
        stats = export_judgebench_pro(
            run_dir,
            out,
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
            progress=None if quiet else progress_bar,
            timeout_s=timeout,
        )
    except ValidationError as exc:
        fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_counts(f"JudgeBench-Pro export of {stats['run_name']}", stats["counts"])
    _print_skipped(stats)
    length = stats["length"]
    if length["n"]:
        console.print(
            f"lengths (whitespace tokens): chosen {number(length['chosen'])}, original rejected {number(length['original_rejected'])}, "
            f"new rejected {number(length['new_rejected'])} ({percent(length['relative_increase'])} increase)",
            highlight=False,
        )
    console.print(
        f"wrote {out}: data.jsonl, data.parquet ({plural(stats['counts']['kept_by_filter'], 'sample')}), README.md, stats.json, "
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
    ann = stats["annotation"]
    kappa = number(ann["kappa"], digits=3, missing="undefined (one label everywhere)")
    console.print(
        f"{plural(ann['n_annotated'], 'sample')} annotated: agreement {percent(ann['observed_agreement'])}, Cohen's kappa {kappa}, "
        f"{ann['n_adjudicated']} adjudicated; kept {ann['n_kept']}, rejected {ann['n_rejected']}. "
        f"Updated {directory / 'data.jsonl'}, data.parquet, stats.json, README.md.",
        highlight=False,
    )


@export_app.command("dpo")
def export_dpo_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    data: str = flag(
        "data",
        ...,
        help="Preference pairs: a named set (rewardbench, judgebench, demo) or a .jsonl/.json/.parquet file.",
    ),
    out: Path = flag("out", ..., help="Output directory (created; must not exist or be empty unless --overwrite)."),
    biases: str | None = flag("biases", None, help=_BIASES_HELP),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="Use a seeded sample of N pairs (the run's seed)."),
    fmt: str = flag(
        "format",
        "standard",
        help="standard (strings) | conversational (role/content messages): TRL's preference formats.",
    ),
    include_original: bool = flag("include_original", False, help="Also keep each original (unperturbed) pair."),
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
        stats = export_dpo(
            run_dir,
            out,
            data=data,
            biases=biases,
            data_dir=data_dir,
            limit=limit,
            fmt=fmt,  # type: ignore[arg-type]
            include_original=include_original,
            overwrite=overwrite,
            skip_bad_rows=skip_bad_rows,
            reviewed_only=reviewed_only,
            progress=None if quiet else progress_bar,
            timeout_s=timeout,
        )
    except ValidationError as exc:
        fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_counts(f"DPO export of {stats['run_name']}", stats["counts"])
    _print_skipped(stats)
    console.print(
        f"wrote {out}: data.jsonl, data.parquet ({plural(stats['counts']['rows'], 'row')}), README.md, stats.json",
        highlight=False,
    )


_SRC_HELP = (
    "A JudgeBench-Pro export (`export judgebench-pro`: its samples) or a run directory (its validation "
    "rewrites of the selected biases)."
)
_HARNESS_BIASES_HELP = f"Run directory only: which biases' validation rewrites to export. {_BIASES_HELP}"


def _harness_command(kind: Literal["lm-eval", "inspect"], summary: str, done: Callable[[dict, Path], str]) -> None:
    """Register `export KIND SRC --out DIR` (the lm-eval and inspect commands share their
    options); `done` words what was written."""

    def command(
        src: Path = typer.Argument(..., metavar="SRC", help=_SRC_HELP),
        out: Path = flag("out", ..., help="Output directory (created; must not exist or be empty unless --overwrite)."),
        biases: str | None = flag("biases", None, help=_HARNESS_BIASES_HELP),
        task_name: str | None = flag("task_name", None, help="Task name (default: the run's name + _pro or _biased)."),
        overwrite: bool = OVERWRITE,
        reviewed_only: bool = flag("reviewed_only", False, help=f"Run directory only. {_REVIEWED_HELP}"),
    ) -> None:
        from ..api.exports import export_harness

        try:
            info = export_harness(
                kind, src, out, biases=biases, task_name=task_name, overwrite=overwrite, reviewed_only=reviewed_only
            )
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
        f"wrote {out}: {info['task']}.yaml ({plural(info['samples'], 'sample')} x 2 orders), {plural(len(info['bias_tasks']), 'per-bias task')}"
        f" (tag {info['task']}_per_bias), utils.py, data.jsonl, README.md, export.json. Run: "
        f"lm_eval --model hf --model_args pretrained=MODEL --tasks {info['task']} --include_path {out}"
    ),
)
_harness_command(
    "inspect",
    "An inspect_ai task file from a Pro set or a run.\n\nDataset, multiple_choice solver and scorer: both orders, "
    "JudgeBench's score.",
    lambda info, out: (
        f"wrote {out}: task.py (task {info['task']}, {plural(info['samples'], 'sample')} x 2 orders), data.jsonl, README.md, "
        f"export.json. Run: inspect eval {out / 'task.py'} --model PROVIDER/MODEL"
    ),
)

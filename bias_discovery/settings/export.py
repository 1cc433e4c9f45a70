"""The options of the exports (`ProExportOptions`, `DpoExportOptions`, `HarnessExportOptions`):
the knobs of one `bias-discovery export ...` invocation, stated once. The command line makes
its flags from these fields (`cli._options.option`), and `api.export_judgebench_pro`,
`api.export_dpo` and `api.export_harness` take them and keyword overrides of their fields.

They sit below the exports' logic so that building the command line does not import it. The
shared fields (`out`, `overwrite`, `data_dir`, `limit`, `skip_bad_rows`, `allow_overlap`,
`timeout_s`) are inherited from `bias_discovery.options`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..options import CallOptions, DataOptions, OperationOptions, OutputOptions, OverlapOptions

__all__ = ["DpoExportOptions", "DpoFormat", "ExportSelection", "HarnessExportOptions", "ProExportOptions"]

DpoFormat = Literal["standard", "conversational"]
"""TRL's preference formats: strings, or role/content messages."""


class ExportSelection(OperationOptions):
    """Which of a run's biases an export takes."""

    biases: str | None = None
    """all (every validated discovered bias, the default) | top-K (the K with the largest
    Δerror) | ID,NAME,... (any biases of the run's library, seeds included)."""
    reviewed_only: bool = False
    """Only biases whose newest review (`bias-discovery review`) is confirmed: the others are
    left out of all/top-K; a named one is an error."""


class ProExportOptions(ExportSelection, DataOptions, OutputOptions, OverlapOptions, CallOptions):
    """How a JudgeBench-Pro set is built from a run (`export judgebench-pro`'s options, the
    arguments of `api.export_judgebench_pro`). `out` is required; `data` defaults to the run's
    test data and `limit` takes a seeded sample of it (the run's seed); `timeout_s` replaces
    every model's request deadline (unset: the run's)."""

    variants: int = Field(default=10, ge=1)
    """Biased variants per test pair (K; the paper uses 10)."""
    filter_model: str | None = None
    """Adversarial filter judge, provider/model: a strong judge other than the run's target
    (the paper uses Qwen3-32B). Default: the run's target, refused without
    `allow_self_filter`."""
    filter_base_url: str | None = None
    """Server URL for an openai/ filter model."""
    checker_model: str | None = None
    """Equivalence checker, provider/model (default: the filter model, not the teacher that
    wrote the rewrites)."""
    checker_base_url: str | None = None
    """Server URL for an openai/ checker model."""
    data: str | None = None
    """Test pairs (default: the run's test data): a named set or a file."""
    allow_self_filter: bool = False
    """Allow the run's target as the filter: its error on the set is then 100 % by
    construction."""


class DpoExportOptions(ExportSelection, DataOptions, OutputOptions, CallOptions):
    """How bias-augmented DPO data is built from a run (`export dpo`'s options, the arguments
    of `api.export_dpo`). `out` and `data` are required; `limit` takes a seeded sample (the
    run's seed); `timeout_s` replaces the teacher's request deadline (unset: the run's)."""

    data: str | None = None
    """Preference pairs: a named set (rewardbench, judgebench, demo) or a .jsonl/.json/.parquet
    file."""
    fmt: DpoFormat = "standard"
    """standard (strings) | conversational (role/content messages): TRL's preference formats."""
    include_original: bool = False
    """Also keep each original (unperturbed) pair."""


class HarnessExportOptions(ExportSelection, OutputOptions):
    """How a Pro set or a run becomes a harness task (`export lm-eval` / `export inspect`'s
    options, the arguments of `api.export_harness`). `out` is required; `biases` and
    `reviewed_only` apply to a run directory only."""

    task_name: str | None = None
    """Task name (default: the run's name + _pro or _biased)."""

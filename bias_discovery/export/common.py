"""What every export shares: output staging, data files, lengths and the card's pieces.

(The bias selection, the run's models and the overlap check that exports, replications and
audits share live in `bias_discovery.run`: `selection`, `context`, `overlap`.)

- `check_output_dir` / `staged_output`: an export is written into a temporary directory next
  to ``--out`` and renamed into place at the end; a failure leaves nothing half-written.
- `write_data_files`: ``data.jsonl`` and ``data.parquet`` with an explicit schema (parquet
  written atomically, an empty set as a file without row groups).
- `length_stats`: average whitespace-token lengths (see `count_tokens`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ExportError
from ..formatting import plural
from ..io import atomic_write_jsonl
from ..library import Bias, ScoreShift
from ..llm.config import ModelConfig
from ..options import OutputOptions
from ..run.reviews import Review
from ..stages.rewrite_checks import TOKEN_COUNT_METHOD, count_tokens
from ..stats import Effect


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("bias-discovery")
    except Exception:  # pragma: no cover - running from an uninstalled checkout
        return "unknown"


COMPARISON_FIELDS = {"n", "delta", "ci_low", "ci_high", "p_value", "p_adjusted"}
"""What the exports report of each validation comparison (vs baseline, vs placebo)."""


class ComparisonSummary(BaseModel):
    """What the exports report of one validation comparison (`common.COMPARISON_FIELDS`)."""

    n: int
    delta: float
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None


class SecondarySummary(ComparisonSummary):
    """A pointwise judge's secondary comparison: which measure, against which control."""

    measure: str
    control: str | None = None


class ReviewSummary(BaseModel):
    """What the exports give of a bias's newest review (`run.reviews.Review`)."""

    decision: str
    reviewer: str
    reviewed_at: str
    note: str = ""


class BiasSummary(BaseModel):
    """One bias of the set as `common.bias_summary` writes it: its reported effect, its
    comparisons with CI, n and p, and what the decision controls."""

    id: str
    name: str
    definition: str
    manifestations: list[str] = Field(default_factory=list)
    origin: str
    iteration: int | None = None
    validated: bool = False
    decided_against: str | None = None
    effect: Effect | None = None
    delta_error: float | None = None
    p_value: float | None = None
    vs_baseline: ComparisonSummary | None = None
    vs_placebo: ComparisonSummary | None = None
    error_statement: str | None = None
    review: ReviewSummary | None = None
    """A reviewer's newest decision about the bias (`bias-discovery review`); None: not reviewed."""
    secondary: SecondarySummary | None = None
    """Pointwise judges: the measure that did not decide, reported, never decisive."""
    score_shift: ScoreShift | None = None
    """Pointwise judges: the rejected response's score shift against the decisive control, in
    scale points and SDs."""


def bias_summary(bias: Bias, review: Review | None = None) -> dict[str, Any]:
    """What a dataset card and stats.json say about one bias: its reported effect (against the
    control that decided, with CI, n and the estimator), its comparisons against the baseline
    and, when the run had one, the placebo, each with CI, n and p, what the decision controls
    (a Δ without its comparison, n and uncertainty is not a finding), and a reviewer's newest
    decision about it (`review`, None: not reviewed)."""
    v = bias.validation
    placebo = None if v is None else v.vs_placebo
    decided = None if v is None else v.decisive_comparison
    return {
        "id": bias.id,
        "name": bias.name,
        "definition": bias.definition,
        "manifestations": list(bias.manifestations),
        "origin": bias.origin.kind,
        "iteration": bias.origin.iteration,
        "validated": bool(v is not None and v.accepted),
        "decided_against": None if v is None else v.decisive,
        "effect": None if v is None else v.effect.model_dump(mode="json"),
        "delta_error": None if v is None else v.effect.delta,
        "p_value": None if decided is None else decided.p_value,
        "vs_baseline": None if v is None else v.vs_baseline.model_dump(include=COMPARISON_FIELDS),
        "vs_placebo": None if placebo is None else placebo.model_dump(include=COMPARISON_FIELDS),
        "error_statement": None if v is None else v.error_statement,
        "review": None
        if review is None
        else review.model_dump(include={"decision", "reviewer", "reviewed_at", "note"}),
        "secondary": None
        if v is None or v.secondary is None
        else v.secondary.model_dump(include=COMPARISON_FIELDS | {"measure", "control"}),
        "score_shift": None if v is None or v.score_shift is None else v.score_shift.model_dump(mode="json"),
    }


def review_paragraph(biases: Sequence[BiasSummary | Mapping[str, Any]], *, reviewed_only: bool) -> str | None:
    """The card's sentence on human review: each bias's newest decision (`BiasSummary.review`),
    and whether the export kept only confirmed biases; None when no bias was reviewed."""
    summaries = [b if isinstance(b, BiasSummary) else BiasSummary.model_validate(b) for b in biases]
    if not reviewed_only and not any(b.review for b in summaries):
        return None
    parts = []
    for b in summaries:
        r = b.review
        if r is None:
            parts.append(f"`{b.id}` not reviewed")
        else:
            note = f' ("{one_line(r.note)}")' if r.note else ""
            parts.append(f"`{b.id}` {r.decision} by {one_line(r.reviewer)} on {r.reviewed_at[:10]}{note}")
    scope = "Only biases a reviewer confirmed were exported (`--reviewed-only`). " if reviewed_only else ""
    return f"Human review (`bias-discovery review`, the newest decision per bias): {scope}" + "; ".join(parts) + "."


def model_config(spec: str | None, base_url: str | None, default: ModelConfig) -> ModelConfig:
    """`spec` (+ `base_url`) as a ModelConfig, or `default` when no spec is given."""
    if spec is None:
        if base_url:
            return default.model_copy(update={"base_url": base_url})
        return default
    return ModelConfig.from_spec(spec, **({"base_url": base_url} if base_url else {}))


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


def atomic_write_parquet(path: Path, rows: Sequence[Mapping[str, Any]], schema: Any) -> None:
    """Write `rows` as parquet with `schema`, atomically (temp file + rename).

    An empty set is written without any row group: `datasets` then reads it without error
    (a zero-row row group makes its parquet reader fail on "BatchSize must be greater than 0").
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        if rows:
            pq.write_table(pa.Table.from_pylist([dict(r) for r in rows], schema=schema), tmp)
        else:
            pq.ParquetWriter(tmp, schema).close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_data_files(directory: Path, rows: Sequence[Mapping[str, Any]], schema: Any) -> None:
    """``data.jsonl`` and ``data.parquet`` in `directory`, the same rows in both, columns in
    schema order."""
    names = list(schema.names)
    ordered = [{name: row.get(name) for name in names} for row in rows]
    atomic_write_jsonl(directory / "data.jsonl", ordered)
    atomic_write_parquet(directory / "data.parquet", ordered, schema)


def string_schema(names: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in names])


# --------------------------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------------------------


class LengthStats(BaseModel):
    """Average lengths in whitespace tokens (`count_tokens`), over `n` samples."""

    n: int
    method: str = TOKEN_COUNT_METHOD
    chosen: float | None
    original_rejected: float | None
    new_rejected: float | None
    relative_increase: float | None
    """(new_rejected - original_rejected) / original_rejected; the paper reports +8.4 %."""


def length_stats(triples: Sequence[tuple[str, str, str]]) -> LengthStats:
    """`triples` = (chosen, original rejected, new rejected) per sample."""
    n = len(triples)
    if n == 0:
        return LengthStats(n=0, chosen=None, original_rejected=None, new_rejected=None, relative_increase=None)
    chosen = sum(count_tokens(c) for c, _, _ in triples) / n
    original = sum(count_tokens(o) for _, o, _ in triples) / n
    new = sum(count_tokens(r) for _, _, r in triples) / n
    return LengthStats(
        n=n,
        chosen=chosen,
        original_rejected=original,
        new_rejected=new,
        relative_increase=(new - original) / original if original else None,
    )


CARD_MISSING = "n/a"
"""What a dataset card prints for a missing number (`bias_discovery.formatting` formats them)."""


def dataset_card_meta(directory: Path, *, split: str, n_rows: int, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The card's YAML metadata: `extra`, then `configs` (the default config reads
    ``data.parquet`` as `split`) and `dataset_info` (rows and bytes of the file).

    `dataset_info` is not decoration: with `configs` in a card, `datasets` keys its cache on
    the folder name and the card only, not on the data files, so a rewritten ``data.parquet``
    (apply-annotations, --overwrite) would be served from the stale cache. Rows and bytes in
    the card change that key whenever the data changes (and `datasets` checks the row count).
    """
    path = directory / "data.parquet"
    size = path.stat().st_size if path.is_file() else 0
    return {
        **extra,
        "configs": [{"config_name": "default", "data_files": [{"split": split, "path": "data.parquet"}]}],
        "dataset_info": {
            "splits": [{"name": split, "num_bytes": size, "num_examples": n_rows}],
            "download_size": size,
            "dataset_size": size,
        },
    }


def yaml_front_matter(meta: Mapping[str, Any]) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(dict(meta), sort_keys=False, allow_unicode=True) + "---\n"


@lru_cache(maxsize=1)
def _card_environment() -> Any:  # a jinja2 Environment (jinja2 is imported on first use)
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    # Markdown, not HTML: nothing is escaped (the cards' text is ours and the run's own names,
    # written into a file, never served); every name the template uses must be given.
    env = Environment(
        loader=FileSystemLoader(Path(__file__).with_name("templates")),
        autoescape=False,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(plural=plural, one_line=one_line)  # `n | plural("sample")`, `name | one_line`
    return env


def card_template(name: str) -> Any:
    """A dataset card's Jinja template (``export/templates/NAME``: a jinja2 Template); values
    and helpers are passed to its `render`."""
    return _card_environment().get_template(name)


def settings_text(settings: Mapping[str, Any]) -> str:
    """``positions=both, seed=42, ...`` for a card."""
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def one_line(text: str) -> str:
    """Collapse whitespace so a definition fits a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


class ExportStats(BaseModel):
    """What the stats.json of every export of a run says of it (a Pro set's `ProStats`, a DPO
    set's `DpoStats` add their own): the run, the data, the biases, how and when it was built.
    Keys a record does not name are kept as they are."""

    model_config = ConfigDict(extra="allow")

    run_name: str
    run_dir: str
    library_file: str
    data: str
    limit: int | None = None
    skipped_rows: int = 0
    bias_selection: str = "all"
    reviewed_only: bool = False
    """Only biases a reviewer confirmed were exported (`--reviewed-only`)."""
    seed: int
    created_at: str
    bias_discovery_version: str
    perturb_settings: dict[str, Any] = Field(default_factory=dict)
    biases: list[BiasSummary] = Field(default_factory=list)
    length: LengthStats


_Options = TypeVar("_Options", bound=OutputOptions)


def export_options(
    cls: type[_Options], options: _Options | None, out: Path | str | None, overrides: Mapping[str, Any]
) -> _Options:
    """An export's options: `options` (or the defaults) with the keyword `overrides` and, when
    given, the positional `out` (the way every export has been called) replacing their fields."""
    return cls.with_overrides(options, {**overrides, **({"out": out} if out is not None else {})})


def required_out(options: OutputOptions) -> Path:
    """An export's `out`, which has no default: refused when unset."""
    if options.out is None:
        raise ExportError("`out` is required: the directory to write the export to")
    return Path(options.out)

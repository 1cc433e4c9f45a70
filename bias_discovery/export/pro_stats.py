"""A JudgeBench-Pro set's stats.json as a typed record (`ProStats`): what the export writes,
what `apply-annotations`, `judge --compare` and the harness exports read, and what the card is
rendered from. Fields that older sets lack have defaults, so every set exported so far reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..data.overlap import DataOverlap
from ..errors import ExportError
from .common import ExportStats

KIND = "judgebench-pro"


def read_pro_stats(directory: Path, *, label: str) -> ProStats:
    """stats.json of the exported Pro set in `directory` (the caller checked it exists),
    refused when it is not JSON or not a Pro set's; `label` starts the kind error."""
    stats_path = directory / "stats.json"
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ExportError(f"{stats_path}: not valid JSON ({exc})") from None
    kind = stats.get("kind") if isinstance(stats, dict) else None
    if kind != KIND:
        raise ExportError(f"{label}: stats.json says kind {kind!r}, expected {KIND!r}")
    try:
        return ProStats.model_validate(stats)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ExportError(f"{stats_path}: not a Pro set's stats.json ({where}: {first['msg']})") from None


class ProCounts(BaseModel):
    """Every count of the pipeline. `generated` = the sum of all drops + `kept_by_filter`."""

    test_pairs: int
    biases: int
    variants_per_pair: int
    generated: int = 0
    """Variants asked of the teacher: test_pairs x variants_per_pair."""
    dropped_invalid_perturbation: int = 0
    invalid_perturbation_reasons: dict[str, int] = Field(default_factory=dict)
    """truncated / empty / engine_error / unchanged (identical to the original rejected)."""
    dropped_duplicate: int = 0
    """Same (question, new rejected) text as an earlier variant."""
    equivalence_checked: int = 0
    equivalence_extracted: int = 0
    """Of those, decided by reading the final answers mechanically (the rest: the checker model)."""
    dropped_equivalent: int = 0
    """The checker said the new rejected response reaches the chosen one's final answer."""
    dropped_check_invalid: int = 0
    """The checker's answer was unusable (truncated, error, neither same nor different)."""
    filter_judged: int = 0
    dropped_filter_correct: int = 0
    """The filter model picked the chosen response in at least one order."""
    dropped_filter_tie: int = 0
    """The filter model called a tie in an order and never picked the chosen response: not
    fooled in both orders, but not right either."""
    dropped_filter_invalid: int = 0
    """A verdict of the filter model was invalid (unparseable, truncated, engine error)."""
    kept_by_filter: int = 0
    """Wrong in both orders: the samples of the set before human verification."""
    after_annotation: int | None = None
    """Samples left after `apply-annotations`; None until annotations are applied."""


class CheckerControl(BaseModel):
    """The equivalence checker asked about unmodified originals: the rejected response of each
    pair it checked a variant of, against the chosen one. Their answers differ by construction,
    so every "same" is a false "changed"."""

    n_asked: int = 0
    """Distinct original pairs asked (the pairs with a variant the rules could not decide)."""
    n_usable: int = 0
    """Of those, answered "same" or "different" (the n of the rate)."""
    n_same: int = 0
    false_changed_rate: float | None = None
    """n_same / n_usable: how often the checker calls a different answer "same" (a variant it
    calls "same" is dropped, so this is roughly the share of good variants it throws away)."""
    ci_low: float | None = None
    ci_high: float | None = None
    """95 % Wilson interval of the rate."""


class ProModels(BaseModel):
    """The models that built the set (specs)."""

    teacher: str
    checker: str
    filter: str
    target: str


class ProAnnotation(BaseModel):
    """The human verification applied by `apply-annotations`."""

    sheet: str
    applied_at: str
    n_annotated: int
    n_agreed: int
    observed_agreement: float | None
    kappa: float | None
    kappa_method: str = "cohen (annotator_1 vs annotator_2)"
    n_disagreements: int = 0
    n_adjudicated: int = 0
    n_overruled: int = 0
    n_kept: int
    n_rejected: int
    verdict_values: list[str] = Field(default_factory=list)


class ProStats(ExportStats):
    """stats.json of a Pro set."""

    kind: Literal["judgebench-pro"] = "judgebench-pro"
    models: ProModels
    self_filter: bool = False
    self_checked: bool = False
    filter_judge_settings: dict[str, Any] = Field(default_factory=dict)
    judge_mode: Literal["pairwise", "pointwise"] = "pairwise"
    """The run's judge mode: a pointwise run's set is filtered by scores, and its rows say
    `judge_mode` and `scale` (each response to be scored alone)."""
    scale: str | None = None
    """A pointwise set's scale (`judge.scale`)."""
    data_overlap: DataOverlap | None = None
    counts: ProCounts
    per_bias: dict[str, dict[str, int]] = Field(default_factory=dict)
    per_domain: dict[str, dict[str, int]] = Field(default_factory=dict)
    checker_control: CheckerControl | None = None
    annotation: ProAnnotation | None = None

    @property
    def n_samples(self) -> int:
        """Samples in the set: after annotation when it was annotated, else kept by the filter."""
        c = self.counts
        return c.after_annotation if c.after_annotation is not None else c.kept_by_filter

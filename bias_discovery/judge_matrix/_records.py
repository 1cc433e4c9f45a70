"""What a matrix writes: matrix.json (`MatrixResult`) and the rows of matrix.csv.

Stable names, read by other tools: `judges`, `biases`, `cells` (judge, bias, delta, ci_low,
ci_high, p_adjusted, accepted, n, mde), `jury` (the same per bias), `family_statement` and
`calls` (`teacher`, `judges` per judge: the calls paid by the invocation that wrote the file).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..data.overlap import DataOverlap
from ..judging import Judgment
from ..run.reviews import Review
from ..stats import EffectDifference, PairedComparison
from ..tables import Tabular, columns_of

__all__ = [
    "CSV_COLUMNS",
    "JudgeComparison",
    "JudgeRecord",
    "MatrixCalls",
    "MatrixCell",
    "MatrixJudgment",
    "MatrixResult",
    "MatrixRow",
    "MatrixSettingsRecord",
    "RewriteSummary",
    "csv_rows",
]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MatrixCell(_Record):
    """One judge (or the jury) on one bias: its Δerror against the decisive control, on the
    test items valid in both arms, decided with every other cell of the matrix as one family."""

    judge: str
    """The judge's name, or `jury`."""
    bias: str
    """The bias id."""
    bias_name: str
    control: Literal["placebo", "baseline"]
    """What Δ is measured against: the same items rewritten neutrally (placebo) or unchanged."""
    delta: float
    """Error with the bias minus error with the control, on the same `n` items (the reported
    effect, `effect_method`)."""
    ci_low: float | None
    ci_high: float | None
    """Paired bootstrap CI of `delta` (at `MatrixResult.settings.confidence`)."""
    effect_method: str
    """How `delta` and its CI are estimated (`stats.FULL_SAMPLE`: every cell sees every item)."""
    p_value: float | None
    p_adjusted: float | None
    """`p_value` adjusted across the whole matrix (every cell and the jury row)."""
    accepted: bool
    n: int
    """Test items valid in both arms (rewrite valid, both verdicts valid)."""
    n_excluded_invalid: int
    mde: float | None
    """Smallest Δ the test detects with `MatrixResult.settings.power` at this n, the matrix's
    corrected level and the hypothesis Δ <= min_delta (None: none is detectable at this n)."""
    control_error: float
    arm_error: float
    measure: str = "pair error"
    """What the cell's Δ measures: `pair error` (a pairwise judge picked the rejected response),
    `pointwise pair error` (a pointwise judge scored the rejected response at least as high as
    the chosen one, each scored alone), or `jury pair error` (the jury's majority). All are error
    rates on the same items, so one family and the judges' comparisons hold them side by side."""
    comparisons: dict[str, PairedComparison] = Field(default_factory=dict)
    """Every comparison made (`placebo`, `baseline`), the decisive one decided."""


class _RowKind(_Record):
    kind: Literal["judge", "jury"]
    """judge: one judge's cell; jury: the jury row's cell."""


class MatrixRow(MatrixCell, _RowKind):
    """A row of matrix.csv (and of `MatrixResult.to_pandas()`): one judge x bias cell (`kind`
    judge) or the jury's row of one bias (`kind` jury), with a cell's fields but `CSV_EXCLUDED`."""

    # pydantic orders fields from the last base to the first: `kind` comes first.


CSV_EXCLUDED = ("effect_method", "comparisons")
"""The cell fields matrix.csv leaves out: the estimator (the same full-sample one in every cell)
and the nested comparisons (in matrix.json)."""


class JudgeComparison(EffectDifference):
    """Per bias, two judges on the same items: is judge A's Δ larger than judge B's?"""

    bias: str
    judge_a: str
    judge_b: str
    larger: str | None = None
    """The judge with the larger Δ when the difference is significant, else None."""


class JudgeRecord(_Record):
    """One judge's configuration and its numbers that are not per bias."""

    name: str
    model: str
    prompt: str
    mitigation: str
    calls_per_item: int
    baseline_error: float | None
    """Error on the unchanged test items (valid verdicts only)."""
    n_baseline_valid: int
    rewrite_effect: PairedComparison | None = None
    """The placebo against the unchanged items: what rewriting alone does to this judge."""


class RewriteSummary(_Record):
    """The teacher's rewrites for one arm (a bias, or the placebo), shared by every judge."""

    bias: str
    """The bias id, or `placebo`."""
    n: int
    n_valid: int
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    n_answer_checked: int | None = None
    n_answer_changed: int | None = None
    n_answer_unverifiable: int | None = None
    n_answer_extracted: int | None = None
    answer_change_rate: float | None = None
    length_ratio: float | None = None
    """Whitespace tokens of the valid rewrites over those of their originals."""


class MatrixSettingsRecord(_Record):
    """How the matrix decided (matrix.json's `settings`)."""

    acceptance: Literal["paired", "paper"]
    control: Literal["placebo", "baseline"]
    """The decisive control."""
    alpha: float
    correction: Literal["holm", "bh", "none"]
    min_delta: float
    """H0 of each cell: Δ <= min_delta."""
    confidence: float
    power: float
    """Power at which the smallest detectable Δ is given."""
    n_boot: int
    positions: Literal["both", "swap", "fixed"]
    """The orders every judge and the jury see each item in."""


class MatrixCalls(_Record):
    """Model calls this invocation paid (sent to a model: call-cache hits are not counted)."""

    teacher: int = 0
    checker: int = 0
    judges: dict[str, int] = Field(default_factory=dict)


class MatrixJudgment(Judgment):
    """One judge call of the matrix (judgments.jsonl)."""

    judge: str
    arm: str
    """`baseline` (the unchanged pair), `placebo`, or the id of the bias in the rejected response."""


class MatrixResult(_Record, Tabular):
    """matrix.json. As a table (`to_pandas()`, `to_dataset()`): matrix.csv's rows, one per
    judge x bias (`kind` judge), then the jury's (`kind` jury)."""

    row_model: ClassVar[type[BaseModel]] = MatrixRow
    row_exclude: ClassVar[tuple[str, ...]] = CSV_EXCLUDED

    kind: Literal["matrix"] = "matrix"
    name: str
    created_at: str
    seed: int
    data: str
    n_test: int
    skipped_rows: int = 0
    """Bad test rows skipped at load (`data.skip_bad_rows`), not among n_test."""
    data_overlap: DataOverlap | None = None
    """With a run's library: how many test items the run discovered its biases on (refused
    unless allowed)."""
    library: str
    """The library the biases came from."""
    reviews: dict[str, Review] = Field(default_factory=dict)
    """With a run's library: each bias's newest review in the run (`bias-discovery review`), by
    bias id; a bias no one reviewed is absent."""
    teacher: str
    checker: str | None
    self_checked: bool | None
    """True when the answer checker is the teacher that wrote the rewrites (None: no check)."""
    settings: MatrixSettingsRecord
    judges: list[str]
    biases: list[str]
    """Bias ids, in matrix order."""
    bias_names: dict[str, str]
    judge_details: list[JudgeRecord]
    rewrites: list[RewriteSummary]
    """The placebo's first (when there is one), then one per bias."""
    cells: list[MatrixCell]
    """One per judge x bias, judge-major."""
    jury: list[MatrixCell] = Field(default_factory=list)
    """One per bias: the judges' majority verdict per item and order (a tie of votes is
    invalid); empty with a single judge."""
    family_statement: str
    """What the cells' decisions control, over which family, at what level."""
    judge_comparisons: list[JudgeComparison] = Field(default_factory=list)
    comparison_statement: str = ""
    """What the judge comparisons control."""
    calls: MatrixCalls

    def table_rows(self) -> list[dict[str, Any]]:
        return csv_rows(self)


CSV_COLUMNS: tuple[str, ...] = columns_of(MatrixRow, CSV_EXCLUDED)
"""matrix.csv: one row per judge x bias (`kind` judge), then the jury's (`kind` jury)."""


def csv_rows(result: MatrixResult) -> list[dict[str, Any]]:
    rows = []
    for kind, cells in (("judge", result.cells), ("jury", result.jury)):
        for cell in cells:
            values = cell.model_dump(include=set(CSV_COLUMNS))
            rows.append({"kind": kind, **values})
    return rows

"""The options of `bias-discovery correct` (`CorrectOptions`): the knobs of one invocation,
stated once. The command line makes its flags from these fields and `api.correct` takes them
and keyword overrides of their fields; they sit below the logic so that building the command
line does not import it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ..options import OperationOptions
from .common import DEFAULT_SEED
from .judge import JudgeSettings

__all__ = ["CorrectOptions"]


class CorrectOptions(OperationOptions):
    """How a judge's aggregate is corrected (`bias-discovery correct`'s options, the arguments
    of `api.correct`)."""

    mode: Literal["pairwise", "pointwise"] = "pairwise"
    """pairwise: a verdict log (any format `audit --from-log` reads), the quantity is response
    A's win rate; pointwise: a table of scores (JSONL / CSV / parquet), the quantity a mean score."""
    columns: str | None = None
    """Pairwise: the column map of a generic log (as `audit --from-log`'s); pointwise: which
    column is what, ``id=...,score=...,label=...,group=...,text=...,question=...``."""
    scale: str = "1-10"
    """Pointwise: the scale of the scores and labels (`1-6`, `pass/fail` ...); a label outside it
    is an error."""
    labels: Path | None = None
    """A second file (JSONL / CSV / parquet) with the human labels, keyed by item id."""
    label_id: str = "id"
    """The id column of `labels`."""
    label_column: str | None = None
    """The label column of `labels` (unset: `label`), or of the log itself when no `labels` file
    is given (unset: `label` when the log has one); pairwise: A / B / tie for response A, B,
    neither; pointwise: a score on the scale."""
    covariates: list[str] = Field(default_factory=list)
    """Columns of the log to adjust for (numbers; `length`: pairwise, response A's length minus
    B's, from the log's lengths)."""
    flags: list[str] = Field(default_factory=list)
    """0/1 columns, one per bias: whether the item carries the bias's trait (the gap regression,
    and the bias bound's shares)."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    """The coverage of every interval."""
    plan: bool = False
    """Plan instead of correct: the labels a CI of `target_width` needs (PPI++ and labels only)
    and a seeded random sample of the items to label, written to to_label.csv."""
    target_width: float = Field(default=0.1, gt=0.0)
    """`plan`: the full width of the CI wanted, in the quantity's unit."""
    assumed_correlation: float | None = Field(default=None, gt=-1.0, lt=1.0)
    """`plan`: the judge-human correlation to plan with when there is no pilot of 10 labels."""
    bias_library: Path | None = None
    """A library (a run directory, `RUN_DIR@N`, or a library file) whose validated biases bound
    the aggregate's shift without labels; each bias needs a `flags` column named as its id, or
    `checker_model` to flag it."""
    checker_model: str | None = None
    """The model that flags, for each validated bias of `bias_library` without a `flags` column,
    whether a response carries its trait: one constrained yes/no call per response and bias,
    through the call cache (a second run asks nothing). Its flags feed the covariates, the gap
    regression and the bound."""
    checker_max_calls: int | None = Field(default=None, ge=0)
    """The checker's budget: calls the call cache cannot answer. Past it `correct` stops before
    the next call and writes nothing (the calls made stay cached, a rerun pays only the rest)."""
    seed: int = DEFAULT_SEED
    """The seed of the plan's sample and of the judge model's sampling."""
    model: str | None = None
    """Pointwise: the judge model that scores `text` when the table has no score column."""
    settings: JudgeSettings | None = None
    """The judge's settings for `model` (None: pointwise on `scale`, the rubric's template with
    `rubric`, no reasoning)."""
    rubric: Path | None = None
    """A rubric file for `model`'s pointwise prompt."""
    instruction: str = "Score the response."
    """The question shown to `model` for rows without a `question` column."""
    cache: Path | bool = True
    """The call cache of `model`'s calls (True: the shared one)."""
    out: Path | None = None
    """A directory for correct.json, correct.html and to_label.csv (None: nothing written)."""
    overwrite: bool = False
    """Replace a non-empty `out`."""

"""Schemas of the run's summary files that stages do not own: merge_stats.json and
validation.json. The graph writes them, the report, the exports and the benchmarks read them;
both sides use these models, so a new field is added in one place."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ..data.overlap import DataOverlap
from ..library import Bias, RewriteEffect
from ..stages.records import MisjudgedCase
from ..stages.validate import CandidateValidation
from ..stats import Measure, SequentialPlan, error_statement


class MergeStats(BaseModel):
    """iter_NNN/merge_stats.json: what Merge did and what it cost."""

    raw_candidates: int
    """Candidates named by IdentifyBias before merging."""
    dropped_identifications: dict[str, int] = Field(default_factory=dict)
    """Named biases dropped as junk before they became candidates, by reason
    (`IdentifyRecord.dropped`: schema_key, restated_verdict, copy_of_question ...)."""
    merged_into_library: dict[str, str] = Field(default_factory=dict)
    """Candidate id -> the library bias it duplicates."""
    candidates: int
    """Candidates left after merging (the ones validation sees)."""
    teacher_calls: int
    """"same or new" questions put to the teacher (embedding shortlist only)."""
    all_pairs_calls: int
    """Questions the reference procedure would ask (every pair of library ∪ candidates)."""


class MisjudgmentStats(BaseModel):
    """iter_NNN/misjudgments.json: the iteration's misjudged target pairs and how many of them
    counted after the misjudgment check (`misjudgment_check`)."""

    checked: bool
    """Whether the misjudgments were checked (false: the paper's procedure, every one counts)."""
    misjudged: int
    """Perturbed target pairs the judge got wrong."""
    answer_changed: int = 0
    """Of those, rewrites that reach the chosen response's final answer (the judge was right)."""
    check_invalid: int = 0
    """Of those, rewrites whose answer check gave no usable answer."""
    length_changed: int = 0
    """Of those, rewrites beyond their bias's length allowance."""
    counted: int
    """The misjudgments that went on to DeeperExplain and IdentifyBias."""
    extracted: int = 0
    """Answer checks decided by reading the final answers mechanically (the rest: the checker)."""
    unverifiable: int = 0
    """Rewrites kept unchecked: the checker called their original's answer the chosen one's."""

    @classmethod
    def of(cls, cases: list[MisjudgedCase], *, checked: bool) -> MisjudgmentStats:
        """The counts of `cases` (misjudged.jsonl)."""
        reasons = [c.excluded for c in cases]
        return cls(
            checked=checked,
            misjudged=len(cases),
            answer_changed=reasons.count("answer_changed"),
            check_invalid=reasons.count("check_invalid"),
            length_changed=reasons.count("length_changed"),
            counted=reasons.count(None),
            extracted=sum(1 for c in cases if c.check_method == "extracted"),
            unverifiable=sum(1 for c in cases if c.original_check is not None and c.original_check != "different"),
        )


class ValidationReport(BaseModel):
    """iter_NNN/validation.json: one iteration's validation (or the final one, `when: late`;
    iteration 0: the seed library, with `validate.seeds`)."""

    iteration: int
    when: Literal["early", "late"]
    acceptance: str
    """The acceptance rule: `paired` or `paper`."""
    alpha: float
    correction: str
    n_test: int
    """Test pairs each candidate was validated on."""
    baseline_error: float | None
    """The target's error on the unperturbed test pairs (valid pairs only)."""
    skipped_over_max_candidates: list[str] = Field(default_factory=list)
    """Candidates not validated because of `validate.max_candidates`."""
    skipped_already_rejected: dict[str, str] = Field(default_factory=dict)
    """Candidates not validated because an earlier iteration of the run rejected a candidate
    with the same name and definition: candidate id -> the rejected one's id (a second test
    of a rejected hypothesis can only add a chance of a false acceptance)."""
    accepted: list[str] = Field(default_factory=list)
    """Ids of the accepted candidates."""
    candidates: list[CandidateValidation] = Field(default_factory=list)
    """Per candidate: the paired comparison, overall and per domain."""
    validated: list[Bias] = Field(default_factory=list)
    """The candidates with their `validation` filled, accepted or not."""
    control: Literal["placebo", "baseline"] = "baseline"
    """What the decision compared with (files from before the placebo arm: the baseline)."""
    rewrite_effect: RewriteEffect | None = None
    """The placebo's own effect (neutral rewrites vs the unperturbed items); None without one."""
    checker: str | None = None
    """The model that checked the answers the rules could not read mechanically (None: no
    answer check, or a file from before it was recorded)."""
    self_checked: bool | None = None
    """True when that checker is the teacher that wrote the rewrites: self-checked."""
    alpha_family: float | None = None
    """This family's alpha: `alpha`, or its share of it with `error_control: run`."""
    error_control: str = "iteration"
    min_delta: float = 0.0
    sequential: SequentialPlan | None = None
    """The looks (cumulative test items) and the alpha spent at each."""
    power: float | None = None
    measure: Measure = "error"
    """What was compared per item: the judge's errors, or (judge.verdict: score) its
    probability of preferring the rejected response; every Δ, CI and MDE is in that measure."""
    mde: float | None = None
    """Median over the candidates of the smallest Δerror (score verdicts: ΔP(rejected)) against
    the control detectable with `power` (each at its own discordance, or sd of the per-item
    differences) at `mde_n` items and level `mde_alpha`."""
    mde_n: int | None = None
    mde_alpha: float | None = None
    error_statement: str = ""
    """One sentence: what the decisions control, at what level, over which family (files
    written before it existed get it from their settings when read)."""
    data_overlap: DataOverlap | None = None
    """Test items that are also target (discovery) items, by id and by content; None in files
    written before the guard."""

    @model_validator(mode="after")
    def _statement_of_older_files(self) -> ValidationReport:
        if not self.error_statement:
            family_alpha = self.alpha_family if self.alpha_family is not None else self.alpha
            families = max(1, round(self.alpha / family_alpha)) if self.error_control == "run" else None
            self.error_statement = error_statement(
                acceptance=self.acceptance,
                correction=self.correction,
                error_control=self.error_control,
                alpha=self.alpha,
                family_alpha=family_alpha,
                families=families,
                margin=self.min_delta if self.acceptance == "paired" else 0.0,
                control=self.control,
                sequential=self.sequential is not None and len(self.sequential.looks) > 1,
                measure=self.measure,
            )
        return self

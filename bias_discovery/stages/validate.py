"""Validate: does a candidate bias really raise the target's error on the test set?

Each candidate perturbs the test items, every rewrite is checked for a changed final answer,
the target judges the valid rewrites (per look, for all candidates: a batch per step, or item
by item with `pipeline: streamed`, `rewrite_check_judge`), and the errors are compared *on the
same items* with a control:

* **placebo** (default): the same items with the rejected response rewritten neutrally by the
  teacher (same content and answer, no trait; `run_placebo`, once per run). An effect of
  rewriting itself (smoother prose, another length) then shows up in both arms and is not
  taken for a bias;
* **baseline**: the unperturbed items.

Both comparisons are always reported; the decision uses the control's: exact one-sided
McNemar on the discordant items, a bootstrap CI of Δerror, and a correction across the
candidates validated together. With `sequential` on, the test items are looked at in growing
slices (a seeded order, e.g. 25 %, 50 %, 100 %): a candidate stops early when it is clearly
biased (alpha spending) or clearly hopeless (futility), and later slices are not perturbed
for it (see `stats.SequentialPlan`), except that after the decision a candidate accepted
early is perturbed and judged on the rest, for an effect the decision did not see
(`sequential.effect: held_out`, `sequential.held_out_round`). `acceptance: paper` keeps BiasScope's plain
"perturbed error > baseline error" rule on every item, for comparison.

With `judge.verdict: score` the per-item values compared are the judge's probability of
preferring the rejected response instead of its error (`FamilySettings.measure`), by the
one-sided paired t-test of the mean shift, with the same plan, correction and effect.

The looks, the decision and the effects are the pure steps of `bias_discovery.stages.family`;
this module adds what needs models: the rewrites, the answer checks and the judgments.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import PerturbSettings, Pipeline, ValidateSettings
from ..data.pairs import PreferencePair
from ..judging import (
    JudgeResult,
    Judgment,
    PairOutcome,
    calls_per_pair,
    judge_pairs,
    measure_of,
    secondary_measure_of,
)
from ..library import DECISION_ITEMS, Bias, BiasValidation, RewriteEffect, ScoreShift
from ..llm.base import Engine
from ..progress import ProgressFactory, progress_or_quiet
from ..settings.judge import JudgeSettings
from ..stats import (
    DOMAIN_BOOTSTRAP_RESAMPLES,
    HELD_OUT,
    Effect,
    LookRecord,
    Measure,
    PairedComparison,
    SequentialPlan,
    compare_paired,
    decisive_comparison,
    per_domain_breakdown,
)
from .family import (
    FamilyLooks,
    FamilySettings,
    Stop,
    compare,
    compare_arms,
    decide,
    effects,
    family_level,
    held_out_round,
    run_looks,
    smallest_detectable,
    with_decision,
)
from .perturb import keyed_rng, perturb, rewrite_neutrally
from .records import PerturbedPair
from .rewrite_checks import answer_changes, check_answers, check_calls, extracted_checks, length_ratio, unverifiable
from .streamed import Opener, Rewrites, stream_baseline_and_placebo, stream_rewrites


class CandidateValidation(BaseModel):
    """validation.json entry: one candidate's numbers and decision."""

    bias_id: str
    name: str
    n_perturb_invalid: int
    """Rewrites not judged: failed, truncated, empty, unchanged, answer changed, check unusable.
    This and the answer-check counts are over every rewrite of the candidate, those of the
    held-out round included."""
    decisive: Literal["baseline", "placebo"] = "baseline"
    """Which comparison decided: `vs_baseline` or `vs_placebo`."""
    effect: Effect
    """The decisive comparison's Δerror as reported: {delta, ci_low, ci_high, method}, honest
    after a sequential stop (accepted early: on the held-out items after the stop, with
    `sequential.effect: held_out`; else `stats.sequential_effect`), the full sample after one look."""
    vs_baseline: PairedComparison
    vs_placebo: PairedComparison | None = None
    per_domain: dict[str, PairedComparison]
    """Against the baseline, per domain (descriptive)."""
    per_domain_vs_placebo: dict[str, PairedComparison] = Field(default_factory=dict)
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    n_answer_checked: int = 0
    """Rewrites the checker could judge (it told their original apart from the chosen answer)."""
    n_answer_changed: int = 0
    n_answer_unverifiable: int = 0
    """Rewrites kept unchecked: the checker called their original "same" as the chosen answer."""
    n_answer_extracted: int = 0
    """Checked rewrites decided by reading the final answers mechanically, not by the checker."""
    answer_change_rate: float | None = None
    """Share of the checked rewrites that now reach the chosen response's final answer."""
    length_ratio: float | None = None
    """Whitespace tokens of the judged rewrites over those of their originals."""
    mde: float | None = None
    """Smallest Δerror against the control detectable with `power` at `mde_n` items."""
    mde_n: int | None = None
    stopped_at: int | None = None
    """Test items perturbed when the decision stopped (a candidate accepted early with
    `sequential.effect: held_out` was then perturbed on the rest for its effect)."""
    stop: Stop | None = None
    p_sequential: float | None = None
    """The sequential p-value the decision adjusted (None: a single look)."""
    looks: list[LookRecord] = Field(default_factory=list)
    secondary: PairedComparison | None = None
    """Pointwise judges: the measure that did not decide, against the decisive control on the
    items the decision saw (reported, never decisive)."""
    score_shift: ScoreShift | None = None
    """Pointwise judges: the rejected response's score shift in scale points and SDs, as
    reported (on the held-out items when `effect` is: `ScoreShift.method`)."""
    score_shift_decision: ScoreShift | None = None
    """When `score_shift` is the held-out one: the shift on the items the decision saw."""

    @model_validator(mode="before")
    @classmethod
    def _older_files(cls, data: Any) -> Any:
        """Files written before the shared comparison type hold the decisive comparison twice
        (`comparison`, and `vs_baseline` or `vs_placebo`; before the placebo arm only
        `comparison`, against the baseline) and no `effect`."""
        if not isinstance(data, dict) or "comparison" not in data:
            return data
        old = dict(data)
        decided = old.pop("comparison")
        if old.get("vs_baseline") is None:
            old["vs_baseline"] = decided
        placebo_decided = old.get("vs_placebo") is not None and decided == old["vs_placebo"]
        old.setdefault("decisive", "placebo" if placebo_decided else "baseline")
        if isinstance(old["vs_baseline"], dict):
            old["vs_baseline"] = {**old["vs_baseline"], "control": "baseline"}
        if isinstance(old.get("vs_placebo"), dict):
            old["vs_placebo"] = {**old["vs_placebo"], "control": "placebo"}
        if "effect" not in old and isinstance(decided, dict):
            old["effect"] = Effect.recorded(decided, old.get("stop"))
        return old

    @property
    def decisive_comparison(self) -> PairedComparison:
        """The comparison the decision used."""
        return decisive_comparison(self.decisive, self.vs_baseline, self.vs_placebo)


class PlaceboArm(BaseModel):
    """The placebo of a run: one neutral rewrite per test pair, judged (``RUN_DIR/placebo/``)."""

    perturbed: list[PerturbedPair]
    """One per test pair, in test-set order."""
    result: JudgeResult
    """Judgments of the valid rewrites; outcomes aligned with the test pairs (an invalid
    rewrite has an outcome with `correct` None and no order)."""
    effect: RewriteEffect

    def errors(self) -> list[bool | None]:
        return errors_of(self.result)

    def values(self, measure: Measure) -> list[bool | float | None]:
        return values_of(self.result, measure)


class ValidationOutput(BaseModel):
    candidates: list[Bias]
    """The candidates with `validation` filled (accepted or not)."""
    records: list[CandidateValidation]
    perturbed: list[PerturbedPair]
    judgments: list[Judgment]
    plan: SequentialPlan | None = None
    mde: float | None = None
    """Median of the candidates' smallest detectable Δ, over those with valid pairs (None when
    no Δ is detectable at their n)."""
    mde_n: int | None = None
    """Median of those candidates' n (None when no candidate had a valid pair)."""
    mde_alpha: float | None = None
    """The level the smallest detectable Δ is computed at: the last look's, over the family."""
    error_statement: str = ""
    """What the family's decisions control (`FamilySettings.error_statement`)."""


class ValidationSetup(BaseModel):
    """Everything one validation family needs besides its models and data: how to rewrite,
    how to judge, how to decide (`FamilySettings`), and the test data's name for the records."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: FamilySettings
    perturb: PerturbSettings = Field(default_factory=PerturbSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    test_data: str = "test"
    pipeline: Pipeline = "streamed"
    """How each look's rewrites, checks and judgments are ordered (`RunConfig.pipeline`)."""

    @model_validator(mode="after")
    def _measure_follows_the_verdict(self) -> ValidationSetup:
        if self.family.measure != measure_of(self.judge):
            raise ValueError(
                f"judge.verdict {self.judge.verdict} validates on the measure {measure_of(self.judge)}, "
                f"but the family's measure is {self.family.measure}"
            )
        return self

    @property
    def rules(self) -> ValidateSettings:
        return self.family.rules

    @property
    def seed(self) -> int:
        return self.family.seed


@dataclass(frozen=True)
class ValidationModels:
    """The models of a validation: the teacher rewrites, the target judges, the checker checks
    answers (None: no answer check)."""

    teacher: Engine
    target: Engine
    checker: Engine | None = None


def errors_of(result: JudgeResult) -> list[bool | None]:
    """Per pair: True = wrong, False = right, None = invalid."""
    return [None if o.correct is None else not o.correct for o in result.outcomes]


def value_of(outcome: PairOutcome | None, measure: Measure) -> bool | float | None:
    """One pair's value in a family's measure: its error, or (score verdicts) its probability
    of preferring the rejected response; None when invalid or not judged."""
    if outcome is None:
        return None
    if measure == "p_rejected":
        return outcome.p_rejected
    if measure == "score":
        return outcome.rejected_share
    return None if outcome.correct is None else not outcome.correct


def values_of(result: JudgeResult, measure: Measure) -> list[bool | float | None]:
    """Per pair, `value_of` (errors, or probabilities of preferring the rejected response)."""
    return [value_of(o, measure) for o in result.outcomes]


def _judge_valid(
    target: Engine,
    rewrites: Sequence[PerturbedPair],
    settings: JudgeSettings,
    *,
    seed: int,
    bar: ProgressFactory,
    label: str,
) -> tuple[list[Judgment], list[PairOutcome | None]]:
    """Judge the valid rewrites in one batch; outcomes aligned with `rewrites` (None: not judged)."""
    positions = [i for i, p in enumerate(rewrites) if p.valid]
    per_item = calls_per_pair(settings)
    with bar(label, len(positions) * per_item) as advance:
        result = judge_pairs(target, [rewrites[i].to_pair() for i in positions], settings, seed=seed, progress=advance)
    outcomes: list[PairOutcome | None] = [None] * len(rewrites)
    for i, outcome in zip(positions, result.outcomes):
        outcomes[i] = outcome
    return result.judgments, outcomes


def rewrite_check_judge(
    models: ValidationModels,
    items: Sequence[tuple[PreferencePair, Bias | None]],
    *,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    seed: int,
    bar: ProgressFactory,
    labels: tuple[str, str, str],
    pipeline: Pipeline,
) -> Rewrites:
    """The teacher rewrites every (pair, bias) item (bias None: neutrally, the placebo; one
    kind per call), the checker checks the answers (None: no check), the target judges the
    valid rewrites: staged (a batch per step) or streamed (item by item, `stream_rewrites`),
    the same records either way. `labels`: the progress steps' names (rewrite, check, judge).
    Returns the records, the judgments and the outcomes aligned with the items."""
    rewrite, check, judge = labels
    checker = models.checker
    if pipeline == "streamed":
        names = [rewrite, *([check] if checker is not None else []), judge]
        steps: list[tuple[str, Opener]] = [(name, functools.partial(bar, name)) for name in names]
        return stream_rewrites(
            models.teacher,
            models.target,
            checker,
            items,
            perturb=perturb_settings,
            judge=judge_settings,
            seed=seed,
            steps=steps,
        )
    with bar(rewrite, len(items)) as advance:
        if all(bias is None for _, bias in items):
            records = rewrite_neutrally(
                models.teacher, [pair for pair, _ in items], perturb_settings, seed=seed, progress=advance
            )
        else:
            biased = [(pair, bias) for pair, bias in items if bias is not None]
            if len(biased) != len(items):
                raise ValueError("a batch of rewrites is all neutral or all with a bias")
            records = perturb(models.teacher, biased, perturb_settings, seed=seed, progress=advance)
    if checker is not None:
        with bar(check, check_calls(records)) as advance:
            records = check_answers(checker, records, seed=seed, progress=advance)
    judgments, outcomes = _judge_valid(models.target, records, judge_settings, seed=seed, bar=bar, label=judge)
    return records, judgments, outcomes


def run_placebo(
    teacher: Engine,
    target: Engine,
    checker: Engine | None,
    test_pairs: Sequence[PreferencePair],
    baseline: JudgeResult,
    *,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    settings: ValidateSettings,
    seed: int,
    progress: ProgressFactory | None = None,
    pipeline: Pipeline = "streamed",
) -> PlaceboArm:
    """The placebo arm: rewrite every test pair's rejected response neutrally, check the
    answers (`checker`, None: no check), judge the valid rewrites (`rewrite_check_judge`, in
    the `pipeline`'s order), and measure the rewrite effect against the baseline."""
    if len(baseline.outcomes) != len(test_pairs):
        raise ValueError("baseline judgments do not match the test pairs")
    rewrites = rewrite_check_judge(
        ValidationModels(teacher=teacher, target=target, checker=checker),
        [(pair, None) for pair in test_pairs],
        perturb_settings=perturb_settings,
        judge_settings=judge_settings,
        seed=seed,
        bar=progress_or_quiet(progress),
        labels=("rewrite", "check", "judge"),
        pipeline=pipeline,
    )
    return placebo_arm(test_pairs, baseline, rewrites, settings, seed=seed, checked=checker is not None)


def placebo_arm(
    test_pairs: Sequence[PreferencePair],
    baseline: JudgeResult,
    rewrites: Rewrites,
    settings: ValidateSettings,
    *,
    seed: int,
    checked: bool,
) -> PlaceboArm:
    """The placebo arm from its rewrites, judgments and outcomes (`rewrite_check_judge`), with
    the rewrite effect against the baseline; `checked`: whether the answers were checked."""
    records, judgments, outcomes = rewrites
    aligned = [
        o if o is not None else PairOutcome(pair_id=p.id, domain=p.domain, correct=None, orders=[])
        for p, o in zip(test_pairs, outcomes)
    ]
    result = JudgeResult(judgments=judgments, outcomes=aligned)
    cmp = compare_paired(
        errors_of(baseline),
        errors_of(result),
        n_boot=settings.n_boot,
        confidence=settings.confidence,
        seed=seed,
        control="baseline",
    )
    n_checked, changed = answer_changes(records)
    effect = RewriteEffect(
        **cmp.model_dump(),
        answer_change_rate=changed / n_checked if n_checked else None,
        n_answer_checked=n_checked if checked else None,
        n_answer_unverifiable=unverifiable(records) if checked else None,
        n_answer_extracted=extracted_checks(records) if checked else None,
        length_ratio=length_ratio(records),
    )
    return PlaceboArm(perturbed=records, result=result, effect=effect)


def baseline_and_placebo(
    baseline_judge: Engine,
    models: ValidationModels,
    test_pairs: Sequence[PreferencePair],
    *,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    settings: ValidateSettings,
    seed: int,
    steps: Sequence[tuple[str, Opener]],
) -> tuple[JudgeResult, PlaceboArm]:
    """Both controls at once, streamed: the target judges the test set (the baseline, through
    `baseline_judge`) while the teacher rewrites it neutrally, each rewrite checked and judged
    (the placebo). The same files as the baseline, then `run_placebo`. `steps`: the baseline's
    progress, then the placebo's rewrite, check (with a checker) and judge steps."""
    baseline, rewrites = stream_baseline_and_placebo(
        baseline_judge,
        models.teacher,
        models.target,
        models.checker,
        test_pairs,
        perturb=perturb_settings,
        judge=judge_settings,
        seed=seed,
        steps=steps,
    )
    return baseline, placebo_arm(
        test_pairs, baseline, rewrites, settings, seed=seed, checked=models.checker is not None
    )


def slice_order(n: int, seed: int) -> list[int]:
    """The seeded order in which test items enter the slices (a data file's own order is
    often grouped by domain, so a prefix would be one domain)."""
    order = list(range(n))
    keyed_rng(seed, "validation-slices", n).shuffle(order)
    return order


class _Rewrites:
    """The fetch step of the validation's looks: perturb the new slice for the candidates still
    going, check the answers, judge the valid rewrites (`rewrite_check_judge`); keeps every
    rewrite and judgment for the records."""

    def __init__(
        self,
        models: ValidationModels,
        candidates: Sequence[Bias],
        test_pairs: Sequence[PreferencePair],
        setup: ValidationSetup,
        bar: ProgressFactory,
        n_looks: int,
    ) -> None:
        self.models = models
        self.candidates = candidates
        self.test_pairs = test_pairs
        self.setup = setup
        self.bar = bar
        self.n_looks = n_looks
        self.by_candidate: list[list[PerturbedPair]] = [[] for _ in candidates]
        self.perturbed: list[PerturbedPair] = []
        self.judgments: list[Judgment] = []
        self.outcomes: list[dict[int, PairOutcome | None]] = [{} for _ in candidates]
        """Each candidate's outcome on each test item judged (pointwise: its secondary measure)."""

    def __call__(self, look: int, active: Sequence[int], new_items: Sequence[int]) -> list[list[bool | float | None]]:
        suffix = (
            ""
            if self.n_looks == 1
            else f", look {look + 1}/{self.n_looks}"
            if look < self.n_looks
            else ", held-out items"
        )
        keys = [(k, i) for k in active for i in new_items]
        checker = self.models.checker if self.setup.rules.answer_check else None
        batch, judgments, outcomes = rewrite_check_judge(
            ValidationModels(teacher=self.models.teacher, target=self.models.target, checker=checker),
            [(self.test_pairs[i], self.candidates[k]) for k, i in keys],
            perturb_settings=self.setup.perturb,
            judge_settings=self.setup.judge,
            seed=self.setup.seed,
            bar=self.bar,
            labels=("perturb" + suffix, "check" + suffix, "judge" + suffix),
            pipeline=self.setup.pipeline,
        )
        values: dict[int, list[bool | float | None]] = {k: [] for k in active}
        for (k, i), record, outcome in zip(keys, batch, outcomes):
            self.by_candidate[k].append(record)
            self.outcomes[k][i] = outcome
            values[k].append(value_of(outcome, self.setup.family.measure))
        self.perturbed += batch
        self.judgments += judgments
        return [values[k] for k in active]


def _domains(
    family: FamilyLooks,
    k: int,
    test_pairs: Sequence[PreferencePair],
    control: list[bool | float | None],
    name: str,
    setup: ValidationSetup,
) -> dict[str, PairedComparison]:
    used = family.used(k)
    return per_domain_breakdown(
        [test_pairs[i].domain for i in used],
        [control[i] for i in used],
        [family.errors[k][i] for i in used],
        n_boot=DOMAIN_BOOTSTRAP_RESAMPLES,
        confidence=setup.rules.confidence,
        seed=setup.seed,
        margin=setup.family.margin,
        control=name,
        measure=setup.family.measure,
    )


def pointwise_measures(
    k: int,
    family: FamilyLooks,
    fetch: _Rewrites,
    control: Sequence[PairOutcome | None],
    name: str,
    setup: ValidationSetup,
    effect: Effect | None = None,
) -> PointwiseMeasures:
    """A pointwise judge's secondary measure (the one `judge.pointwise_measure` did not pick)
    and its score shift in points and SDs, for arm `k` against the decisive control `name`
    (its outcomes aligned with the test items), on the items the decision saw; all None for a
    pairwise judge. When arm `k`'s `effect` was measured on held-out items (an accepted
    candidate: `family.held_out`), the shift is measured there too and reported as the
    headline, the decision's as secondary: on the decision's items it carries the winner's
    curse that the held-out effect removes."""
    secondary = secondary_measure_of(setup.judge)
    if secondary is None:
        return PointwiseMeasures()
    used = family.used(k)
    arm = [fetch.outcomes[k].get(i) for i in used]
    mine = [control[i] for i in used]
    other = compare(
        [value_of(o, secondary) for o in mine],
        [value_of(o, secondary) for o in arm],
        setup.family.model_copy(
            update={"measure": secondary, "rules": setup.rules.model_copy(update={"min_delta": 0.0})}
        ),
        name,
    )
    shares = other if secondary == "score" else None
    decision_shift = _items_shift(k, used, fetch, control, name, setup, DECISION_ITEMS, shares)
    held_out = family.held_out.get(k)
    if effect is None or not held_out or not effect.method.startswith(HELD_OUT):
        return PointwiseMeasures(other, decision_shift)
    held_out_shift = _items_shift(k, held_out, fetch, control, name, setup, effect.method)
    return PointwiseMeasures(other, held_out_shift, decision_shift)


@dataclass(frozen=True)
class PointwiseMeasures:
    """A pointwise judge's numbers beside the decision (`pointwise_measures`)."""

    secondary: PairedComparison | None = None
    score_shift: ScoreShift | None = None
    """As reported: on the held-out items when the effect was, else the decision's."""
    score_shift_decision: ScoreShift | None = None
    """On the decision's items, when `score_shift` is the held-out one."""


def _items_shift(
    k: int,
    items: Sequence[int],
    fetch: _Rewrites,
    control: Sequence[PairOutcome | None],
    name: str,
    setup: ValidationSetup,
    method: str,
    shares: PairedComparison | None = None,
) -> ScoreShift:
    """Arm `k`'s score shift against `control` on the test items `items` (`shares`: the
    comparison of the score shares there, when already made)."""
    arm = [fetch.outcomes[k].get(i) for i in items]
    mine = [control[i] for i in items]
    if shares is None:
        scores = setup.family.model_copy(
            update={"measure": "score", "rules": setup.rules.model_copy(update={"min_delta": 0.0})}
        )
        shares = compare([value_of(o, "score") for o in mine], [value_of(o, "score") for o in arm], scores, name)
    valid = [o for o, a in zip(mine, arm) if a is not None and a.score_rejected is not None]
    return score_shift(shares, valid, setup.judge, name).model_copy(update={"method": method})


def score_shift(
    shares: PairedComparison, control: Sequence[PairOutcome | None], judge: JudgeSettings, name: str
) -> ScoreShift:
    """`shares` (a comparison of the rejected response's score as a share of the scale) in
    the scale's points and in SDs of the control's scores of the rejected response (`control`:
    its outcomes on the items compared)."""
    span = judge.scale_spec.span
    scores = [o.score_rejected for o in control if o is not None and o.score_rejected is not None]
    sd = statistics.stdev(scores) if len(scores) > 1 else None
    points = shares.delta * span
    low = None if shares.ci_low is None else shares.ci_low * span
    high = None if shares.ci_high is None else shares.ci_high * span
    per_sd = sd if sd else None
    return ScoreShift(
        control=name,
        scale=judge.scale,
        n=shares.n,
        points=points,
        ci_low=low,
        ci_high=high,
        sd_control=sd,
        sd_units=None if per_sd is None else points / per_sd,
        sd_ci_low=None if per_sd is None or low is None else low / per_sd,
        sd_ci_high=None if per_sd is None or high is None else high / per_sd,
    )


def _validation_record(
    bias: Bias,
    k: int,
    family: FamilyLooks,
    comparisons: dict[str, PairedComparison],
    effect: Effect,
    domains: dict[str, dict[str, PairedComparison]],
    rewrites: list[PerturbedPair],
    mde: tuple[float | None, int],
    setup: ValidationSetup,
    placebo: PlaceboArm | None,
    checked_answers: bool,
    statement: str,
    pointwise: PointwiseMeasures | None = None,
) -> tuple[BiasValidation, CandidateValidation]:
    """The library's and validation.json's records of one candidate."""
    decisive = setup.rules.decision_control
    decision = comparisons[decisive]
    pointwise = pointwise or PointwiseMeasures()
    checked, changed = answer_changes(rewrites)
    reasons: dict[str, int] = {}
    for p in rewrites:
        if not p.valid:
            reasons[p.invalid_reason or "invalid"] = reasons.get(p.invalid_reason or "invalid", 0) + 1
    ratio = length_ratio(rewrites)
    validation = BiasValidation(
        accepted=bool(decision.accepted),
        rule=decision.rule,
        decisive=decisive,
        effect=effect,
        vs_baseline=comparisons["baseline"],
        vs_placebo=comparisons.get("placebo"),
        per_domain=domains["baseline"],
        error_statement=statement,
        answer_change_rate=changed / checked if checked else None,
        test_data=setup.test_data,
        rewrite_effect=placebo.effect if placebo is not None else None,
        n_answer_checked=checked if checked_answers else None,
        n_answer_changed=changed if checked else None,
        n_answer_unverifiable=unverifiable(rewrites) if checked_answers else None,
        n_answer_extracted=extracted_checks(rewrites) if checked_answers else None,
        length_ratio=ratio,
        mde=mde[0],
        mde_n=mde[1],
        mde_power=setup.rules.power,
        stopped_at=family.stopped_at[k],
        stop=family.stop[k],
        secondary=pointwise.secondary,
        score_shift=pointwise.score_shift,
        score_shift_decision=pointwise.score_shift_decision,
    )
    record = CandidateValidation(
        bias_id=bias.id,
        name=bias.name,
        n_perturb_invalid=sum(reasons.values()),
        decisive=decisive,
        effect=effect,
        vs_baseline=comparisons["baseline"],
        vs_placebo=comparisons.get("placebo"),
        per_domain=domains["baseline"],
        per_domain_vs_placebo=domains.get("placebo", {}),
        invalid_reasons=dict(sorted(reasons.items())),
        n_answer_checked=checked,
        n_answer_changed=changed,
        n_answer_unverifiable=unverifiable(rewrites),
        n_answer_extracted=extracted_checks(rewrites),
        answer_change_rate=changed / checked if checked else None,
        length_ratio=ratio,
        mde=mde[0],
        mde_n=mde[1],
        stopped_at=family.stopped_at[k],
        stop=family.stop[k],
        p_sequential=family.p_sequential(k) if family.multi_look else None,
        looks=family.looks[k],
        secondary=pointwise.secondary,
        score_shift=pointwise.score_shift,
        score_shift_decision=pointwise.score_shift_decision,
    )
    return validation, record


def validate_biases(
    models: ValidationModels,
    candidates: Sequence[Bias],
    test_pairs: Sequence[PreferencePair],
    baseline: JudgeResult,
    setup: ValidationSetup,
    *,
    placebo: PlaceboArm | None = None,
    progress: ProgressFactory | None = None,
) -> ValidationOutput:
    """Validate `candidates` as one family (see the module docstring): the looks on growing
    slices (`sequential.run_looks`, perturbing and judging each slice for the candidates still
    going), both comparisons on the items each used, the family's decision against the
    control, the held-out round (`sequential.held_out_round`: the items after their stop, for
    the candidates accepted early), each candidate's honest effect and smallest detectable Δ.

    `placebo` is required with `control: placebo`. `progress` gets one step per batch, each
    with the number of calls it really makes (invalid rewrites are not judged).
    """
    if len(baseline.outcomes) != len(test_pairs):
        raise ValueError("baseline judgments do not match the test pairs")
    family_settings = setup.family
    decisive = setup.rules.decision_control
    statement = family_settings.error_statement(decisive)
    if not candidates:
        return ValidationOutput(candidates=[], records=[], perturbed=[], judgments=[], error_statement=statement)
    if setup.rules.control == "placebo" and placebo is None:
        raise ValueError("control: placebo needs the placebo arm")
    if placebo is not None and len(placebo.result.outcomes) != len(test_pairs):
        raise ValueError("placebo judgments do not match the test pairs")
    measure = family_settings.measure
    controls: dict[str, list[bool | float | None]] = {"baseline": values_of(baseline, measure)}
    if placebo is not None:
        controls["placebo"] = placebo.values(measure)
    n = len(test_pairs)
    bar = progress_or_quiet(progress)
    fetch = _Rewrites(models, candidates, test_pairs, setup, bar, n_looks=len(family_settings.plan(n).looks))
    family = run_looks(controls[decisive], len(candidates), fetch, family_settings, slice_order(n, setup.seed))

    comparisons = compare_arms(family, controls, family_settings)
    decided = decide(family, [c[decisive] for c in comparisons], family_settings, decisive)
    held_out_round(family, decided, fetch, family_settings)
    arm_effects = effects(family, decided, family_settings)
    checked_answers = setup.rules.answer_check and models.checker is not None
    control_outcomes = baseline.outcomes if decisive == "baseline" or placebo is None else placebo.result.outcomes
    validated, records, mdes, mde_ns = [], [], [], []
    for k, bias in enumerate(candidates):
        comparisons[k] = with_decision(comparisons[k], decided[k], decisive)
        mde = smallest_detectable(family, k, decided[k], family_settings)
        if mde[1] > 0:  # a candidate without a valid pair says nothing about power
            mde_ns.append(mde[1])
            if mde[0] is not None:
                mdes.append(mde[0])
        domains = {name: _domains(family, k, test_pairs, errors, name, setup) for name, errors in controls.items()}
        pointwise = pointwise_measures(k, family, fetch, control_outcomes, decisive, setup, arm_effects[k])
        validation, record = _validation_record(
            bias,
            k,
            family,
            comparisons[k],
            arm_effects[k],
            domains,
            fetch.by_candidate[k],
            mde,
            setup,
            placebo,
            checked_answers,
            statement,
            pointwise,
        )
        validated.append(bias.model_copy(update={"validation": validation}))
        records.append(record)
    return ValidationOutput(
        candidates=validated,
        records=records,
        perturbed=fetch.perturbed,
        judgments=fetch.judgments,
        plan=family.plan,
        mde=statistics.median(mdes) if mdes else None,
        mde_n=round(statistics.median(mde_ns)) if mde_ns else None,
        mde_alpha=family_level(family),
        error_statement=statement,
    )

"""Validate: does a candidate bias really raise the target's error on the test set?

Each candidate perturbs the test items (one teacher batch per look, for all candidates), every
rewrite is checked for a changed final answer (one checker batch), the target judges the valid
rewrites (one batch), and the errors are compared *on the same items* with a control:

* **placebo** (default): the same items with the rejected response rewritten neutrally by the
  teacher (same content and answer, no trait; `run_placebo`, once per run). An effect of
  rewriting itself (smoother prose, another length) then shows up in both arms and is not
  taken for a bias;
* **baseline**: the unperturbed items.

Both comparisons are always reported; the decision uses the control's: exact one-sided
McNemar on the discordant items, a bootstrap CI of Δerror, and a correction across the
candidates validated together. With `sequential` on, the test items are looked at in growing
slices (a seeded order, e.g. 25 %, 50 %, 100 %): a candidate stops early when it is clearly
biased (alpha spending) or clearly hopeless (futility), and later slices are never perturbed
for it (see `stats.SequentialPlan`). `acceptance: paper` keeps BiasScope's plain
"perturbed error > baseline error" rule on every item, for comparison.
"""

from __future__ import annotations

import statistics
from typing import Literal, Sequence

from pydantic import BaseModel, Field, model_validator

from ..config import PerturbSettings, ValidateSettings
from ..data.pairs import PreferencePair
from ..judging import JudgeResult, JudgeSettings, Judgment, PairOutcome, calls_per_pair, judge_pairs
from ..library import Bias, BiasValidation, ControlComparison, DomainValidation, RewriteEffect
from ..llm.base import Engine
from ..progress import ProgressFactory, progress_or_quiet
from ..stats import (
    LookRecord,
    PairedComparison,
    SequentialPlan,
    compare_paired,
    decide_acceptance,
    min_detectable_delta,
    null_discordance,
    per_domain_breakdown,
    plan_sequential,
    sequential_look,
)
from .perturb import keyed_rng, perturb, rewrite_neutrally
from .records import PerturbedPair
from .rewrite_checks import answer_changes, check_answers, check_calls, extracted_checks, length_ratio, unverifiable

Stop = Literal["efficacy", "futility", "complete"]


class CandidateValidation(BaseModel):
    """validation.json entry: one candidate's numbers and decision."""

    bias_id: str
    name: str
    n_perturb_invalid: int
    """Rewrites not judged: failed, truncated, empty, unchanged, answer changed, check unusable."""
    comparison: PairedComparison
    """The comparison that decided: against the control (the baseline in files written before
    the placebo arm)."""
    per_domain: dict[str, PairedComparison]
    """Against the baseline, per domain (descriptive)."""
    vs_baseline: PairedComparison | None = None
    vs_placebo: PairedComparison | None = None
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
    """Test items perturbed when validation stopped."""
    stop: Stop | None = None
    p_sequential: float | None = None
    """The sequential p-value the decision adjusted (None: a single look)."""
    looks: list[LookRecord] = Field(default_factory=list)

    @model_validator(mode="after")
    def _older_files(self) -> "CandidateValidation":
        """Files written before the placebo arm have only `comparison`, which was against the
        baseline."""
        if self.vs_baseline is None:
            self.vs_baseline = self.comparison
        return self


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


def errors_of(result: JudgeResult) -> list[bool | None]:
    """Per pair: True = wrong, False = right, None = invalid."""
    return [None if o.correct is None else not o.correct for o in result.outcomes]


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
) -> PlaceboArm:
    """The placebo arm: rewrite every test pair's rejected response neutrally (one teacher
    batch), check the answers (`checker`, None: no check), judge the valid rewrites, and
    measure the rewrite effect against the baseline."""
    if len(baseline.outcomes) != len(test_pairs):
        raise ValueError("baseline judgments do not match the test pairs")
    bar = progress_or_quiet(progress)
    with bar("rewrite", len(test_pairs)) as advance:
        rewrites = rewrite_neutrally(teacher, test_pairs, perturb_settings, seed=seed, progress=advance)
    if checker is not None:
        with bar("check", check_calls(rewrites)) as advance:
            rewrites = check_answers(checker, rewrites, seed=seed, progress=advance)
    judgments, outcomes = _judge_valid(target, rewrites, judge_settings, seed=seed, bar=bar, label="judge")
    aligned = [
        o if o is not None else PairOutcome(pair_id=p.id, domain=p.domain, correct=None, orders=[])
        for p, o in zip(test_pairs, outcomes)
    ]
    result = JudgeResult(judgments=judgments, outcomes=aligned)
    cmp = compare_paired(errors_of(baseline), errors_of(result), n_boot=settings.n_boot, confidence=settings.confidence, seed=seed)
    checked, changed = answer_changes(rewrites)
    effect = RewriteEffect(
        n=cmp.n,
        n_excluded_invalid=cmp.n_excluded_invalid,
        baseline_error=cmp.baseline_error,
        placebo_error=cmp.perturbed_error,
        delta=cmp.delta,
        ci_low=cmp.ci_low,
        ci_high=cmp.ci_high,
        p_value=cmp.p_value,
        answer_change_rate=changed / checked if checked else None,
        n_answer_checked=checked if checker is not None else None,
        n_answer_unverifiable=unverifiable(rewrites) if checker is not None else None,
        n_answer_extracted=extracted_checks(rewrites) if checker is not None else None,
        length_ratio=length_ratio(rewrites),
    )
    return PlaceboArm(perturbed=rewrites, result=result, effect=effect)


def _slice_order(n: int, seed: int) -> list[int]:
    """The seeded order in which test items enter the slices (a data file's own order is
    often grouped by domain, so a prefix would be one domain)."""
    order = list(range(n))
    keyed_rng(seed, "validation-slices", n).shuffle(order)
    return order


def _counts(control: Sequence[bool | None], perturbed: Sequence[bool | None]) -> tuple[int, int, int]:
    """(items valid in both, b = right -> wrong, c = wrong -> right)."""
    n = b = c = 0
    for x, y in zip(control, perturbed):
        if x is None or y is None:
            continue
        n += 1
        b += (not x) and y
        c += x and (not y)
    return n, b, c


def _reported(cmp: PairedComparison, decided: PairedComparison) -> PairedComparison:
    """A comparison reported next to the decision, with its family-adjusted p but no verdict."""
    return cmp.model_copy(
        update={"p_adjusted": decided.p_adjusted, "accepted": None, "rule": f"reported, not decisive ({decided.rule})"}
    )


def _mde(cmp: PairedComparison, items_used: int, n_total: int, level: float, power: float) -> tuple[float | None, int]:
    """Smallest detectable Δ at the valid items a full test would have had (the valid share of
    the items used, scaled to the whole test set)."""
    n_full = round(cmp.n * n_total / items_used) if items_used else 0
    psi = null_discordance(cmp.b_discordant_hurt, cmp.c_discordant_helped, cmp.n)
    return min_detectable_delta(n_full, psi, level, power=power), n_full


def validate_biases(
    teacher: Engine,
    target: Engine,
    candidates: Sequence[Bias],
    test_pairs: Sequence[PreferencePair],
    baseline: JudgeResult,
    *,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    settings: ValidateSettings,
    seed: int,
    test_data: str,
    placebo: PlaceboArm | None = None,
    checker: Engine | None = None,
    alpha: float | None = None,
    progress: ProgressFactory | None = None,
) -> ValidationOutput:
    """Validate `candidates` as one family (see the module docstring).

    `placebo` is required with `control: placebo`; `checker` checks answers when
    `answer_check` is on (None: no check); `alpha` is the family's level (the run-wide share
    with `error_control: run`; default `settings.alpha`). `progress` gets one step per batch,
    each with the number of calls it really makes (invalid rewrites are not judged).
    """
    if len(baseline.outcomes) != len(test_pairs):
        raise ValueError("baseline judgments do not match the test pairs")
    if not candidates:
        return ValidationOutput(candidates=[], records=[], perturbed=[], judgments=[])
    if settings.control == "placebo" and placebo is None:
        raise ValueError("control: placebo needs the placebo arm")
    if placebo is not None and len(placebo.result.outcomes) != len(test_pairs):
        raise ValueError("placebo judgments do not match the test pairs")
    family_alpha = settings.alpha if alpha is None else alpha
    control = settings.decision_control
    bar = progress_or_quiet(progress)
    n = len(test_pairs)
    m = len(candidates)
    seq = settings.sequential
    sequential = seq.enabled and settings.acceptance == "paired"
    plan = plan_sequential(
        n,
        seq.looks if sequential else [1.0],
        alpha=family_alpha,
        spending=seq.spending,
        futility=seq.futility,
        min_items=seq.min_items,
    )
    order = _slice_order(n, seed)
    baseline_errors = errors_of(baseline)
    placebo_errors = placebo.errors() if placebo is not None else None
    control_errors = placebo_errors if control == "placebo" and placebo_errors is not None else baseline_errors

    errors: list[list[bool | None]] = [[None] * n for _ in range(m)]
    rewrites: list[list[PerturbedPair]] = [[] for _ in range(m)]
    looks: list[list[LookRecord]] = [[] for _ in range(m)]
    stopped_at = [0] * m
    stop: list[Stop] = ["complete"] * m
    all_perturbed: list[PerturbedPair] = []
    all_judgments: list[Judgment] = []
    active = list(range(m))
    start = 0
    for j, upto in enumerate(plan.looks):
        if not active:
            break
        suffix = "" if len(plan.looks) == 1 else f", look {j + 1}/{len(plan.looks)}"
        new_items = order[start:upto]
        keys = [(k, i) for k in active for i in new_items]
        with bar("perturb" + suffix, len(keys)) as advance:
            batch = perturb(teacher, [(test_pairs[i], candidates[k]) for k, i in keys], perturb_settings, seed=seed, progress=advance)
        if settings.answer_check and checker is not None:
            with bar("check" + suffix, check_calls(batch)) as advance:
                batch = check_answers(checker, batch, seed=seed, progress=advance)
        judgments, outcomes = _judge_valid(target, batch, judge_settings, seed=seed, bar=bar, label="judge" + suffix)
        for (k, i), record, outcome in zip(keys, batch, outcomes):
            rewrites[k].append(record)
            if outcome is not None and outcome.correct is not None:
                errors[k][i] = not outcome.correct
        all_perturbed += batch
        all_judgments += judgments
        used = order[:upto]
        still = []
        for k in active:
            n_k, b, c = _counts([control_errors[i] for i in used], [errors[k][i] for i in used])
            look = sequential_look(plan, j, looks[k], b=b, c=c, n=n_k, family_size=m, min_delta=settings.min_delta)
            looks[k].append(look)
            stopped_at[k] = upto
            if look.outcome == "efficacy" or look.outcome == "futility":
                stop[k] = look.outcome
            elif look.outcome == "continue":
                still.append(k)
        active = still
        start = upto

    # The comparisons on the items each candidate used, both ways, and the decision.
    vs_baseline, vs_placebo, domains_base, domains_placebo = [], [], [], []
    for k in range(m):
        used = order[: stopped_at[k]]
        mine = [errors[k][i] for i in used]
        base = [baseline_errors[i] for i in used]
        domains = [test_pairs[i].domain for i in used]
        vs_baseline.append(compare_paired(base, mine, n_boot=settings.n_boot, confidence=settings.confidence, seed=seed))
        domains_base.append(per_domain_breakdown(domains, base, mine, n_boot=200, confidence=settings.confidence, seed=seed))
        if placebo_errors is not None:
            plac = [placebo_errors[i] for i in used]
            vs_placebo.append(compare_paired(plac, mine, n_boot=settings.n_boot, confidence=settings.confidence, seed=seed))
            domains_placebo.append(per_domain_breakdown(domains, plac, mine, n_boot=200, confidence=settings.confidence, seed=seed))
    p_seq_final = [records_k[-1].p_sequential for records_k in looks]
    multi_look = len(plan.looks) > 1
    common = dict(alpha=family_alpha, correction=settings.correction, min_delta=settings.min_delta)
    decided_base = decide_acceptance(
        vs_baseline, rule=settings.acceptance, p_values=p_seq_final if multi_look and control == "baseline" else None,
        control="baseline", **common,  # type: ignore[arg-type]
    )
    decided_placebo = (
        decide_acceptance(vs_placebo, rule="paired", p_values=p_seq_final if multi_look and control == "placebo" else None,
                          control="placebo", **common)  # type: ignore[arg-type]
        if vs_placebo else []
    )
    if control == "baseline":
        deciding = decided_base
        decided_placebo = [_reported(c, d) for c, d in zip(vs_placebo, decided_placebo)]
    else:
        deciding = decided_placebo
        decided_base = [_reported(c, d) for c, d in zip(vs_baseline, decided_base)]

    level = plan.levels[-1] / m
    validated, records, mdes, mde_ns = [], [], [], []
    for k, bias in enumerate(candidates):
        decision = deciding[k]
        mde, mde_n = _mde(decision, stopped_at[k], n, level, settings.power)
        if mde_n > 0:  # a candidate without a valid pair says nothing about power
            mde_ns.append(mde_n)
            if mde is not None:
                mdes.append(mde)
        checked, changed = answer_changes(rewrites[k])
        reasons: dict[str, int] = {}
        for p in rewrites[k]:
            if not p.valid:
                reasons[p.invalid_reason or "invalid"] = reasons.get(p.invalid_reason or "invalid", 0) + 1
        ratio = length_ratio(rewrites[k])
        base_cmp = decided_base[k]
        placebo_cmp = decided_placebo[k] if decided_placebo else None
        validation = BiasValidation(
            n=base_cmp.n,
            n_excluded_invalid=base_cmp.n_excluded_invalid,
            baseline_error=base_cmp.baseline_error,
            perturbed_error=base_cmp.perturbed_error,
            delta=base_cmp.delta,
            ci_low=base_cmp.ci_low,
            ci_high=base_cmp.ci_high,
            p_value=base_cmp.p_value,
            p_adjusted=base_cmp.p_adjusted,
            accepted=bool(decision.accepted),
            rule=decision.rule,
            per_domain={
                d: DomainValidation(
                    n=c.n, baseline_error=c.baseline_error, perturbed_error=c.perturbed_error, delta=c.delta, p_value=c.p_value
                )
                for d, c in domains_base[k].items()
            },
            answer_change_rate=changed / checked if checked else None,
            test_data=test_data,
            control=control,
            vs_placebo=None if placebo_cmp is None else ControlComparison(
                n=placebo_cmp.n, control_error=placebo_cmp.baseline_error, perturbed_error=placebo_cmp.perturbed_error,
                delta=placebo_cmp.delta, ci_low=placebo_cmp.ci_low, ci_high=placebo_cmp.ci_high,
                p_value=placebo_cmp.p_value, p_adjusted=placebo_cmp.p_adjusted,
            ),
            rewrite_effect=placebo.effect if placebo is not None else None,
            n_answer_checked=checked if settings.answer_check and checker is not None else None,
            n_answer_changed=changed if checked else None,
            n_answer_unverifiable=unverifiable(rewrites[k]) if settings.answer_check and checker is not None else None,
            n_answer_extracted=extracted_checks(rewrites[k]) if settings.answer_check and checker is not None else None,
            length_ratio=ratio,
            mde=mde,
            mde_n=mde_n,
            mde_power=settings.power,
            stopped_at=stopped_at[k],
            stop=stop[k],
        )
        validated.append(bias.model_copy(update={"validation": validation}))
        records.append(
            CandidateValidation(
                bias_id=bias.id,
                name=bias.name,
                n_perturb_invalid=sum(reasons.values()),
                comparison=decision,
                per_domain=domains_base[k],
                vs_baseline=base_cmp,
                vs_placebo=placebo_cmp,
                per_domain_vs_placebo=domains_placebo[k] if domains_placebo else {},
                invalid_reasons=dict(sorted(reasons.items())),
                n_answer_checked=checked,
                n_answer_changed=changed,
                n_answer_unverifiable=unverifiable(rewrites[k]),
                n_answer_extracted=extracted_checks(rewrites[k]),
                answer_change_rate=changed / checked if checked else None,
                length_ratio=ratio,
                mde=mde,
                mde_n=mde_n,
                stopped_at=stopped_at[k],
                stop=stop[k],
                p_sequential=p_seq_final[k] if multi_look else None,
                looks=looks[k],
            )
        )
    return ValidationOutput(
        candidates=validated,
        records=records,
        perturbed=all_perturbed,
        judgments=all_judgments,
        plan=plan,
        mde=statistics.median(mdes) if mdes else None,
        mde_n=round(statistics.median(mde_ns)) if mde_ns else None,
        mde_alpha=level,
    )

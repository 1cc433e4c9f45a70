"""Group-sequential validation: looks on growing slices, alpha spending, futility by conditional
power. The spending plans and the looks are hand-written (no well-kept Python library offers
Lan-DeMets spending for these paired tests); their normal tails and quantiles are
scipy.stats.norm's, imported on first use."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..settings.validate import check_look_fractions
from ._intervals import mean_and_sd
from ._multiplicity import _check_pvalues
from ._tests import _check_margin, paired_p_value, paired_t_one_sided

SpendingFunction = Literal["obrien_fleming", "pocock"]
"""Lan-DeMets alpha-spending functions: `obrien_fleming` spends almost nothing at early looks
(the final look keeps nearly all of alpha), `pocock` spends more evenly (earlier stops, a
stricter final look)."""

LookOutcome = Literal["continue", "efficacy", "futility", "final"]


def alpha_spent(t: float, alpha: float, spending: SpendingFunction = "obrien_fleming") -> float:
    """Cumulative type-I error a one-sided design may spend by information fraction `t`.

    O'Brien-Fleming type (Lan & DeMets 1983): ``2 (1 - Phi(z_{1 - alpha/2} / sqrt(t)))``;
    Pocock type: ``alpha ln(1 + (e - 1) t)``. Both are 0 at t = 0 and alpha at t = 1.
    """
    if not (0.0 < t <= 1.0):
        raise ValueError(f"information fraction must be in (0, 1]; got {t!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    if spending == "obrien_fleming":
        from scipy.stats import norm

        return min(alpha, 2.0 * float(norm.sf(float(norm.isf(alpha / 2.0)) / math.sqrt(t))))
    if spending == "pocock":
        return min(alpha, alpha * math.log(1.0 + (math.e - 1.0) * t))
    raise ValueError(f"spending must be 'obrien_fleming' or 'pocock'; got {spending!r}")


class SequentialPlan(BaseModel):
    """Where a validation looks at its data and at which nominal level.

    `looks` are cumulative item counts (the last is the whole test set); `levels[j]` is the
    alpha spent between look j - 1 and look j, so the levels sum to `alpha`. A candidate's
    sequential p-value is ``min_j p_j * alpha / levels[j]`` over the looks it reached: by the
    union bound P(p_seq <= x) <= sum_j x * levels[j] / alpha = x under H0, whatever the
    correlation between looks, so p_seq is a valid p-value that Holm or BH can take, and
    stopping early (for futility or efficacy) can only make it larger or leave it as it is.
    That is conservative next to an exact group-sequential boundary (which would use the
    correlation of the looks), and needs no numerical integration.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_total: int = Field(ge=0)
    looks: tuple[int, ...]
    levels: tuple[float, ...]
    alpha: float = Field(gt=0.0, lt=1.0)
    spending: str = "none"
    futility: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Stop a candidate when its conditional power under the current trend is below this."""


def plan_sequential(
    n_total: int,
    fractions: Sequence[float],
    *,
    alpha: float,
    spending: SpendingFunction = "obrien_fleming",
    futility: float = 0.0,
    min_items: int = 1,
) -> SequentialPlan:
    """The looks of a validation on `n_total` items: one per fraction (rounded up), except
    looks on fewer than `min_items` items (too little data to stop on); the last look is
    always the whole test set. `fractions=[1.0]` is the classic single test."""
    if n_total < 0:
        raise ValueError(f"n_total must be >= 0; got {n_total}")
    fs = check_look_fractions(fractions)
    looks: list[int] = []
    used: list[float] = []
    for f in fs[:-1]:
        size = math.ceil(f * n_total)
        if size >= max(min_items, 1) and size < n_total and (not looks or size > looks[-1]):
            looks.append(size)
            used.append(size / n_total)
    looks.append(n_total)
    used.append(1.0)
    if len(looks) == 1:
        return SequentialPlan(
            n_total=n_total, looks=(n_total,), levels=(alpha,), alpha=alpha, spending="none", futility=0.0
        )
    levels, spent = [], 0.0
    for t in used:
        cumulative = alpha if t == 1.0 else alpha_spent(t, alpha, spending)
        levels.append(max(0.0, cumulative - spent))
        spent = max(spent, cumulative)
    return SequentialPlan(
        n_total=n_total, looks=tuple(looks), levels=tuple(levels), alpha=alpha, spending=spending, futility=futility
    )


def sequential_p_value(p_values: Sequence[float], plan: SequentialPlan) -> float:
    """``min_j p_j * alpha / levels[j]`` over the looks made so far (see `SequentialPlan`)."""
    ps = _check_pvalues(p_values)
    if len(ps) > len(plan.levels):
        raise ValueError(f"{len(ps)} p-values for a plan of {len(plan.levels)} looks")
    best = 1.0
    for p, level in zip(ps, plan.levels):
        if level > 0.0:
            best = min(best, p * plan.alpha / level)
    return min(1.0, best)


def conditional_power(b: float, c: float, n_seen: int, n_total: int, level: float, margin: float = 0.0) -> float:
    """Chance that the final one-sided test of H0: Δ <= margin at `level` rejects, if the rest
    of the items behave like the `n_seen` seen so far (b hurt, c helped): stochastic
    curtailment under the current trend, by the normal approximation of B - C (at margin 0 the
    final statistic is McNemar's (B - C) / sqrt(B + C); above it, B - C - n margin over its
    null standard deviation sqrt(n (psi - margin^2))).

    Only used to stop hopeless candidates early (futility is non-binding: stopping can only
    lower the chance of acceptance, so it never raises the false-acceptance rate).
    """
    if n_seen <= 0 or n_seen > n_total:
        raise ValueError(f"need 0 < n_seen <= n_total; got {n_seen} and {n_total}")
    _check_margin(margin)
    from scipy.stats import norm

    z = float(norm.isf(level))
    rest = n_total - n_seen
    p10, p01 = b / n_seen, c / n_seen
    mean_rest = rest * (p10 - p01)
    var_rest = rest * (p10 + p01 - (p10 - p01) ** 2)
    discordant = b + c + rest * (p10 + p01)
    null_variance = discordant - n_total * margin * margin
    needed = z * math.sqrt(max(null_variance, 0.0)) + n_total * margin - (b - c) - mean_rest
    if var_rest <= 0.0:
        return 1.0 if needed <= 0.0 and discordant > 0 else 0.0
    return float(norm.sf(needed / math.sqrt(var_rest)))


def shift_conditional_power(
    mean: float, sd: float, n_seen: int, n_total: int, level: float, margin: float = 0.0
) -> float:
    """`conditional_power` for score verdicts: the chance that the final paired t-test of
    H0: Δ <= margin at `level` rejects if the remaining items' differences have the `mean`
    and `sd` of the `n_seen` seen so far (normal approximation of their sum; the final
    statistic (S - N margin) / (sd sqrt(N)))."""
    if n_seen <= 0 or n_seen > n_total:
        raise ValueError(f"need 0 < n_seen <= n_total; got {n_seen} and {n_total}")
    _check_margin(margin)
    from scipy.stats import norm

    z = float(norm.isf(level))
    rest = n_total - n_seen
    needed = z * sd * math.sqrt(n_total) + n_total * margin - n_total * mean
    if rest == 0 or sd <= 0.0:
        return 1.0 if needed < 0.0 else 0.0
    return float(norm.sf(needed / (sd * math.sqrt(rest))))


class LookRecord(BaseModel):
    """One look of a sequential validation at one candidate (validation.json). On score
    verdicts (`mean_difference` set) b and c count the items whose probability of preferring
    the rejected response rose / fell, and the p-value is the paired t-test's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    look: int = Field(ge=1)
    items: int = Field(ge=0, description="Test items in the slice so far.")
    n: int = Field(ge=0, description="Of those, items valid in both conditions.")
    b_discordant_hurt: int = Field(ge=0)
    c_discordant_helped: int = Field(ge=0)
    mean_difference: float | None = Field(default=None, description="Score verdicts: ΔP(rejected) on the slice.")
    sd_difference: float | None = Field(
        default=None, ge=0.0, description="Score verdicts: the sd of its per-item differences."
    )
    p_value: float = Field(
        ge=0.0, le=1.0, description="One-sided p of H0: Δ <= margin on the slice (`paired_p_value`)."
    )
    level: float = Field(ge=0.0, le=1.0, description="Alpha spent at this look.")
    p_sequential: float = Field(ge=0.0, le=1.0, description="Sequential p-value up to this look.")
    conditional_power: float | None = Field(default=None, description="Under the current trend.")
    outcome: LookOutcome


def look_outcome(
    plan: SequentialPlan,
    look: int,
    *,
    p_sequential: float,
    b: int,
    c: int,
    n: int,
    items: int,
    family_size: int,
    margin: float = 0.0,
    shift: tuple[float, float] | None = None,
) -> tuple[LookOutcome, float | None]:
    """What one candidate does after look `look` (0-based): stop for efficacy, stop for
    futility, go on, or (last look) be decided with the family.

    Efficacy: ``p_seq <= alpha / family_size`` (the p-values test H0: Δ <= margin); then Holm
    (or BH) accepts it whatever the other candidates' p-values (Holm's adjusted p is at most
    family_size * p), so stopping does not change the decision. Futility: conditional power
    of the final look (at its own level, without the family correction: the most lenient
    the candidate could face) below `plan.futility`, or no valid pair at all in the slice.
    Returns the outcome and the conditional power (None when not computed).
    `sequential_effect` integrates over exactly these two rules. `shift` = (mean, sd) of the
    per-item differences of score verdicts: their conditional power (`shift_conditional_power`).
    """
    if look == len(plan.looks) - 1:
        return "final", None
    if p_sequential <= plan.alpha / max(family_size, 1):
        return "efficacy", None
    if plan.futility <= 0.0:
        return "continue", None
    if n == 0:
        return "futility", 0.0  # no valid pair in the slice (e.g. every rewrite failed): nothing to go on
    n_final = expected_final_n(n, items, plan.n_total)
    if shift is None:
        power = conditional_power(b, c, n, n_final, plan.levels[-1], margin)
    else:
        power = shift_conditional_power(shift[0], shift[1], n, n_final, plan.levels[-1], margin)
    return ("futility" if power < plan.futility else "continue"), power


def expected_final_n(n: int, items: int, n_total: int) -> int:
    """The valid pairs a look on `items` of `n_total` test items (n of them valid) expects at
    the end, at the same valid share."""
    return max(n, round(n * n_total / items)) if items else n


def sequential_look(
    plan: SequentialPlan,
    look: int,
    earlier: Sequence[LookRecord],
    *,
    b: int,
    c: int,
    n: int,
    family_size: int,
    margin: float = 0.0,
) -> LookRecord:
    """One candidate's look `look` (0-based) at the first `plan.looks[look]` items, of which
    `n` are valid in both arms with b hurt and c helped; `earlier` are its previous looks.
    The record holds the slice's p-value of H0: Δ <= margin (`paired_p_value`), the
    sequential p-value so far and what the candidate does next (`look_outcome`)."""
    return _record_look(
        plan, look, earlier, p=paired_p_value(b, c, n, margin), b=b, c=c, n=n, family_size=family_size, margin=margin
    )


def sequential_shift_look(
    plan: SequentialPlan,
    look: int,
    earlier: Sequence[LookRecord],
    *,
    differences: Sequence[float],
    family_size: int,
    margin: float = 0.0,
) -> LookRecord:
    """`sequential_look` for score verdicts: `differences` are the per-item shifts of the
    probability of preferring the rejected response (arm minus control) on the items of the
    slice valid in both; the slice's p-value is the paired t-test's of H0: Δ <= margin, the
    futility rule its conditional power. Same plan, sequential p-value and stopping rules. The
    record's `mean_difference` and `sd_difference` (0 without a valid item) mark it as a
    score look."""
    n = len(differences)
    mean, sd = mean_and_sd(differences) if n else (0.0, 0.0)
    b = sum(1 for d in differences if d > 0.0)
    c = sum(1 for d in differences if d < 0.0)
    p = paired_t_one_sided(differences, margin)
    return _record_look(
        plan, look, earlier, p=p, b=b, c=c, n=n, family_size=family_size, margin=margin, shift=(mean, sd)
    )


def _record_look(
    plan: SequentialPlan,
    look: int,
    earlier: Sequence[LookRecord],
    *,
    p: float,
    b: int,
    c: int,
    n: int,
    family_size: int,
    margin: float,
    shift: tuple[float, float] | None = None,
) -> LookRecord:
    """The record of look `look` with the slice's p-value `p`: the sequential p-value so far
    and the outcome (`look_outcome`; `shift` = the score look's mean and sd)."""
    if len(earlier) != look:
        raise ValueError(f"look {look} needs {look} earlier looks, got {len(earlier)}")
    p_seq = sequential_p_value([r.p_value for r in earlier] + [p], plan)
    items = plan.looks[look]
    outcome, power = look_outcome(
        plan, look, p_sequential=p_seq, b=b, c=c, n=n, items=items, family_size=family_size, margin=margin, shift=shift
    )
    return LookRecord(
        look=look + 1,
        items=items,
        n=n,
        b_discordant_hurt=b,
        c_discordant_helped=c,
        mean_difference=None if shift is None else shift[0],
        sd_difference=None if shift is None else shift[1],
        p_value=p,
        level=plan.levels[look],
        p_sequential=p_seq,
        conditional_power=power,
        outcome=outcome,
    )

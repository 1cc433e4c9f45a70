"""The one paired comparison type, the acceptance decision, the error statement, per-domain breakdowns, and two judges' Δ compared."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..formatting import MEASURE_LABELS
from ..settings.validate import DEFAULT_BOOTSTRAP_RESAMPLES
from ._intervals import (
    DOMAIN_BOOTSTRAP_RESAMPLES,
    _bootstrap_mean_ci,
    _check_confidence,
    mean_and_sd,
    mean_t_interval,
    paired_bootstrap_delta_ci,
)
from ._multiplicity import Correction, _check_pvalues, adjust_p_values
from ._tests import paired_p_value, paired_t_one_sided, sign_flip_p_value

Measure = Literal["error", "p_rejected", "score"]
"""What a comparison's per-item values are: the judge's errors (choice verdicts: True wrong,
False right), its probability of preferring the rejected response (score verdicts), or a
pointwise judge's score of the rejected response as a share of its scale (0 the lowest label,
1 the highest; a shift of 1 / span is one point of the scale)."""


def is_shift(measure: str) -> bool:
    """Whether a measure's per-item values are numbers whose mean shift is tested (paired
    t-test: `p_rejected`, `score`) rather than errors counted (McNemar: `error`)."""
    return measure in ("p_rejected", "score")


AcceptanceRule = Literal["paired", "paper"]
"""`paired`: the adjusted p-value of H0: Delta <= min_delta is <= alpha (default; exact one-sided
McNemar at min_delta 0, Tango's score test above it).
`paper`: BiasScope's Eq. 10, perturbed error > baseline error, no test (for comparison)."""


class PairedComparison(BaseModel):
    """One arm against a control on the same items: the project's one comparison type.

    The arm is what is tested (a perturbation carrying a candidate bias, the placebo's neutral
    rewrite ...); the control is what it is compared with (the unperturbed items, the placebo
    ...), named in `control`. Error rates are over the `n` items valid in *both* (an item whose
    verdict was unparseable in either is excluded and counted in `n_excluded_invalid`), so
    ``delta == (b_discordant_hurt - c_discordant_helped) / n`` exactly. `p_value` tests
    H0: Δ <= `margin` (exact McNemar at margin 0, Tango's score test above it). `p_adjusted`,
    `accepted` and `rule` are filled by `decide_acceptance`; until then None / "undecided".

    Records written before this type was shared (the library's `DomainValidation`,
    `ControlComparison`, `RewriteEffect`, and files naming the errors `baseline_error` /
    `perturbed_error` / `placebo_error`) are read into it; the fields they lack (discordant
    counts, CIs) stay None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    control: str | None = Field(default=None, description="What the arm is compared with: baseline, placebo ...")
    measure: Measure = Field(
        default="error",
        description="error: control_error and arm_error are error rates (choice verdicts); p_rejected: they are "
        "the mean probability of preferring the rejected response (score verdicts), tested by the paired t-test.",
    )
    n: int = Field(ge=0, description="Items valid in both arms (the paired sample).")
    n_excluded_invalid: int = Field(
        default=0, ge=0, description="Items excluded because the verdict was invalid in either arm."
    )
    control_error: float = Field(ge=0.0, le=1.0, description="Error rate with the control.")
    arm_error: float = Field(ge=0.0, le=1.0, description="Error rate on the same items with the arm.")
    delta: float = Field(ge=-1.0, le=1.0, description="arm_error - control_error.")
    ci_low: float | None = Field(default=None, ge=-1.0, le=1.0, description="Paired bootstrap CI of delta, low end.")
    ci_high: float | None = Field(default=None, ge=-1.0, le=1.0, description="Paired bootstrap CI of delta, high end.")
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0, description="Level of the CI.")
    b_discordant_hurt: int | None = Field(default=None, ge=0, description="Right with the control, wrong with the arm.")
    c_discordant_helped: int | None = Field(
        default=None, ge=0, description="Wrong with the control, right with the arm."
    )
    sd_difference: float | None = Field(
        default=None, ge=0.0, description="p_rejected: the standard deviation of the per-item differences."
    )
    margin: float = Field(default=0.0, ge=0.0, lt=1.0, description="The null hypothesis is Δ <= margin (min_delta).")
    p_value: float | None = Field(
        default=None, ge=0.0, le=1.0, description="One-sided p of H0: Δ <= margin (see `paired_p_value`)."
    )
    p_adjusted: float | None = Field(
        default=None, description="The p-value the decision used, adjusted across the candidates decided together."
    )
    accepted: bool | None = Field(default=None, description="Decision; None until decided (or not decisive).")
    rule: str = Field(default="undecided", description="The decision rule, in words.")

    @model_validator(mode="before")
    @classmethod
    def _older_shapes(cls, data: Any) -> Any:
        """Read the field names of records written before the comparison type was shared."""
        if not isinstance(data, dict):
            return data
        renamed = dict(data)
        for old, new in (
            ("baseline_error", "control_error"),
            ("perturbed_error", "arm_error"),
            ("placebo_error", "arm_error"),
        ):
            if old in renamed:
                value = renamed.pop(old)
                renamed.setdefault(new, value)
        return renamed

    @model_validator(mode="after")
    def _ci_ordered(self) -> PairedComparison:
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low ({self.ci_low}) is above ci_high ({self.ci_high})")
        return self


def paired_counts(control: Sequence[bool | None], arm: Sequence[bool | None]) -> tuple[int, int, int, int]:
    """(n valid in both, b = right -> wrong, c = wrong -> right, excluded) of two error vectors
    over the same items (True = wrong, False = right, None = invalid)."""
    if len(control) != len(arm):
        raise ValueError(f"control and arm must cover the same items; got {len(control)} and {len(arm)}")
    n = b = c = 0
    for x, y in zip(control, arm):
        if x is None or y is None:
            continue
        n += 1
        b += (not x) and bool(y)
        c += bool(x) and (not y)
    return n, b, c, len(control) - n


def compare_paired(
    baseline: Sequence[bool | None],
    perturbed: Sequence[bool | None],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    margin: float = 0.0,
    control: str | None = None,
) -> PairedComparison:
    """Compare a judge's errors on the same items with a control (`baseline`) and with an arm
    (`perturbed`); `control` names the control, `margin` the null hypothesis Δ <= margin.

    `baseline[i]` / `perturbed[i]` is True when the judge was wrong on item i, False when it
    was right, None when its verdict was invalid (unparseable, truncated, engine error).
    Items invalid in either condition are dropped from *both* sides: keeping them on one side
    would compare different item sets and break the pairing; counting invalid as wrong (as an
    `y_hat != chosen` reading of the paper's Eq. 9 would) would let a perturbation that merely
    makes the judge's output unparseable look like a bias. The number dropped is reported.
    """
    n, b, c, excluded = paired_counts(baseline, perturbed)
    base = [bool(x) for x, y in zip(baseline, perturbed) if x is not None and y is not None]
    pert = [bool(y) for x, y in zip(baseline, perturbed) if x is not None and y is not None]
    ci_low, ci_high = paired_bootstrap_delta_ci(base, pert, n_boot=n_boot, confidence=confidence, seed=seed)
    return PairedComparison(
        control=control,
        n=n,
        n_excluded_invalid=excluded,
        control_error=sum(base) / n if n else 0.0,
        arm_error=sum(pert) / n if n else 0.0,
        delta=(b - c) / n if n else 0.0,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        b_discordant_hurt=b,
        c_discordant_helped=c,
        margin=margin,
        p_value=paired_p_value(b, c, n, margin),
    )


def paired_values(control: Sequence[float | None], arm: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """The items valid in both of two per-item value vectors (None = invalid), as two lists."""
    if len(control) != len(arm):
        raise ValueError(f"control and arm must cover the same items; got {len(control)} and {len(arm)}")
    both = [(float(x), float(y)) for x, y in zip(control, arm) if x is not None and y is not None]
    return [x for x, _ in both], [y for _, y in both]


def compare_paired_scores(
    control: Sequence[float | None],
    arm: Sequence[float | None],
    *,
    confidence: float = 0.95,
    margin: float = 0.0,
    control_name: str | None = None,
    measure: Measure = "p_rejected",
) -> PairedComparison:
    """Compare a judge's probability of preferring the rejected response (score verdicts; or
    `measure` score: a pointwise judge's score of it, as a share of the scale) on
    the same items with a control and with an arm: Δ = mean(arm - control) over the items
    valid in both (an invalid score on either side drops the item from both, as
    `compare_paired` does), a Student-t CI of Δ, and the one-sided paired t-test of
    H0: Δ <= margin (`paired_t_one_sided`; the CI and the test are the same t statistic)."""
    base, mine = paired_values(control, arm)
    n = len(base)
    diffs = [y - x for x, y in zip(base, mine)]
    mean, sd = mean_and_sd(diffs) if n else (0.0, 0.0)
    low, high = mean_t_interval(diffs, confidence, bounds=(-1.0, 1.0)) if n else (-1.0, 1.0)
    return PairedComparison(
        control=control_name,
        measure=measure,
        n=n,
        n_excluded_invalid=len(control) - n,
        control_error=math.fsum(base) / n if n else 0.0,
        arm_error=math.fsum(mine) / n if n else 0.0,
        delta=max(-1.0, min(1.0, mean)),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        sd_difference=sd if n > 1 else None,
        margin=margin,
        p_value=paired_t_one_sided(diffs, margin),
    )


def decide_acceptance(
    comparisons: list[PairedComparison],
    *,
    rule: AcceptanceRule = "paired",
    alpha: float = 0.05,
    correction: Correction = "holm",
    p_values: Sequence[float] | None = None,
    control: str = "baseline",
) -> list[PairedComparison]:
    """Decide which candidates of one iteration are accepted; returns decided copies, in order.

    `p_values` replace the comparisons' own p-values in the test (the sequential p-values of
    a validation on growing slices, see `SequentialPlan`); `control` names what the
    comparisons compare with (``baseline`` or ``placebo``), for the rule's text.

    The list is the family: pass all candidates validated together (one iteration, or all
    of them at the end with `validate: late`), so the correction sees every test made.

    `paired` (default): accept iff the adjusted p-value of H0: Δ <= margin is <= alpha (the
    comparisons' `margin`, min_delta: exact one-sided McNemar at 0, Tango's score test above
    it, see `paired_p_value`). A practically relevant effect is thus a hypothesis the test
    rejects, not a point estimate above a threshold (which accepts a true Δ just below
    min_delta about as often as a coin).

    `paper`: BiasScope's Eq. 10, accept iff perturbed error > baseline error, i.e. b > c on
    the paired items (compared as integers, so no float ties). No test, no correction, and
    the margin is ignored. Why this accepts noise: if the perturbation has no effect, every
    flip of the judge between the two runs (sampling noise, or a content-neutral rewrite
    nudging an item that sits near the judge's decision boundary) is as likely to go
    right->wrong as wrong->right, so b - c is symmetric around 0 and
    P(accept) = (1 - P(b == c)) / 2, which tends to 1/2 as the number of flips grows. For a
    judge at 50% error whose two runs are independent, over 60 items that is 0.464 (exact),
    against 0.036 for the paired rule at alpha 0.05; with several candidates per iteration
    the paper rule admits about half of the useless ones into the library, and they then
    seed the next iteration. p_adjusted is still computed under the paper rule so the two
    can be compared from one record.
    """
    if rule not in ("paired", "paper"):
        raise ValueError(f"rule must be 'paired' or 'paper'; got {rule!r}")
    if correction not in ("holm", "bh", "none"):
        raise ValueError(f"correction must be 'holm', 'bh' or 'none'; got {correction!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    if p_values is None:
        if any(cmp.p_value is None for cmp in comparisons):
            raise ValueError("every comparison needs its p-value to be decided")
        ps = [float(cmp.p_value) for cmp in comparisons if cmp.p_value is not None]
    else:
        ps = _check_pvalues(p_values)
    if len(ps) != len(comparisons):
        raise ValueError(f"{len(ps)} p-values for {len(comparisons)} comparisons")
    adjusted = adjust_p_values(ps, correction)

    if rule == "paper":
        rule_text = "paper: perturbed error > baseline error (no test)"
    else:
        corr_text = {"holm": "Holm-adjusted", "bh": "BH-adjusted", "none": "unadjusted"}[correction]
        margin = max((cmp.margin for cmp in comparisons), default=0.0)
        shifts = [cmp.measure for cmp in comparisons if is_shift(cmp.measure)]
        if shifts:
            kind = f"one-sided paired t-test of {MEASURE_LABELS[shifts[0]]}" + (
                f" <= {margin:g}" if margin > 0.0 else ""
            )
        elif margin > 0.0:
            kind = f"Tango score test of Δ <= {margin:g}"
        else:
            kind = "exact one-sided McNemar"
        if p_values is not None:
            kind = "sequential " + kind
        rule_text = f"paired vs {control}: {corr_text} {kind}, p <= {alpha:.3g} (family of {len(comparisons)})"
    out: list[PairedComparison] = []
    for cmp, p_adj in zip(comparisons, adjusted):
        if rule == "paper":
            accepted = (
                cmp.delta > 0.0
                if cmp.b_discordant_hurt is None
                else cmp.b_discordant_hurt > (cmp.c_discordant_helped or 0)
            )
        else:
            accepted = p_adj <= alpha
        out.append(cmp.model_copy(update={"p_adjusted": p_adj, "accepted": accepted, "rule": rule_text}))
    return out


ErrorControl = Literal["iteration", "run"]
"""`run`: alpha is split evenly over a run's planned validations (each a family); `iteration`:
each validation's family gets the whole alpha."""


def error_statement(
    *,
    acceptance: str,
    correction: str,
    error_control: str,
    alpha: float,
    family_alpha: float,
    families: int | None,
    margin: float = 0.0,
    control: str = "placebo",
    sequential: bool = False,
    scope: str = "run",
    measure: Measure = "error",
    unit: str = "candidate",
    members: str | None = None,
) -> str:
    """The one sentence that says what a validation's decisions control, at what level, over
    which family, for these settings (validation.json's `error_statement`, the library, the
    report and `library show`, a matrix's `family_statement`).

    `unit` names what is accepted or not (a candidate; a matrix's cell), its plural taking an
    "s"; `members` describes a single family's members ("9 cells: 2 judges and the jury x 3
    biases"), said instead of "the validation".

    `families` is the number of validations the `scope` plans (a run: its iterations, plus
    the seed library's; a replication: 1; None: unknown) and `family_alpha` each one's level. Holm bounds the
    chance of any false acceptance in a family under any dependence; splitting alpha evenly
    over the families (Bonferroni) bounds it over the scope. Benjamini-Hochberg bounds the
    expected share of false acceptances among the accepted (independent or positively
    dependent tests), and, when no candidate has an effect, the chance of any acceptance.
    """
    if acceptance == "paper":
        return (
            "No error control: the paper's rule (perturbed error > baseline error) accepts without a test; "
            f"a {unit} with no effect is accepted about half of the time."
        )
    raised = {
        "error": "error",
        "p_rejected": "probability of preferring the rejected response",
        "score": "score of the rejected response",
    }[measure]
    null = (
        f"{unit} that does not raise the judge's {raised} over the {control}"
        if margin <= 0.0
        else f"{unit} whose true {MEASURE_LABELS[measure]} over the {control} is at most {margin:g}"
    )
    nulls = (
        f"{unit}s that do not raise the {raised} over the {control}"
        if margin <= 0.0
        else f"{unit}s at most {margin:g} above the {control}"
    )
    looks = ", early looks included" if sequential else ""
    split = error_control == "run"
    several = families is None or families > 1
    if not several:
        within = f"across the {scope}'s {members}" if members else f"within the {scope}'s one validation"
    else:
        count = "" if families is None else f"{families} "
        within = f"within each of the {scope}'s {count}planned validations at {family_alpha:.3g}"
    if correction == "holm" and split:
        return (
            f"Family-wise error over the {scope}: the chance that the {scope} accepts any {null} is at most "
            f"α = {alpha:g} (Holm {within}{', Bonferroni across them' if several else ''}{looks})."
        )
    if correction == "holm":
        return (
            f"Family-wise error per validation: the chance that one validation (one iteration's candidates) accepts "
            f"any {null} is at most α = {alpha:g} (Holm{looks}); over the {scope}'s "
            + (
                f"{families} planned validations that chance can reach {min(1.0, families * alpha):.3g}."
                if families is not None
                else "validations these chances add up (up to their number × α)."
            )
        )
    if correction == "bh" and split:
        return (
            f"False-discovery rate at most {family_alpha:.3g} {within.replace(f' at {family_alpha:.3g}', '')} "
            f"(Benjamini-Hochberg, α = {alpha:g}{' split evenly' if several else ''}{looks}): the expected share of {nulls} among the "
            f"accepted; if no {unit} has an effect, the chance that the {scope} accepts any is at most {alpha:g}."
        )
    if correction == "bh":
        return (
            f"False-discovery rate per validation: among one iteration's accepted candidates the expected share of "
            f"{nulls} is at most {alpha:g} (Benjamini-Hochberg{looks}); the chance of some false acceptance in the "
            f"{scope} is not bounded."
        )
    level = family_alpha if split else alpha
    return (
        f"No multiplicity control: each {unit} is tested alone at α = {level:.3g}{looks}; the chance of some "
        f"false acceptance can reach the number of {unit}s tested × {level:.3g}."
    )


def per_domain_breakdown(
    domains: Sequence[str],
    baseline: Sequence[bool | float | None],
    perturbed: Sequence[bool | float | None],
    *,
    n_boot: int = DOMAIN_BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    margin: float = 0.0,
    control: str | None = None,
    measure: Measure = "error",
) -> dict[str, PairedComparison]:
    """`compare_paired` (`compare_paired_scores` for the `p_rejected` measure) within each
    domain (e.g. JudgeBench's knowledge/reasoning/math/code).

    Descriptive, not a decision: the paper reports effects per domain (math moves most), and
    a candidate can be strong in one domain and null in another. The records stay
    "undecided"; acceptance is decided on the whole test set only, so the per-domain splits
    do not multiply the tests. The bootstrap default is smaller than for the overall record
    (`DOMAIN_BOOTSTRAP_RESAMPLES`: a descriptive CI per domain, drawn for every candidate).
    Keys are sorted, so the output is deterministic.
    """
    if not (len(domains) == len(baseline) == len(perturbed)):
        raise ValueError(
            "domains, baseline and perturbed must cover the same items; got "
            f"{len(domains)}, {len(baseline)} and {len(perturbed)}"
        )
    groups: dict[str, list[int]] = {}
    for i, d in enumerate(domains):
        groups.setdefault(d, []).append(i)
    if is_shift(measure):
        return {
            d: compare_paired_scores(
                [baseline[i] for i in groups[d]],
                [perturbed[i] for i in groups[d]],
                confidence=confidence,
                margin=margin,
                control_name=control,
                measure=measure,
            )
            for d in sorted(groups)
        }
    return {
        d: compare_paired(
            [None if baseline[i] is None else bool(baseline[i]) for i in groups[d]],
            [None if perturbed[i] is None else bool(perturbed[i]) for i in groups[d]],
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
            margin=margin,
            control=control,
        )
        for d in sorted(groups)
    }


class EffectDifference(BaseModel):
    """Two judges' Δerror for one bias on the same items, each against its own control (the
    judge's placebo or baseline): is one judge's Δ larger than the other's?

    Computed on the `n` items valid in all four arms (each judge's control and biased arm),
    so `delta_a` and `delta_b` can differ slightly from the judges' own comparisons, which
    use the items valid for that judge. Per item the difference of the two judges' changes,
    (arm_a - control_a) - (arm_b - control_b), lies in -2..2; `difference` is its mean.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=0, description="Items valid in all four arms.")
    n_excluded_invalid: int = Field(ge=0, description="Items invalid in at least one arm.")
    delta_a: float = Field(ge=-1.0, le=1.0, description="Judge A's Δerror on these items.")
    delta_b: float = Field(ge=-1.0, le=1.0, description="Judge B's Δerror on these items.")
    difference: float = Field(ge=-2.0, le=2.0, description="delta_a - delta_b.")
    ci_low: float | None = Field(description="Paired bootstrap CI of the difference (None: no item).")
    ci_high: float | None
    confidence: float = Field(gt=0.0, lt=1.0)
    p_value: float = Field(ge=0.0, le=1.0, description="Two-sided exact sign-flip p of H0: no difference.")
    p_adjusted: float | None = Field(
        default=None, description="p_value adjusted across the comparisons decided together."
    )
    significant: bool | None = Field(default=None, description="p_adjusted <= alpha; None until decided.")


def compare_effects(
    control_a: Sequence[bool | None],
    arm_a: Sequence[bool | None],
    control_b: Sequence[bool | None],
    arm_b: Sequence[bool | None],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> EffectDifference:
    """Compare two judges' Δerror on the same items (errors as in `compare_paired`: True
    wrong, False right, None invalid): the difference of their per-item changes, its paired
    bootstrap CI and the exact two-sided sign-flip p (`sign_flip_p_value`)."""
    if not (len(control_a) == len(arm_a) == len(control_b) == len(arm_b)):
        raise ValueError("the four arms must cover the same items")
    _check_confidence(confidence)
    change_a, change_b = [], []
    for ca, aa, cb, ab in zip(control_a, arm_a, control_b, arm_b):
        if ca is None or aa is None or cb is None or ab is None:
            continue
        change_a.append(int(bool(aa)) - int(bool(ca)))
        change_b.append(int(bool(ab)) - int(bool(cb)))
    n = len(change_a)
    diff = np.asarray(change_a, dtype=np.int8) - np.asarray(change_b, dtype=np.int8)
    ci = _bootstrap_mean_ci(diff, n_boot=n_boot, confidence=confidence, seed=seed) if n else (None, None)
    return EffectDifference(
        n=n,
        n_excluded_invalid=len(control_a) - n,
        delta_a=sum(change_a) / n if n else 0.0,
        delta_b=sum(change_b) / n if n else 0.0,
        difference=float(diff.sum()) / n if n else 0.0,
        ci_low=ci[0],
        ci_high=ci[1],
        confidence=confidence,
        p_value=sign_flip_p_value(diff.tolist()),
    )


def decide_differences(
    differences: Sequence[EffectDifference], *, alpha: float, correction: Correction
) -> list[EffectDifference]:
    """Adjust the comparisons' p-values together (they are one family) and mark those at or
    below `alpha`; returns decided copies, in order."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    adjusted = adjust_p_values([d.p_value for d in differences], correction)
    return [d.model_copy(update={"p_adjusted": p, "significant": p <= alpha}) for d, p in zip(differences, adjusted)]

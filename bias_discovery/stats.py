"""Statistics for validating candidate biases: paired tests, intervals, multiplicity control.

Why this module exists
----------------------
BiasScope (Section 2.3, Eq. 10) accepts a candidate bias when the judge's error rate on the
perturbed test set is higher than on the original one. On a finite test set and a judge whose
verdicts wobble, that difference is positive about half of the time *even when the
perturbation does nothing* (see `decide_acceptance`). Here validation is instead a **paired**
comparison on the same items:

* the item-level outcome is "judge wrong at baseline" vs "judge wrong when perturbed";
* the evidence lives only in the discordant items (right -> wrong, b; wrong -> right, c), so
  the test is the exact one-sided McNemar test (a binomial test on b out of b + c);
* the size of the effect is reported with a paired percentile-bootstrap CI of
  Delta error = err(perturbed) - err(baseline), resampling items so the pairing is kept;
* one iteration validates several candidates at once, so p-values are adjusted (Holm by
  default, Benjamini-Hochberg optionally) before comparing with alpha; `error_statement` says
  in one sentence what that controls for the settings in use;
* `min_delta` is a hypothesis, not a threshold on the estimate: H0 is Δ <= min_delta, tested
  with Tango's score test (`paired_p_value`), with power and the smallest detectable Δ for it;
* a validation on growing slices (`SequentialPlan`) reports the effect given where and why
  it stopped (`sequential_effect`), since the Δ of the stopping look is biased.

The paper's plain rule stays available (`rule="paper"`) so results can be compared.

Everything is pure Python + numpy (no scipy): exact binomial tails use integer arithmetic
(`math.comb`) for the sizes we meet (test sets of hundreds of items) and a log-space sum
beyond that; the normal quantile comes from `statistics.NormalDist`.

Also here: Cohen's kappa, for the annotation of exported benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AcceptanceRule",
    "CONDITIONAL",
    "ConditionalInterval",
    "Correction",
    "DEFAULT_BOOTSTRAP_RESAMPLES",
    "DOMAIN_BOOTSTRAP_RESAMPLES",
    "Effect",
    "EffectDifference",
    "ErrorControl",
    "FULL_SAMPLE",
    "HELD_OUT",
    "LookRecord",
    "PairedComparison",
    "SequentialPlan",
    "SpendingFunction",
    "StoppingDesign",
    "alpha_spent",
    "check_look_fractions",
    "conditional_interval",
    "conditional_power",
    "continuation_tails",
    "decisive_comparison",
    "error_statement",
    "expected_final_n",
    "held_out_method",
    "look_outcome",
    "min_detectable_delta",
    "min_detectable_shift",
    "null_discordance",
    "paired_counts",
    "paired_p_value",
    "paired_power",
    "paired_t_one_sided",
    "compare_paired_scores",
    "mean_and_sd",
    "paired_values",
    "Measure",
    "MEASURE_LABELS",
    "plan_sequential",
    "sequential_effect",
    "sign_flip_p_value",
    "sequential_look",
    "sequential_shift_look",
    "stopping_design",
    "shift_conditional_power",
    "sequential_p_value",
    "student_t_quantile",
    "student_t_sf",
    "adjust_p_values",
    "benjamini_hochberg_adjust",
    "compare_effects",
    "compare_paired",
    "decide_acceptance",
    "decide_differences",
    "holm_adjust",
    "mcnemar_exact_one_sided",
    "mean_t_interval",
    "paired_bootstrap_delta_ci",
    "per_domain_breakdown",
    "tango_restricted_helped_rate",
    "tango_z",
    "wilson_interval",
    "cohens_kappa",
]

Measure = Literal["error", "p_rejected"]
"""What a comparison's per-item values are: the judge's errors (choice verdicts: True wrong,
False right) or its probability of preferring the rejected response (score verdicts)."""
MEASURE_LABELS: dict[str, str] = {"error": "Δerror", "p_rejected": "ΔP(rejected)"}
"""How a difference of each measure is named wherever it is printed."""

AcceptanceRule = Literal["paired", "paper"]
"""`paired`: the adjusted p-value of H0: Delta <= min_delta is <= alpha (default; exact one-sided
McNemar at min_delta 0, Tango's score test above it).
`paper`: BiasScope's Eq. 10, perturbed error > baseline error, no test (for comparison)."""

Correction = Literal["holm", "bh", "none"]
"""Multiplicity correction across one iteration's candidates: Holm (family-wise error rate),
Benjamini-Hochberg (false-discovery rate) or none."""

# Above this many discordant pairs the exact integer tail becomes slow (O(n^2) bit work);
# the log-space sum is then used. Test sets are hundreds of items, so it is rarely reached.
_EXACT_TAIL_MAX_N = 5000
# Bound on the number of bootstrap indices drawn at once (int64: 2**21 * 8 B = 16 MiB).
_MAX_DRAWS_PER_CHUNK = 2**21

DEFAULT_BOOTSTRAP_RESAMPLES = 2000
"""Resamples of a paired bootstrap CI of Δerror (`validate.n_boot`, `audit --n-boot`): on 300
items the Monte Carlo error of each CI end is about 0.2 percentage points."""
DOMAIN_BOOTSTRAP_RESAMPLES = 200
"""Resamples of the descriptive per-domain CIs (drawn for every candidate and domain)."""


# --------------------------------------------------------------------------------------------
# Intervals and tests
# --------------------------------------------------------------------------------------------


def _check_confidence(confidence: float) -> None:
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k / n (two-sided).

    Used for error rates, per domain included, where n can be small (a domain may hold a few
    dozen items) and the rate can sit at 0 or 1: the Wald interval p +- z*sqrt(p(1-p)/n)
    collapses to a point there and undercovers badly for small n; Wilson does not.
    n == 0 gives the uninformative (0.0, 1.0).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    _check_confidence(confidence)
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    z2 = z * z
    p = k / n
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if k == 0 else max(0.0, center - half)
    high = 1.0 if k == n else min(1.0, center + half)
    return (low, high)


def _regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz; Numerical Recipes' betacf),
    evaluated where it converges fast (x < (a + 1) / (a + b + 2)), by symmetry elsewhere."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _regularized_incomplete_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (no scipy)."""
    if df <= 0:
        raise ValueError(f"df must be > 0; got {df!r}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)
    return tail if t >= 0 else 1.0 - tail


def student_t_quantile(q: float, df: float) -> float:
    """The t with P(T <= t) = q, by bisection on `student_t_sf` (monotone)."""
    if not (0.0 < q < 1.0):
        raise ValueError(f"q must be in (0, 1); got {q!r}")
    low, high = -1.0, 1.0
    while student_t_sf(low, df) < 1.0 - q:
        low *= 2.0
    while student_t_sf(high, df) > 1.0 - q:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if student_t_sf(mid, df) > 1.0 - q:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, abs(mid)):
            break
    return (low + high) / 2.0


def mean_t_interval(
    values: Sequence[float], confidence: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, float]:
    """Student-t interval of the mean of `values` (mean +- t * sd / sqrt(n)), clipped to
    `bounds` (the range the values live in, e.g. probabilities). With fewer than two values
    nothing is known about the spread: the interval is `bounds`. Used where n can be small
    (a domain of a few pairs), where a percentile bootstrap would collapse to a point."""
    _check_confidence(confidence)
    n = len(values)
    if n < 2:
        return bounds
    mean, sd = mean_and_sd(values)
    half = student_t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return (max(bounds[0], mean - half), min(bounds[1], mean + half))


def paired_t_one_sided(differences: Sequence[float], margin: float = 0.0) -> float:
    """One-sided paired t-test p-value of H0: mean difference <= margin (per item: the score
    under the arm minus under the control, on the same item).

    Differences that all sit at the same distance from the margin (no spread) are decided as
    the sign-flip test would: n of them above give 0.5 ** n, otherwise 1.0. Fewer than two
    items: 1.0."""
    n = len(differences)
    if n < 2:
        return 1.0
    mean, sd = mean_and_sd(differences)
    if sd <= _NO_SPREAD * max(1.0, abs(mean)):  # equal up to rounding: the sign-flip test's p
        return 0.5**n if mean > margin else 1.0
    return student_t_sf((mean - margin) / (sd / math.sqrt(n)), n - 1)


_NO_SPREAD = 1e-12
"""A standard deviation this small (relative to the mean) is rounding: the values are equal."""


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0


def _binom_half_upper_tail_exact(b: int, m: int) -> float:
    """P(X >= b) for X ~ Binomial(m, 1/2), exactly, as one correctly rounded division."""
    term = math.comb(m, b)
    total = 0
    for k in range(b, m + 1):
        total += term
        term = term * (m - k) // (k + 1)  # C(m, k+1) from C(m, k); the division is exact
    return total / (1 << m)


def _binom_half_upper_tail_log(b: int, m: int) -> float:
    """P(X >= b) for X ~ Binomial(m, 1/2) by a log-space sum, for large m.

    The sum always runs over the *far* tail (by symmetry P(X >= b) = 1 - P(X >= m - b + 1)),
    whose terms shrink geometrically, so it stops once a term is 1e-17 of the first one.
    """
    if 2 * b <= m:
        return 1.0 - _binom_half_upper_tail_log(m - b + 1, m)
    log2 = math.log(2.0)
    lgm = math.lgamma(m + 1)

    def log_pmf(k: int) -> float:
        return lgm - math.lgamma(k + 1) - math.lgamma(m - k + 1) - m * log2

    first = log_pmf(b)
    acc = 0.0  # sum of exp(log_pmf(k) - first)
    for k in range(b, m + 1):
        rel = log_pmf(k) - first
        if rel < -40.0:
            break
        acc += math.exp(rel)
    return min(1.0, math.exp(first + math.log(acc)))


def mcnemar_exact_one_sided(b: int, c: int) -> float:
    """Exact one-sided McNemar p-value for "the perturbation raises the error rate".

    b = items the judge got right at baseline and wrong when perturbed (perturbation hurt),
    c = items wrong at baseline and right when perturbed (perturbation helped).
    Concordant items carry no information about the difference, so under H0 (no effect) each
    discordant item is equally likely to fall either way: b ~ Binomial(b + c, 1/2).
    H1 is one-sided because a bias is only a bias if it *raises* the error:
        p = P(X >= b | X ~ Binomial(b + c, 1/2)).
    b + c == 0 gives 1.0 (no evidence at all).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0; got b={b}, c={c}")
    m = b + c
    if m == 0 or b == 0:
        return 1.0
    if m <= _EXACT_TAIL_MAX_N:
        return min(1.0, _binom_half_upper_tail_exact(b, m))
    return _binom_half_upper_tail_log(b, m)


def _check_margin(margin: float) -> None:
    if not (0.0 <= margin < 1.0):
        raise ValueError(f"margin must be in [0, 1); got {margin!r}")


def tango_restricted_helped_rate(b: float, c: float, n: float, margin: float) -> float:
    """The maximum-likelihood p01 (wrong -> right rate) under H0's boundary p10 - p01 = margin.

    With r = n - b - c concordant items the constrained log-likelihood is
    ``b log(p + m) + c log p + r log(1 - 2p - m)``; setting its derivative to zero gives
    ``2n p^2 - B p - c m (1 - m) = 0`` with ``B = b (1 - m) + c (1 - 3m) - 2 m r``, whose
    positive root is returned (Tango 1998, Statistics in Medicine 17: 891-908).
    """
    if n <= 0:
        raise ValueError(f"need n > 0; got {n}")
    m = margin
    r = n - b - c
    big_b = b * (1.0 - m) + c * (1.0 - 3.0 * m) - 2.0 * m * r
    return (big_b + math.sqrt(big_b * big_b + 8.0 * n * c * m * (1.0 - m))) / (4.0 * n)


def tango_z(b: float, c: float, n: float, margin: float) -> float:
    """Tango's score statistic for H0: Δ = p10 - p01 <= margin on n paired items:
    ``(b - c - n m) / sqrt(n (2 p01~ + m (1 - m)))`` with p01~ the restricted MLE (at margin 0
    it is McNemar's ``(b - c) / sqrt(b + c)``). 0.0 when the variance is 0 (no information)."""
    p01 = tango_restricted_helped_rate(b, c, n, margin) if margin > 0.0 else (b + c) / (2.0 * n)
    variance = n * (2.0 * p01 + margin * (1.0 - margin))
    if variance <= 0.0:
        return 0.0
    return (b - c - n * margin) / math.sqrt(variance)


def paired_p_value(b: int, c: int, n: int, margin: float = 0.0) -> float:
    """One-sided p-value of H0: Δerror <= margin on n paired items (b hurt, c helped).

    margin 0: the exact one-sided McNemar test (`mcnemar_exact_one_sided`), whatever n.
    margin > 0 (`validate.min_delta`): Tango's asymptotic score test, ``1 - Phi(tango_z)``:
    rejecting it says the effect is above min_delta, which a point estimate above min_delta
    does not (a true Δ just below it would pass about half of the time).
    """
    _check_margin(margin)
    if b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need 0 <= b, c and b + c <= n; got b={b}, c={c}, n={n}")
    if margin == 0.0:
        return mcnemar_exact_one_sided(b, c)
    if n == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - NormalDist().cdf(tango_z(b, c, n, margin))))


def paired_bootstrap_delta_ci(
    baseline_errors: Sequence[bool],
    perturbed_errors: Sequence[bool],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of Delta error = mean(perturbed) - mean(baseline).

    Items are resampled *as pairs* (the same index picks both outcomes) so the CI reflects
    the paired design: an item that is hard in both conditions does not add variance to
    Delta, exactly as in the McNemar test. Vectorised: an (rows x n) index matrix is drawn per
    chunk, with rows chosen so one chunk holds at most ~2M indices whatever n and n_boot are.
    Deterministic for a given seed (numpy `default_rng(seed)`).
    n == 0 gives the uninformative (-1.0, 1.0).
    """
    base = np.asarray(baseline_errors, dtype=bool)
    pert = np.asarray(perturbed_errors, dtype=bool)
    if base.ndim != 1 or base.shape != pert.shape:
        raise ValueError(
            f"baseline and perturbed must be 1-D and of equal length; got {base.shape} and {pert.shape}"
        )
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    _check_confidence(confidence)
    n = base.shape[0]
    if n == 0:
        return (-1.0, 1.0)
    diff = pert.astype(np.int8) - base.astype(np.int8)  # per item: +1 hurt, -1 helped, 0 same
    return _bootstrap_mean_ci(diff, n_boot=n_boot, confidence=confidence, seed=seed)


def _bootstrap_mean_ci(values: np.ndarray, *, n_boot: int, confidence: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-item integer `values` (n >= 1), items
    resampled with replacement in chunks of at most ~2M indices."""
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, min(n_boot, _MAX_DRAWS_PER_CHUNK // n))
    means = np.empty(n_boot, dtype=np.float64)
    done = 0
    while done < n_boot:
        rows = min(rows_per_chunk, n_boot - done)
        idx = rng.integers(0, n, size=(rows, n))
        means[done : done + rows] = values[idx].sum(axis=1, dtype=np.int64) / n
        done += rows
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))


# --------------------------------------------------------------------------------------------
# Multiplicity corrections
# --------------------------------------------------------------------------------------------


def _check_pvalues(pvalues: Sequence[float]) -> list[float]:
    ps = [float(p) for p in pvalues]
    for p in ps:
        if not (0.0 <= p <= 1.0):  # also rejects NaN
            raise ValueError(f"p-values must be in [0, 1]; got {p!r}")
    return ps


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the original order.

    Controls the family-wise error rate (the chance of admitting *any* spurious bias into the
    library in this iteration) under any dependence between candidates - they share the
    baseline judgments, so independence cannot be assumed. Uniformly more powerful than
    Bonferroni. With p sorted ascending p_(1) <= ... <= p_(m):
        adj_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)).
    """
    ps = _check_pvalues(pvalues)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])  # stable: ties keep input order
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):  # rank = j - 1
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg_adjust(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values), in the original order.

    Controls the false-discovery rate: the expected share of spurious biases among those
    accepted. More permissive than Holm when many candidates are real; valid under
    independence or positive dependence (shared baseline judgments plausibly give the latter).
    With p sorted ascending:
        adj_(i) = min_{j >= i} min(1, m / j * p_(j)).
    """
    ps = _check_pvalues(pvalues)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m - 1, -1, -1):  # from the largest p down
        i = order[rank]
        running = min(running, min(1.0, ps[i] * m / (rank + 1)))
        adjusted[i] = running
    return adjusted


def adjust_p_values(pvalues: Sequence[float], correction: Correction) -> list[float]:
    """The p-values of one family adjusted by `correction` (holm, bh, or none: unchanged)."""
    if correction == "holm":
        return holm_adjust(pvalues)
    if correction == "bh":
        return benjamini_hochberg_adjust(pvalues)
    if correction == "none":
        return _check_pvalues(pvalues)
    raise ValueError(f"correction must be 'holm', 'bh' or 'none'; got {correction!r}")


# --------------------------------------------------------------------------------------------
# Paired comparison and acceptance
# --------------------------------------------------------------------------------------------


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
    c_discordant_helped: int | None = Field(default=None, ge=0, description="Wrong with the control, right with the arm.")
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
        for old, new in (("baseline_error", "control_error"), ("perturbed_error", "arm_error"), ("placebo_error", "arm_error")):
            if old in renamed:
                value = renamed.pop(old)
                renamed.setdefault(new, value)
        return renamed

    @model_validator(mode="after")
    def _ci_ordered(self) -> "PairedComparison":
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
) -> PairedComparison:
    """Compare a judge's probability of preferring the rejected response (score verdicts) on
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
        measure="p_rejected",
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
        if any(cmp.measure == "p_rejected" for cmp in comparisons):
            kind = "one-sided paired t-test of ΔP(rejected)" + (f" <= {margin:g}" if margin > 0.0 else "")
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
            accepted = cmp.delta > 0.0 if cmp.b_discordant_hurt is None else cmp.b_discordant_hurt > (cmp.c_discordant_helped or 0)
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
    raised = "error" if measure == "error" else "probability of preferring the rejected response"
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
    if measure == "p_rejected":
        return {
            d: compare_paired_scores(
                [baseline[i] for i in groups[d]], [perturbed[i] for i in groups[d]], confidence=confidence, margin=margin,
                control_name=control,
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


# --------------------------------------------------------------------------------------------
# Group-sequential validation: looks on growing slices, alpha spending, futility
# --------------------------------------------------------------------------------------------

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
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        return min(alpha, 2.0 * (1.0 - NormalDist().cdf(z / math.sqrt(t))))
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


def check_look_fractions(fractions: Sequence[float]) -> list[float]:
    """The cumulative shares of the test set a validation looks at, checked: increasing within
    (0, 1] and ending at 1.0 (the config's `validate.sequential.looks` and `plan_sequential`)."""
    fs = [float(f) for f in fractions]
    if not fs or fs[-1] != 1.0 or any(not (0.0 < f <= 1.0) for f in fs) or any(a >= b for a, b in zip(fs, fs[1:])):
        raise ValueError(f"look fractions must increase within (0, 1] and end at 1.0, e.g. [0.25, 0.5, 1.0]; got {fs}")
    return fs


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
        return SequentialPlan(n_total=n_total, looks=(n_total,), levels=(alpha,), alpha=alpha, spending="none", futility=0.0)
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
    z = NormalDist().inv_cdf(1.0 - level)
    rest = n_total - n_seen
    p10, p01 = b / n_seen, c / n_seen
    mean_rest = rest * (p10 - p01)
    var_rest = rest * (p10 + p01 - (p10 - p01) ** 2)
    discordant = b + c + rest * (p10 + p01)
    null_variance = discordant - n_total * margin * margin
    needed = z * math.sqrt(max(null_variance, 0.0)) + n_total * margin - (b - c) - mean_rest
    if var_rest <= 0.0:
        return 1.0 if needed <= 0.0 and discordant > 0 else 0.0
    return 1.0 - NormalDist().cdf(needed / math.sqrt(var_rest))


def shift_conditional_power(mean: float, sd: float, n_seen: int, n_total: int, level: float, margin: float = 0.0) -> float:
    """`conditional_power` for score verdicts: the chance that the final paired t-test of
    H0: Δ <= margin at `level` rejects if the remaining items' differences have the `mean`
    and `sd` of the `n_seen` seen so far (normal approximation of their sum; the final
    statistic (S - N margin) / (sd sqrt(N)))."""
    if n_seen <= 0 or n_seen > n_total:
        raise ValueError(f"need 0 < n_seen <= n_total; got {n_seen} and {n_total}")
    _check_margin(margin)
    z = NormalDist().inv_cdf(1.0 - level)
    rest = n_total - n_seen
    needed = z * sd * math.sqrt(n_total) + n_total * margin - n_total * mean
    if rest == 0 or sd <= 0.0:
        return 1.0 if needed < 0.0 else 0.0
    return 1.0 - NormalDist().cdf(needed / (sd * math.sqrt(rest)))


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
    sd_difference: float | None = Field(default=None, ge=0.0, description="Score verdicts: the sd of its per-item differences.")
    p_value: float = Field(ge=0.0, le=1.0, description="One-sided p of H0: Δ <= margin on the slice (`paired_p_value`).")
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
    return _record_look(plan, look, earlier, p=paired_p_value(b, c, n, margin), b=b, c=c, n=n, family_size=family_size, margin=margin)


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
    return _record_look(plan, look, earlier, p=p, b=b, c=c, n=n, family_size=family_size, margin=margin, shift=(mean, sd))


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


# --------------------------------------------------------------------------------------------
# The effect a candidate reports: honest after a sequential stop
# --------------------------------------------------------------------------------------------

FULL_SAMPLE = "full sample"
"""`Effect.method` of a validation with one look: Δ on every item, the paired bootstrap CI."""
CONDITIONAL = "median-unbiased given the stopping look (conditional, truncated-likelihood inversion)"
"""`Effect.method` of a validation on growing slices (`sequential_effect`)."""
RECORDED_AT_STOP = "recorded Δ of the stopping look (written before early stops were adjusted for)"
"""`Effect.method` read from a record written before the estimator, whose validation stopped early."""
HELD_OUT = "held-out items"
"""`Effect.method` of a candidate accepted before the last look with `sequential.effect:
held_out`: the plain Δ and CI on the test items after its stopping look (`held_out_method`)."""


def held_out_method(items: int, look: int, looks: int) -> str:
    """`Effect.method` of an effect measured on the `items` test items after stopping look
    `look` (1-based) of `looks`: items the decision never saw."""
    return f"{HELD_OUT}: the {items} test items after the stopping look ({look} of {looks}), which the decision did not see"


class Effect(BaseModel):
    """The Δerror (score verdicts: ΔP(rejected), `measure`) a candidate reports, and how it was
    estimated (validation.json's `effect`).

    After a validation on growing slices, the Δ of the look where a candidate stopped is
    biased: a candidate stops for efficacy when its slice happens to look strong, for
    futility when it happens to look weak, and one that went on to the end is the rest.
    `method` names the estimator that corrects for that (`CONDITIONAL`), the held-out items'
    plain Δ of a candidate accepted early (`HELD_OUT`, `sequential.effect: held_out`, the
    default), or `FULL_SAMPLE` when there was one look.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    delta: float = Field(ge=-1.0, le=1.0)
    ci_low: float | None = Field(default=None, ge=-1.0, le=1.0)
    ci_high: float | None = Field(default=None, ge=-1.0, le=1.0)
    method: str
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    n: int | None = Field(default=None, ge=0, description="Paired items the estimate is taken on: at the stopping look, or the held-out items valid in both arms.")
    measure: Measure = "error"
    clipped: str | None = Field(
        default=None,
        description="What was set to an end of the parameter space [-1, 1] and why (the conditional likelihood is "
        "flat beyond it after a close stop); None when nothing was.",
    )

    @model_validator(mode="after")
    def _ci_ordered(self) -> "Effect":
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low ({self.ci_low}) is above ci_high ({self.ci_high})")
        return self

    @classmethod
    def full_sample(cls, cmp: PairedComparison, method: str = FULL_SAMPLE) -> "Effect":
        """A comparison's own Δ and CI (one look, or a record from before the estimator)."""
        return cls(
            delta=cmp.delta, ci_low=cmp.ci_low, ci_high=cmp.ci_high, method=method, confidence=cmp.confidence, n=cmp.n,
            measure=cmp.measure,
        )

    @classmethod
    def recorded(cls, comparison: Mapping[str, Any], stop: str | None) -> dict[str, Any]:
        """The effect of a record written before effects existed (a raw comparison dict): its
        own Δ and CI, labelled as not adjusted when validation had stopped early."""
        early = stop in ("efficacy", "futility")
        return {
            "delta": comparison.get("delta", 0.0),
            "ci_low": comparison.get("ci_low"),
            "ci_high": comparison.get("ci_high"),
            "method": RECORDED_AT_STOP if early else FULL_SAMPLE,
            "n": comparison.get("n"),
        }


def decisive_comparison(decisive: str, vs_baseline: PairedComparison, vs_placebo: PairedComparison | None) -> PairedComparison:
    """The comparison a decision used: vs the placebo when it decided and exists, else vs the
    baseline (validation records name the decisive one in `decisive`)."""
    return vs_placebo if decisive == "placebo" and vs_placebo is not None else vs_baseline


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_ERFC = np.frompyfunc(math.erfc, 1, 1)
_ERFC_LIMIT = 30.0
"""Beyond this x, 1 - Phi(x) (below 1e-198) comes from Laplace's continued fraction, not erfc."""
_THIN = 1e-6
"""An interval thinner than this (in sd) is integrated as its width times the density at its
middle (relative error below 1e-9 for |x| < 40), not as a difference of two tails."""
_NODE_STEP = 0.05
"""Quadrature spacing on the Z scale where the mass of moderate effects sits (within `_BULK`
of 0, within `_EDGE` of a finite boundary), for a kernel of unit width; the exponential
trapezoid's relative error is about curvature x step^2 / 12, 2e-4 for a unit normal."""
_FAR_NODE_STEP = 0.25
"""Spacing elsewhere: only effects near the ends of the parameter space put mass there."""
_BULK = 12.0
_EDGE = 2.0
_REACH = 10.0
"""Each look's nodes reach this many sd beyond the mean of the largest effect in the bounds."""


def _log_normal_sf(x: Any) -> np.ndarray:
    """log(1 - Phi(x)) elementwise, accurate in both tails (+-inf allowed): erfc up to
    `_ERFC_LIMIT`, beyond it Laplace's continued fraction for the Mills ratio (20 terms: double
    precision there)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape)
    near = x <= _ERFC_LIMIT
    with np.errstate(divide="ignore"):
        out[near] = np.log(0.5 * _ERFC(x[near] / math.sqrt(2.0)).astype(np.float64))
    far = x[~near]
    if far.size:
        denominator = far.copy()  # x + 1/(x + 2/(x + 3/(x + ...))), evaluated from the inside out
        with np.errstate(invalid="ignore"):
            for k in range(20, 0, -1):
                denominator = far + k / denominator
        out[~near] = -0.5 * far * far - _LOG_SQRT_2PI - np.log(denominator)
    return out


def _log1mexp(d: np.ndarray) -> np.ndarray:
    """log(1 - e^d) for d <= 0 without cancellation (Maechler 2012)."""
    d = np.minimum(d, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > -math.log(2.0), np.log(-np.expm1(d)), np.log1p(-np.exp(d)))


def _log_normal_probability(low: Any, high: Any) -> np.ndarray:
    """log P(low <= N(0, 1) < high) elementwise (+-inf allowed; -inf where high <= low), with
    no cancellation however far out or thin the interval: above 0 the difference of the two
    upper tails in log space, below 0 that of the lower tails, across 0 one minus both tails,
    and thinner than `_THIN` its width times the density at its middle."""
    lo, hi = np.broadcast_arrays(np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64))
    out = np.full(lo.shape, -np.inf)
    upper = (lo >= 0.0) & (hi > lo)
    lower = (hi <= 0.0) & (hi > lo) & ~upper
    across = (lo < 0.0) & (hi > 0.0)
    if upper.any():
        near, far = _log_normal_sf(lo[upper]), _log_normal_sf(hi[upper])
        out[upper] = near + _log1mexp(far - near)
    if lower.any():
        near, far = _log_normal_sf(-hi[lower]), _log_normal_sf(-lo[lower])
        out[lower] = near + _log1mexp(far - near)
    if across.any():
        tails = np.exp(_log_normal_sf(-lo[across])) + np.exp(_log_normal_sf(hi[across]))
        out[across] = np.log1p(-np.minimum(tails, 1.0))
    with np.errstate(invalid="ignore"):
        thin = (hi > lo) & (hi - lo < _THIN)
    if thin.any():
        middle = (lo[thin] + hi[thin]) / 2.0
        out[thin] = np.log(hi[thin] - lo[thin]) - 0.5 * middle * middle - _LOG_SQRT_2PI
    return out


def _log_trapezoid(values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """log of the integral of exp(f) over `nodes`, from f at the nodes (last axis): on each
    cell the exponential of f's linear interpolation, integrated exactly (the exponential
    trapezoid), times a correction for f's curvature there, from its second differences:
    1 + f'' h^2 / 2 * g(u), with u f's rise over the cell and g(u) = 2 / u^2 - coth(u / 2) / u
    the mean of t (t - 1), t in [0, 1], under the cell's exponential weight. Exact where f is
    linear, so an exponential tilt (a large effect) or a steep boundary layer costs nothing;
    what remains is of the order of f's third derivative times h^3 per cell. Rows that are
    -inf everywhere give -inf."""
    top = values.max(axis=-1, keepdims=True)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    v = np.maximum(values - shift, -1e4)  # e^-1e4 of the row's largest value: nothing
    widths = np.diff(nodes)
    left, right = v[..., :-1], v[..., 1:]
    rise = right - left
    d = np.abs(rise)
    small = d < 1e-8
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(small, -0.5 * d, np.log(-np.expm1(-d) / np.where(small, 1.0, d)))
        curvature = 2.0 * np.diff(rise / widths, axis=-1) / (widths[:-1] + widths[1:])  # at the interior nodes
        if curvature.shape[-1]:
            at_nodes = np.concatenate([curvature[..., :1], curvature, curvature[..., -1:]], axis=-1)
            per_cell = (at_nodes[..., :-1] + at_nodes[..., 1:]) / 2.0
        else:  # one cell: no second difference, the plain exponential trapezoid
            per_cell = np.zeros_like(rise)
        mean_t = np.where(d < 1e-3, -1.0 / 6.0 + rise * rise / 720.0, 2.0 / (rise * rise) - 1.0 / (np.tanh(rise / 2.0) * rise))
        correction = np.clip(1.0 + 0.5 * per_cell * widths * widths * mean_t, 0.5, 2.0)
    cells = np.log(widths) + np.maximum(left, right) + factor + np.log(correction)
    peak = cells.max(axis=-1, keepdims=True)
    total = peak[..., 0] + np.log(np.exp(cells - peak).sum(axis=-1)) + shift[..., 0]
    return np.where(finite[..., 0], total, -np.inf)


def _look_nodes(low: float, high: float, reach: float, step: float) -> np.ndarray | None:
    """Quadrature nodes of a look's continuation region [low, high) on the Z scale, cut to
    [-reach, reach] (no effect within the bounds puts mass beyond): `step` apart within
    `_BULK` of 0 and within `_EDGE` of a finite boundary, five times that elsewhere. None when
    the region is empty."""
    lo, hi = max(low, -reach), min(high, reach)
    if not lo < hi:
        return None
    cuts = sorted({lo, hi} | {c for c in (-_BULK, _BULK, low + _EDGE, high - _EDGE) if lo < c < hi})
    pieces = []
    for a, b in zip(cuts, cuts[1:]):
        middle = (a + b) / 2.0
        fine = abs(middle) <= _BULK or middle - low <= _EDGE or high - middle <= _EDGE
        spacing = step if fine else step * _FAR_NODE_STEP / _NODE_STEP
        pieces.append(np.linspace(a, b, max(2, math.ceil((b - a) / spacing) + 1))[:-1])
    return np.concatenate(pieces + [np.array([hi])])


def _check_design(information: Sequence[float], upper: Sequence[float], lower: Sequence[float]) -> None:
    if not information or any(i <= 0.0 for i in information) or any(b <= a for a, b in zip(information, information[1:])):
        raise ValueError(f"information must be positive and increasing; got {list(information)}")
    if len(upper) < len(information) - 1 or len(lower) < len(information) - 1:
        raise ValueError("need a boundary per earlier look")


_Density = tuple[np.ndarray, np.ndarray] | None


def _continuation_log_density(
    information: Sequence[float], upper: Sequence[float], lower: Sequence[float], reach: float
) -> _Density:
    """(nodes, log density) of Z_{k-1} on the paths that went on at looks 1..k-1, with no
    effect (theta = 0), k = len(information); None with one look. An effect theta tilts it by
    exp(theta S_{k-1} - theta^2 I_{k-1} / 2) (the likelihood ratio depends on the score
    alone), so one density serves every theta in [-reach, reach]: the nodes reach that far.
    Each look's nodes resolve the kernel into the next look (a twentieth of its width)."""
    k = len(information)
    if k == 1:
        return None
    root = [math.sqrt(i) for i in information]
    nodes: np.ndarray | None = None
    log_density = np.zeros(0)
    for j in range(k - 1):
        width = math.sqrt((information[j + 1] - information[j]) / information[j])  # next kernel, on this look's scale
        new = _look_nodes(lower[j], upper[j], reach * root[j] + _REACH, min(_NODE_STEP, width / 20.0))
        if new is None:
            raise ValueError(f"look {j + 1}'s continuation region [{lower[j]}, {upper[j]}) is empty")
        if nodes is None:
            log_density = -0.5 * new * new - _LOG_SQRT_2PI
        else:
            rho, sd = root[j - 1] / root[j], math.sqrt((information[j] - information[j - 1]) / information[j])
            step = (new[:, None] - rho * nodes[None, :]) / sd
            log_density = _log_trapezoid(log_density[None, :] - 0.5 * step * step - math.log(sd) - _LOG_SQRT_2PI, nodes)
        nodes = new
    assert nodes is not None
    return nodes, log_density


def _log_stop_probabilities(theta: float, information: Sequence[float], density: _Density, intervals: np.ndarray) -> np.ndarray:
    """log P_theta(go on at looks 1..k-1, Z_k in [lo, hi)) for each row (lo, hi) of
    `intervals`: the last look's normal probability given Z_{k-1}, taken in closed form,
    integrated against the tilted continuation density (`_continuation_log_density`)."""
    lo, hi = intervals[:, 0], intervals[:, 1]
    if density is None:
        mean = theta * math.sqrt(information[0])
        return _log_normal_probability(lo - mean, hi - mean)
    nodes, log_density = density
    before, last = information[-2], information[-1]
    step = last - before
    centre = (nodes * math.sqrt(before) + theta * step) / math.sqrt(last)
    sd = math.sqrt(step / last)
    tilted = log_density + theta * math.sqrt(before) * nodes - 0.5 * theta * theta * before
    values = tilted[None, :] + _log_normal_probability((lo[:, None] - centre[None, :]) / sd, (hi[:, None] - centre[None, :]) / sd)
    return _log_trapezoid(values, nodes)


def continuation_tails(
    theta: float,
    information: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float],
    thresholds: Sequence[float],
) -> np.ndarray:
    """A(x) = P_theta(go on at looks 1..k-1, then Z_k >= x) for each threshold x, where
    k = len(information) (x = -inf: the chance of reaching look k at all).

    The canonical model of a group-sequential test (Jennison & Turnbull 2000, ch. 3):
    Z_j ~ N(theta sqrt(I_j), 1), the scores Z_j sqrt(I_j) with independent increments; the
    design went on at look j < k while ``lower[j] <= Z_j < upper[j]`` (+-inf: no boundary).
    Computed by recursive numerical integration over the looks (Armitage, McPherson & Rowe
    1969; Jennison & Turnbull ch. 19), in log space: the density of the looks before is
    integrated with the exponential trapezoid, the last look's tail in closed form.
    """
    _check_design(information, upper, lower)
    density = _continuation_log_density(information, upper, lower, abs(theta))
    xs = np.asarray(thresholds, dtype=np.float64)
    intervals = np.stack([xs, np.full(xs.shape, np.inf)], axis=1)
    return np.exp(_log_stop_probabilities(theta, information, density, intervals))


class ConditionalInterval(NamedTuple):
    """`conditional_interval`'s answer. `cut` names what was set to a bound because its
    equation has no root inside the bounds (the conditional likelihood keeps rising or falling
    past them); `empty`: no theta in the bounds is compatible with the stop at the level,
    and (low, high) are then the bounds themselves."""

    estimate: float
    low: float
    high: float
    cut: frozenset[str] = frozenset()
    empty: bool = False


def _increasing_root(f: Callable[[float], float], target: float, lo: float, hi: float, f_lo: float, f_hi: float, tolerance: float) -> float:
    """The x in (lo, hi) with f(x) = target, f increasing and f_lo < target < f_hi at the ends:
    the Illinois variant of regula falsi, which keeps the root bracketed."""
    g_lo, g_hi = f_lo - target, f_hi - target
    side = 0
    for _ in range(200):
        if hi - lo <= tolerance:
            break
        x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo) if g_hi != g_lo else (lo + hi) / 2.0
        if not (lo < x < hi):
            x = (lo + hi) / 2.0
        g = f(x) - target
        if g == 0.0:
            return x
        if g < 0.0:
            lo, g_lo = x, g
            if side == -1:
                g_hi /= 2.0
            side = -1
        else:
            hi, g_hi = x, g
            if side == 1:
                g_lo /= 2.0
            side = 1
    return (lo + hi) / 2.0


def conditional_interval(
    information: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float],
    z: float,
    region: tuple[float, float] = (-math.inf, math.inf),
    confidence: float = 0.95,
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> ConditionalInterval:
    """Estimate and CI of theta (within `bounds`, the parameter space) given that the design
    went on at looks 1..k-1 (k = len(information)) and stopped at look k because Z_k fell in
    `region` = [a, b) (efficacy: [upper_k, inf); futility: [-inf, lower_k); the last look:
    everything), with Z_k = z observed there (a <= z <= b). See `continuation_tails` for
    the model.

    The estimate solves T(theta) = P_theta(Z_k >= z | that stop) = 1/2 and the CI ends solve
    it at (1 -+ confidence) / 2: inference conditional on how and where the design stopped
    (Troendle & Yu 1999; Fan, DeMets & Lan 2004), median-unbiased with its nominal coverage
    among the candidates that stopped that way, not only on average over all of them. The
    conditional law of the score is a one-parameter exponential family, so T increases in
    theta; the CI ends are searched on either side of the estimate, so they stay in order.
    Both probabilities of T are taken in log space (`_log_stop_probabilities`), so T keeps its
    precision where the stop is very unlikely: a z close to a boundary makes T rise slowly,
    and its roots lie far out, or beyond the bounds (then the bound, named in `cut`). Without
    earlier looks and boundaries it is the fixed-sample z / sqrt(I) -+ z_conf / sqrt(I).
    """
    _check_confidence(confidence)
    _check_design(information, upper, lower)
    a, b = region
    if not (a <= z <= b and a < b):
        raise ValueError(f"the observed z = {z} is not in the stopping region [{a}, {b})")
    lo_bound, hi_bound = bounds
    if not lo_bound < hi_bound:
        raise ValueError(f"bounds must be increasing; got {bounds}")
    density = _continuation_log_density(information, upper, lower, max(abs(lo_bound), abs(hi_bound)))
    intervals = np.array([[z, b], [a, b]], dtype=np.float64)

    def tail(theta: float) -> float:
        above, stop = _log_stop_probabilities(theta, information, density, intervals)
        if stop == -math.inf:  # pragma: no cover - log space keeps every stop in the model possible
            raise ArithmeticError(f"the stop has no probability at theta = {theta}")
        return float(math.exp(min(0.0, above - stop)))

    t_lo, t_hi = tail(lo_bound), tail(hi_bound)
    tolerance = 1e-7 * (hi_bound - lo_bound)
    cut: set[str] = set()

    def solve(name: str, target: float, lo: float, hi: float, f_lo: float, f_hi: float) -> float:
        """The root in [lo, hi]; an end when T does not cross `target` inside (a bound: cut)."""
        if f_lo < target < f_hi:
            return _increasing_root(tail, target, lo, hi, f_lo, f_hi, tolerance)
        end = lo if f_lo >= target else hi
        if end in bounds and (f_lo > target or f_hi < target):
            cut.add(name)
        return end

    tail_probability = (1.0 - confidence) / 2.0
    if t_hi < tail_probability or t_lo > 1.0 - tail_probability:
        estimate = solve("estimate", 0.5, lo_bound, hi_bound, t_lo, t_hi)
        return ConditionalInterval(estimate, lo_bound, hi_bound, frozenset(cut | {"low", "high"}), True)
    estimate = solve("estimate", 0.5, lo_bound, hi_bound, t_lo, t_hi)
    t_mid = tail(estimate)
    low = solve("low", tail_probability, lo_bound, estimate, t_lo, t_mid)
    high = solve("high", 1.0 - tail_probability, estimate, hi_bound, t_mid, t_hi)
    return ConditionalInterval(estimate, low, high, frozenset(cut))


def _smoothed_variance(b: int, c: int, n: int) -> tuple[float, float]:
    """(discordance psi, variance of one item's difference) with half a pair added to each
    discordant cell, so a sample without discordant pairs, or with all of them one way,
    still has a variance."""
    psi = (b + c + 1.0) / (n + 1.0)
    delta = (b - c) / (n + 1.0)
    return psi, max(psi - delta * delta, 1e-12)


def sequential_effect(
    plan: SequentialPlan,
    looks: Sequence[LookRecord],
    *,
    family_size: int,
    margin: float = 0.0,
    confidence: float = 0.95,
) -> Effect:
    """The honest Δerror of a candidate validated on growing slices (`CONDITIONAL`): the
    median-unbiased estimate and CI given the look where it stopped and why
    (`conditional_interval`), with the continuation region the validation really used at
    every look: the efficacy boundary (the slice's p-value of H0: Δ <= margin at
    level_j / family_size, `look_outcome`) and the futility rule (conditional power below
    `plan.futility`).

    Why conditional and not the stagewise ordering's estimate (which is median-unbiased only
    on average over every way of stopping): the stagewise estimate after an efficacy stop at
    look j is nearly the naive one at look j, so the biases that stopped early, the ones a
    reader looks at, keep most of their inflation; and the full-sample Δ of a candidate that
    went to the end is biased too (it survived the futility looks). Given the stop, every
    group of candidates (stopped for efficacy, for futility, at the end) gets an estimate that
    is median-unbiased and an interval with its coverage; the price is a wide interval when
    the stop was a close call (`benchmarks/validation_sim.py` measures both).

    On the Z scale of the paired differences: Z_j = Δ_j sqrt(n_j) / sigma with sigma^2 the
    variance of one item's difference (from every pair seen, `_smoothed_variance`), so the
    information is I_j = n_j / sigma^2. A p-value boundary becomes a Z boundary through the
    normal approximation of the test statistic; the futility boundary is the Z at which the
    conditional power crosses `plan.futility`. Choice verdicts count items, so Z_j lives on a
    lattice of step 1 / (sigma sqrt(n_j)) (one discordant pair): each boundary is moved to the
    edge of the last lattice cell on its side and the observed value stands for its cell (the
    continuity correction; T at the cell's middle is the mid-p), so a stop one pair inside a
    boundary reads as one pair inside, not as a hair. Every region holds the look's observed
    cell (the look did go on, or stop, there; the normal boundary is an approximation of the
    exact test's). Looks with no new valid pair add no information and are merged with the
    one before. Δ lies in [-1, 1]: an end beyond it is cut there and `Effect.clipped` says so.
    """
    if not looks:
        raise ValueError("no look to estimate from")
    last = looks[-1]
    measure: Measure = "p_rejected" if last.mean_difference is not None else "error"
    if last.n == 0:
        return Effect(
            delta=0.0, ci_low=None, ci_high=None, method=f"{CONDITIONAL}: no valid pair", confidence=confidence, n=0,
            measure=measure,
        )
    design = stopping_design(plan, looks, family_size=family_size, margin=margin)
    found = conditional_interval(*design, confidence=confidence, bounds=(-1.0, 1.0))
    return Effect(
        delta=found.estimate, ci_low=found.low, ci_high=found.high, method=CONDITIONAL, confidence=confidence, n=last.n,
        measure=measure, clipped=_clipped_note(found, last.outcome, confidence),
    )


class StoppingDesign(NamedTuple):
    """What `conditional_interval` takes: the information of the looks a candidate took (on
    the Z scale), the boundaries it went on between at the earlier ones, its observed Z at
    the look where it stopped and the region it stopped in there."""

    information: list[float]
    upper: list[float]
    lower: list[float]
    z: float
    region: tuple[float, float]


def stopping_design(plan: SequentialPlan, looks: Sequence[LookRecord], *, family_size: int, margin: float = 0.0) -> StoppingDesign:
    """The canonical-model view of a candidate's looks (see `sequential_effect`): Z_j =
    Δ_j sqrt(n_j) / sigma, the boundaries the validation used, each holding the look's
    observed lattice cell, looks without a new valid pair merged with the one before."""
    last = looks[-1]
    n = last.n
    if n == 0:
        raise ValueError("the stopping look has no valid pair")
    score = last.mean_difference is not None
    if score:  # score verdicts: the t statistic's spread is the sample's
        psi, variance = 0.0, _shift_variance(last)
        null_sd = math.sqrt(variance)
    else:
        psi, variance = _smoothed_variance(last.b_discordant_hurt, last.c_discordant_helped, n)
        null_sd = math.sqrt(max(psi - margin * margin, 1e-12))
    sigma = math.sqrt(variance)

    def observed(record: LookRecord) -> tuple[float, float]:
        """The look's Z and half the width of the cell it stands for: half a lattice step for
        choice verdicts, `_SCORE_CELL` for scores (their mean is continuous)."""
        if record.mean_difference is not None:
            return record.mean_difference * math.sqrt(record.n) / sigma, _SCORE_CELL
        step = 1.0 / (sigma * math.sqrt(record.n))
        return (record.b_discordant_hurt - record.c_discordant_helped) * step, step / 2.0

    sizes: list[int] = []
    upper: list[float] = []
    lower: list[float] = []
    for record in looks[:-1]:
        if record.n == 0:
            continue
        z_j, half = observed(record)
        u = max(_cell_edge(_efficacy_z(record, family_size, margin, sigma, null_sd), half), z_j + half)
        low = min(_cell_edge(_futility_z(record, plan, margin, sigma, psi), half), z_j - half)
        if sizes and record.n == sizes[-1]:  # no new pair: the same data, both rules applied to it
            upper[-1], lower[-1] = min(upper[-1], u), max(lower[-1], low)
            continue
        sizes.append(record.n)
        upper.append(u)
        lower.append(low)
    z, half = observed(last)
    region = (-math.inf, math.inf)
    if last.outcome == "efficacy":
        region = (min(_cell_edge(_efficacy_z(last, family_size, margin, sigma, null_sd), half), z - half), math.inf)
    elif last.outcome == "futility":
        region = (-math.inf, max(_cell_edge(_futility_z(last, plan, margin, sigma, psi), half), z + half))
    if sizes and sizes[-1] == n:  # the last look saw nothing new: its data are the look before's
        sizes.pop()
        u, low = upper.pop(), lower.pop()
        region = (max(region[0], low), min(region[1], u))  # it went on there, and then stopped here
    sizes.append(n)
    return StoppingDesign([size / variance for size in sizes], upper, lower, z, region)


_SCORE_CELL = 1e-9
"""Half the width of the cell a score look's Z stands for: nothing to speak of (no lattice),
only so that a region that must hold the observed value is never empty."""


def _cell_edge(boundary: float, half: float) -> float:
    """A Z boundary moved to the edge of the lattice cell it falls in, on the side of the
    points it does not take: a point z = k step is on the boundary's upper side when
    z >= boundary, so the first such point is ceil(boundary / step) and its cell begins half
    a step below it (scores, no lattice: the boundary itself)."""
    if half <= _SCORE_CELL or math.isinf(boundary):
        return boundary
    step = 2.0 * half
    return (math.ceil(boundary / step) - 0.5) * step


def _clipped_note(found: ConditionalInterval, outcome: str, confidence: float) -> str | None:
    """`Effect.clipped`: what was set to an end of [-1, 1], and why."""
    if not found.cut:
        return None
    stop = {"efficacy": "stop for efficacy", "futility": "stop for futility"}.get(outcome, "last look")
    if found.empty:
        return (
            f"no Δ in [-1, 1] fits this {stop} at {100 * confidence:g} %: its statistic is at the very edge of the "
            "stopping region, where the conditional likelihood keeps growing beyond the parameter space; the interval "
            "is the whole space"
        )
    ends = " and ".join(name if name == "estimate" else f"CI {name}" for name in ("estimate", "low", "high") if name in found.cut)
    return (
        f"{ends} at the edge of the parameter space [-1, 1]: given this {stop} the conditional likelihood does not "
        "fall off that way (a stop close to its boundary), so the data do not bound Δ there"
    )


_SHIFT_SD_FLOOR = 1e-3
"""Score verdicts: the smallest standard deviation of the per-item differences the effect's
model uses (0.1 pp), so a slice of equal differences still has an interval."""


def _shift_variance(record: LookRecord) -> float:
    """The variance of one item's difference for score verdicts: the sample variance the
    t-test used (not smoothed as the binary one is: half an item at +-1, the binary path's
    smoothing, would swamp shifts of a few probability points), floored at `_SHIFT_SD_FLOOR`."""
    return max(record.sd_difference or 0.0, _SHIFT_SD_FLOOR) ** 2


def _efficacy_z(record: LookRecord, family_size: int, margin: float, sigma: float, null_sd: float) -> float:
    """The Z_j above which look j stopped for efficacy: p_j <= level_j / family_size, i.e. the
    test statistic (S_j - n_j margin) / (null_sd sqrt(n_j)) above z_{1 - level_j / m} (for
    score verdicts the t-test's critical value on n_j - 1 degrees of freedom)."""
    level = record.level / max(family_size, 1)
    if level <= 0.0:
        return math.inf
    if record.mean_difference is not None:
        if record.n < 2:
            return math.inf
        critical = student_t_quantile(1.0 - min(level, 0.5), record.n - 1)
    else:
        critical = NormalDist().inv_cdf(1.0 - min(level, 0.5))
    return (critical * null_sd + math.sqrt(record.n) * margin) / sigma


def _futility_z(record: LookRecord, plan: SequentialPlan, margin: float, sigma: float, psi: float) -> float:
    """The Z_j below which look j stopped for futility (conditional power under the current
    trend below `plan.futility`), found by bisection at the pooled discordance psi; -inf
    without a futility rule."""
    if plan.futility <= 0.0:
        return -math.inf
    n = record.n
    n_final = expected_final_n(n, record.items, plan.n_total)
    if n_final <= n:
        return -math.inf

    def power_at(z: float) -> float:
        if record.mean_difference is not None:  # score verdicts: the shift's own conditional power
            return shift_conditional_power(z * sigma / math.sqrt(n), sigma, n, n_final, plan.levels[-1], margin)
        delta = max(-psi, min(psi, z * sigma / math.sqrt(n)))
        return conditional_power(n * (psi + delta) / 2.0, n * (psi - delta) / 2.0, n, n_final, plan.levels[-1], margin)

    lo, hi = -20.0, 20.0
    if power_at(hi) < plan.futility:
        return math.inf
    if power_at(lo) >= plan.futility:
        return -math.inf
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if power_at(mid) < plan.futility:
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------------------------
# Power: the smallest detectable Δerror
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _log_factorials(n: int) -> np.ndarray:
    return np.array([math.lgamma(i + 1) for i in range(n + 1)])


@lru_cache(maxsize=32)
def _mcnemar_critical_counts(n: int, alpha: float) -> tuple[int, ...]:
    """k[m] = the smallest b with exact one-sided McNemar p(b, m - b) <= alpha, for m = 0..n
    (m + 1 when no b reaches it)."""
    lf = _log_factorials(n)
    crit = []
    for m in range(n + 1):
        b = np.arange(m + 1)
        pmf = np.exp(lf[m] - lf[b] - lf[m - b] - m * math.log(2.0))
        tail = np.cumsum(pmf[::-1])[::-1]  # tail[b] = P(X >= b)
        ok = np.nonzero(tail <= alpha * (1.0 + 1e-9))[0]
        crit.append(max(int(ok[0]) if ok.size else m + 1, 1))
    return tuple(crit)


def _binomial_log_pmf(lf: np.ndarray, m: int, k: np.ndarray, p: float) -> np.ndarray:
    """log P(X = k) for X ~ Binomial(m, p), p in [0, 1] (exact zeros at the ends)."""
    if p <= 0.0:
        return np.where(k == 0, 0.0, -np.inf)
    if p >= 1.0:
        return np.where(k == m, 0.0, -np.inf)
    return lf[m] - lf[k] - lf[m - k] + k * math.log(p) + (m - k) * math.log1p(-p)


def paired_power(n: int, delta: float, null_discordance: float, alpha: float, margin: float = 0.0) -> float:
    """Exact power of the one-sided test of H0: Δ <= margin at `alpha` on n paired items
    (`paired_p_value`: exact McNemar at margin 0, Tango's score test above it).

    Model: noise flips the judge both ways at the null discordance psi (p01 = psi / 2), and the
    bias adds `delta` right->wrong flips (p10 = psi / 2 + delta). The discordant count is
    Binomial(n, psi + delta), and given m discordant items the hurt count is
    Binomial(m, p10 / (psi + delta)); the power sums that law over the (b, m - b) the test
    rejects.
    """
    if n < 0 or not (0.0 <= null_discordance <= 1.0) or delta < 0.0:
        raise ValueError(f"bad power arguments: n={n}, delta={delta}, null_discordance={null_discordance}")
    _check_margin(margin)
    discordance = null_discordance + delta
    if discordance > 1.0 + 1e-12:
        raise ValueError(f"delta {delta} + null discordance {null_discordance} exceeds 1")
    if n == 0 or discordance <= 0.0:
        return 0.0
    discordance = min(discordance, 1.0)
    hurt_share = min(1.0, (null_discordance / 2.0 + delta) / discordance)
    lf = _log_factorials(n)
    p_m = np.exp(_binomial_log_pmf(lf, n, np.arange(n + 1), discordance))
    crit = _mcnemar_critical_counts(n, alpha) if margin == 0.0 else None
    z = NormalDist().inv_cdf(1.0 - alpha)
    power = 0.0
    for m in range(n + 1):
        if p_m[m] < 1e-300:
            continue
        b = np.arange(m + 1)
        if crit is not None:
            rejects = b >= crit[m]
        else:
            rejects = _tango_z_vector(b, m - b, n, margin) >= z
        if not rejects.any():
            continue
        pmf = np.exp(_binomial_log_pmf(lf, m, b[rejects], hurt_share))
        power += float(p_m[m]) * min(1.0, float(pmf.sum()))
    return min(1.0, power)


def _tango_z_vector(b: np.ndarray, c: np.ndarray, n: int, margin: float) -> np.ndarray:
    """`tango_z` over arrays of (b, c) at one n and margin > 0."""
    m = margin
    r = n - b - c
    big_b = b * (1.0 - m) + c * (1.0 - 3.0 * m) - 2.0 * m * r
    p01 = (big_b + np.sqrt(big_b * big_b + 8.0 * n * c * m * (1.0 - m))) / (4.0 * n)
    variance = n * (2.0 * p01 + m * (1.0 - m))
    return (b - c - n * m) / np.sqrt(variance)


def min_detectable_delta(
    n: int, null_discordance: float, alpha: float, *, power: float = 0.8, tolerance: float = 1e-4, margin: float = 0.0
) -> float | None:
    """The smallest Δerror the one-sided test of H0: Δ <= margin at `alpha` detects with
    `power` on `n` paired items whose null discordance is `null_discordance` (see
    `paired_power`); None when no Δ up to its maximum (1 - psi) reaches that power."""
    if not (0.0 < power < 1.0):
        raise ValueError(f"power must be in (0, 1); got {power!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    psi = min(max(null_discordance, 0.0), 1.0)
    high = 1.0 - psi
    if n <= 0 or high <= margin or paired_power(n, high, psi, alpha, margin) < power:
        return None
    low = margin
    while high - low > tolerance:
        mid = (low + high) / 2.0
        if paired_power(n, mid, psi, alpha, margin) >= power:
            high = mid
        else:
            low = mid
    return high


def min_detectable_shift(
    n: int, sd: float | None, alpha: float, *, power: float = 0.8, margin: float = 0.0
) -> float | None:
    """The smallest ΔP(rejected) (score verdicts) the one-sided paired t-test of
    H0: Δ <= margin at `alpha` detects with `power` on `n` items whose per-item differences
    have standard deviation `sd`: margin + (t_{1-alpha} + t_{power}) sd / sqrt(n) on n - 1
    degrees of freedom (the usual approximation of the noncentral t). The sd observed is
    taken as the noise (the spread the mean shift does not explain). None with fewer than two
    items, without an sd, or when it exceeds the largest possible shift (1)."""
    if not (0.0 < power < 1.0):
        raise ValueError(f"power must be in (0, 1); got {power!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    if n < 2 or sd is None:
        return None
    shift = margin + (student_t_quantile(1.0 - alpha, n - 1) + student_t_quantile(power, n - 1)) * sd / math.sqrt(n)
    return shift if shift <= 1.0 else None


def null_discordance(b: int, c: int, n: int) -> float:
    """The discordance the observed effect does not explain: (b + c - max(0, b - c)) / n, i.e.
    twice the smaller discordant count. Under H0 it estimates b + c; under a real effect it
    leaves the effect's one-way flips out."""
    if n <= 0:
        return 0.0
    return (b + c - max(0, b - c)) / n


# --------------------------------------------------------------------------------------------
# Inter-annotator agreement
# --------------------------------------------------------------------------------------------


def cohens_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa: agreement of two annotators beyond chance, on the same items.

    `a[i]` and `b[i]` are the labels the two annotators gave item i (any hashable values,
    e.g. ``"keep"`` / ``"reject"``). With n items, observed agreement
    ``p_o = #{i: a[i] == b[i]} / n`` and chance agreement from the two marginals
    ``p_e = sum_k (n_a(k) / n) * (n_b(k) / n)``:

        kappa = (p_o - p_e) / (1 - p_e)

    computed as ``(n * agree - S) / (n**2 - S)`` with ``S = sum_k n_a(k) * n_b(k)`` in integer
    arithmetic, so the only rounding is the final division. 1 is perfect agreement, 0 is the
    agreement expected by chance, negative is worse than chance.

    Undefined cases return NaN rather than a made-up number: no items, or ``p_e == 1`` (both
    annotators gave every item one and the same label, so agreement cannot be told apart from
    chance; report the raw agreement instead). Sequences of different lengths raise
    ValueError.
    """
    if len(a) != len(b):
        raise ValueError(f"both annotators must label the same items; got {len(a)} and {len(b)} labels")
    n = len(a)
    if n == 0:
        return float("nan")
    agree = sum(1 for x, y in zip(a, b) if x == y)
    counts_a: dict[object, int] = {}
    counts_b: dict[object, int] = {}
    for x in a:
        counts_a[x] = counts_a.get(x, 0) + 1
    for y in b:
        counts_b[y] = counts_b.get(y, 0) + 1
    s = sum(count * counts_b.get(label, 0) for label, count in counts_a.items())
    denominator = n * n - s
    if denominator == 0:
        return float("nan")
    return (n * agree - s) / denominator



# --------------------------------------------------------------------------------------------
# Two judges on the same items: is one judge's Δ larger than the other's?
# --------------------------------------------------------------------------------------------


def sign_flip_p_value(differences: Sequence[int]) -> float:
    """Two-sided exact sign-flip (permutation) p-value of H0: the per-item integer
    `differences` are symmetric around 0.

    Under H0 each nonzero difference is as likely to carry either sign (two judges are
    exchangeable on every item), so the sum S = sum d_i is distributed as sum +-|d_i| with fair,
    independent signs; p = P(|S| >= |S observed|), computed exactly by convolving the signs
    over the integers (O(k x sum |d_i|) for k nonzero items). No nonzero difference: 1.0.
    """
    values = [int(d) for d in differences]
    if any(v != d for v, d in zip(values, differences)):
        raise ValueError("sign_flip_p_value takes integer differences")
    magnitudes = [abs(v) for v in values if v]
    observed = abs(sum(values))
    if not magnitudes or observed == 0:
        return 1.0
    total = sum(magnitudes)
    dist = np.zeros(2 * total + 1)  # index s + total holds P(S = s)
    dist[total] = 1.0
    for m in magnitudes:
        step = np.zeros_like(dist)
        step[m:] += 0.5 * dist[:-m]
        step[:-m] += 0.5 * dist[m:]
        dist = step
    sums = np.arange(-total, total + 1)
    return min(1.0, float(dist[np.abs(sums) >= observed].sum()))


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
    p_adjusted: float | None = Field(default=None, description="p_value adjusted across the comparisons decided together.")
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


def decide_differences(differences: Sequence[EffectDifference], *, alpha: float, correction: Correction) -> list[EffectDifference]:
    """Adjust the comparisons' p-values together (they are one family) and mark those at or
    below `alpha`; returns decided copies, in order."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    adjusted = adjust_p_values([d.p_value for d in differences], correction)
    return [d.model_copy(update={"p_adjusted": p, "significant": p <= alpha}) for d, p in zip(differences, adjusted)]

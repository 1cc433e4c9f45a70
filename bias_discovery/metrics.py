"""The published measures of known judge biases, as pure functions (`bias-discovery audit`).

Three papers define the standard measures and a fourth a runtime monitor; each function here
implements one formula as published, on plain lists, with an `Estimate` (value, n, 95 % CI):

* CALM (Ye et al. 2024, §2.3): Robustness Rate RR = (1/|D|) Σ 𝕀(y = ŷ), Consistency Rate
  CR = (1/|D|) Σ 𝕀(y = y_rand), Acc_ori = (1/|D|) Σ 𝕀(y = R), Acc_hack = (1/|D|) Σ 𝕀(ŷ = R).
* Chen et al. 2024 (§4.6, Eq. 2): Attack Success Rate ASR = |V_{2|1}| / |V_1| (V_1: control
  preference A_1 or Tie; V_{2|1}: of those, experimental preference A_2^p), its factual-error
  variant |V_{2|2}| / |V_2|, and the 6-vote aggregation (A_1 = 0, Tie = 0.5, A_2 = 1, mean,
  threshold 0.5).
* Wei et al. 2024 (§4, App. A.4): Acc_both, Acc_random, flipping noise q̂ from K repeats,
  de-noised position bias PB and length bias LB.
* The bias monitor of the mitigation notes: position z = (first_wins - 0.5 N) / √(0.25 N),
  flagged at |z| > 2; length Spearman ρ with its p-value, flagged at ρ > 0.3 and p < 0.05.

A judge's verdict on a pair is a *preference*: ``"chosen"``, ``"rejected"``, ``"tie"``, or
None when the verdict was invalid. Items invalid in a condition a measure needs are left out
of that measure (its n says how many remain); a tie is never a correct verdict.

**Wei et al.'s q̂ estimates 2q(1-q), not q.** q̂ = 1 - (1/N) Σ [(k/K)(k-1)/(K-1) +
((K-k)/K)(K-k-1)/(K-1)] is the chance that two of an item's K repeats (drawn without
replacement) disagree. Under the paper's own noise model (each verdict flipped with
probability q) that chance is 2q(1-q): q = 0.10 gives q̂ ≈ 0.18. We implement PB and LB as
published (de-noised with q̂) and also report q solved from q̂, q = (1 - √(1 - 2q̂)) / 2, and
the PB / LB de-noised with it (`flip_probability_from_q_hat`).

No scipy: Spearman's p-value uses Student's t with n - 2 degrees of freedom (what
`scipy.stats.spearmanr` reports), its tail from the regularized incomplete beta function.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .stats import wilson_interval

__all__ = [
    "Estimate",
    "Preference",
    "acc_both",
    "acc_random",
    "accuracy",
    "attack_success_rate",
    "attack_success_rate_factual_error",
    "bootstrap_estimate",
    "chen_vote_preference",
    "consistency_rate",
    "denoise",
    "flip_agreement",
    "flip_probability_from_q_hat",
    "flipping_noise",
    "length_bias",
    "position_bias",
    "position_z",
    "proportion",
    "rank_average",
    "robustness_rate",
    "spearman",
    "spearman_rho",
    "student_t_two_sided_p",
]

Preference = Literal["chosen", "rejected", "tie"]
"""The response a verdict prefers (None where the verdict was invalid)."""

CONFIDENCE = 0.95


class Estimate(BaseModel):
    """One measured number with the sample it rests on and its uncertainty."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float | None = Field(description="The estimate; None when it is undefined (n = 0, a zero denominator).")
    n: int = Field(ge=0, description="Items (or verdicts) the estimate rests on.")
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = Field(default="", description="How the CI was computed: wilson, bootstrap, ...")


def proportion(k: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """k / n with its Wilson interval; value None when n = 0."""
    if n == 0:
        return Estimate(value=None, n=0, method="wilson")
    low, high = wilson_interval(k, n, confidence)
    return Estimate(value=k / n, n=n, ci_low=low, ci_high=high, method="wilson")


def _check_same_length(*columns: Sequence[object]) -> None:
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        raise ValueError(f"the columns must cover the same items; got lengths {sorted(len(c) for c in columns)}")


# --------------------------------------------------------------------------------------------
# CALM (§2.3)
# --------------------------------------------------------------------------------------------


def _agreement(a: Sequence[Preference | None], b: Sequence[Preference | None]) -> Estimate:
    _check_same_length(a, b)
    both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return proportion(sum(1 for x, y in both if x == y), len(both))


def robustness_rate(y: Sequence[Preference | None], y_hat: Sequence[Preference | None]) -> Estimate:
    """CALM's RR = (1/|D|) Σ 𝕀(y = ŷ): the share of items whose preference is unchanged after
    the bias is injected (ŷ). Compared by *response* (chosen / rejected / tie), so a swap of
    positions that keeps the preferred response counts as robust."""
    return _agreement(y, y_hat)


def consistency_rate(y: Sequence[Preference | None], y_rand: Sequence[Preference | None]) -> Estimate:
    """CALM's CR = (1/|D|) Σ 𝕀(y = y_rand): the same items judged again without perturbation,
    with a new seed (and sampling, when the temperature is above 0)."""
    return _agreement(y, y_rand)


def accuracy(y: Sequence[Preference | None]) -> Estimate:
    """CALM's Acc = (1/|D|) Σ 𝕀(y = R), R the chosen response (Acc_ori on y, Acc_hack on ŷ).
    A tie is not correct; invalid verdicts are left out."""
    valid = [p for p in y if p is not None]
    return proportion(sum(1 for p in valid if p == "chosen"), len(valid))


# --------------------------------------------------------------------------------------------
# Chen et al. (§4.5-4.6)
# --------------------------------------------------------------------------------------------


def attack_success_rate(control: Sequence[Preference | None], experimental: Sequence[Preference | None]) -> Estimate:
    """Eq. 2: ASR = |V_{2|1}| / |V_1|. A_1 is the untouched (chosen) response, A_2 the one
    perturbed into A_2^p (our rejected). V_1 = items whose control preference is A_1 or Tie;
    V_{2|1} = those of V_1 whose experimental preference is A_2^p. n = |V_1|."""
    _check_same_length(control, experimental)
    v1 = [e for c, e in zip(control, experimental) if c in ("chosen", "tie") and e is not None]
    return proportion(sum(1 for e in v1 if e == "rejected"), len(v1))


def attack_success_rate_factual_error(
    control: Sequence[Preference | None], experimental: Sequence[Preference | None]
) -> Estimate:
    """The factual-error variant: ASR = |V_{2|2}| / |V_2|, V_2 = items whose control preference
    is A_2 (our rejected) or Tie, V_{2|2} = those whose experimental preference is still A_2^p or
    Tie (the judge missed the injected error). n = |V_2|."""
    _check_same_length(control, experimental)
    v2 = [e for c, e in zip(control, experimental) if c in ("rejected", "tie") and e is not None]
    return proportion(sum(1 for e in v2 if e in ("rejected", "tie")), len(v2))


def chen_vote_preference(votes: Sequence[Preference | None]) -> Preference | None:
    """Chen et al.'s aggregation of position-shuffled votes: A_1 (chosen) = 0, Tie = 0.5,
    A_2 (rejected) = 1, averaged over the valid votes; below 0.5 -> chosen, above -> rejected,
    exactly 0.5 -> tie (our reading of "0.5 as a threshold"). None when no vote is valid.
    Computed on twice the scores, in integers, so 0.5 is hit exactly."""
    doubled = [{"chosen": 0, "tie": 1, "rejected": 2}[v] for v in votes if v is not None]
    if not doubled:
        return None
    total, n = sum(doubled), len(doubled)  # mean < 0.5  <=>  sum(2 * score) < n
    if total < n:
        return "chosen"
    if total > n:
        return "rejected"
    return "tie"


# --------------------------------------------------------------------------------------------
# Wei et al. (§4, App. A.4)
# --------------------------------------------------------------------------------------------


def acc_both(y: Sequence[Preference | None], y_prime: Sequence[Preference | None]) -> Estimate:
    """Acc_both = (1/N) Σ 𝕀(y = y_c ∧ y' = y_c): right in both orders (y: chosen shown first,
    y': rejected shown first). Items invalid in either order are left out."""
    _check_same_length(y, y_prime)
    both = [(a, b) for a, b in zip(y, y_prime) if a is not None and b is not None]
    return proportion(sum(1 for a, b in both if a == "chosen" and b == "chosen"), len(both))


def acc_random(y: Sequence[Preference | None], y_prime: Sequence[Preference | None], *, seed: int) -> Estimate:
    """Acc_random = (1/N) Σ 𝕀(y_random = y_c), y_random drawn from {y, y'} with probability 0.5
    each, by a generator seeded with `seed` (the draw is part of the published measure).
    Items invalid in either order are left out."""
    _check_same_length(y, y_prime)
    rng = random.Random(seed)
    draws = [rng.random() < 0.5 for _ in y]  # one draw per item, invalid ones too: item i's draw never depends on others
    both = [(a if first else b) for a, b, first in zip(y, y_prime, draws) if a is not None and b is not None]
    return proportion(sum(1 for pick in both if pick == "chosen"), len(both))


def flip_agreement(k: int, repeats: int) -> float:
    """The bracket of Wei et al.'s q̂ for one item: (k/K)(k-1)/(K-1) + ((K-k)/K)(K-k-1)/(K-1),
    the chance that two of its K repeats (without replacement) agree; k repeats picked the
    first response."""
    if repeats < 2:
        raise ValueError(f"flipping noise needs at least 2 repeats per item; got K = {repeats}")
    if not 0 <= k <= repeats:
        raise ValueError(f"need 0 <= k <= K; got k = {k}, K = {repeats}")
    K = repeats
    return (k / K) * (k - 1) / (K - 1) + ((K - k) / K) * (K - k - 1) / (K - 1)


def flipping_noise(counts: Sequence[tuple[int, int]]) -> float | None:
    """Wei et al.'s q̂ = 1 - (1/N) Σ_n agreement(k_n, K_n) over items given as (k, K) pairs:
    k repeats of K picked the first response (K may differ per item when some repeats were
    invalid; items with K < 2 must be left out by the caller). None for no items.
    Estimates 2q(1-q) under the paper's noise model; see `flip_probability_from_q_hat`."""
    if not counts:
        return None
    return 1.0 - sum(flip_agreement(k, K) for k, K in counts) / len(counts)


def flip_probability_from_q_hat(q_hat: float | None) -> float | None:
    """q solved from q̂ = 2q(1-q): q = (1 - √(1 - 2q̂)) / 2, the root in [0, 0.5]. None when
    q̂ > 0.5 (no flip probability explains that much disagreement) or q̂ is None."""
    if q_hat is None or q_hat > 0.5:
        return None
    return (1.0 - math.sqrt(max(0.0, 1.0 - 2.0 * q_hat))) / 2.0


def denoise(p: float | None, q: float | None) -> float | None:
    """p[X = 1] = (p[Z = 1] - q) / (1 - 2q): an accuracy freed of flipping noise q (App. A.4).
    None when either is None or 1 - 2q <= 0 (the noise swamps the signal). Not clipped to
    [0, 1]: a value outside says the noise estimate and the accuracy disagree."""
    if p is None or q is None or 1.0 - 2.0 * q <= 0.0:
        return None
    return (p - q) / (1.0 - 2.0 * q)


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def position_bias(p_cr: float | None, q_cr: float | None, p_rc: float | None, q_rc: float | None) -> float | None:
    """PB = (p̂_cr - q̂_cr)/(1 - 2q̂_cr) - (p̂_rc - q̂_rc)/(1 - 2q̂_rc): accuracy with the chosen
    response first minus accuracy with it second, each de-noised. > 0: the first position is
    favoured. With q = 0 it is the raw difference p̂_cr - p̂_rc."""
    return _difference(denoise(p_cr, q_cr), denoise(p_rc, q_rc))


def length_bias(p_plus: float | None, q_plus: float | None, p_minus: float | None, q_minus: float | None) -> float | None:
    """LB = (p̂₊ - q̂₊)/(1 - 2q̂₊) - (p̂₋ - q̂₋)/(1 - 2q̂₋): Acc_both on items whose chosen
    response is longer (Δlength > 0) minus on the others (Δlength <= 0), each de-noised.
    > 0: the judge favours longer responses more than the labels do."""
    return _difference(denoise(p_plus, q_plus), denoise(p_minus, q_minus))


# --------------------------------------------------------------------------------------------
# Bias monitor (mitigation notes)
# --------------------------------------------------------------------------------------------


def position_z(first_wins: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """z = (first_wins - 0.5 N) / √(0.25 N) over N verdicts that picked a response (flag at
    |z| > 2). The CI is the Wilson interval of the first-win share, mapped through the same
    linear transform. None for N = 0."""
    if n == 0:
        return Estimate(value=None, n=0, method="wilson")
    scale = math.sqrt(0.25 * n)
    low, high = wilson_interval(first_wins, n, confidence)
    return Estimate(
        value=(first_wins - 0.5 * n) / scale,
        n=n,
        ci_low=(low * n - 0.5 * n) / scale,
        ci_high=(high * n - 0.5 * n) / scale,
        method="wilson share, as z",
    )


def rank_average(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties given the mean of the ranks they span (as Spearman's ρ needs)."""
    return _ranks(np.asarray(values, dtype=float)).tolist()


def _ranks(a: np.ndarray) -> np.ndarray:
    sorter = np.argsort(a, kind="mergesort")
    inverse = np.empty_like(sorter)
    inverse[sorter] = np.arange(a.size)
    ordered = a[sorter]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = starts.cumsum()[inverse]  # 1-based group of each value
    bounds = np.r_[np.nonzero(starts)[0], a.size]  # first position of each group, then n
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = float(dx @ dx), float(dy @ dy)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, float(dx @ dy) / math.sqrt(sxx * syy)))


def spearman_rho(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Spearman's ρ alone (the Pearson correlation of average ranks); None when n < 3 or
    either variable is constant. Vectorised: the bootstrap calls it thousands of times."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError(f"x and y must be 1-D and of equal length; got {xa.shape} and {ya.shape}")
    if xa.size < 3:
        return None
    return _pearson(_ranks(xa), _ranks(ya))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for T ~ Student's t with `df` degrees of freedom: I_{df/(df+t²)}(df/2, 1/2)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0; got {df}")
    if math.isinf(t):
        return 0.0
    return min(1.0, _regularized_beta(df / 2.0, 0.5, df / (df + t * t)))


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """Spearman's ρ and its two-sided p-value from t = ρ √((n - 2) / (1 - ρ²)) on n - 2
    degrees of freedom (as scipy.stats.spearmanr). (None, None) when n < 3 or either variable
    is constant; p = 0 when |ρ| = 1."""
    _check_same_length(x, y)
    rho = spearman_rho(x, y)
    if rho is None:
        return None, None
    n = len(x)
    if abs(rho) >= 1.0:
        return rho, 0.0
    t = rho * math.sqrt((n - 2) / (1.0 - rho * rho))
    return rho, student_t_two_sided_p(t, n - 2)


# --------------------------------------------------------------------------------------------
# Bootstrap over items
# --------------------------------------------------------------------------------------------


def bootstrap_estimate(
    n_items: int,
    statistic: Callable[[np.ndarray], float | None],
    *,
    n_boot: int = 2000,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Estimate:
    """`statistic(indices)` on all items, with a percentile-bootstrap CI from resampling the
    items with replacement (an item carries all its verdicts, so the pairing of orders and
    repeats is kept). Resamples where the statistic is undefined (None) are dropped; the CI is
    None when fewer than half of them are defined."""
    everything = np.arange(n_items)
    value = statistic(everything) if n_items else None
    if value is None:
        return Estimate(value=None, n=n_items, method="bootstrap")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        result = statistic(rng.integers(0, n_items, size=n_items))
        if result is not None and math.isfinite(result):
            draws.append(result)
    if len(draws) < n_boot / 2:
        return Estimate(value=value, n=n_items, method="bootstrap")
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(draws), [tail, 1.0 - tail])
    return Estimate(value=value, n=n_items, ci_low=float(low), ci_high=float(high), method="bootstrap")

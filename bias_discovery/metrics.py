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
* The bias monitor of the mitigation notes: a position z, flagged at |z| > 2, and a length
  Spearman ρ with its p-value, flagged at ρ > 0.3 and p < 0.05; both with the *item* as the
  unit (see `position_z` and `length_spearman`), since an item's two orders are not
  independent observations.

A judge's verdict on a pair is a *preference*: ``"chosen"``, ``"rejected"``, ``"tie"``, or
None when the verdict was invalid. A measure that compares arms (two orders, original vs
perturbed, two repeats) is computed on the items valid in every arm it compares, so a
difference never comes from items invalid in one arm only; its n says how many remain and
its `n_excluded` how many were left out. A tie is never a correct verdict.

**Wei et al.'s q̂ estimates 2q(1-q), not q.** q̂ = 1 - (1/N) Σ [(k/K)(k-1)/(K-1) +
((K-k)/K)(K-k-1)/(K-1)] is the chance that two of an item's K repeats (drawn without
replacement) disagree. Under the paper's own noise model (each verdict flipped with
probability q) that chance is 2q(1-q): q = 0.10 gives q̂ ≈ 0.18. We implement PB and LB as
published (de-noised with q̂) and also report q solved from q̂, q = (1 - √(1 - 2q̂)) / 2, and
the PB / LB de-noised with it (`flip_probability_from_q_hat`).

No scipy: `spearman`'s p-value uses Student's t with n - 2 degrees of freedom (what
`scipy.stats.spearmanr` reports), its tail from the regularized incomplete beta function; the
monitor's length test permutes the items instead (`spearman_permutation_p`).
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
    "length_spearman",
    "paired_accuracies",
    "position_bias",
    "PositionProfile",
    "position_counts",
    "position_profile",
    "position_share",
    "position_z",
    "proportion",
    "rank_average",
    "robustness_rate",
    "spearman",
    "spearman_permutation_p",
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
    n_excluded: int | None = Field(
        default=None,
        ge=0,
        description="Items of the set measured that were left out because a verdict the measure needs was "
        "invalid in one of the arms it compares (None: not counted, as in files written before it was).",
    )


def proportion(k: int, n: int, confidence: float = CONFIDENCE, *, n_excluded: int | None = None) -> Estimate:
    """k / n with its Wilson interval; value None when n = 0."""
    if n == 0:
        return Estimate(value=None, n=0, method="wilson", n_excluded=n_excluded)
    low, high = wilson_interval(k, n, confidence)
    return Estimate(value=k / n, n=n, ci_low=low, ci_high=high, method="wilson", n_excluded=n_excluded)


def _check_same_length(*columns: Sequence[object]) -> None:
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        raise ValueError(f"the columns must cover the same items; got lengths {sorted(len(c) for c in columns)}")


# --------------------------------------------------------------------------------------------
# CALM (§2.3)
# --------------------------------------------------------------------------------------------


def _valid_in_both(
    a: Sequence[Preference | None], b: Sequence[Preference | None]
) -> list[tuple[Preference, Preference]]:
    """The (a, b) verdict pairs of the items valid in both arms."""
    _check_same_length(a, b)
    return [(x, y) for x, y in zip(a, b) if x is not None and y is not None]


def _agreement(a: Sequence[Preference | None], b: Sequence[Preference | None]) -> Estimate:
    both = _valid_in_both(a, b)
    return proportion(sum(1 for x, y in both if x == y), len(both), n_excluded=len(a) - len(both))


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
    """CALM's Acc = (1/|D|) Σ 𝕀(y = R), R the chosen response, of one arm alone. A tie is not
    correct; invalid verdicts are left out. Two arms that are compared (Acc_ori and Acc_hack,
    p̂_cr and p̂_rc) go through `paired_accuracies` instead."""
    valid = [p for p in y if p is not None]
    return proportion(sum(1 for p in valid if p == "chosen"), len(valid), n_excluded=len(y) - len(valid))


def paired_accuracies(
    y: Sequence[Preference | None], y_other: Sequence[Preference | None]
) -> tuple[Estimate, Estimate]:
    """The accuracy of each of two compared arms (CALM's Acc_ori and Acc_hack; Wei et al.'s
    p̂_cr and p̂_rc) on the same items: those valid in both. Each arm's accuracy on its own
    valid items would let an item invalid in one arm only move one number, and the difference
    would partly measure invalid verdicts rather than the bias."""
    both = _valid_in_both(y, y_other)
    excluded = len(y) - len(both)
    return (
        proportion(sum(1 for a, _ in both if a == "chosen"), len(both), n_excluded=excluded),
        proportion(sum(1 for _, b in both if b == "chosen"), len(both), n_excluded=excluded),
    )


# --------------------------------------------------------------------------------------------
# Chen et al. (§4.5-4.6)
# --------------------------------------------------------------------------------------------


def attack_success_rate(control: Sequence[Preference | None], experimental: Sequence[Preference | None]) -> Estimate:
    """Eq. 2: ASR = |V_{2|1}| / |V_1|. A_1 is the untouched (chosen) response, A_2 the one
    perturbed into A_2^p (our rejected). V_1 = items whose control preference is A_1 or Tie;
    V_{2|1} = those of V_1 whose experimental preference is A_2^p. n = |V_1|."""
    v1 = [e for c, e in _valid_in_both(control, experimental) if c in ("chosen", "tie")]
    return proportion(
        sum(1 for e in v1 if e == "rejected"),
        len(v1),
        n_excluded=_invalid_for(control, experimental, ("chosen", "tie")),
    )


def attack_success_rate_factual_error(
    control: Sequence[Preference | None], experimental: Sequence[Preference | None]
) -> Estimate:
    """The factual-error variant: ASR = |V_{2|2}| / |V_2|, V_2 = items whose control preference
    is A_2 (our rejected) or Tie, V_{2|2} = those whose experimental preference is still A_2^p or
    Tie (the judge missed the injected error). n = |V_2|."""
    v2 = [e for c, e in _valid_in_both(control, experimental) if c in ("rejected", "tie")]
    return proportion(
        sum(1 for e in v2 if e in ("rejected", "tie")),
        len(v2),
        n_excluded=_invalid_for(control, experimental, ("rejected", "tie")),
    )


def _invalid_for(
    control: Sequence[Preference | None], experimental: Sequence[Preference | None], subset: tuple[str, ...]
) -> int:
    """Items an ASR leaves out for an invalid verdict: the control invalid (its V is unknown),
    or the control in V and the experimental verdict invalid."""
    return sum(1 for c, e in zip(control, experimental) if c is None or (c in subset and e is None))


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
    both = _valid_in_both(y, y_prime)
    return proportion(
        sum(1 for a, b in both if a == "chosen" and b == "chosen"), len(both), n_excluded=len(y) - len(both)
    )


def acc_random(y: Sequence[Preference | None], y_prime: Sequence[Preference | None], *, seed: int) -> Estimate:
    """Acc_random = (1/N) Σ 𝕀(y_random = y_c), y_random drawn from {y, y'} with probability 0.5
    each, by a generator seeded with `seed` (the draw is part of the published measure).
    Items invalid in either order are left out."""
    _check_same_length(y, y_prime)
    rng = random.Random(seed)
    draws = [
        rng.random() < 0.5 for _ in y
    ]  # one draw per item, invalid ones too: item i's draw never depends on others
    both = [(a if first else b) for a, b, first in zip(y, y_prime, draws) if a is not None and b is not None]
    return proportion(sum(1 for pick in both if pick == "chosen"), len(both), n_excluded=len(y) - len(both))


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


def length_bias(
    p_plus: float | None, q_plus: float | None, p_minus: float | None, q_minus: float | None
) -> float | None:
    """LB = (p̂₊ - q̂₊)/(1 - 2q̂₊) - (p̂₋ - q̂₋)/(1 - 2q̂₋): Acc_both on items whose chosen
    response is longer (Δlength > 0) minus on the others (Δlength <= 0), each de-noised.
    > 0: the judge favours longer responses more than the labels do."""
    return _difference(denoise(p_plus, q_plus), denoise(p_minus, q_minus))


# --------------------------------------------------------------------------------------------
# Bias monitor (mitigation notes)
# --------------------------------------------------------------------------------------------


def position_counts(y_cr: Sequence[Preference | None], y_rc: Sequence[Preference | None]) -> tuple[int, int, int, int]:
    """The item-level position outcome: (items whose two verdicts both picked the response
    shown *first*, both picked the one shown *second*, items where both verdicts picked a
    response, items left out: a verdict invalid or a tie). y_cr: the verdict with the chosen
    response first; y_rc: with it second. An item that picked the same response in both
    orders says nothing about position; one that picked the same position twice is
    position-inconsistent, towards the first or the second."""
    _check_same_length(y_cr, y_rc)
    picks = ("chosen", "rejected")
    matched = [(a, b) for a, b in zip(y_cr, y_rc) if a in picks and b in picks]
    first = sum(1 for a, b in matched if a == "chosen" and b == "rejected")
    second = sum(1 for a, b in matched if a == "rejected" and b == "chosen")
    return first, second, len(matched), len(y_cr) - len(matched)


def position_z(
    y_cr: Sequence[Preference | None], y_rc: Sequence[Preference | None], confidence: float = CONFIDENCE
) -> Estimate:
    """The monitor's position z with the item as the unit (flag at |z| > 2): the sign test on
    the position-inconsistent items with a continuity correction,
    z = sign(F - S) · max(0, |F - S| - 1) / √(F + S), F and S the items whose two verdicts both
    picked the first (second) position (`position_counts`); n = the items where both verdicts
    picked a response.

    Why not (first wins - N/2) / √(N/4) over the N verdicts, as the notes publish it: an item's
    two orders share that item's pull towards a position, so its verdicts are not independent,
    and under a judge whose position preference varies at random between items but is zero on
    average that z fires far above 5 % (`benchmarks/monitor_sim.py`). Per item, first-wins
    minus one is -1, 0 or +1, symmetric under "no position bias" whatever the items' own
    preferences, so F is Binomial(F + S, 1/2) under that null. The continuity correction keeps
    P(|z| > 2) at or below 4.6 % for every F + S (without it, 7 % at F + S = 8 and above 5 %
    for many small counts, computed exactly). The CI is the Wilson interval of F / (F + S)
    mapped through z ≈ (F / (F + S) - 0.5) · 2√(F + S)."""
    first, second, n, excluded = position_counts(y_cr, y_rc)
    m = first + second
    method = "sign test over items (continuity-corrected); CI: wilson share, as z"
    if m == 0:
        return Estimate(value=None if n == 0 else 0.0, n=n, method=method, n_excluded=excluded)
    low, high = wilson_interval(first, m, confidence)
    scale = 2.0 * math.sqrt(m)
    value = math.copysign(max(0.0, abs(first - second) - 1.0), first - second) / math.sqrt(m)
    return Estimate(
        value=value + 0.0,  # no -0.0
        n=n,
        ci_low=(low - 0.5) * scale,
        ci_high=(high - 0.5) * scale,
        method=method,
        n_excluded=excluded,
    )


def position_share(
    y_cr: Sequence[Preference | None], y_rc: Sequence[Preference | None], confidence: float = CONFIDENCE
) -> Estimate:
    """F / (F + S): of the position-inconsistent items (the same position won in both orders),
    the share where it was the first (50 % = no position preference), with its Wilson CI."""
    first, second, _, excluded = position_counts(y_cr, y_rc)
    return proportion(first, first + second, confidence, n_excluded=excluded)


class PositionProfile(BaseModel):
    """How far a judge's verdict follows where a response is shown, from test pairs judged in
    both orders: a property of the judge measured on every run (`validate.position_profile`).

    The unit is the pair (its two verdicts share the pair's pull, so they are not two
    observations). A pair is *decided by position* when the same position won in both orders:
    the first (`first_both`) or the second (`second_both`); a position-blind judge may do that
    by chance, but equally often towards either position (the sign test's null)."""

    model_config = ConfigDict(extra="forbid")

    n_pairs: int = Field(ge=0, description="Pairs with a valid verdict in both orders.")
    first_both: int = Field(ge=0, description="Pairs where the response shown first won in both orders.")
    second_both: int = Field(ge=0, description="Pairs where the response shown second won in both orders.")
    n_excluded: int = Field(ge=0, description="Pairs left out: a verdict invalid, or a tie, in either order.")
    decided_by_position: Estimate
    """(first_both + second_both) / n_pairs, with its Wilson CI."""
    first_share: Estimate
    """first_both / (first_both + second_both), with its Wilson CI (50 %: no preference between the two)."""
    sign_test_p: float | None
    """Two-sided exact binomial p of first_both against second_both (None when both are 0)."""
    first_rate: float | None
    """Share of the valid verdicts that picked the response shown first (descriptive: a pair's two
    verdicts are not independent)."""
    extra_calls: int = Field(
        default=0, ge=0, description="Judge calls made only for this profile (the other order of each pair)."
    )

    def sentence(self) -> str:
        """One plain sentence: what the judge did, with n and the CI."""
        if self.n_pairs == 0:
            return "position: no test pair had a valid verdict in both orders"
        d = self.decided_by_position
        towards = "first" if self.first_both >= self.second_both else "second"
        count = self.first_both if towards == "first" else self.second_both
        ci = f"{100 * (d.ci_low or 0):.0f}-{100 * (d.ci_high or 0):.0f} %"
        p = "" if self.sign_test_p is None else f", sign test p = {self.sign_test_p:.2g}"
        return (
            f"the judge picked the response shown {towards} in both orders for {count} of {self.n_pairs} test pairs "
            f"(position decided {self.first_both + self.second_both} of {self.n_pairs}: "
            f"{100 * (d.value or 0):.0f} %, 95 % CI {ci}; {self.first_both} towards the first, "
            f"{self.second_both} towards the second{p})"
        )


def position_profile(
    y_cr: Sequence[Preference | None],
    y_rc: Sequence[Preference | None],
    *,
    extra_calls: int = 0,
    confidence: float = CONFIDENCE,
) -> PositionProfile:
    """The `PositionProfile` of verdicts on the same pairs with the chosen response first (y_cr)
    and second (y_rc)."""
    from scipy.stats import binomtest

    first, second, n, excluded = position_counts(y_cr, y_rc)
    decided = first + second
    valid = [v for v in (*y_cr, *y_rc) if v in ("chosen", "rejected")]
    first_wins = sum(1 for v in y_cr if v == "chosen") + sum(1 for v in y_rc if v == "rejected")
    return PositionProfile(
        n_pairs=n,
        first_both=first,
        second_both=second,
        n_excluded=excluded,
        decided_by_position=proportion(decided, n, confidence, n_excluded=excluded),
        first_share=position_share(y_cr, y_rc, confidence),
        sign_test_p=float(binomtest(first, decided, 0.5).pvalue) if decided else None,
        first_rate=first_wins / len(valid) if valid else None,
        extra_calls=extra_calls,
    )


SPEARMAN_PERMUTATIONS = 1999
"""Permutations of the monitor's length test: p resolves to 1/2000."""


def length_spearman(
    len_chosen: Sequence[float],
    len_rejected: Sequence[float],
    y_cr: Sequence[Preference | None],
    y_rc: Sequence[Preference | None],
    *,
    seed: int = 0,
    permutations: int = SPEARMAN_PERMUTATIONS,
) -> tuple[Estimate, float | None, list[tuple[float, float]]]:
    """The monitor's length correlation with the item as the unit: Spearman ρ between an
    item's length difference (chosen minus rejected) and the chosen response's share of its
    two verdicts (picked 1, tie 0.5, rejected 0), over the items valid in both orders; > 0:
    the longer response wins more. Returns (ρ with n and `n_excluded`, its two-sided
    permutation p, the (difference, share) points for a bootstrap over items).

    Why not ρ over both responses of every verdict (four points per item) with t on n - 2 df,
    as the notes publish it: those points are not independent (an item's two responses split
    one verdict, its two verdicts share the item), so that p is too small and fires far above
    5 % under a judge without any length preference (`benchmarks/monitor_sim.py`). One point
    per item makes the items the units; the p comes from permuting the shares over the items
    (`spearman_permutation_p`), exact at any n, where t on n - 2 df runs above 5 % for small
    audits with the shares' many ties (6 % at 8 items, 5.4 % at 24, simulated)."""
    _check_same_length(len_chosen, len_rejected, y_cr, y_rc)
    score = {"chosen": 1.0, "tie": 0.5, "rejected": 0.0}
    points = [
        (float(lc) - float(lr), (score[a] + score[b]) / 2.0)
        for lc, lr, a, b in zip(len_chosen, len_rejected, y_cr, y_rc)
        if a is not None and b is not None
    ]
    x, shares = [d for d, _ in points], [v for _, v in points]
    rho = spearman_rho(x, shares) if points else None
    p = None if rho is None else spearman_permutation_p(x, shares, permutations=permutations, seed=seed)
    method = f"spearman over items; p: {permutations} permutations over items"
    estimate = Estimate(value=rho, n=len(points), method=method, n_excluded=len(y_cr) - len(points))
    return estimate, p, points


def spearman_permutation_p(
    x: Sequence[float], y: Sequence[float], *, permutations: int = SPEARMAN_PERMUTATIONS, seed: int = 0
) -> float | None:
    """Two-sided p of Spearman's ρ from `permutations` seeded permutations of y:
    (1 + #{|ρ_perm| >= |ρ|}) / (1 + permutations), a valid p-value (P(p <= α) <= α) whenever
    the units are exchangeable under the null, whatever n and however many ties. None when ρ
    is undefined (n < 3, a constant variable)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rho = spearman_rho(xa, ya)
    if rho is None:
        return None
    rx, ry = _ranks(xa), _ranks(ya)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = math.sqrt(float(rx @ rx) * float(ry @ ry))
    threshold = abs(rho) * scale * (1.0 - 1e-9)  # equal |ρ| counts as at least as extreme
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < permutations:  # in blocks: bounded memory on large sets
        block = min(500, permutations - done)
        shuffled = rng.permuted(np.broadcast_to(ry, (block, ry.size)), axis=1)
        extreme += int((np.abs(shuffled @ rx) >= threshold).sum())
        done += block
    return (1 + extreme) / (1 + permutations)


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

"""Tests of bias_discovery.metrics against small examples computed by hand (in the comments)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bias_discovery.metrics import (
    acc_both,
    acc_random,
    accuracy,
    attack_success_rate,
    attack_success_rate_factual_error,
    bootstrap_estimate,
    chen_vote_preference,
    consistency_rate,
    denoise,
    flip_agreement,
    flip_probability_from_q_hat,
    flipping_noise,
    length_bias,
    position_bias,
    position_z,
    proportion,
    rank_average,
    robustness_rate,
    spearman,
    student_t_two_sided_p,
)
from bias_discovery.stats import wilson_interval

C, R, T = "chosen", "rejected", "tie"


# ------------------------------------------------------------------------------------------
# CALM
# ------------------------------------------------------------------------------------------


def test_calm_rates_compare_responses_and_drop_invalid_items():
    y = [C, C, R, T, C, None]
    y_hat = [C, R, R, C, None, C]
    # valid in both: items 0-3; same: items 0 and 2 -> RR = 2/4
    rr = robustness_rate(y, y_hat)
    assert (rr.value, rr.n) == (0.5, 4)
    assert (rr.ci_low, rr.ci_high) == wilson_interval(2, 4)
    y_rand = [C, C, R, R, C, C]
    # valid in both: items 0-4; same: 0, 1, 2, 4 -> CR = 4/5
    assert consistency_rate(y, y_rand).value == pytest.approx(0.8) and consistency_rate(y, y_rand).n == 5
    # Acc_ori on y: valid 5, chosen 3 (a tie is not correct) -> 3/5; Acc_hack on y_hat: 5 valid, 2 chosen
    assert accuracy(y).value == pytest.approx(0.6) and accuracy(y).n == 5
    assert accuracy(y_hat).value == pytest.approx(0.6) and accuracy(y_hat).n == 5


def test_proportion_of_nothing_is_undefined():
    empty = proportion(0, 0)
    assert empty.value is None and empty.n == 0 and empty.ci_low is None


# ------------------------------------------------------------------------------------------
# Chen et al.
# ------------------------------------------------------------------------------------------


def test_attack_success_rate_eq2():
    control = [C, C, T, T, R, C, None]
    experimental = [R, C, R, T, R, None, R]
    # V1 = control in {chosen, tie} with a valid experimental verdict: items 0, 1, 2, 3 (5 has
    # no experimental verdict, 6 no control) -> |V1| = 4; V2|1 = experimental rejected: 0, 2 -> 2/4
    asr = attack_success_rate(control, experimental)
    assert (asr.value, asr.n) == (0.5, 4)


def test_attack_success_rate_factual_error_variant():
    control = [R, R, T, T, C]
    experimental = [R, C, T, C, R]
    # V2 = control in {rejected, tie}: items 0-3 -> |V2| = 4; V2|2 = experimental in
    # {rejected, tie}: items 0 and 2 -> 2/4 (item 4 is not in V2 at all)
    asr = attack_success_rate_factual_error(control, experimental)
    assert (asr.value, asr.n) == (0.5, 4)


@pytest.mark.parametrize(
    "votes, expected",
    [
        # scores 0,0,0,1,1,0.5 -> mean 2.5/6 < 0.5 -> chosen (A1)
        ([C, C, C, R, R, T], C),
        # 0,0,1,1,1,1 -> 4/6 > 0.5 -> rejected (A2)
        ([C, C, R, R, R, R], R),
        # 0,0,0,1,1,1 -> exactly 0.5 -> tie
        ([C, C, C, R, R, R], T),
        # all ties -> 0.5 -> tie
        ([T] * 6, T),
        # invalid votes are left out: 0, 1, 1 -> 2/3 -> rejected
        ([C, None, R, None, R, None], R),
        ([None] * 6, None),
    ],
)
def test_chen_six_vote_aggregation(votes, expected):
    assert chen_vote_preference(votes) == expected


# ------------------------------------------------------------------------------------------
# Wei et al.
# ------------------------------------------------------------------------------------------


def test_acc_both_and_acc_random():
    y = [C, C, R, C, None]
    y_prime = [C, R, R, T, C]
    # valid in both: 0-3; right in both orders: item 0 only -> 1/4
    assert acc_both(y, y_prime).value == 0.25 and acc_both(y, y_prime).n == 4
    # Acc_random is a seeded draw: items 0 (both right) always count, item 2 (both wrong) never,
    # items 1 and 3 count when the draw lands on y -> between 1/4 and 3/4, reproducible
    values = {acc_random(y, y_prime, seed=s).value for s in range(40)}
    assert values <= {0.25, 0.5, 0.75} and len(values) > 1
    assert acc_random(y, y_prime, seed=3) == acc_random(y, y_prime, seed=3)


def test_flipping_noise_hand_example():
    # K = 3. The bracket a(k) = (k/K)(k-1)/(K-1) + ((K-k)/K)(K-k-1)/(K-1):
    # a(3) = 1*2/2 + 0 = 1;  a(2) = (2/3)(1/2) + (1/3)(0) = 1/3;  a(1) = 0 + (2/3)(1/2) = 1/3;  a(0) = 1
    assert [flip_agreement(k, 3) for k in (3, 2, 1, 0)] == pytest.approx([1, 1 / 3, 1 / 3, 1])
    # q_hat = 1 - mean(1, 1/3, 1, 1/3) = 1 - 2/3 = 1/3
    q_hat = flipping_noise([(3, 3), (2, 3), (0, 3), (1, 3)])
    assert q_hat == pytest.approx(1 / 3)
    # solved q: (1 - sqrt(1 - 2/3)) / 2 = (1 - 0.5773503) / 2 = 0.2113249
    assert flip_probability_from_q_hat(q_hat) == pytest.approx(0.21132487)
    # K = 2, k = 1: the two repeats disagree -> a = 0, q_hat = 1 (no q explains it)
    assert flipping_noise([(1, 2)]) == 1.0 and flip_probability_from_q_hat(1.0) is None
    assert flipping_noise([]) is None


def test_flipping_noise_needs_two_repeats():
    with pytest.raises(ValueError, match="at least 2 repeats"):
        flip_agreement(1, 1)


def test_q_hat_estimates_2q_one_minus_q_in_simulation():
    """The paper's noise model: an item's true verdict X, each of K repeats flipped with
    probability q. q̂ then estimates 2q(1-q) (0.18 for q = 0.10), and the solved q recovers q."""
    rng = random.Random(12)
    K, N, q = 5, 20000, 0.10
    counts = []
    for _ in range(N):
        x = rng.random() < 0.7
        k = sum(1 for _ in range(K) if (x if rng.random() >= q else not x))
        counts.append((k, K))
    q_hat = flipping_noise(counts)
    assert q_hat == pytest.approx(2 * q * (1 - q), abs=0.01)  # 0.18, not 0.10
    assert flip_probability_from_q_hat(q_hat) == pytest.approx(q, abs=0.01)


def test_denoised_position_and_length_bias():
    # p_cr = 0.9, q_cr = 0.1: (0.9 - 0.1) / (1 - 0.2) = 1.0
    # p_rc = 0.3, q_rc = 0.2: (0.3 - 0.2) / (1 - 0.4) = 1/6     -> PB = 1 - 1/6 = 5/6
    assert position_bias(0.9, 0.1, 0.3, 0.2) == pytest.approx(5 / 6)
    # no noise: the raw difference
    assert position_bias(1.0, 0.0, 0.0, 0.0) == 1.0
    # LB: (0.6 - 0.05)/0.9 - (0.4 - 0.05)/0.9 = 0.2/0.9 = 0.2222
    assert length_bias(0.6, 0.05, 0.4, 0.05) == pytest.approx(0.2 / 0.9)
    # 1 - 2q <= 0: undefined
    assert denoise(0.5, 0.5) is None and position_bias(0.9, 0.6, 0.3, 0.1) is None


# ------------------------------------------------------------------------------------------
# Bias monitor
# ------------------------------------------------------------------------------------------


def test_position_z():
    # 15 first wins of 20: (15 - 10) / sqrt(5) = 2.2360680 -> flagged (|z| > 2)
    z = position_z(15, 20)
    assert z.value == pytest.approx(5 / math.sqrt(5)) and z.n == 20
    low, high = wilson_interval(15, 20)
    assert z.ci_low == pytest.approx((low * 20 - 10) / math.sqrt(5))
    assert z.ci_high == pytest.approx((high * 20 - 10) / math.sqrt(5))
    assert position_z(10, 20).value == 0.0 and position_z(0, 0).value is None


def test_ranks_with_ties():
    assert rank_average([10, 20, 20, 5]) == [2.0, 3.5, 3.5, 1.0]


def test_spearman_hand_example():
    # ranks x = 1..5; y = [5, 6, 7, 8, 7] -> ranks [1, 2, 3.5, 5, 3.5]
    # deviations from 3: x (-2,-1,0,1,2), y (-2,-1,0.5,2,0.5): Sxy = 4+1+0+2+1 = 8, Sxx = 10,
    # Syy = 4+1+0.25+4+0.25 = 9.5 -> rho = 8 / sqrt(95) = 0.8207827
    # t = rho * sqrt(3 / (1 - 64/95)) = 8 * sqrt(3/31) = 2.4886; two-sided p on 3 df = 0.0886
    rho, p = spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
    assert rho == pytest.approx(8 / math.sqrt(95))
    assert p == pytest.approx(0.0885870, abs=1e-6)
    assert spearman([1, 2, 3], [3, 2, 1]) == (-1.0, 0.0)
    assert spearman([1, 2, 3], [1, 1, 1]) == (None, None)
    assert spearman([1, 2], [1, 2]) == (None, None)


@pytest.mark.parametrize(
    "t, df, p",
    [
        (2.0, 10, 0.0733880),  # Student's t table: two-sided P(|T| >= 2) on 10 df
        (1.0, 1, 0.5),  # Cauchy: P(|T| >= 1) = 1/2 exactly
        (0.0, 7, 1.0),
        (12.706205, 1, 0.05),  # the 97.5 % quantile on 1 df
        (1.959964, 1e6, 0.05),  # -> normal
    ],
)
def test_student_t_tail(t, df, p):
    assert student_t_two_sided_p(t, df) == pytest.approx(p, abs=2e-6)


def test_spearman_agrees_with_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    for n in (4, 12, 60):
        x = rng.integers(0, 6, size=n).tolist()
        y = (np.asarray(x) * 0.3 + rng.integers(0, 3, size=n)).tolist()
        ours = spearman(x, y)
        theirs = stats.spearmanr(x, y)
        assert ours[0] == pytest.approx(theirs.statistic, abs=1e-12)
        assert ours[1] == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------------------------------
# Bootstrap
# ------------------------------------------------------------------------------------------


def test_bootstrap_estimate_of_a_mean():
    values = np.array([0.0, 1.0] * 20)
    est = bootstrap_estimate(40, lambda idx: float(values[idx].mean()), n_boot=500, seed=1)
    assert est.value == 0.5 and est.n == 40 and est.method == "bootstrap"
    assert 0.3 < est.ci_low < 0.5 < est.ci_high < 0.7
    assert est == bootstrap_estimate(40, lambda idx: float(values[idx].mean()), n_boot=500, seed=1)
    # undefined on the full sample: no value, no CI
    undefined = bootstrap_estimate(5, lambda idx: None)
    assert undefined.value is None and undefined.ci_low is None

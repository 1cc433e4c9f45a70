"""Tests of bias_discovery.metrics against small examples computed by hand (in the comments)."""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import sys

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
    length_spearman,
    paired_accuracies,
    position_bias,
    position_share,
    position_z,
    proportion,
    rank_average,
    robustness_rate,
    spearman,
    spearman_permutation_p,
    spearman_rho,
    student_t_two_sided_p,
)
from bias_discovery.stats import wilson_interval

from helpers import REPO

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
    assert (rr.n_excluded, consistency_rate(y, y_rand).n_excluded) == (2, 1)
    # one arm alone: y has 5 valid verdicts, 3 chosen (a tie is not correct) -> 3/5
    assert accuracy(y).value == pytest.approx(0.6) and (accuracy(y).n, accuracy(y).n_excluded) == (5, 1)


def test_compared_accuracies_are_on_the_items_valid_in_both_arms():
    y = [C, C, R, T, C, None]
    y_hat = [C, R, R, R, None, C]
    # Each arm alone: Acc(y) = 3/5 (items 0-4), Acc(y_hat) = 2/5 (items 0-3, 5), a difference of
    # 20 pp; on the items both judged validly (0-3) y is right twice and y_hat once: 25 pp,
    # the Δerror of the same items.
    assert (accuracy(y).value, accuracy(y_hat).value) == (0.6, 0.4)
    acc_ori, acc_hack = paired_accuracies(y, y_hat)
    assert (acc_ori.value, acc_hack.value) == (0.5, 0.25)
    assert (acc_ori.n, acc_hack.n, acc_ori.n_excluded, acc_hack.n_excluded) == (4, 4, 2, 2)
    assert (acc_ori.ci_low, acc_ori.ci_high) == wilson_interval(2, 4)


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
    # left out for an invalid verdict: item 5 (in V1, experimental invalid), item 6 (no control)
    assert asr.n_excluded == 2


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
    assert acc_both(y, y_prime).value == 0.25 and acc_both(y, y_prime).n == 4 and acc_both(y, y_prime).n_excluded == 1
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


def test_position_z_has_the_item_as_the_unit():
    # (chosen first, chosen second): C/R = the first position won twice (F), R/C = the second
    # twice (S), C/C and R/R = the same response both times (no position information)
    y_cr = [C] * 5 + [R] + [C, C, R] + [C, T]
    y_rc = [R] * 5 + [C] + [C, C, R] + [None, C]
    # F = 5, S = 1 -> z = (|5 - 1| - 1) / sqrt(6) = 1.2247; n = 9 items with two picks; 2 left out
    z = position_z(y_cr, y_rc)
    assert z.value == pytest.approx(3 / math.sqrt(6)) and (z.n, z.n_excluded) == (9, 2)
    assert position_z(y_rc, y_cr).value == pytest.approx(-3 / math.sqrt(6))  # orders swapped: S = 5
    low, high = wilson_interval(5, 6)
    assert (z.ci_low, z.ci_high) == (
        pytest.approx((low - 0.5) * 2 * math.sqrt(6)),
        pytest.approx((high - 0.5) * 2 * math.sqrt(6)),
    )
    share = position_share(y_cr, y_rc)
    assert share.value == pytest.approx(5 / 6) and (share.n, share.n_excluded) == (6, 2)
    # every item picked the same response in both orders: no position evidence at all
    assert position_z([C, R], [C, R]).value == 0.0
    assert position_z([None], [C]).value is None and position_z([], []).value is None
    # Every item first twice: z = (n - 1) / sqrt(n) -> 5 items cannot pass |z| > 2, 6 can
    assert position_z([C] * 5, [R] * 5).value == pytest.approx(4 / math.sqrt(5))
    assert position_z([C] * 6, [R] * 6).value == pytest.approx(5 / math.sqrt(6)) and 5 / math.sqrt(6) > 2
    assert position_z([C, R], [R, C]).value == 0.0  # F = S = 1


def test_position_flag_holds_its_level_for_every_number_of_inconsistent_items():
    # Under no position bias F ~ Binomial(m, 1/2) given m = F + S: the exact chance of |z| > 2,
    # for every m up to 120, is at most 4.6 % (the uncorrected sign test reaches 7 % at m = 8)
    worst = 0.0
    for m in range(1, 121):
        fires = sum(
            math.comb(m, f)
            for f in range(m + 1)
            if abs(position_z([C] * f + [R] * (m - f), [R] * f + [C] * (m - f)).value) > 2
        )
        worst = max(worst, fires / 2**m)
    assert 0.04 < worst <= 0.046


def test_length_spearman_has_the_item_as_the_unit():
    # Four items, length difference (chosen - rejected) and the chosen response's share of the
    # two verdicts: (+10, 1), (+5, 0.5: C then R), (-5, 0.5: tie twice), (-10, 0); one item
    # with an invalid verdict is left out.
    rho, p, points = length_spearman(
        [20, 15, 5, 0, 9], [10, 10, 10, 10, 9], [C, C, T, R, C], [C, R, T, R, None], seed=1
    )
    assert points == [(10.0, 1.0), (5.0, 0.5), (-5.0, 0.5), (-10.0, 0.0)]
    # ranks x 4, 3, 2, 1; shares 4, 2.5, 2.5, 1 -> rho = 4.5 / sqrt(5 * 4.5) = 0.9487
    assert rho.value == pytest.approx(4.5 / math.sqrt(22.5)) and (rho.n, rho.n_excluded) == (4, 1)
    # exact permutation p: of the 24 orders of the shares, those with |rho| >= 0.9487
    assert p == pytest.approx(_exact_permutation_p([10, 5, -5, -10], [1, 0.5, 0.5, 0]), abs=0.03)


def _exact_permutation_p(x, y):
    observed = abs(spearman_rho(x, y))
    orders = list(itertools.permutations(y))
    return sum(abs(spearman_rho(x, list(o))) >= observed - 1e-12 for o in orders) / len(orders)


def test_spearman_permutation_p_matches_full_enumeration():
    x, y = [1, 2, 3, 4, 5, 6, 7], [0, 0, 0.5, 1, 0, 1, 1]
    exact = _exact_permutation_p(x, y)
    mc = spearman_permutation_p(x, y, permutations=4999, seed=3)
    assert mc == pytest.approx(exact, abs=0.015) and 0.0 < mc <= 1.0
    assert spearman_permutation_p(x, y, permutations=4999, seed=3) == mc  # seeded
    assert spearman_permutation_p([1, 2, 3], [1, 1, 1]) is None


def test_monitor_false_alarms_under_item_level_preferences(monkeypatch):
    """benchmarks/monitor_sim.py at a tenth of its replications (200 per null judge): the
    item-level monitor holds its level where the verdict-level statistics it replaced fire far
    above 5 %."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # the script imports provenance.py beside it
    spec = importlib.util.spec_from_file_location("monitor_sim", REPO / "benchmarks" / "monitor_sim.py")
    sim = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "monitor_sim", sim)  # its dataclasses look their module up
    spec.loader.exec_module(sim)
    rates = sim.simulate_monitor_false_alarms(200, 0)
    assert set(rates) == {"monitor_false_alarm_z", "monitor_false_alarm_rho"}
    assert rates["monitor_false_alarm_z"] <= 0.06 and rates["monitor_false_alarm_rho"] <= 0.08
    position_lean, response_lean = sim.CELLS[3], sim.CELLS[4]  # 100 items each
    rng = np.random.default_rng(1)
    assert sim.run_cell(position_lean, 200, rng, verdict_level=True)["old_z"] / 200 > 0.08
    assert sim.run_cell(response_lean, 200, rng, verdict_level=True)["old_rho"] / 200 > 0.08


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


def test_the_audits_z_legend_prints_the_formula_of_the_value_it_shows():
    """The legend printed under the audit's z is the continuity-corrected formula that
    `position_z` computes: with F = 5, S = 1 the uncorrected (F − S)/√(F + S) would be 4/√6."""
    from bias_discovery.auditing.display import ROWS

    [legend] = [row for row in ROWS["position"] if row.field == "z"]
    assert "sign(F − S)·max(0, |F − S| − 1)/√(F + S)" in legend.meaning and "continuity-corrected" in legend.meaning
    y_cr, y_rc = [C] * 5 + [R], [R] * 5 + [C]
    assert position_z(y_cr, y_rc).value == pytest.approx((abs(5 - 1) - 1) / math.sqrt(5 + 1))

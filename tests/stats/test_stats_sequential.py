"""Group-sequential validation (bias_discovery.stats.sequential): alpha spending, looks, sequential p-values, futility, and the error rates of a simulated family."""

from __future__ import annotations

import numpy as np
import pytest

from bias_discovery import stats

from stats_cases import _items, _validate_family


def test_alpha_spending_hand_values():
    # O'Brien-Fleming type: 2 (1 - Phi(z_{0.975} / sqrt(t))); z_{0.975} = 1.959964
    # t = 0.25: 2 (1 - Phi(3.919928)) = 2 * 4.4288e-5 = 8.8575e-5
    assert stats.alpha_spent(0.25, 0.05) == pytest.approx(8.8575e-5, rel=1e-3)
    assert stats.alpha_spent(1.0, 0.05) == pytest.approx(0.05, rel=1e-12)
    # Pocock type: 0.05 ln(1 + (e - 1) 0.5) = 0.05 ln(1.859141) = 0.0310057
    assert stats.alpha_spent(0.5, 0.05, "pocock") == pytest.approx(0.0310057, rel=1e-5)
    assert stats.alpha_spent(1.0, 0.05, "pocock") == pytest.approx(0.05, rel=1e-12)
    with pytest.raises(ValueError):
        stats.alpha_spent(0.0, 0.05)
    with pytest.raises(ValueError):
        stats.alpha_spent(0.5, 0.05, "linear")  # type: ignore[arg-type]


def test_plan_looks_levels_and_small_sets():
    plan = stats.plan_sequential(100, [0.25, 0.5, 1.0], alpha=0.05, min_items=20, futility=0.1)
    assert plan.looks == (25, 50, 100)
    assert sum(plan.levels) == pytest.approx(0.05, rel=1e-12)
    assert plan.levels[0] == pytest.approx(stats.alpha_spent(0.25, 0.05))
    # 7 items per look at 25 % of 28: below min_items, skipped
    assert stats.plan_sequential(28, [0.25, 0.5, 1.0], alpha=0.05, min_items=10).looks == (14, 28)
    # a test set too small for any interim look is one classic test at alpha
    single = stats.plan_sequential(12, [0.25, 0.5, 1.0], alpha=0.05, min_items=20)
    assert single.looks == (12,) and single.levels == (0.05,)
    with pytest.raises(ValueError):
        stats.plan_sequential(100, [0.5, 0.25, 1.0], alpha=0.05)
    with pytest.raises(ValueError):
        stats.plan_sequential(100, [0.25, 0.5], alpha=0.05)


def test_sequential_p_value_hand_values():
    plan = stats.plan_sequential(100, [0.25, 0.5, 1.0], alpha=0.05, min_items=20)
    l1, l2, l3 = plan.levels
    # one look: p * alpha / level_1
    assert stats.sequential_p_value([0.001], plan) == pytest.approx(min(1.0, 0.001 * 0.05 / l1))
    # the smallest weighted p-value over the looks made
    assert stats.sequential_p_value([0.2, 0.0001], plan) == pytest.approx(0.0001 * 0.05 / l2)
    assert stats.sequential_p_value([0.9, 0.5, 0.04], plan) == pytest.approx(0.04 * 0.05 / l3)
    assert stats.sequential_p_value([1.0, 1.0, 1.0], plan) == 1.0
    # a single-look plan leaves p alone
    assert stats.sequential_p_value([0.03], stats.plan_sequential(10, [1.0], alpha=0.05)) == pytest.approx(0.03)


def test_conditional_power_hand_values():
    # b = 3, c = 3 after 25 of 100 items, final level 0.05 (z = 1.644854):
    # rest 75, p10 = p01 = 0.12 -> mean 0, var 75 * 0.24 = 18; discordant 6 + 18 = 24;
    # needed = 1.644854 * sqrt(24) = 8.0582 -> CP = 1 - Phi(8.0582 / sqrt(18)) = 1 - Phi(1.8993)
    assert stats.conditional_power(3, 3, 25, 100, 0.05) == pytest.approx(0.028762, abs=2e-5)
    # b = 10, c = 2: mean 75 * 0.32 = 24, var 75 * (0.48 - 0.1024) = 28.32, discordant 48,
    # needed = 1.644854 * sqrt(48) - 8 - 24 = -20.604 -> CP = 1 - Phi(-3.8717) = 0.999946
    assert stats.conditional_power(10, 2, 25, 100, 0.05) == pytest.approx(0.999946, abs=2e-6)
    # nothing discordant: nothing can happen
    assert stats.conditional_power(0, 0, 25, 100, 0.05) == 0.0


def test_look_outcomes():
    plan = stats.plan_sequential(100, [0.25, 0.5, 1.0], alpha=0.05, min_items=20, futility=0.1)
    # futility is judged against the last look's own level (the most lenient the candidate faces)
    rec = stats.sequential_look(plan, 0, [], b=3, c=3, n=25, family_size=3)
    assert rec.outcome == "futility"
    assert rec.conditional_power == pytest.approx(stats.conditional_power(3, 3, 25, 100, plan.levels[-1]))
    assert rec.conditional_power < 0.1
    going = stats.sequential_look(plan, 0, [], b=6, c=1, n=25, family_size=3)
    assert going.outcome == "continue" and going.conditional_power > 0.1
    # 50 items: b = 20, c = 0 -> p = 2^-20, far below level_2 / 3
    strong = stats.sequential_look(plan, 1, [going], b=20, c=0, n=50, family_size=3)
    assert strong.p_value == 2.0**-20 and strong.outcome == "efficacy"
    assert strong.p_sequential == pytest.approx(
        min(going.p_value * 0.05 / plan.levels[0], 2.0**-20 * 0.05 / plan.levels[1])
    )
    # a clear effect that the test cannot tell above min_delta does not stop for efficacy
    assert stats.sequential_look(plan, 1, [going], b=20, c=0, n=50, family_size=3, margin=0.3).outcome == "continue"
    assert stats.sequential_look(plan, 2, [going, strong], b=30, c=0, n=100, family_size=3).outcome == "final"
    with pytest.raises(ValueError):
        stats.sequential_look(plan, 1, [], b=1, c=1, n=50, family_size=1)


@pytest.mark.slow
def test_sequential_validation_keeps_false_acceptance_within_alpha():
    """A null candidate (the perturbation does nothing; the judge flips on half of the items,
    the worst case) validated on 100 items, 25/50/100 % looks, O'Brien-Fleming spending and a
    futility stop: it is falsely accepted at most alpha of the time, alone and as a family of
    three under Holm, and it stops well before the end on average. The paper's rule accepts
    about half of these candidates. (Numbers quoted in docs/benchmarks/index.md.)"""
    rng = np.random.default_rng(20240611)
    n, reps, alpha = 100, 3000, 0.05
    sequential = stats.plan_sequential(n, [0.25, 0.5, 1.0], alpha=alpha, min_items=20, futility=0.1)
    fixed = stats.plan_sequential(n, [1.0], alpha=alpha)
    accepted = {"sequential": 0, "fixed": 0, "paper": 0}
    items_used = 0
    for _ in range(reps):
        control, perturbed = _items(rng, n, psi=0.5, delta=0.0)
        ok, used = _validate_family(control, [perturbed], sequential)
        accepted["sequential"] += ok[0]
        items_used += used[0]
        accepted["fixed"] += _validate_family(control, [perturbed], fixed)[0][0]
        accepted["paper"] += _validate_family(control, [perturbed], fixed, rule="paper")[0][0]
    rates = {k: v / reps for k, v in accepted.items()}
    assert rates["sequential"] <= alpha and rates["fixed"] <= alpha
    assert 0.40 <= rates["paper"] <= 0.52
    assert items_used / (reps * n) < 0.5  # a null candidate rarely needs the whole test set

    family_errors = 0
    for _ in range(1000):
        control = _items(rng, n, psi=0.5, delta=0.0)[0]
        candidates = [_items(rng, n, psi=0.5, delta=0.0)[1] for _ in range(3)]
        family_errors += any(_validate_family(control, candidates, sequential)[0])
    assert family_errors / 1000 <= alpha


@pytest.mark.slow
def test_sequential_validation_keeps_most_of_the_power():
    """A real effect (Δ = 0.2 over a null discordance of 0.3, 100 items): the single test
    accepts it as often as `paired_power` says, and the sequential test nearly as often."""
    rng = np.random.default_rng(7)
    n, reps = 100, 1500
    sequential = stats.plan_sequential(n, [0.25, 0.5, 1.0], alpha=0.05, min_items=20, futility=0.1)
    fixed = stats.plan_sequential(n, [1.0], alpha=0.05)
    hits_seq = hits_fixed = 0
    for _ in range(reps):
        control, perturbed = _items(rng, n, psi=0.3, delta=0.2)
        hits_seq += _validate_family(control, [perturbed], sequential)[0][0]
        hits_fixed += _validate_family(control, [perturbed], fixed)[0][0]
    exact = stats.paired_power(n, 0.2, 0.3, 0.05)
    assert hits_fixed / reps == pytest.approx(exact, abs=0.035)
    assert hits_seq / reps >= hits_fixed / reps - 0.08


def test_conditional_power_for_a_margin():
    # b = 10, c = 2 after 25 of 100, level 0.05, margin 0.1: rest 75, mean 24, var 28.32,
    # discordant 48, null variance 48 - 100 * 0.01 = 47,
    # needed = 1.644854 * sqrt(47) + 100 * 0.1 - 8 - 24 = -10.7234 -> CP = 1 - Phi(-2.01504)
    assert stats.conditional_power(10, 2, 25, 100, 0.05, margin=0.1) == pytest.approx(0.978049, abs=2e-5)
    assert stats.conditional_power(10, 2, 25, 100, 0.05, margin=0.1) < stats.conditional_power(10, 2, 25, 100, 0.05)

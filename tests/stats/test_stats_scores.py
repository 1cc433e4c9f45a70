"""Statistics on probabilities (score verdicts): Student's t without scipy, checked against its
closed forms (df = 1 is the Cauchy distribution, df = 2 has an algebraic CDF) and table values."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from bias_discovery.config import ValidateSettings
from bias_discovery.stages.family import (
    FamilySettings,
    compare_arms,
    decide,
    effects,
    run_looks,
)
from bias_discovery.stats import (
    compare_paired_scores,
    min_detectable_shift,
    paired_t_one_sided,
    plan_sequential,
    sequential_shift_look,
    shift_conditional_power,
    student_t_quantile,
    student_t_sf,
)


@pytest.mark.parametrize("t", [-7.0, -1.0, 0.0, 0.3, 2.0, 31.8])
def test_student_t_sf_closed_forms(t: float) -> None:
    assert student_t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
    assert student_t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_student_t_quantiles() -> None:
    assert student_t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)  # 12.7062
    assert student_t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-6)  # sqrt(2) q' / sqrt(1 - q'^2), q' = 0.95
    assert student_t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)  # tables
    assert student_t_quantile(0.95, 30) == pytest.approx(1.697261, abs=1e-6)
    assert student_t_quantile(0.025, 10) == pytest.approx(-2.228139, abs=1e-6)
    assert student_t_quantile(0.975, 10**7) == pytest.approx(1.959964, abs=1e-6)  # the normal limit
    with pytest.raises(ValueError):
        student_t_quantile(1.0, 3)


def test_paired_t_one_sided_by_hand() -> None:
    """d = 0.1, 0.2, 0.3, 0.0: mean 0.15, sd = sqrt(0.05 / 3) = 0.129099, t = 0.15 / (0.129099 / 2)
    = 2.323790 on 3 df; P(T3 > 2.323790) from the closed form of the t(3) CDF."""
    t = 0.15 / (math.sqrt(0.05 / 3) / 2)
    closed_form = 0.5 - (math.atan(t / math.sqrt(3)) + (t / math.sqrt(3)) / (1 + t * t / 3)) / math.pi
    assert paired_t_one_sided([0.1, 0.2, 0.3, 0.0]) == pytest.approx(closed_form, abs=1e-12)
    assert paired_t_one_sided([-0.1, -0.2, -0.3, 0.0]) == pytest.approx(1 - closed_form, abs=1e-12)
    assert paired_t_one_sided([0.2] * 5) == 0.5**5  # no spread: the sign-flip test's p
    assert paired_t_one_sided([0.0] * 5) == 1.0 and paired_t_one_sided([0.4]) == 1.0


# ---------------------------------------------------------------- validation on score verdicts


def test_compare_paired_scores_by_hand() -> None:
    """Items valid in both: 2 (0.2 -> 0.3, 0.4 -> 0.7); differences 0.1 and 0.3: mean 0.2,
    sd sqrt(0.02) = 0.141421, t = 0.2 / (0.141421 / sqrt 2) = 2 on 1 df: p = 1/2 - atan(2)/pi."""
    cmp = compare_paired_scores([0.2, 0.4, None, 0.5], [0.3, 0.7, 0.9, None], control_name="placebo")
    assert (cmp.measure, cmp.control, cmp.n, cmp.n_excluded_invalid) == ("p_rejected", "placebo", 2, 2)
    assert (cmp.control_error, cmp.arm_error, cmp.delta) == pytest.approx((0.3, 0.5, 0.2))
    assert cmp.sd_difference == pytest.approx(math.sqrt(0.02))
    assert cmp.p_value == pytest.approx(0.5 - math.atan(2.0) / math.pi)
    half = 12.706205 * math.sqrt(0.02) / math.sqrt(2)  # t(0.975, 1) = 12.706: the CI is clipped to [-1, 1]
    assert (cmp.ci_low, cmp.ci_high) == (max(-1.0, 0.2 - half), min(1.0, 0.2 + half))
    assert cmp.b_discordant_hurt is None and cmp.c_discordant_helped is None
    with_margin = compare_paired_scores([0.2, 0.4], [0.3, 0.7], margin=0.1)
    assert with_margin.p_value == pytest.approx(0.5 - math.atan(1.0) / math.pi)  # t = (0.2 - 0.1) / 0.1 = 1


def test_shift_conditional_power_by_hand() -> None:
    """Seen 25 of 100 items, mean shift 0.1, sd 0.2, final level 0.025 (z = 1.959964): the rest
    (75 items) must add at least 1.959964 * 0.2 * 10 - 100 * 0.1 = -6.08 beyond its expected
    sum, whose sd is 0.2 * sqrt(75): power = Phi(6.08 / 1.732051)."""
    z = NormalDist().inv_cdf(0.975)
    expected = NormalDist().cdf(-(z * 0.2 * 10 - 10.0) / (0.2 * math.sqrt(75)))
    assert shift_conditional_power(0.1, 0.2, 25, 100, 0.025) == pytest.approx(expected)
    assert shift_conditional_power(0.0, 0.2, 25, 100, 0.025, margin=0.05) < 0.01
    assert shift_conditional_power(0.1, 0.0, 25, 100, 0.025) == 1.0  # no spread: the trend decides


def test_min_detectable_shift_by_hand() -> None:
    """n = 50, sd 0.2, alpha 0.05, power 0.8: (t(0.95, 49) + t(0.80, 49)) * 0.2 / sqrt(50)
    with t(0.95, 49) = 1.676551 and t(0.80, 49) = 0.849018 (tables)."""
    assert min_detectable_shift(50, 0.2, 0.05) == pytest.approx((1.676551 + 0.849018) * 0.2 / math.sqrt(50), abs=1e-6)
    assert min_detectable_shift(50, 0.2, 0.05, margin=0.05) == pytest.approx(
        0.05 + (1.676551 + 0.849018) * 0.2 / math.sqrt(50), abs=1e-6
    )
    assert min_detectable_shift(1, 0.2, 0.05) is None and min_detectable_shift(50, None, 0.05) is None
    assert min_detectable_shift(3, 0.9, 0.01) is None  # more than the largest possible shift


def test_a_score_look_stops_as_the_binary_one_does() -> None:
    plan = plan_sequential(100, [0.25, 0.5, 1.0], alpha=0.05, spending="obrien_fleming", futility=0.1, min_items=10)
    strong = sequential_shift_look(plan, 0, [], differences=[0.3 + 0.01 * (i % 5) for i in range(25)], family_size=2)
    assert strong.outcome == "efficacy" and strong.n == 25 and strong.b_discordant_hurt == 25
    assert strong.mean_difference == pytest.approx(0.32) and strong.p_value < strong.level / 2
    flat = sequential_shift_look(plan, 0, [], differences=[(-1) ** i * 0.1 for i in range(25)], family_size=2)
    assert flat.outcome == "futility" and flat.conditional_power is not None and flat.conditional_power < 0.1
    assert (flat.b_discordant_hurt, flat.c_discordant_helped) == (13, 12)


def test_the_effect_after_an_early_stop_is_median_unbiased_on_scores() -> None:
    """300 sequential validations of a true shift of 5 pp (sd 0.15, 120 items, the default
    looks): the Δ of the look where a candidate stopped for efficacy is biased upwards; the
    conditional estimate (`sequential.effect: conditional`) is not, and its 95 % interval covers
    the truth about 95 % of the time."""
    rng = np.random.default_rng(3)
    settings = FamilySettings(
        rules=ValidateSettings(held_out=0.0, sequential={"effect": "conditional"}),
        family_alpha=0.05,
        measure="p_rejected",
    )
    naive, conditional, covered = [], [], []
    for _ in range(300):
        shifts = rng.normal(0.05, 0.15, 120)

        def fetch(
            look: int, active: Sequence[int], new_items: Sequence[int], shifts: Any = shifts
        ) -> list[list[float | None]]:
            return [[0.5 + float(shifts[i]) / 2 for i in new_items] for _ in active]

        control: list[float | None] = [0.5 - float(d) / 2 for d in shifts]  # arm - control = the shift
        family = run_looks(control, 1, fetch, settings, list(range(120)))
        if family.stop[0] != "efficacy":
            continue
        [cmp] = [c["placebo"] for c in compare_arms(family, {"placebo": control}, settings)]
        [effect] = effects(family, decide(family, [cmp], settings, "placebo"), settings)
        naive.append(cmp.delta)
        conditional.append(effect.delta)
        covered.append(effect.ci_low <= 0.05 <= effect.ci_high)
    assert len(naive) > 100
    assert statistics.median(naive) > 0.058  # the stopping look's own Δ: inflated
    assert abs(statistics.median(conditional) - 0.05) < 0.006
    assert 0.9 <= sum(covered) / len(covered) <= 0.99

"""Statistics on probabilities (score verdicts): Student's t without scipy, checked against its
closed forms (df = 1 is the Cauchy distribution, df = 2 has an algebraic CDF) and table values."""

from __future__ import annotations

import math

import pytest

from bias_discovery.stats import paired_t_one_sided, student_t_quantile, student_t_sf


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

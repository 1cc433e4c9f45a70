"""Statistics on probabilities (score verdicts): Student's t without scipy, checked against its
closed forms (df = 1 is the Cauchy distribution, df = 2 has an algebraic CDF) and table values."""

from __future__ import annotations

import math

import pytest

from bias_discovery.stats import student_t_quantile, student_t_sf


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

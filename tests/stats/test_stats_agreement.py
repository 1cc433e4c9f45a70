"""Cohen's kappa (bias_discovery.stats.agreement) by hand."""

from __future__ import annotations

import math

import pytest

from bias_discovery import stats


def test_cohens_kappa_hand_value():
    # 10 items; items 1-5 both keep, item 6 keep/reject, items 7-8 both reject,
    # items 9-10 reject/keep.
    a = ["keep"] * 6 + ["reject"] * 4
    b = ["keep"] * 5 + ["reject"] * 3 + ["keep"] * 2
    # p_o = 7/10; marginals a: keep 6, reject 4; b: keep 7, reject 3
    # p_e = 0.6 * 0.7 + 0.4 * 0.3 = 0.54; kappa = (0.7 - 0.54) / (1 - 0.54) = 0.16 / 0.46 = 8/23
    assert stats.cohens_kappa(a, b) == pytest.approx(8 / 23, rel=1e-12)


def test_cohens_kappa_extremes_and_undefined():
    assert stats.cohens_kappa(["x", "y", "x"], ["x", "y", "x"]) == 1.0
    # Systematic disagreement on a balanced split: p_o = 0, p_e = 0.5 -> kappa = -1
    assert stats.cohens_kappa(["x", "y"], ["y", "x"]) == -1.0
    # One label everywhere from both: p_e = 1, undefined
    assert math.isnan(stats.cohens_kappa(["keep"] * 4, ["keep"] * 4))
    assert math.isnan(stats.cohens_kappa([], []))
    with pytest.raises(ValueError):
        stats.cohens_kappa(["x"], ["x", "y"])

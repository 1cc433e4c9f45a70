"""Multiplicity corrections (bias_discovery.stats.multiplicity): Holm and Benjamini-Hochberg by hand."""

from __future__ import annotations

import numpy as np
import pytest

from bias_discovery import stats
from bias_discovery.stats import (
    benjamini_hochberg_adjust,
    holm_adjust,
)


def test_holm_hand_values():
    # p = [0.01, 0.04, 0.03, 0.005], m = 4. Sorted: 0.005 (i=3), 0.01 (i=0), 0.03 (i=2), 0.04 (i=1)
    # times (m - j + 1) = 4, 3, 2, 1:  0.020, 0.030, 0.060, 0.040
    # running max:                     0.020, 0.030, 0.060, 0.060
    # back to the input order: [0.03, 0.06, 0.06, 0.02]
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_bh_hand_values():
    # same p, sorted 0.005, 0.01, 0.03, 0.04; times m/j = 4/1, 4/2, 4/3, 4/4:
    #   0.020, 0.020, 0.040, 0.040; running min from the top: 0.020, 0.020, 0.040, 0.040
    # input order: [0.02, 0.04, 0.04, 0.02]
    assert benjamini_hochberg_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # the step-up matters here: p = [0.01, 0.02, 0.021, 0.5], m = 4
    #   m/j * p = 0.04, 0.04, 0.028, 0.5 -> running min from the top: 0.028, 0.028, 0.028, 0.5
    assert benjamini_hochberg_adjust([0.01, 0.02, 0.021, 0.5]) == pytest.approx([0.028, 0.028, 0.028, 0.5])


def test_adjustments_cap_at_one_and_handle_edge_cases():
    # Holm: 3 * 0.5 = 1.5 -> capped at 1 (and the running max keeps it there)
    assert holm_adjust([0.5, 0.6, 0.7]) == [1.0, 1.0, 1.0]
    # BH: 3/3 * 0.7 = 0.7, then min(0.7, 3/2 * 0.6 = 0.9) = 0.7, then min(0.7, 3 * 0.5) = 0.7
    assert benjamini_hochberg_adjust([0.5, 0.6, 0.7]) == pytest.approx([0.7, 0.7, 0.7])
    assert holm_adjust([]) == [] and benjamini_hochberg_adjust([]) == []
    assert holm_adjust([0.2]) == [0.2] and benjamini_hochberg_adjust([0.2]) == [0.2]
    with pytest.raises(ValueError):
        holm_adjust([0.1, float("nan")])
    with pytest.raises(ValueError):
        benjamini_hochberg_adjust([1.2])


def test_adjustments_are_monotone_and_dominate_raw():
    rng = np.random.default_rng(1)
    ps = list(rng.random(25) ** 3)
    for adjust in (holm_adjust, benjamini_hochberg_adjust):
        adj = adjust(ps)
        assert all(a >= p for a, p in zip(adj, ps))
        assert all(a <= 1.0 for a in adj)
        by_p = [a for _, a in sorted(zip(ps, adj))]
        assert by_p == sorted(by_p)
    # Holm is never more permissive than BH
    assert all(h >= b - 1e-15 for h, b in zip(holm_adjust(ps), benjamini_hochberg_adjust(ps)))


def test_adjust_p_values_is_the_correction_decide_acceptance_uses():
    ps = [0.01, 0.04, 0.03]
    assert stats.adjust_p_values(ps, "holm") == stats.holm_adjust(ps)
    assert stats.adjust_p_values(ps, "bh") == stats.benjamini_hochberg_adjust(ps)
    assert stats.adjust_p_values(ps, "none") == ps
    with pytest.raises(ValueError):
        stats.adjust_p_values(ps, "bonferroni")  # type: ignore[arg-type]


@pytest.mark.parametrize("correction", ["holm", "bh", "none"])
def test_the_acceptance_threshold_is_where_the_decision_flips(correction):
    """`acceptance_threshold`: the member is accepted at every p-value up to it and at none
    above it, the others' as they are; between alpha / m and alpha."""
    others = [0.001, 0.02, 0.3]
    alpha = 0.05
    for index in range(4):
        ps = others[:index] + [0.5] + others[index:]
        threshold = stats.acceptance_threshold(ps, index, alpha, correction)
        assert alpha / 4 * (1 - 1e-6) <= threshold <= alpha

        def accepted(p: float, ps: list[float] = ps, index: int = index) -> bool:
            return stats.adjust_p_values(ps[:index] + [p] + ps[index + 1 :], correction)[index] <= alpha

        assert accepted(threshold) and not accepted(threshold * (1 + 1e-6) + 1e-12)
    assert stats.acceptance_threshold([0.9], 0, alpha, correction) == alpha  # alone: alpha itself
    # Holm by hand: beside 0.001 and 0.3, a third p is accepted up to 0.05 / 2 (second smallest)
    if correction == "holm":
        assert stats.acceptance_threshold([0.001, 0.9, 0.3], 1, alpha, "holm") == pytest.approx(0.025)
    with pytest.raises(ValueError):
        stats.acceptance_threshold([0.1], 1, alpha, correction)

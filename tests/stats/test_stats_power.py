"""Power and the smallest detectable Δ (bias_discovery.stats.power), against enumerations of every outcome."""

from __future__ import annotations

import math

import pytest

from bias_discovery import stats
from bias_discovery.stats import (
    mcnemar_exact_one_sided,
)


def _power_by_enumeration(n: int, delta: float, psi: float, alpha: float) -> float:
    """Independent check: sum the trinomial over every (b, c) the exact test rejects."""
    p10, p01 = psi / 2 + delta, psi / 2
    p00 = 1.0 - p10 - p01
    total = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            if mcnemar_exact_one_sided(b, c) <= alpha:
                total += math.comb(n, b) * math.comb(n - b, c) * p10**b * p01**c * p00 ** (n - b - c)
    return total


def test_paired_power_hand_values():
    # no noise, n = 5: only b = 5 of 5 rejects (p = 1/32); b ~ Bin(5, 0.5): power = 1/32
    assert stats.paired_power(5, 0.5, 0.0, 0.05) == pytest.approx(1 / 32)
    # n = 6: b = 5 of m = 5 (p = 1/32) and b = 6 of 6 (p = 1/64) reject, b = 5 of 6 does not
    # (7/64 > 0.05): power = P(M >= 5) under Bin(6, 0.5) = 7/64
    assert stats.paired_power(6, 0.5, 0.0, 0.05) == pytest.approx(7 / 64)
    # no effect at discordance 1/2: the exact null rejection rate of test_exact_acceptance_probability_under_noise
    assert stats.paired_power(60, 0.0, 0.5, 0.05) == pytest.approx(0.03551, abs=1e-5)
    for n, delta, psi in ((30, 0.2, 0.3), (25, 0.1, 0.6), (40, 0.35, 0.0)):
        assert stats.paired_power(n, delta, psi, 0.05) == pytest.approx(
            _power_by_enumeration(n, delta, psi, 0.05), rel=1e-9
        )


def test_min_detectable_delta():
    mde = stats.min_detectable_delta(30, 0.3, 0.05)
    assert mde is not None
    assert _power_by_enumeration(30, mde, 0.3, 0.05) >= 0.8 > _power_by_enumeration(30, mde - 0.002, 0.3, 0.05)
    # more items, or less noise, detect smaller effects; a stricter alpha needs larger ones
    assert stats.min_detectable_delta(120, 0.3, 0.05) < mde
    assert stats.min_detectable_delta(30, 0.1, 0.05) < mde
    assert stats.min_detectable_delta(30, 0.3, 0.01) > mde
    # 3 items cannot reach p <= 0.05 at all (the best is 1/8)
    assert stats.min_detectable_delta(3, 0.0, 0.05) is None
    assert stats.null_discordance(10, 2, 20) == pytest.approx(0.2)  # (12 - 8) / 20
    assert stats.null_discordance(2, 5, 20) == pytest.approx(0.35)  # b < c: all of it
    with pytest.raises(ValueError):
        stats.min_detectable_delta(30, 0.3, 0.05, power=1.0)


def _margin_power_by_enumeration(n: int, delta: float, psi: float, alpha: float, margin: float) -> float:
    p10, p01 = psi / 2 + delta, psi / 2
    p00 = 1.0 - p10 - p01
    total = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            if stats.paired_p_value(b, c, n, margin) <= alpha:
                total += math.comb(n, b) * math.comb(n - b, c) * p10**b * p01**c * p00 ** (n - b - c)
    return total


def test_power_and_mde_are_for_the_hypothesis_delta_above_min_delta():
    for n, delta, psi, margin in ((30, 0.2, 0.3, 0.05), (40, 0.25, 0.2, 0.1)):
        assert stats.paired_power(n, delta, psi, 0.05, margin) == pytest.approx(
            _margin_power_by_enumeration(n, delta, psi, 0.05, margin), rel=1e-9
        )
    # the test of Δ <= 0.05 needs a larger effect for the same power than the test of Δ <= 0
    plain = stats.min_detectable_delta(300, 0.3, 0.05)
    shifted = stats.min_detectable_delta(300, 0.3, 0.05, margin=0.05)
    assert plain is not None and shifted is not None and shifted > plain + 0.03
    assert (
        stats.paired_power(300, shifted, 0.3, 0.05, 0.05)
        >= 0.8
        > stats.paired_power(300, shifted - 0.002, 0.3, 0.05, 0.05)
    )
    # at the boundary Δ = min_delta the test rejects about alpha of the time, below it less
    assert stats.paired_power(300, 0.05, 0.3, 0.05, 0.05) == pytest.approx(0.05, abs=0.01)
    assert stats.paired_power(300, 0.03, 0.3, 0.05, 0.05) < 0.02

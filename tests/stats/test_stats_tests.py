"""The one-sided paired tests (bias_discovery.stats._tests): exact McNemar, its log-space tail, Tango's score test, the sign-flip test, against values computed by hand."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from bias_discovery import stats
from bias_discovery.stats import (
    mcnemar_exact_one_sided,
)


def test_mcnemar_b7_c1():
    # m = 8 discordant, p = P(X >= 7 | Bin(8, 1/2)) = (C(8,7) + C(8,8)) / 2^8 = (8 + 1) / 256
    #   = 9/256 = 0.03515625
    assert mcnemar_exact_one_sided(7, 1) == 0.03515625


def test_mcnemar_no_discordant_pairs_is_one():
    assert mcnemar_exact_one_sided(0, 0) == 1.0


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        # P(X >= 5 | Bin(8, 1/2)) = (C(8,5)+C(8,6)+C(8,7)+C(8,8)) / 256 = (56+28+8+1)/256 = 93/256
        (5, 3, 93 / 256),
        # P(X >= 3 | Bin(3, 1/2)) = 1/8
        (3, 0, 0.125),
        # P(X >= 1 | Bin(2, 1/2)) = 1 - 1/4 = 3/4
        (1, 1, 0.75),
        # b = 0: P(X >= 0) = 1 (the perturbation only helped)
        (0, 5, 1.0),
        # P(X >= 20 | Bin(22, 1/2)) = (C(22,20)+C(22,21)+C(22,22)) / 2^22 = (231+22+1)/4194304
        #   = 254/4194304 = 6.0558319091796875e-05
        (20, 2, 254 / 4194304),
    ],
)
def test_mcnemar_hand_values(b, c, expected):
    assert mcnemar_exact_one_sided(b, c) == pytest.approx(expected, rel=1e-15, abs=0)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact_one_sided(-1, 3)


@pytest.mark.parametrize(("b", "m"), [(101, 200), (120, 200), (150, 200), (60, 200), (3, 200), (520, 1001)])
def test_the_binomial_tail_matches_exact_rational_arithmetic(b, m):
    # Regression test from when the tail was hand-written (an exact integer sum, a log-space sum
    # beyond 5000 discordant pairs): scipy's binomial tail against the exact rational value.
    exact = float(Fraction(sum(math.comb(m, k) for k in range(b, m + 1)), 2**m))
    assert mcnemar_exact_one_sided(b, m - b) == pytest.approx(exact, rel=1e-12)


def test_mcnemar_large_n_uses_log_space_and_is_sensible():
    # b = c = 6000: P(X >= 6000 | Bin(12000, 1/2)) = 1/2 + P(X = 6000)/2, and by Stirling
    # P(X = m/2) ~ sqrt(2 / (pi m)) = sqrt(2 / (pi * 12000)) = 0.0072836 -> p ~ 0.5036418
    assert mcnemar_exact_one_sided(6000, 6000) == pytest.approx(0.5036418, rel=1e-5)
    # b = 5200, c = 4800: normal approximation with continuity correction,
    # z = (5200 - 0.5 - 5000) / sqrt(10000 / 4) = 199.5 / 50 = 3.99, 1 - Phi(3.99) = 3.30e-5
    assert mcnemar_exact_one_sided(5200, 4800) == pytest.approx(3.30e-5, rel=0.05)


def test_tango_restricted_mle_maximises_the_constrained_likelihood():
    for b, c, n, margin in ((40, 20, 300, 0.05), (5, 9, 60, 0.1), (0, 3, 40, 0.02), (12, 0, 50, 0.2)):
        p = stats.tango_restricted_helped_rate(b, c, n, margin)
        grid = np.linspace(1e-9, (1 - margin) / 2 - 1e-9, 400001)
        loglik = b * np.log(grid + margin) + c * np.log(grid) + (n - b - c) * np.log(1 - 2 * grid - margin)
        assert p == pytest.approx(grid[loglik.argmax()], abs=1e-5)


def test_tango_z_and_p_value_hand_values():
    # margin 0: McNemar's z, and the exact test for the p-value
    assert stats.tango_z(30, 10, 300, 0.0) == pytest.approx(20 / math.sqrt(40))
    assert stats.paired_p_value(7, 1, 20) == mcnemar_exact_one_sided(7, 1) == pytest.approx(9 / 256)
    # b = 40, c = 20, n = 300, margin 0.05: p01~ = 0.0732748, variance 300 (2 p01~ + 0.0475)
    # = 58.2149, z = (20 - 15) / 7.62987 = 0.655322, p = 1 - Phi(z) = 0.256131
    assert stats.tango_restricted_helped_rate(40, 20, 300, 0.05) == pytest.approx(0.0732748, abs=1e-7)
    assert stats.tango_z(40, 20, 300, 0.05) == pytest.approx(0.655322, abs=1e-5)
    assert stats.paired_p_value(40, 20, 300, 0.05) == pytest.approx(0.256131, abs=1e-5)
    with pytest.raises(ValueError):
        stats.paired_p_value(5, 5, 8)  # more discordant pairs than items
    with pytest.raises(ValueError):
        stats.paired_p_value(1, 0, 8, margin=1.0)


def test_sign_flip_p_value_by_hand():
    # three items, each +1: of the 8 sign patterns, 2 reach |S| >= 3
    assert stats.sign_flip_p_value([1, 1, 1]) == pytest.approx(2 / 8)
    # +2 and +1 (S = 3): patterns give 3, 1, -1, -3 -> 2 of 4
    assert stats.sign_flip_p_value([2, 1, 0, 0]) == pytest.approx(2 / 4)
    # five +1 and one -1 (S = 4): |S| >= 4 needs at most one sign against the majority: 2 x (1 + 6) / 64
    assert stats.sign_flip_p_value([1, 1, 1, 1, 1, -1]) == pytest.approx(14 / 64)
    assert stats.sign_flip_p_value([]) == 1.0 and stats.sign_flip_p_value([0, 0]) == 1.0
    assert stats.sign_flip_p_value([1, -1]) == 1.0
    # exact against brute force over every sign pattern
    values = [2, 1, 1, -2, 1, 2, -1, 1, 1]
    observed = abs(sum(values))
    hits = 0
    for mask in range(2 ** len(values)):
        total = sum(abs(v) * (1 if mask >> i & 1 else -1) for i, v in enumerate(values))
        hits += abs(total) >= observed
    assert stats.sign_flip_p_value(values) == pytest.approx(hits / 2 ** len(values))
    with pytest.raises(ValueError):
        stats.sign_flip_p_value([0.5])

"""ECE, Brier and the reliability bins of verdict probabilities (`stats.calibration`)."""

from __future__ import annotations

import numpy as np
import pytest

from bias_discovery.stats import calibration, expected_calibration_error


def test_a_calibrated_judge_has_ece_near_zero_and_an_overconfident_one_its_gap():
    """Verdicts at 80 % confidence right 80 % of the time: ECE 0, Brier 0.2 (0.8 x 0.2² +
    0.2 x 0.8²). Right only 60 % of the time: ECE 0.2, the gap, and a Brier of 0.28."""
    calibrated = [0.8] * 8 + [0.2] * 2  # P(better) per verdict: 8 right at 0.8, 2 wrong at 0.8
    assert expected_calibration_error(calibrated) == pytest.approx(0.0)
    cal = calibration([[p] for p in calibrated], n_boot=200)
    assert cal.brier == pytest.approx(0.8 * 0.04 + 0.2 * 0.64) and cal.n_items == 10 and cal.n_verdicts == 10
    over = [0.8] * 6 + [0.2] * 4
    assert expected_calibration_error(over) == pytest.approx(0.2)
    assert calibration([[p] for p in over], n_boot=200).brier == pytest.approx(0.6 * 0.04 + 0.4 * 0.64)


def test_bins_ties_and_the_items_as_the_bootstrap_unit():
    """0.5 leans nowhere: confidence 0.5, half right, ECE 0. Confidence 1.0 goes to the last
    bin. The CI resamples items (two verdicts each here), and covers the estimate."""
    assert expected_calibration_error([0.5, 0.5]) == pytest.approx(0.0)
    rng = np.random.default_rng(1)
    items = [[float(p), float(p)] for p in rng.uniform(0.0, 1.0, size=60)]
    cal = calibration(items, n_boot=300, seed=3)
    assert cal.n_items == 60 and cal.n_verdicts == 120 and sum(b.n for b in cal.bins) == 120
    assert cal.ece_ci_low <= cal.ece <= cal.ece_ci_high and cal.brier_ci_low <= cal.brier <= cal.brier_ci_high
    last = calibration([[1.0]], n_boot=100).bins[-1]
    assert last.n == 1 and last.accuracy == 1.0 and calibration([[1.0]]).ece_ci_low is None  # one item: no CI


def test_no_verdicts():
    cal = calibration([], n_boot=100)
    assert cal.ece is None and cal.brier is None and cal.n_verdicts == 0


@pytest.mark.parametrize("n_bins", [4, 5, 10, 20])
def test_a_confidence_on_a_bin_edge_falls_in_the_bin_it_opens(n_bins: int):
    """Issue 47: bins hold [low, high), so a confidence exactly on an edge is in the bin whose
    `low` it is, whichever side of 0.5 the probability is on (0.7 and 0.3 both have confidence
    0.7). Before, 0.7 fell in the bin below: (0.7 − 0.5) / 0.5 · 10 is 3.9999999999999996."""
    for b in range(n_bins):
        edge = round(0.5 + 0.5 * b / n_bins, 10)
        for p in (edge, round(1.0 - edge, 10)):
            bins = calibration([[p]], n_bins=n_bins, n_boot=10).bins
            (holding,) = [x for x in bins if x.n]
            assert holding.low == pytest.approx(edge, abs=1e-12), (n_bins, b, p)
            assert holding.low <= holding.confidence < holding.high
    top = calibration([[1.0]], n_bins=n_bins, n_boot=10).bins
    assert top[-1].n == 1 and top[-1].high == 1.0

"""PPI++ estimators (`stats._ppi`): ours against ppi_py called directly on the same arrays, and
the hand-written parts (the two-sample difference, the labels-only n) against a simulation."""

from __future__ import annotations

import math

import numpy as np
import ppi_py
import pytest

from bias_discovery.stats import (
    difference_of_estimates,
    gap_regression,
    judge_only_mean,
    labels_for_width,
    labels_only_mean,
    ppi_covariate_mean,
    ppi_mean,
)


def _data(seed: int = 0, n_all: int = 600, n_lab: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n_all, 2))
    y = 3.0 + z[:, 0] + rng.normal(size=n_all)
    yhat = y + 0.6 + 0.4 * z[:, 1] + rng.normal(scale=0.7, size=n_all)
    labelled = np.zeros(n_all, dtype=bool)
    labelled[rng.choice(n_all, n_lab, replace=False)] = True
    return y, yhat, z, labelled


def test_ppi_mean_matches_ppi_py_to_1e_9() -> None:
    y, yhat, _, m = _data()
    ours = ppi_mean(y[m], yhat[m], yhat[~m], confidence=0.95)
    point = ppi_py.ppi_mean_pointestimate(y[m], yhat[m], yhat[~m], lam=None)
    low, high = ppi_py.ppi_mean_ci(y[m], yhat[m], yhat[~m], alpha=0.05, lam=None)
    assert ours.estimate == pytest.approx(float(np.ravel(point)[0]), abs=1e-9)
    assert ours.ci_low == pytest.approx(float(np.ravel(low)[0]), abs=1e-9)
    assert ours.ci_high == pytest.approx(float(np.ravel(high)[0]), abs=1e-9)
    assert (ours.n_labelled, ours.n_unlabelled) == (60, 540)
    assert ours.lam is not None and 0.0 <= ours.lam <= 1.0
    # the reported lambda is the one ppi_py used: plugging it back in gives the same estimate
    fixed = ppi_py.ppi_mean_pointestimate(y[m], yhat[m], yhat[~m], lam=ours.lam)
    assert ours.estimate == pytest.approx(float(np.ravel(fixed)[0]), abs=1e-9)


def test_classical_means_match_ppi_py_to_1e_9() -> None:
    y, yhat, _, m = _data(1)
    judge = judge_only_mean(yhat, confidence=0.9)
    low, high = ppi_py.classical_mean_ci(yhat, alpha=0.1)
    assert (judge.ci_low, judge.ci_high) == pytest.approx((float(low), float(high)), abs=1e-9)
    assert judge.estimate == pytest.approx(float(yhat.mean()), abs=1e-12)
    assert (judge.n_labelled, judge.n_unlabelled) == (0, 600)
    labels = labels_only_mean(y[m])
    low, high = ppi_py.classical_mean_ci(y[m], alpha=0.05)
    assert (labels.ci_low, labels.ci_high) == pytest.approx((float(low), float(high)), abs=1e-9)
    assert labels.n_labelled == 60


def _check_covariate_mean_against_ppi_py() -> None:
    y, yhat, z, m = _data(2)
    ours = ppi_covariate_mean(y[m], yhat[m], z[m], yhat[~m], z[~m])
    centre = z.mean(axis=0)
    x_lab = np.column_stack([np.ones(m.sum()), z[m] - centre])
    x_unl = np.column_stack([np.ones((~m).sum()), z[~m] - centre])
    low, high = ppi_py.ppi_ols_ci(x_lab, y[m], yhat[m], x_unl, yhat[~m], alpha=0.05, lam=None, coord=0)
    point = ppi_py.ppi_ols_pointestimate(x_lab, y[m], yhat[m], x_unl, yhat[~m], lam=None, coord=0)
    assert ours.ci_low == pytest.approx(float(low[0]), abs=1e-9)
    assert ours.ci_high == pytest.approx(float(high[0]), abs=1e-9)
    assert ours.estimate == pytest.approx(float(point[0]), abs=1e-9)


def test_covariate_mean_matches_ppi_py_ols_to_1e_9(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against ppi_py's OLS with its numba statistics run as Python (the same code; numba's
    compile takes 35 s per process): the slow test below checks the compiled one."""
    import ppi_py.ppi as ppi_module

    monkeypatch.setattr(ppi_module, "_ols_get_stats", ppi_module._ols_get_stats.py_func)
    _check_covariate_mean_against_ppi_py()


@pytest.mark.slow
def test_covariate_mean_matches_ppi_py_ols_compiled_to_1e_9() -> None:
    _check_covariate_mean_against_ppi_py()


def test_gap_regression_matches_ppi_py_classical_ols_to_1e_9() -> None:
    rng = np.random.default_rng(3)
    flags = (rng.random((80, 2)) < 0.4).astype(float)
    gap = 0.1 + 0.8 * flags[:, 0] + rng.normal(scale=0.3, size=80)
    rows = gap_regression(gap, flags, ["verbosity", "authority"])
    design = np.column_stack([np.ones(80), flags])
    low, high = ppi_py.classical_ols_ci(design, gap, alpha=0.05)
    point = np.linalg.lstsq(design, gap, rcond=None)[0]
    assert [r.name for r in rows] == ["intercept", "verbosity", "authority"]
    for k, row in enumerate(rows):
        assert (row.ci_low, row.ci_high) == pytest.approx((float(low[k]), float(high[k])), abs=1e-9)
        assert row.estimate == pytest.approx(float(point[k]), abs=1e-9)
        assert row.n == 80
    assert rows[1].n_flagged == int(flags[:, 0].sum())
    assert rows[0].n_flagged == int((flags.sum(axis=1) == 0).sum())
    assert rows[1].ci_low > 0.4  # the planted trait is found


def test_difference_of_two_ppi_means_covers_in_simulation() -> None:
    """ppi_py has no two-sample PPI: the difference's interval is checked for coverage on 400
    simulated pairs of models with biased judges (truth: X minus Y = 0.5)."""
    rng = np.random.default_rng(4)
    covered, reps = 0, 400
    for _ in range(reps):
        estimates = []
        for mean in (3.5, 3.0):
            y = mean + rng.normal(size=300)
            yhat = y + 0.8 + rng.normal(scale=0.6, size=300)
            estimates.append(ppi_mean(y[:30], yhat[:30], yhat[30:]))
        diff = difference_of_estimates(estimates[0], estimates[1])
        covered += diff.ci_low <= 0.5 <= diff.ci_high
    # 95 % nominal; 400 reps: a binomial sd of 1.1 pp, PPI++ a little under at n = 30
    assert covered / reps >= 0.9


def test_labels_for_width_labels_only_is_the_clt_n_and_ppi_needs_fewer() -> None:
    plan = labels_for_width(0.2, sd=1.0, correlation=0.8, pool=2000)
    assert plan.n_labels_only == math.ceil((2 * 1.959963984540054 / 0.2) ** 2)
    assert plan.n_ppi is not None and plan.n_ppi < plan.n_labels_only
    # the PPI++ n achieves the width in simulation (judge correlated 0.8 with the label)
    rng = np.random.default_rng(5)
    widths = []
    for _ in range(200):
        y = rng.normal(size=2000)
        yhat = 0.8 * y + 0.6 * rng.normal(size=2000)
        est = ppi_mean(y[: plan.n_ppi], yhat[: plan.n_ppi], yhat[plan.n_ppi :])
        widths.append(est.width)
    assert float(np.mean(widths)) == pytest.approx(0.2, rel=0.1)
    assert labels_for_width(0.2, sd=1.0, correlation=0.0, pool=2000).n_ppi == plan.n_labels_only
    assert labels_for_width(0.01, sd=1.0, correlation=0.5, pool=100).n_ppi is None


def test_bad_arrays_raise() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        labels_only_mean([1.0])
    with pytest.raises(ValueError, match="differ in length"):
        ppi_mean([1.0, 2.0], [1.0, 2.0, 3.0], [1.0])
    with pytest.raises(ValueError, match="strictly between"):
        labels_for_width(0.1, sd=1.0, correlation=1.0, pool=10)


def test_a_judge_with_one_value_for_every_item_gets_weight_0() -> None:
    """ppi_py's tuning is 0/0 then (NaN); the estimate is the labels' own, as with lam=0."""
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    est = ppi_mean(y, np.ones(5), np.ones(20))
    low, high = ppi_py.ppi_mean_ci(y, np.ones(5), np.ones(20), alpha=0.05, lam=0.0)
    assert est.lam == 0.0 and est.estimate == pytest.approx(0.6)
    assert (est.ci_low, est.ci_high) == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)

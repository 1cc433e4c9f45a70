"""Prediction-powered inference (PPI++) for a judge's aggregate: the mean of a quantity over
all items, from the judge's value on every item and a human label on a random subset.

What `ppi_py` (Angelopoulos et al., arXiv 2301.09633 and 2311.01453) has is called, not
rewritten: the power-tuned mean (`ppi_mean_pointestimate` / `ppi_mean_ci` with ``lam=None``),
the power-tuned OLS with covariates (`ppi_ols_*`; its interval is centred on the estimate of
the weight the interval re-tunes, which can differ from `ppi_ols_pointestimate`'s in the 4th
decimal: both are reported as ppi_py gives them), the classical intervals of its baselines
(`classical_mean_ci`, `classical_ols_ci`) and its power analysis (`ppi_power`). What it lacks
and is written here, each part tested against a simulation: the difference of two independent
PPI++ means (X minus Y: their standard errors added in quadrature) and the labels needed for a
given interval width from labels alone (the CLT's n).

Every interval is two-sided at `confidence` (normal approximation, as ppi_py's); a symmetric
interval's midpoint is its point estimate, which is how the OLS coefficients' estimates are
read from ppi_py's intervals. ppi_py is imported on first use (it imports numba, scikit-learn
and statsmodels: seconds).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

Method = Literal["judge_only", "labels_only", "ppi++", "ppi++_covariates", "difference"]

__all__ = [
    "CorrectedEstimate",
    "GapCoefficient",
    "LabelPlan",
    "Method",
    "difference_of_estimates",
    "gap_regression",
    "judge_only_mean",
    "labels_for_width",
    "labels_only_mean",
    "ppi_covariate_mean",
    "ppi_mean",
]


class CorrectedEstimate(BaseModel):
    """One estimate of an aggregate, with its interval and what it was computed from."""

    model_config = ConfigDict(frozen=True)

    method: Method
    """judge_only (the judge's mean over every item), labels_only (the human labels' mean),
    ppi++ (power-tuned PPI), ppi++_covariates (PPI++ OLS intercept with centred covariates),
    difference (X minus Y of two estimates)."""
    estimate: float
    """The point estimate."""
    ci_low: float
    """Lower bound of the two-sided interval at `confidence`."""
    ci_high: float
    """Upper bound of the two-sided interval at `confidence`."""
    confidence: float
    """The interval's nominal coverage (0.95: a 95 % CI)."""
    n_labelled: int
    """Items with a human label the estimate used."""
    n_unlabelled: int
    """Items with only the judge's value the estimate used."""
    lam: float | None = None
    """PPI++'s power-tuning weight on the judge (0: labels only, 1: plain PPI); None elsewhere."""

    @property
    def width(self) -> float:
        return self.ci_high - self.ci_low

    @property
    def standard_error(self) -> float:
        return self.width / (2.0 * _z(self.confidence))


class GapCoefficient(BaseModel):
    """One coefficient of the judge-minus-human gap regressed on per-bias flags."""

    model_config = ConfigDict(frozen=True)

    name: str
    """`intercept` (the gap on items carrying no flagged trait), or the flag's name."""
    estimate: float
    """How much the gap moves when the flag is on (the intercept: the gap with every flag off)."""
    ci_low: float
    """Lower bound of the two-sided interval (classical OLS, sandwich errors)."""
    ci_high: float
    """Upper bound."""
    n: int
    """Labelled items the regression used."""
    n_flagged: int
    """Of those, items carrying this flag (the intercept: carrying none)."""


class LabelPlan(BaseModel):
    """How many human labels an interval of a given width needs."""

    model_config = ConfigDict(frozen=True)

    target_width: float
    """The full width of the two-sided interval asked for."""
    confidence: float
    """Its coverage."""
    sd: float
    """The labels' standard deviation assumed (from a pilot or the scale)."""
    correlation: float
    """The judge-human correlation assumed (PPI's gain comes from it)."""
    pool: int
    """Items the judge scored, labelled and unlabelled."""
    n_labels_only: int
    """Labels needed without the judge (the CLT's n)."""
    n_ppi: int | None
    """Labels needed with PPI++ and the judge on the rest of the pool (ppi_py's `ppi_power`);
    None when the pool is too small for that width even with every item labelled."""


def _z(confidence: float) -> float:
    from scipy.stats import norm

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(norm.ppf(0.5 + confidence / 2.0))


def _array(values: Sequence[float] | np.ndarray[Any, Any], what: str, *, at_least: int = 2) -> np.ndarray[Any, Any]:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.shape[0] < at_least:
        raise ValueError(f"{what}: need at least {at_least} values, got {arr.shape[0] if arr.ndim == 1 else arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: every value must be a finite number")
    return arr


def _interval(values: Any) -> tuple[float, float]:
    low, high = values
    return float(np.asarray(low).reshape(-1)[0]), float(np.asarray(high).reshape(-1)[0])


def _classical_mean(
    values: Sequence[float], what: str, method: Literal["judge_only", "labels_only"], confidence: float
) -> CorrectedEstimate:
    """The mean of `values` with ppi_py's classical interval: the two estimates PPI is compared
    with, which differ only in whose values they average."""
    import ppi_py

    array = _array(values, what)
    low, high = _interval(ppi_py.classical_mean_ci(array, alpha=1.0 - confidence))
    n = int(array.shape[0])
    return CorrectedEstimate(
        method=method,
        estimate=float(array.mean()),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        n_labelled=n if method == "labels_only" else 0,
        n_unlabelled=n if method == "judge_only" else 0,
    )


def judge_only_mean(judge_values: Sequence[float], confidence: float = 0.95) -> CorrectedEstimate:
    """The judge's own mean over every item with the classical interval: what a user reports
    today. Its interval covers the judge's mean, not the human one, when the judge is biased."""
    return _classical_mean(judge_values, "judge values", "judge_only", confidence)


def labels_only_mean(labels: Sequence[float], confidence: float = 0.95) -> CorrectedEstimate:
    """The human labels' mean with the classical interval (the judge is not used)."""
    return _classical_mean(labels, "labels", "labels_only", confidence)


def _ppi_lambda(y: np.ndarray[Any, Any], yhat: np.ndarray[Any, Any], yhat_unlabelled: np.ndarray[Any, Any]) -> float:
    """The power-tuning weight ppi_py picks with ``lam=None`` (the same computation, made
    visible so the record can say how much the judge was trusted)."""
    from ppi_py.ppi import _calc_lam_glm
    from ppi_py.utils import reshape_to_2d

    y2, yhat2, unl2 = reshape_to_2d(y), reshape_to_2d(yhat), reshape_to_2d(yhat_unlabelled)
    plain = unl2.mean(0) + (y2 - yhat2).mean(0)
    lam = _calc_lam_glm(y2 - plain, yhat2 - plain, unl2 - plain, np.eye(1), coord=None, clip=True)
    return float(lam)


def ppi_mean(
    labels: Sequence[float],
    judge_labelled: Sequence[float],
    judge_unlabelled: Sequence[float],
    confidence: float = 0.95,
) -> CorrectedEstimate:
    """PPI++ (power-tuned) mean: ppi_py's `ppi_mean_pointestimate` and `ppi_mean_ci` with
    ``lam=None``. `labels` and `judge_labelled` are the same items, in the same order;
    `judge_unlabelled` the items without a label. Valid when the labelled items are a random
    sample of all items. A judge with one value for every item gets weight 0 (labels only)."""
    import ppi_py

    y = _array(labels, "labels")
    yhat = _array(judge_labelled, "judge values of the labelled items")
    unl = _array(judge_unlabelled, "judge values of the unlabelled items", at_least=1)
    if y.shape != yhat.shape:
        raise ValueError(f"labels ({y.shape[0]}) and the judge's values on them ({yhat.shape[0]}) differ in length")
    alpha = 1.0 - confidence
    # A judge that gives every item the same value carries no information, and ppi_py's tuning
    # divides 0 by 0 (NaN): its weight is 0, the labels-only estimate, as tuning would choose.
    lam: float | None = 0.0 if np.ptp(np.concatenate([yhat, unl])) == 0.0 else None
    estimate = float(np.asarray(ppi_py.ppi_mean_pointestimate(y, yhat, unl, lam=lam)).reshape(-1)[0])
    low, high = _interval(ppi_py.ppi_mean_ci(y, yhat, unl, alpha=alpha, lam=lam))
    return CorrectedEstimate(
        method="ppi++",
        estimate=estimate,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        n_labelled=int(y.shape[0]),
        n_unlabelled=int(unl.shape[0]),
        lam=_ppi_lambda(y, yhat, unl) if lam is None else lam,
    )


@contextmanager
def _plain_python_ols_stats() -> Iterator[None]:
    """ppi_py's `_ols_get_stats` is a numba function compiled on its first call in each
    process (35 s on a shared 2-core machine, for a loop that takes milliseconds in Python on
    thousands of items): its Python original (`py_func`, the same code) runs instead while
    the OLS estimators are called."""
    import ppi_py.ppi as ppi_module

    jitted = ppi_module._ols_get_stats
    ppi_module._ols_get_stats = getattr(jitted, "py_func", jitted)
    try:
        yield
    finally:
        ppi_module._ols_get_stats = jitted


def _design(covariates: np.ndarray[Any, Any], centre: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.column_stack([np.ones(covariates.shape[0]), covariates - centre])


def ppi_covariate_mean(
    labels: Sequence[float],
    judge_labelled: Sequence[float],
    covariates_labelled: np.ndarray[Any, Any],
    judge_unlabelled: Sequence[float],
    covariates_unlabelled: np.ndarray[Any, Any],
    confidence: float = 0.95,
) -> CorrectedEstimate:
    """Covariate-adjusted PPI++: ppi_py's `ppi_ols_ci` (``lam=None``, tuned for the intercept)
    of the label on an intercept and the covariates centred at their mean over every item, so
    the intercept is the mean of the label; the covariates absorb what differs between the
    labelled sample and the rest. Covariates: one column per covariate, one row per item."""
    import ppi_py

    y = _array(labels, "labels")
    yhat = _array(judge_labelled, "judge values of the labelled items")
    unl = _array(judge_unlabelled, "judge values of the unlabelled items", at_least=1)
    x_lab = np.asarray(covariates_labelled, dtype=float).reshape(y.shape[0], -1)
    x_unl = np.asarray(covariates_unlabelled, dtype=float).reshape(unl.shape[0], -1)
    centre = np.vstack([x_lab, x_unl]).mean(axis=0)
    design_lab, design_unl = _design(x_lab, centre), _design(x_unl, centre)
    with _plain_python_ols_stats():
        point = ppi_py.ppi_ols_pointestimate(design_lab, y, yhat, design_unl, unl, lam=None, coord=0)
        low, high = ppi_py.ppi_ols_ci(design_lab, y, yhat, design_unl, unl, alpha=1.0 - confidence, lam=None, coord=0)
    low0, high0 = float(np.asarray(low)[0]), float(np.asarray(high)[0])
    return CorrectedEstimate(
        method="ppi++_covariates",
        estimate=float(np.asarray(point)[0]),
        ci_low=low0,
        ci_high=high0,
        confidence=confidence,
        n_labelled=int(y.shape[0]),
        n_unlabelled=int(unl.shape[0]),
    )


def difference_of_estimates(x: CorrectedEstimate, y: CorrectedEstimate) -> CorrectedEstimate:
    """X minus Y of two estimates made on disjoint items (two models' responses): the point
    estimates subtracted, the standard errors added in quadrature (independent samples; ppi_py
    has no two-sample PPI, so this is written here and tested against a simulation)."""
    if x.confidence != y.confidence:
        raise ValueError("the two estimates have intervals at different confidences")
    z = _z(x.confidence)
    se = math.hypot(x.standard_error, y.standard_error)
    diff = x.estimate - y.estimate
    return CorrectedEstimate(
        method="difference",
        estimate=diff,
        ci_low=diff - z * se,
        ci_high=diff + z * se,
        confidence=x.confidence,
        n_labelled=x.n_labelled + y.n_labelled,
        n_unlabelled=x.n_unlabelled + y.n_unlabelled,
    )


def gap_regression(
    gap: Sequence[float], flags: np.ndarray[Any, Any], names: Sequence[str], confidence: float = 0.95
) -> list[GapCoefficient]:
    """The judge-minus-human gap of the labelled items regressed on per-bias 0/1 flags (with an
    intercept): ppi_py's `classical_ols_ci`. Each coefficient says how much a trait moves the
    gap, holding the other flags fixed."""
    import ppi_py

    g = _array(gap, "gap")
    x = np.asarray(flags, dtype=float).reshape(g.shape[0], -1)
    if x.shape[1] != len(names):
        raise ValueError(f"{x.shape[1]} flag columns but {len(names)} names")
    design = np.column_stack([np.ones(g.shape[0]), x])
    low, high = ppi_py.classical_ols_ci(design, g, alpha=1.0 - confidence)
    low_a, high_a = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    counts = [int((x.sum(axis=1) == 0).sum())] + [int(x[:, k].sum()) for k in range(x.shape[1])]
    return [
        GapCoefficient(
            name=name,
            estimate=float((low_a[k] + high_a[k]) / 2.0),
            ci_low=float(low_a[k]),
            ci_high=float(high_a[k]),
            n=int(g.shape[0]),
            n_flagged=counts[k],
        )
        for k, name in enumerate(["intercept", *names])
    ]


def labels_for_width(
    target_width: float, *, sd: float, correlation: float, pool: int, confidence: float = 0.95
) -> LabelPlan:
    """Labels needed for a two-sided interval of full width `target_width`: from labels alone,
    n = (2 z sd / width)^2; with PPI++ and the judge on the rest of a pool of `pool` items,
    ppi_py's `ppi_power` (the cheapest pair of the same effective n, labels costing 1 and a
    judge's call nothing, n + N at most the pool)."""
    import ppi_py

    if target_width <= 0 or sd <= 0:
        raise ValueError("the target width and the standard deviation must be positive")
    if not -1.0 < correlation < 1.0:
        raise ValueError(f"the judge-human correlation must be strictly between -1 and 1, got {correlation}")
    n0 = max(2, math.ceil((2.0 * _z(confidence) * sd / target_width) ** 2))
    n_ppi: int | None = None
    if correlation == 0.0:
        n_ppi = n0 if n0 <= pool else None
    else:
        with warnings.catch_warnings():  # "too large for the pool": said by n_ppi = None
            warnings.simplefilter("ignore", UserWarning)
            pair = ppi_py.ppi_power(correlation, cost_X=0.0, cost_Y=1.0, cost_Yhat=1e-9, effective_n=n0, n_max=pool)
        n, big_n = int(pair["n"]), int(pair["N"])
        if n + big_n <= pool and int(pair["effective_n"]) >= n0 - 1:
            n_ppi = max(2, n)
    return LabelPlan(
        target_width=target_width,
        confidence=confidence,
        sd=sd,
        correlation=correlation,
        pool=pool,
        n_labels_only=n0,
        n_ppi=n_ppi,
    )

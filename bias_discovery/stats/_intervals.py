"""Intervals: Wilson for a proportion, Student-t for a mean, the paired percentile bootstrap of a
difference; the t distribution they use (scipy.stats: `t.sf`, `t.ppf`; the normal quantile
`norm.ppf`). scipy is imported on first use: the CLI imports this package and starts fast."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..settings.validate import DEFAULT_BOOTSTRAP_RESAMPLES

# Bound on the number of bootstrap indices drawn at once (int64: 2**21 * 8 B = 16 MiB).
_MAX_DRAWS_PER_CHUNK = 2**21

DOMAIN_BOOTSTRAP_RESAMPLES = 200
"""Resamples of the descriptive per-domain CIs (drawn for every candidate and domain)."""


def _check_confidence(confidence: float) -> None:
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k / n (two-sided).

    Used for error rates, per domain included, where n can be small (a domain may hold a few
    dozen items) and the rate can sit at 0 or 1: the Wald interval p +- z*sqrt(p(1-p)/n)
    collapses to a point there and undercovers badly for small n; Wilson does not.
    n == 0 gives the uninformative (0.0, 1.0).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    _check_confidence(confidence)
    if n == 0:
        return (0.0, 1.0)
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2.0))
    z2 = z * z
    p = k / n
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if k == 0 else max(0.0, center - half)
    high = 1.0 if k == n else min(1.0, center + half)
    return (low, high)


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (scipy.stats.t.sf)."""
    if df <= 0:
        raise ValueError(f"df must be > 0; got {df!r}")
    from scipy.stats import t as student_t

    return float(student_t.sf(t, df))


def student_t_quantile(q: float, df: float) -> float:
    """The t with P(T <= t) = q (scipy.stats.t.ppf)."""
    if not (0.0 < q < 1.0):
        raise ValueError(f"q must be in (0, 1); got {q!r}")
    if df <= 0:
        raise ValueError(f"df must be > 0; got {df!r}")
    from scipy.stats import t as student_t

    return float(student_t.ppf(q, df))


def mean_t_interval(
    values: Sequence[float], confidence: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, float]:
    """Student-t interval of the mean of `values` (mean +- t * sd / sqrt(n)), clipped to
    `bounds` (the range the values live in, e.g. probabilities). With fewer than two values
    nothing is known about the spread: the interval is `bounds`. Used where n can be small
    (a domain of a few pairs), where a percentile bootstrap would collapse to a point."""
    _check_confidence(confidence)
    n = len(values)
    if n < 2:
        return bounds
    mean, sd = mean_and_sd(values)
    half = student_t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return (max(bounds[0], mean - half), min(bounds[1], mean + half))


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0


def paired_bootstrap_delta_ci(
    baseline_errors: Sequence[bool],
    perturbed_errors: Sequence[bool],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of Delta error = mean(perturbed) - mean(baseline).

    Items are resampled *as pairs* (the same index picks both outcomes) so the CI reflects
    the paired design: an item that is hard in both conditions does not add variance to
    Delta, exactly as in the McNemar test. Vectorised: an (rows x n) index matrix is drawn per
    chunk, with rows chosen so one chunk holds at most ~2M indices whatever n and n_boot are.
    Deterministic for a given seed (numpy `default_rng(seed)`).
    n == 0 gives the uninformative (-1.0, 1.0).
    """
    base = np.asarray(baseline_errors, dtype=bool)
    pert = np.asarray(perturbed_errors, dtype=bool)
    if base.ndim != 1 or base.shape != pert.shape:
        raise ValueError(f"baseline and perturbed must be 1-D and of equal length; got {base.shape} and {pert.shape}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    _check_confidence(confidence)
    n = base.shape[0]
    if n == 0:
        return (-1.0, 1.0)
    diff = pert.astype(np.int8) - base.astype(np.int8)  # per item: +1 hurt, -1 helped, 0 same
    return _bootstrap_mean_ci(diff, n_boot=n_boot, confidence=confidence, seed=seed)


def _bootstrap_mean_ci(values: np.ndarray, *, n_boot: int, confidence: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-item integer `values` (n >= 1), items
    resampled with replacement in chunks of at most ~2M indices."""
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, min(n_boot, _MAX_DRAWS_PER_CHUNK // n))
    means = np.empty(n_boot, dtype=np.float64)
    done = 0
    while done < n_boot:
        rows = min(rows_per_chunk, n_boot - done)
        idx = rng.integers(0, n, size=(rows, n))
        means[done : done + rows] = values[idx].sum(axis=1, dtype=np.int64) / n
        done += rows
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))

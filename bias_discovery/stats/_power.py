"""Power of the paired tests and the smallest Δ they detect: exact sums over the binomial laws
of the discordant and hurt counts (scipy.stats.binom's log-pmf and tail), hand-written because
no well-kept library gives the power of McNemar's or Tango's test under this noise model.
scipy is imported on first use."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ._intervals import student_t_quantile
from ._tests import _check_margin


@lru_cache(maxsize=32)
def _mcnemar_critical_counts(n: int, alpha: float) -> tuple[int, ...]:
    """k[m] = the smallest b with exact one-sided McNemar p(b, m - b) <= alpha, for m = 0..n
    (m + 1 when no b reaches it)."""
    from scipy.stats import binom

    crit = []
    for m in range(n + 1):
        b = np.arange(m + 1)
        tail = binom.sf(b - 1, m, 0.5)  # tail[b] = P(X >= b)
        ok = np.nonzero(tail <= alpha * (1.0 + 1e-9))[0]
        crit.append(max(int(ok[0]) if ok.size else m + 1, 1))
    return tuple(crit)


def _binomial_log_pmf(m: int, k: np.ndarray, p: float) -> np.ndarray:
    """log P(X = k) for X ~ Binomial(m, p), p in [0, 1] (exact zeros at the ends)."""
    from scipy.stats import binom

    log_pmf: np.ndarray = np.asarray(binom.logpmf(k, m, p), dtype=np.float64)
    return log_pmf


def paired_power(n: int, delta: float, null_discordance: float, alpha: float, margin: float = 0.0) -> float:
    """Exact power of the one-sided test of H0: Δ <= margin at `alpha` on n paired items
    (`paired_p_value`: exact McNemar at margin 0, Tango's score test above it).

    Model: noise flips the judge both ways at the null discordance psi (p01 = psi / 2), and the
    bias adds `delta` right->wrong flips (p10 = psi / 2 + delta). The discordant count is
    Binomial(n, psi + delta), and given m discordant items the hurt count is
    Binomial(m, p10 / (psi + delta)); the power sums that law over the (b, m - b) the test
    rejects.
    """
    if n < 0 or not (0.0 <= null_discordance <= 1.0) or delta < 0.0:
        raise ValueError(f"bad power arguments: n={n}, delta={delta}, null_discordance={null_discordance}")
    _check_margin(margin)
    discordance = null_discordance + delta
    if discordance > 1.0 + 1e-12:
        raise ValueError(f"delta {delta} + null discordance {null_discordance} exceeds 1")
    if n == 0 or discordance <= 0.0:
        return 0.0
    discordance = min(discordance, 1.0)
    hurt_share = min(1.0, (null_discordance / 2.0 + delta) / discordance)
    from scipy.stats import norm

    p_m = np.exp(_binomial_log_pmf(n, np.arange(n + 1), discordance))
    crit = _mcnemar_critical_counts(n, alpha) if margin == 0.0 else None
    z = float(norm.isf(alpha))
    power = 0.0
    for m in range(n + 1):
        if p_m[m] < 1e-300:
            continue
        b = np.arange(m + 1)
        if crit is not None:
            rejects = b >= crit[m]
        else:
            rejects = _tango_z_vector(b, m - b, n, margin) >= z
        if not rejects.any():
            continue
        pmf = np.exp(_binomial_log_pmf(m, b[rejects], hurt_share))
        power += float(p_m[m]) * min(1.0, float(pmf.sum()))
    return min(1.0, power)


def _tango_z_vector(b: np.ndarray, c: np.ndarray, n: int, margin: float) -> np.ndarray:
    """`tango_z` over arrays of (b, c) at one n and margin > 0."""
    m = margin
    r = n - b - c
    big_b = b * (1.0 - m) + c * (1.0 - 3.0 * m) - 2.0 * m * r
    p01 = (big_b + np.sqrt(big_b * big_b + 8.0 * n * c * m * (1.0 - m))) / (4.0 * n)
    variance = n * (2.0 * p01 + m * (1.0 - m))
    z: np.ndarray = (b - c - n * m) / np.sqrt(variance)
    return z


def min_detectable_delta(
    n: int, null_discordance: float, alpha: float, *, power: float = 0.8, tolerance: float = 1e-4, margin: float = 0.0
) -> float | None:
    """The smallest Δerror the one-sided test of H0: Δ <= margin at `alpha` detects with
    `power` on `n` paired items whose null discordance is `null_discordance` (see
    `paired_power`); None when no Δ up to its maximum (1 - psi) reaches that power."""
    if not (0.0 < power < 1.0):
        raise ValueError(f"power must be in (0, 1); got {power!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    psi = min(max(null_discordance, 0.0), 1.0)
    high = 1.0 - psi
    if n <= 0 or high <= margin or paired_power(n, high, psi, alpha, margin) < power:
        return None
    low = margin
    while high - low > tolerance:
        mid = (low + high) / 2.0
        if paired_power(n, mid, psi, alpha, margin) >= power:
            high = mid
        else:
            low = mid
    return high


def min_detectable_shift(
    n: int, sd: float | None, alpha: float, *, power: float = 0.8, margin: float = 0.0
) -> float | None:
    """The smallest ΔP(rejected) (score verdicts) the one-sided paired t-test of
    H0: Δ <= margin at `alpha` detects with `power` on `n` items whose per-item differences
    have standard deviation `sd`: margin + (t_{1-alpha} + t_{power}) sd / sqrt(n) on n - 1
    degrees of freedom (the usual approximation of the noncentral t). The sd observed is
    taken as the noise (the spread the mean shift does not explain). None with fewer than two
    items, without an sd, or when it exceeds the largest possible shift (1)."""
    if not (0.0 < power < 1.0):
        raise ValueError(f"power must be in (0, 1); got {power!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    if n < 2 or sd is None:
        return None
    shift = margin + (student_t_quantile(1.0 - alpha, n - 1) + student_t_quantile(power, n - 1)) * sd / math.sqrt(n)
    return shift if shift <= 1.0 else None


def null_discordance(b: int, c: int, n: int) -> float:
    """The discordance the observed effect does not explain: (b + c - max(0, b - c)) / n, i.e.
    twice the smaller discordant count. Under H0 it estimates b + c; under a real effect it
    leaves the effect's one-way flips out."""
    if n <= 0:
        return 0.0
    return (b + c - max(0, b - c)) / n

"""The effect a candidate reports: honest after a sequential stop (the conditional estimator).

The estimator (the stopping design, the recursive integration of the continuation density,
the inversion of the truncated likelihood) is hand-written: no well-kept Python library
offers a conditional estimate after a group-sequential stop of these paired tests. Its normal
tails are scipy.special's `log_ndtr`, imported on first use."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._comparison import Measure, PairedComparison
from ._intervals import _check_confidence, student_t_quantile
from ._sequential import (
    LookRecord,
    SequentialPlan,
    conditional_power,
    expected_final_n,
    shift_conditional_power,
)

FULL_SAMPLE = "full sample"
"""`Effect.method` of a validation with one look: Δ on every item, the paired bootstrap CI."""
CONDITIONAL = "median-unbiased given the stopping look (conditional, truncated-likelihood inversion)"
"""`Effect.method` of a validation on growing slices (`sequential_effect`) without the decision."""
CONDITIONAL_ON_DECISION = (
    "median-unbiased given the stopping look and the decision (conditional, truncated-likelihood inversion)"
)
"""`Effect.method` of `sequential_effect` given the family's decision too (`Decision`): what a
candidate reports when no held-out item measured it (every rejected one, and an accepted one
without held-out items)."""
RECORDED_AT_STOP = "recorded Δ of the stopping look (written before early stops were adjusted for)"
"""`Effect.method` read from a record written before the estimator, whose validation stopped early."""
HELD_OUT = "held-out items"
"""`Effect.method` of an accepted candidate measured after the decision: the plain Δ and CI on
test items no decision saw (`held_out_method`)."""


def held_out_method(items: int, look: int, looks: int, reserved: int = 0) -> str:
    """`Effect.method` of an effect measured on `items` test items no decision saw: those after
    stopping look `look` (1-based) of `looks`, of which the last `reserved` were kept from
    every decision (`validate.held_out`), or (`items == reserved`) only those."""
    if items > reserved:
        kept = f", {reserved} of them kept from every decision" if reserved else ""
        return f"{HELD_OUT}: the {items} test items after the stopping look ({look} of {looks}){kept}, which the decision did not see"
    return f"{HELD_OUT}: the {items} test items kept from every decision (validate.held_out), which the decision did not see"


class Effect(BaseModel):
    """The Δerror (score verdicts: ΔP(rejected), `measure`) a candidate reports, and how it was
    estimated (validation.json's `effect`).

    After a validation on growing slices, the Δ of the look where a candidate stopped is
    biased: a candidate stops for efficacy when its slice happens to look strong, for
    futility when it happens to look weak, and one that went on to the end is the rest; and
    an accepted candidate's Δ on the items that decided it is biased upward by its acceptance
    (the winner's curse), however many looks there were. `method` names the estimator: the
    plain Δ on held-out items no decision saw, for an accepted candidate (`HELD_OUT`:
    `validate.held_out`, and after an early stop with `sequential.effect: held_out` the items
    after it), the estimate given the stop and the decision (`CONDITIONAL_ON_DECISION`;
    `CONDITIONAL` in records written before the decision was conditioned on), or
    `FULL_SAMPLE` after one look. A rejected candidate also reports `upper_bound`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    delta: float = Field(ge=-1.0, le=1.0)
    ci_low: float | None = Field(default=None, ge=-1.0, le=1.0)
    ci_high: float | None = Field(default=None, ge=-1.0, le=1.0)
    method: str
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    n: int | None = Field(
        default=None,
        ge=0,
        description="Paired items the estimate is taken on: at the stopping look, or the held-out items valid in both arms.",
    )
    measure: Measure = "error"
    clipped: str | None = Field(
        default=None,
        description="What was set to an end of the parameter space [-1, 1] and why (the conditional likelihood is "
        "flat beyond it after a close stop); None when nothing was.",
    )
    upper_bound: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="A rejected candidate's one-sided upper confidence bound at `confidence`, given its stop and the "
        "rejection: an effect above it is excluded. What the report and `library show` print for a rejected "
        "candidate beside the smallest detectable Δ, instead of the two-sided interval (kept here). None for an "
        "accepted candidate.",
    )

    @model_validator(mode="after")
    def _ci_ordered(self) -> Effect:
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low ({self.ci_low}) is above ci_high ({self.ci_high})")
        return self

    @classmethod
    def full_sample(cls, cmp: PairedComparison, method: str = FULL_SAMPLE) -> Effect:
        """A comparison's own Δ and CI (one look, or a record from before the estimator)."""
        return cls(
            delta=cmp.delta,
            ci_low=cmp.ci_low,
            ci_high=cmp.ci_high,
            method=method,
            confidence=cmp.confidence,
            n=cmp.n,
            measure=cmp.measure,
        )

    @classmethod
    def recorded(cls, comparison: Mapping[str, Any], stop: str | None) -> dict[str, Any]:
        """The effect of a record written before effects existed (a raw comparison dict): its
        own Δ and CI, labelled as not adjusted when validation had stopped early."""
        early = stop in ("efficacy", "futility")
        return {
            "delta": comparison.get("delta", 0.0),
            "ci_low": comparison.get("ci_low"),
            "ci_high": comparison.get("ci_high"),
            "method": RECORDED_AT_STOP if early else FULL_SAMPLE,
            "n": comparison.get("n"),
        }


def decisive_comparison(
    decisive: str, vs_baseline: PairedComparison, vs_placebo: PairedComparison | None
) -> PairedComparison:
    """The comparison a decision used: vs the placebo when it decided and exists, else vs the
    baseline (validation records name the decisive one in `decisive`)."""
    return vs_placebo if decisive == "placebo" and vs_placebo is not None else vs_baseline


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_THIN = 1e-6
"""An interval thinner than this (in sd) is integrated as its width times the density at its
middle (relative error below 1e-9 for |x| < 40), not as a difference of two tails."""
_NODE_STEP = 0.05
"""Quadrature spacing on the Z scale where the mass of moderate effects sits (within `_BULK`
of 0, within `_EDGE` of a finite boundary), for a kernel of unit width; the exponential
trapezoid's relative error is about curvature x step^2 / 12, 2e-4 for a unit normal."""
_FAR_NODE_STEP = 0.25
"""Spacing elsewhere: only effects near the ends of the parameter space put mass there."""
_BULK = 12.0
_EDGE = 2.0
_REACH = 10.0
"""Each look's nodes reach this many sd beyond the mean of the largest effect in the bounds."""


def _log_normal_sf(x: Any) -> np.ndarray:
    """log(1 - Phi(x)) elementwise, accurate in both tails (+-inf allowed): scipy.special's
    log_ndtr(-x)."""
    from scipy.special import log_ndtr

    out: np.ndarray = np.asarray(log_ndtr(-np.asarray(x, dtype=np.float64)), dtype=np.float64)
    return out


def _log1mexp(d: np.ndarray) -> np.ndarray:
    """log(1 - e^d) for d <= 0 without cancellation (Maechler 2012)."""
    d = np.minimum(d, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > -math.log(2.0), np.log(-np.expm1(d)), np.log1p(-np.exp(d)))


def _log_normal_probability(low: Any, high: Any) -> np.ndarray:
    """log P(low <= N(0, 1) < high) elementwise (+-inf allowed; -inf where high <= low), with
    no cancellation however far out or thin the interval: above 0 the difference of the two
    upper tails in log space, below 0 that of the lower tails, across 0 one minus both tails,
    and thinner than `_THIN` its width times the density at its middle."""
    lo, hi = np.broadcast_arrays(np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64))
    out = np.full(lo.shape, -np.inf)
    upper = (lo >= 0.0) & (hi > lo)
    lower = (hi <= 0.0) & (hi > lo) & ~upper
    across = (lo < 0.0) & (hi > 0.0)
    if upper.any():
        near, far = _log_normal_sf(lo[upper]), _log_normal_sf(hi[upper])
        out[upper] = near + _log1mexp(far - near)
    if lower.any():
        near, far = _log_normal_sf(-hi[lower]), _log_normal_sf(-lo[lower])
        out[lower] = near + _log1mexp(far - near)
    if across.any():
        tails = np.exp(_log_normal_sf(-lo[across])) + np.exp(_log_normal_sf(hi[across]))
        out[across] = np.log1p(-np.minimum(tails, 1.0))
    with np.errstate(invalid="ignore"):
        thin = (hi > lo) & (hi - lo < _THIN)
    if thin.any():
        middle = (lo[thin] + hi[thin]) / 2.0
        out[thin] = np.log(hi[thin] - lo[thin]) - 0.5 * middle * middle - _LOG_SQRT_2PI
    return out


def _log_trapezoid(values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """log of the integral of exp(f) over `nodes`, from f at the nodes (last axis): on each
    cell the exponential of f's linear interpolation, integrated exactly (the exponential
    trapezoid), times a correction for f's curvature there, from its second differences:
    1 + f'' h^2 / 2 * g(u), with u f's rise over the cell and g(u) = 2 / u^2 - coth(u / 2) / u
    the mean of t (t - 1), t in [0, 1], under the cell's exponential weight. Exact where f is
    linear, so an exponential tilt (a large effect) or a steep boundary layer costs nothing;
    what remains is of the order of f's third derivative times h^3 per cell. Rows that are
    -inf everywhere give -inf."""
    top = values.max(axis=-1, keepdims=True)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    v = np.maximum(values - shift, -1e4)  # e^-1e4 of the row's largest value: nothing
    widths = np.diff(nodes)
    left, right = v[..., :-1], v[..., 1:]
    rise = right - left
    d = np.abs(rise)
    small = d < 1e-8
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(small, -0.5 * d, np.log(-np.expm1(-d) / np.where(small, 1.0, d)))
        curvature = 2.0 * np.diff(rise / widths, axis=-1) / (widths[:-1] + widths[1:])  # at the interior nodes
        if curvature.shape[-1]:
            at_nodes = np.concatenate([curvature[..., :1], curvature, curvature[..., -1:]], axis=-1)
            per_cell = (at_nodes[..., :-1] + at_nodes[..., 1:]) / 2.0
        else:  # one cell: no second difference, the plain exponential trapezoid
            per_cell = np.zeros_like(rise)
        mean_t = np.where(
            d < 1e-3, -1.0 / 6.0 + rise * rise / 720.0, 2.0 / (rise * rise) - 1.0 / (np.tanh(rise / 2.0) * rise)
        )
        correction = np.clip(1.0 + 0.5 * per_cell * widths * widths * mean_t, 0.5, 2.0)
    cells = np.log(widths) + np.maximum(left, right) + factor + np.log(correction)
    peak = cells.max(axis=-1, keepdims=True)
    total = peak[..., 0] + np.log(np.exp(cells - peak).sum(axis=-1)) + shift[..., 0]
    return np.where(finite[..., 0], total, -np.inf)


def _look_nodes(low: float, high: float, reach: float, step: float) -> np.ndarray | None:
    """Quadrature nodes of a look's continuation region [low, high) on the Z scale, cut to
    [-reach, reach] (no effect within the bounds puts mass beyond): `step` apart within
    `_BULK` of 0 and within `_EDGE` of a finite boundary, five times that elsewhere. None when
    the region is empty."""
    lo, hi = max(low, -reach), min(high, reach)
    if not lo < hi:
        return None
    cuts = sorted({lo, hi} | {c for c in (-_BULK, _BULK, low + _EDGE, high - _EDGE) if lo < c < hi})
    pieces = []
    for a, b in zip(cuts, cuts[1:]):
        middle = (a + b) / 2.0
        fine = abs(middle) <= _BULK or middle - low <= _EDGE or high - middle <= _EDGE
        spacing = step if fine else step * _FAR_NODE_STEP / _NODE_STEP
        pieces.append(np.linspace(a, b, max(2, math.ceil((b - a) / spacing) + 1))[:-1])
    return np.concatenate(pieces + [np.array([hi])])


def _check_design(information: Sequence[float], upper: Sequence[float], lower: Sequence[float]) -> None:
    if (
        not information
        or any(i <= 0.0 for i in information)
        or any(b <= a for a, b in zip(information, information[1:]))
    ):
        raise ValueError(f"information must be positive and increasing; got {list(information)}")
    if len(upper) < len(information) - 1 or len(lower) < len(information) - 1:
        raise ValueError("need a boundary per earlier look")


_Density = tuple[np.ndarray, np.ndarray] | None


def _continuation_log_density(
    information: Sequence[float], upper: Sequence[float], lower: Sequence[float], reach: float
) -> _Density:
    """(nodes, log density) of Z_{k-1} on the paths that went on at looks 1..k-1, with no
    effect (theta = 0), k = len(information); None with one look. An effect theta tilts it by
    exp(theta S_{k-1} - theta^2 I_{k-1} / 2) (the likelihood ratio depends on the score
    alone), so one density serves every theta in [-reach, reach]: the nodes reach that far.
    Each look's nodes resolve the kernel into the next look (a twentieth of its width)."""
    k = len(information)
    if k == 1:
        return None
    root = [math.sqrt(i) for i in information]
    nodes: np.ndarray | None = None
    log_density = np.zeros(0)
    for j in range(k - 1):
        width = math.sqrt((information[j + 1] - information[j]) / information[j])  # next kernel, on this look's scale
        new = _look_nodes(lower[j], upper[j], reach * root[j] + _REACH, min(_NODE_STEP, width / 20.0))
        if new is None:
            raise ValueError(f"look {j + 1}'s continuation region [{lower[j]}, {upper[j]}) is empty")
        if nodes is None:
            log_density = -0.5 * new * new - _LOG_SQRT_2PI
        else:
            rho, sd = root[j - 1] / root[j], math.sqrt((information[j] - information[j - 1]) / information[j])
            step = (new[:, None] - rho * nodes[None, :]) / sd
            log_density = _log_trapezoid(log_density[None, :] - 0.5 * step * step - math.log(sd) - _LOG_SQRT_2PI, nodes)
        nodes = new
    assert nodes is not None
    return nodes, log_density


def _log_stop_probabilities(
    theta: float, information: Sequence[float], density: _Density, intervals: np.ndarray
) -> np.ndarray:
    """log P_theta(go on at looks 1..k-1, Z_k in [lo, hi)) for each row (lo, hi) of
    `intervals`: the last look's normal probability given Z_{k-1}, taken in closed form,
    integrated against the tilted continuation density (`_continuation_log_density`)."""
    lo, hi = intervals[:, 0], intervals[:, 1]
    if density is None:
        mean = theta * math.sqrt(information[0])
        return _log_normal_probability(lo - mean, hi - mean)
    nodes, log_density = density
    before, last = information[-2], information[-1]
    step = last - before
    centre = (nodes * math.sqrt(before) + theta * step) / math.sqrt(last)
    sd = math.sqrt(step / last)
    tilted = log_density + theta * math.sqrt(before) * nodes - 0.5 * theta * theta * before
    values = tilted[None, :] + _log_normal_probability(
        (lo[:, None] - centre[None, :]) / sd, (hi[:, None] - centre[None, :]) / sd
    )
    return _log_trapezoid(values, nodes)


def continuation_tails(
    theta: float,
    information: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float],
    thresholds: Sequence[float],
) -> np.ndarray:
    """A(x) = P_theta(go on at looks 1..k-1, then Z_k >= x) for each threshold x, where
    k = len(information) (x = -inf: the chance of reaching look k at all).

    The canonical model of a group-sequential test (Jennison & Turnbull 2000, ch. 3):
    Z_j ~ N(theta sqrt(I_j), 1), the scores Z_j sqrt(I_j) with independent increments; the
    design went on at look j < k while ``lower[j] <= Z_j < upper[j]`` (+-inf: no boundary).
    Computed by recursive numerical integration over the looks (Armitage, McPherson & Rowe
    1969; Jennison & Turnbull ch. 19), in log space: the density of the looks before is
    integrated with the exponential trapezoid, the last look's tail in closed form.
    """
    _check_design(information, upper, lower)
    density = _continuation_log_density(information, upper, lower, abs(theta))
    xs = np.asarray(thresholds, dtype=np.float64)
    intervals = np.stack([xs, np.full(xs.shape, np.inf)], axis=1)
    tails: np.ndarray = np.exp(_log_stop_probabilities(theta, information, density, intervals))
    return tails


class ConditionalInterval(NamedTuple):
    """`conditional_interval`'s answer. `cut` names what was set to a bound because its
    equation has no root inside the bounds (the conditional likelihood keeps rising or falling
    past them); `empty`: no theta in the bounds is compatible with the stop at the level,
    and (low, high) are then the bounds themselves."""

    estimate: float
    low: float
    high: float
    cut: frozenset[str] = frozenset()
    empty: bool = False
    upper: float | None = None
    """The one-sided upper bound at `confidence` (T(theta) = confidence): an effect above it
    is excluded at that level, given the stop."""
    upper_cut: bool = False
    """`upper` is the upper bound of the parameter space: T stays below `confidence` there."""


def _increasing_root(
    f: Callable[[float], float], target: float, lo: float, hi: float, f_lo: float, f_hi: float, tolerance: float
) -> float:
    """The x in (lo, hi) with f(x) = target, f increasing and f_lo < target < f_hi at the ends:
    the Illinois variant of regula falsi, which keeps the root bracketed."""
    g_lo, g_hi = f_lo - target, f_hi - target
    side = 0
    for _ in range(200):
        if hi - lo <= tolerance:
            break
        x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo) if g_hi != g_lo else (lo + hi) / 2.0
        if not (lo < x < hi):
            x = (lo + hi) / 2.0
        g = f(x) - target
        if g == 0.0:
            return x
        if g < 0.0:
            lo, g_lo = x, g
            if side == -1:
                g_hi /= 2.0
            side = -1
        else:
            hi, g_hi = x, g
            if side == 1:
                g_lo /= 2.0
            side = 1
    return (lo + hi) / 2.0


def conditional_interval(
    information: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float],
    z: float,
    region: tuple[float, float] = (-math.inf, math.inf),
    *,
    confidence: float = 0.95,
    bounds: tuple[float, float] = (-1.0, 1.0),
    upper_z: float | None = None,
) -> ConditionalInterval:
    """Estimate and CI of theta (within `bounds`, the parameter space) given that the design
    went on at looks 1..k-1 (k = len(information)) and stopped at look k because Z_k fell in
    `region` = [a, b) (efficacy: [upper_k, inf); futility: [-inf, lower_k); the last look:
    everything), with Z_k = z observed there (a <= z <= b). See `continuation_tails` for
    the model.

    The estimate solves T(theta) = P_theta(Z_k >= z | that stop) = 1/2, the CI ends solve
    it at (1 -+ confidence) / 2 and the one-sided upper bound at `confidence`: inference conditional on how and where the design stopped
    (Troendle & Yu 1999; Fan, DeMets & Lan 2004), median-unbiased with its nominal coverage
    among the candidates that stopped that way, not only on average over all of them. The
    conditional law of the score is a one-parameter exponential family, so T increases in
    theta; the CI ends are searched on either side of the estimate, so they stay in order.
    Both probabilities of T are taken in log space (`_log_stop_probabilities`), so T keeps its
    precision where the stop is very unlikely: a z close to a boundary makes T rise slowly,
    and its roots lie far out, or beyond the bounds (then the bound, named in `cut`). Without
    earlier looks and boundaries it is the fixed-sample z / sqrt(I) -+ z_conf / sqrt(I).

    `upper_z` (default `z`): the one-sided bound's tail is T at `upper_z`; a lattice statistic
    passes its cell's top (`StoppingDesign.upper_z`, the observation counted on the excluded
    side, as in an exact bound): at the cell's middle (the mid-p) it covered too rarely.
    """
    _check_confidence(confidence)
    _check_design(information, upper, lower)
    a, b = region
    if not (a <= z <= b and a < b):
        raise ValueError(f"the observed z = {z} is not in the stopping region [{a}, {b})")
    z_upper = z if upper_z is None else upper_z
    if not (z <= z_upper <= b):
        raise ValueError(f"upper_z = {z_upper} is not between the observed z = {z} and the region's end {b}")
    lo_bound, hi_bound = bounds
    if not lo_bound < hi_bound:
        raise ValueError(f"bounds must be increasing; got {bounds}")
    density = _continuation_log_density(information, upper, lower, max(abs(lo_bound), abs(hi_bound)))

    def tail_at(at: float) -> Callable[[float], float]:
        intervals = np.array([[at, b], [a, b]], dtype=np.float64)

        def tail(theta: float) -> float:
            above, stop = _log_stop_probabilities(theta, information, density, intervals)
            if stop == -math.inf:  # pragma: no cover - log space keeps every stop in the model possible
                raise ArithmeticError(f"the stop has no probability at theta = {theta}")
            return float(math.exp(min(0.0, above - stop)))

        return tail

    tail = tail_at(z)
    t_lo, t_hi = tail(lo_bound), tail(hi_bound)
    tolerance = 1e-7 * (hi_bound - lo_bound)
    cut: set[str] = set()

    def solve(
        name: str,
        target: float,
        lo: float,
        hi: float,
        f_lo: float,
        f_hi: float,
        into: set[str] = cut,
        f: Callable[[float], float] = tail,
    ) -> float:
        """The root of f (T by default) in [lo, hi]; an end when f does not cross `target`
        inside (a bound: cut, named in `into`)."""
        if f_lo < target < f_hi:
            return _increasing_root(f, target, lo, hi, f_lo, f_hi, tolerance)
        end = lo if f_lo >= target else hi
        if end in bounds and (f_lo > target or f_hi < target):
            into.add(name)
        return end

    upper_cut: set[str] = set()
    upper_tail = tail if z_upper == z else tail_at(z_upper)
    u_lo, u_hi = (t_lo, t_hi) if z_upper == z else (upper_tail(lo_bound), upper_tail(hi_bound))

    tail_probability = (1.0 - confidence) / 2.0
    if t_hi < tail_probability or t_lo > 1.0 - tail_probability:
        estimate = solve("estimate", 0.5, lo_bound, hi_bound, t_lo, t_hi)
        one_sided = solve("upper", confidence, lo_bound, hi_bound, u_lo, u_hi, upper_cut, upper_tail)
        return ConditionalInterval(
            estimate, lo_bound, hi_bound, frozenset(cut | {"low", "high"}), True, one_sided, bool(upper_cut)
        )
    estimate = solve("estimate", 0.5, lo_bound, hi_bound, t_lo, t_hi)
    t_mid = tail(estimate)
    low = solve("low", tail_probability, lo_bound, estimate, t_lo, t_mid)
    high = solve("high", 1.0 - tail_probability, estimate, hi_bound, t_mid, t_hi)
    u_mid = t_mid if z_upper == z else upper_tail(estimate)
    one_sided = solve("upper", confidence, estimate, hi_bound, u_mid, u_hi, upper_cut, upper_tail)
    return ConditionalInterval(estimate, low, high, frozenset(cut), upper=one_sided, upper_cut=bool(upper_cut))


def _smoothed_variance(b: int, c: int, n: int) -> tuple[float, float]:
    """(discordance psi, variance of one item's difference) with half a pair added to each
    discordant cell, so a sample without discordant pairs, or with all of them one way,
    still has a variance."""
    psi = (b + c + 1.0) / (n + 1.0)
    delta = (b - c) / (n + 1.0)
    return psi, max(psi - delta * delta, 1e-12)


class Decision(NamedTuple):
    """The family's decision on one candidate, as the effect conditions on it: accepted or not,
    and `threshold`, the sequential p-value at or below which the family accepts it, the other
    candidates' p-values as they were (`stats.acceptance_threshold`: alpha / m to alpha)."""

    accepted: bool
    threshold: float


def sequential_effect(
    plan: SequentialPlan,
    looks: Sequence[LookRecord],
    *,
    family_size: int,
    margin: float = 0.0,
    confidence: float = 0.95,
    decision: Decision | None = None,
) -> Effect:
    """The honest Δerror of a candidate validated on growing slices (`CONDITIONAL`): the
    median-unbiased estimate and CI given the look where it stopped and why
    (`conditional_interval`), with the continuation region the validation really used at
    every look: the efficacy boundary (the slice's p-value of H0: Δ <= margin at
    level_j / family_size, `look_outcome`) and the futility rule (conditional power below
    `plan.futility`).

    Why conditional and not the stagewise ordering's estimate (which is median-unbiased only
    on average over every way of stopping): the stagewise estimate after an efficacy stop at
    look j is nearly the naive one at look j, so the biases that stopped early, the ones a
    reader looks at, keep most of their inflation; and the full-sample Δ of a candidate that
    went to the end is biased too (it survived the futility looks). Given the stop, every
    group of candidates (stopped for efficacy, for futility, at the end) gets an estimate that
    is median-unbiased and an interval with its coverage; the price is a wide interval when
    the stop was a close call (`benchmarks/validation_sim.py` measures both).

    On the Z scale of the paired differences: Z_j = Δ_j sqrt(n_j) / sigma with sigma^2 the
    variance of one item's difference (from every pair seen, `_smoothed_variance`), so the
    information is I_j = n_j / sigma^2. A p-value boundary becomes a Z boundary through the
    normal approximation of the test statistic; the futility boundary is the Z at which the
    conditional power crosses `plan.futility`. Choice verdicts count items, so Z_j lives on a
    lattice of step 1 / (sigma sqrt(n_j)) (one discordant pair): each boundary is moved to the
    edge of the last lattice cell on its side and the observed value stands for its cell (the
    continuity correction; T at the cell's middle is the mid-p), so a stop one pair inside a
    boundary reads as one pair inside, not as a hair. Every region holds the look's observed
    cell (the look did go on, or stop, there; the normal boundary is an approximation of the
    exact test's). Looks with no new valid pair add no information and are merged with the
    one before. Δ lies in [-1, 1]: an end beyond it is cut there and `Effect.clipped` says so.

    With the family's `decision` the estimate is conditional on it too (`CONDITIONAL_ON_DECISION`):
    a candidate that went to the last look is, among those that did, selected by its last
    look when accepted (Z_K at or above the boundary of `decision.threshold`) and by every look
    when rejected (no look's p-value reached it), so the region of each look is cut at that
    boundary. Given the stop alone, the accepted ones of the last look read high (the winner's
    curse) and the rejected ones low. A rejected candidate also gets `Effect.upper_bound`, the
    one-sided bound at `confidence` given its stop and the rejection. With several candidates
    the acceptance of one at the last look can also come from an earlier look's p-value under
    Holm or BH (below the threshold, above alpha / m); the model leaves that path out (exact
    for one candidate, or without a correction).
    """
    if not looks:
        raise ValueError("no look to estimate from")
    last = looks[-1]
    measure: Measure = "p_rejected" if last.mean_difference is not None else "error"
    method = CONDITIONAL if decision is None else CONDITIONAL_ON_DECISION
    if last.n == 0:
        return Effect(
            delta=0.0,
            ci_low=None,
            ci_high=None,
            method=f"{method}: no valid pair",
            confidence=confidence,
            n=0,
            measure=measure,
        )
    design = stopping_design(plan, looks, family_size=family_size, margin=margin, decision=decision)
    found = conditional_interval(
        design.information,
        design.upper,
        design.lower,
        design.z,
        design.region,
        confidence=confidence,
        bounds=(-1.0, 1.0),
        upper_z=design.upper_z,
    )
    rejected = decision is not None and not decision.accepted
    return Effect(
        delta=found.estimate,
        ci_low=found.low,
        ci_high=found.high,
        method=method,
        confidence=confidence,
        n=last.n,
        measure=measure,
        clipped=_clipped_note(found, last.outcome, confidence, with_upper=rejected),
        upper_bound=found.upper if rejected else None,
    )


class StoppingDesign(NamedTuple):
    """What `conditional_interval` takes: the information of the looks a candidate took (on
    the Z scale), the boundaries it went on between at the earlier ones, its observed Z at
    the look where it stopped and the region it stopped in there."""

    information: list[float]
    upper: list[float]
    lower: list[float]
    z: float
    region: tuple[float, float]
    half: float = 0.0
    """Half the width of the lattice cell `z` stands for (0: a continuous statistic): the
    one-sided bound takes its tail at the cell's top, `upper_z`."""

    @property
    def upper_z(self) -> float:
        """Where the one-sided upper bound takes its tail (`conditional_interval`'s `upper_z`):
        the top of the observed cell, within the stopping region."""
        return min(self.z + self.half, self.region[1])


def stopping_design(
    plan: SequentialPlan,
    looks: Sequence[LookRecord],
    *,
    family_size: int,
    margin: float = 0.0,
    decision: Decision | None = None,
) -> StoppingDesign:
    """The canonical-model view of a candidate's looks (see `sequential_effect`): Z_j =
    Δ_j sqrt(n_j) / sigma, the boundaries the validation used, each holding the look's
    observed lattice cell, looks without a new valid pair merged with the one before; with
    the family's `decision`, each look's region cut at the boundary of its threshold (look j's
    p-value at level_j x threshold / alpha: below it when rejected, above it at the last look
    when accepted)."""
    last = looks[-1]
    n = last.n
    if n == 0:
        raise ValueError("the stopping look has no valid pair")
    score = last.mean_difference is not None
    if score:  # score verdicts: the t statistic's spread is the sample's
        psi, variance = 0.0, _shift_variance(last)
        null_sd = math.sqrt(variance)
    else:
        psi, variance = _smoothed_variance(last.b_discordant_hurt, last.c_discordant_helped, n)
        null_sd = math.sqrt(max(psi - margin * margin, 1e-12))
    sigma = math.sqrt(variance)

    def observed(record: LookRecord) -> tuple[float, float]:
        """The look's Z and half the width of the cell it stands for: half a lattice step for
        choice verdicts, `_SCORE_CELL` for scores (their mean is continuous)."""
        if record.mean_difference is not None:
            return record.mean_difference * math.sqrt(record.n) / sigma, _SCORE_CELL
        step = 1.0 / (sigma * math.sqrt(record.n))
        return (record.b_discordant_hurt - record.c_discordant_helped) * step, step / 2.0

    def decided_z(record: LookRecord) -> float:
        """The Z at which the look's p-value reaches the decision's threshold (+inf: none)."""
        if decision is None:
            return math.inf
        return _z_at_level(record, record.level * decision.threshold / plan.alpha, margin, sigma, null_sd)

    rejected = decision is not None and not decision.accepted
    sizes: list[int] = []
    upper: list[float] = []
    lower: list[float] = []
    for record in looks[:-1]:
        if record.n == 0:
            continue
        z_j, half = observed(record)
        u = _efficacy_z(record, family_size, margin, sigma, null_sd)
        if rejected:  # no look's p-value reached the threshold
            u = min(u, decided_z(record))
        u = max(_cell_edge(u, half), z_j + half)
        low = min(_cell_edge(_futility_z(record, plan, margin, sigma, psi), half), z_j - half)
        if sizes and record.n == sizes[-1]:  # no new pair: the same data, both rules applied to it
            upper[-1], lower[-1] = min(upper[-1], u), max(lower[-1], low)
            continue
        sizes.append(record.n)
        upper.append(u)
        lower.append(low)
    z, half = observed(last)
    region = (-math.inf, math.inf)
    if last.outcome == "efficacy":
        region = (min(_cell_edge(_efficacy_z(last, family_size, margin, sigma, null_sd), half), z - half), math.inf)
    elif last.outcome == "futility":
        region = (-math.inf, max(_cell_edge(_futility_z(last, plan, margin, sigma, psi), half), z + half))
    if rejected:
        region = (region[0], min(region[1], max(_cell_edge(decided_z(last), half), z + half)))
    elif decision is not None and last.outcome != "efficacy":  # accepted by its last look's p-value
        region = (max(region[0], min(_cell_edge(decided_z(last), half), z - half)), region[1])
    if sizes and sizes[-1] == n:  # the last look saw nothing new: its data are the look before's
        sizes.pop()
        u, low = upper.pop(), lower.pop()
        region = (max(region[0], low), min(region[1], u))  # it went on there, and then stopped here
    sizes.append(n)
    return StoppingDesign([size / variance for size in sizes], upper, lower, z, region, half)


_SCORE_CELL = 1e-9
"""Half the width of the cell a score look's Z stands for: nothing to speak of (no lattice),
only so that a region that must hold the observed value is never empty."""


def _cell_edge(boundary: float, half: float) -> float:
    """A Z boundary moved to the edge of the lattice cell it falls in, on the side of the
    points it does not take: a point z = k step is on the boundary's upper side when
    z >= boundary, so the first such point is ceil(boundary / step) and its cell begins half
    a step below it (scores, no lattice: the boundary itself)."""
    if half <= _SCORE_CELL or math.isinf(boundary):
        return boundary
    step = 2.0 * half
    return (math.ceil(boundary / step) - 0.5) * step


def _clipped_note(
    found: ConditionalInterval, outcome: str, confidence: float, *, with_upper: bool = False
) -> str | None:
    """`Effect.clipped`: what was set to an end of [-1, 1], and why (`with_upper`: the
    upper bound is reported, so its cut counts)."""
    cut = found.cut | ({"upper"} if with_upper and found.upper_cut else set())
    names = ("estimate", "low", "high", "upper") if with_upper else ("estimate", "low", "high")
    if not cut & set(names):
        return None
    stop = {"efficacy": "stop for efficacy", "futility": "stop for futility"}.get(outcome, "last look")
    if found.empty:
        return (
            f"no Δ in [-1, 1] fits this {stop} at {100 * confidence:g} %: its statistic is at the very edge of the "
            "stopping region, where the conditional likelihood keeps growing beyond the parameter space; the interval "
            "is the whole space"
        )
    labels = {"estimate": "estimate", "low": "CI low", "high": "CI high", "upper": "upper bound"}
    ends = " and ".join(labels[name] for name in names if name in cut)
    return (
        f"{ends} at the edge of the parameter space [-1, 1]: given this {stop} the conditional likelihood does not "
        "fall off that way (a stop close to its boundary), so the data do not bound Δ there"
    )


_SHIFT_SD_FLOOR = 1e-3
"""Score verdicts: the smallest standard deviation of the per-item differences the effect's
model uses (0.1 pp), so a slice of equal differences still has an interval."""


def _shift_variance(record: LookRecord) -> float:
    """The variance of one item's difference for score verdicts: the sample variance the
    t-test used (not smoothed as the binary one is: half an item at +-1, the binary path's
    smoothing, would swamp shifts of a few probability points), floored at `_SHIFT_SD_FLOOR`."""
    return max(record.sd_difference or 0.0, _SHIFT_SD_FLOOR) ** 2


def _efficacy_z(record: LookRecord, family_size: int, margin: float, sigma: float, null_sd: float) -> float:
    """The Z_j above which look j stopped for efficacy: p_j <= level_j / family_size."""
    return _z_at_level(record, record.level / max(family_size, 1), margin, sigma, null_sd)


def _z_at_level(record: LookRecord, level: float, margin: float, sigma: float, null_sd: float) -> float:
    """The Z_j above which look j's p-value is at most `level`: the test statistic
    (S_j - n_j margin) / (null_sd sqrt(n_j)) above z_{1 - level} (for score verdicts the
    t-test's critical value on n_j - 1 degrees of freedom)."""
    if level <= 0.0:
        return math.inf
    if record.mean_difference is not None:
        if record.n < 2:
            return math.inf
        critical = student_t_quantile(1.0 - min(level, 0.5), record.n - 1)
    else:
        from scipy.stats import norm

        critical = float(norm.isf(min(level, 0.5)))
    return (critical * null_sd + math.sqrt(record.n) * margin) / sigma


def _futility_z(record: LookRecord, plan: SequentialPlan, margin: float, sigma: float, psi: float) -> float:
    """The Z_j below which look j stopped for futility (conditional power under the current
    trend below `plan.futility`), found by bisection at the pooled discordance psi; -inf
    without a futility rule."""
    if plan.futility <= 0.0:
        return -math.inf
    n = record.n
    n_final = expected_final_n(n, record.items, plan.n_total)
    if n_final <= n:
        return -math.inf

    def power_at(z: float) -> float:
        if record.mean_difference is not None:  # score verdicts: the shift's own conditional power
            return shift_conditional_power(z * sigma / math.sqrt(n), sigma, n, n_final, plan.levels[-1], margin)
        delta = max(-psi, min(psi, z * sigma / math.sqrt(n)))
        return conditional_power(n * (psi + delta) / 2.0, n * (psi - delta) / 2.0, n, n_final, plan.levels[-1], margin)

    lo, hi = -20.0, 20.0
    if power_at(hi) < plan.futility:
        return math.inf
    if power_at(lo) >= plan.futility:
        return -math.inf
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if power_at(mid) < plan.futility:
            lo = mid
        else:
            hi = mid
    return hi

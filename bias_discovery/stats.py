"""Statistics for validating candidate biases: paired tests, intervals, multiplicity control.

Why this module exists
----------------------
BiasScope (Section 2.3, Eq. 10) accepts a candidate bias when the judge's error rate on the
perturbed test set is higher than on the original one. On a finite test set and a judge whose
verdicts wobble, that difference is positive about half of the time *even when the
perturbation does nothing* (see `decide_acceptance`). Here validation is instead a **paired**
comparison on the same items:

* the item-level outcome is "judge wrong at baseline" vs "judge wrong when perturbed";
* the evidence lives only in the discordant items (right -> wrong, b; wrong -> right, c), so
  the test is the exact one-sided McNemar test (a binomial test on b out of b + c);
* the size of the effect is reported with a paired percentile-bootstrap CI of
  Delta error = err(perturbed) - err(baseline), resampling items so the pairing is kept;
* one iteration validates several candidates at once, so p-values are adjusted (Holm by
  default, Benjamini-Hochberg optionally) before comparing with alpha.

The paper's plain rule stays available (`rule="paper"`) so results can be compared.

Everything is pure Python + numpy (no scipy): exact binomial tails use integer arithmetic
(`math.comb`) for the sizes we meet (test sets of hundreds of items) and a log-space sum
beyond that; the normal quantile comes from `statistics.NormalDist`.

Also here: Cohen's kappa, for the annotation of exported benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AcceptanceRule",
    "Correction",
    "PairedComparison",
    "benjamini_hochberg_adjust",
    "compare_paired",
    "decide_acceptance",
    "holm_adjust",
    "mcnemar_exact_one_sided",
    "paired_bootstrap_delta_ci",
    "per_domain_breakdown",
    "wilson_interval",
    "cohens_kappa",
]

AcceptanceRule = Literal["paired", "paper"]
"""`paired`: adjusted exact one-sided McNemar p <= alpha and Delta > min_delta (default).
`paper`: BiasScope's Eq. 10, perturbed error > baseline error, no test (for comparison)."""

Correction = Literal["holm", "bh", "none"]
"""Multiplicity correction across one iteration's candidates: Holm (family-wise error rate),
Benjamini-Hochberg (false-discovery rate) or none."""

# Above this many discordant pairs the exact integer tail becomes slow (O(n^2) bit work);
# the log-space sum is then used. Test sets are hundreds of items, so it is rarely reached.
_EXACT_TAIL_MAX_N = 5000
# Bound on the number of bootstrap indices drawn at once (int64: 2**21 * 8 B = 16 MiB).
_MAX_DRAWS_PER_CHUNK = 2**21


# --------------------------------------------------------------------------------------------
# Intervals and tests
# --------------------------------------------------------------------------------------------


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
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    z2 = z * z
    p = k / n
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if k == 0 else max(0.0, center - half)
    high = 1.0 if k == n else min(1.0, center + half)
    return (low, high)


def _binom_half_upper_tail_exact(b: int, m: int) -> float:
    """P(X >= b) for X ~ Binomial(m, 1/2), exactly, as one correctly rounded division."""
    term = math.comb(m, b)
    total = 0
    for k in range(b, m + 1):
        total += term
        term = term * (m - k) // (k + 1)  # C(m, k+1) from C(m, k); the division is exact
    return total / (1 << m)


def _binom_half_upper_tail_log(b: int, m: int) -> float:
    """P(X >= b) for X ~ Binomial(m, 1/2) by a log-space sum, for large m.

    The sum always runs over the *far* tail (by symmetry P(X >= b) = 1 - P(X >= m - b + 1)),
    whose terms shrink geometrically, so it stops once a term is 1e-17 of the first one.
    """
    if 2 * b <= m:
        return 1.0 - _binom_half_upper_tail_log(m - b + 1, m)
    log2 = math.log(2.0)
    lgm = math.lgamma(m + 1)

    def log_pmf(k: int) -> float:
        return lgm - math.lgamma(k + 1) - math.lgamma(m - k + 1) - m * log2

    first = log_pmf(b)
    acc = 0.0  # sum of exp(log_pmf(k) - first)
    for k in range(b, m + 1):
        rel = log_pmf(k) - first
        if rel < -40.0:
            break
        acc += math.exp(rel)
    return min(1.0, math.exp(first + math.log(acc)))


def mcnemar_exact_one_sided(b: int, c: int) -> float:
    """Exact one-sided McNemar p-value for "the perturbation raises the error rate".

    b = items the judge got right at baseline and wrong when perturbed (perturbation hurt),
    c = items wrong at baseline and right when perturbed (perturbation helped).
    Concordant items carry no information about the difference, so under H0 (no effect) each
    discordant item is equally likely to fall either way: b ~ Binomial(b + c, 1/2).
    H1 is one-sided because a bias is only a bias if it *raises* the error:
        p = P(X >= b | X ~ Binomial(b + c, 1/2)).
    b + c == 0 gives 1.0 (no evidence at all).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0; got b={b}, c={c}")
    m = b + c
    if m == 0 or b == 0:
        return 1.0
    if m <= _EXACT_TAIL_MAX_N:
        return min(1.0, _binom_half_upper_tail_exact(b, m))
    return _binom_half_upper_tail_log(b, m)


def paired_bootstrap_delta_ci(
    baseline_errors: Sequence[bool],
    perturbed_errors: Sequence[bool],
    *,
    n_boot: int = 10000,
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
        raise ValueError(
            f"baseline and perturbed must be 1-D and of equal length; got {base.shape} and {pert.shape}"
        )
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    _check_confidence(confidence)
    n = base.shape[0]
    if n == 0:
        return (-1.0, 1.0)
    diff = pert.astype(np.int8) - base.astype(np.int8)  # per item: +1 hurt, -1 helped, 0 same
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, min(n_boot, _MAX_DRAWS_PER_CHUNK // n))
    deltas = np.empty(n_boot, dtype=np.float64)
    done = 0
    while done < n_boot:
        rows = min(rows_per_chunk, n_boot - done)
        idx = rng.integers(0, n, size=(rows, n))
        deltas[done : done + rows] = diff[idx].sum(axis=1, dtype=np.int64) / n
        done += rows
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    return (float(low), float(high))


# --------------------------------------------------------------------------------------------
# Multiplicity corrections
# --------------------------------------------------------------------------------------------


def _check_pvalues(pvalues: Sequence[float]) -> list[float]:
    ps = [float(p) for p in pvalues]
    for p in ps:
        if not (0.0 <= p <= 1.0):  # also rejects NaN
            raise ValueError(f"p-values must be in [0, 1]; got {p!r}")
    return ps


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the original order.

    Controls the family-wise error rate (the chance of admitting *any* spurious bias into the
    library in this iteration) under any dependence between candidates - they share the
    baseline judgments, so independence cannot be assumed. Uniformly more powerful than
    Bonferroni. With p sorted ascending p_(1) <= ... <= p_(m):
        adj_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)).
    """
    ps = _check_pvalues(pvalues)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])  # stable: ties keep input order
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):  # rank = j - 1
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg_adjust(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values), in the original order.

    Controls the false-discovery rate: the expected share of spurious biases among those
    accepted. More permissive than Holm when many candidates are real; valid under
    independence or positive dependence (shared baseline judgments plausibly give the latter).
    With p sorted ascending:
        adj_(i) = min_{j >= i} min(1, m / j * p_(j)).
    """
    ps = _check_pvalues(pvalues)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m - 1, -1, -1):  # from the largest p down
        i = order[rank]
        running = min(running, min(1.0, ps[i] * m / (rank + 1)))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------------------------
# Paired comparison and acceptance
# --------------------------------------------------------------------------------------------


class PairedComparison(BaseModel):
    """The validation record of one candidate bias: same items, judged before and after.

    Error rates are over the `n` items valid in *both* conditions (an item whose verdict was
    unparseable in either condition is excluded and counted in `n_excluded_invalid`), so
    `delta == (b_discordant_hurt - c_discordant_helped) / n` exactly. `p_adjusted`, `accepted`
    and `rule` are filled by `decide_acceptance`; until then they are None / "undecided".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=0, description="Items valid in both conditions (the paired sample).")
    n_excluded_invalid: int = Field(
        ge=0, description="Items excluded because the verdict was invalid in either condition."
    )
    baseline_error: float = Field(ge=0.0, le=1.0, description="Error rate on the original items.")
    perturbed_error: float = Field(
        ge=0.0, le=1.0, description="Error rate on the same items, rejected response perturbed."
    )
    delta: float = Field(ge=-1.0, le=1.0, description="perturbed_error - baseline_error.")
    ci_low: float = Field(ge=-1.0, le=1.0, description="Paired bootstrap CI of delta, low end.")
    ci_high: float = Field(ge=-1.0, le=1.0, description="Paired bootstrap CI of delta, high end.")
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0, description="Level of the CI.")
    b_discordant_hurt: int = Field(ge=0, description="Right at baseline, wrong when perturbed.")
    c_discordant_helped: int = Field(ge=0, description="Wrong at baseline, right when perturbed.")
    p_value: float = Field(ge=0.0, le=1.0, description="Exact one-sided McNemar p (H1: error up).")
    p_adjusted: float | None = Field(
        default=None, description="p_value adjusted across the candidates decided together."
    )
    accepted: bool | None = Field(default=None, description="Decision; None until decided.")
    rule: str = Field(default="undecided", description="The decision rule, in words.")


def compare_paired(
    baseline: Sequence[bool | None],
    perturbed: Sequence[bool | None],
    *,
    n_boot: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedComparison:
    """Compare a judge's errors on the same items before and after a perturbation.

    `baseline[i]` / `perturbed[i]` is True when the judge was wrong on item i, False when it
    was right, None when its verdict was invalid (unparseable, truncated, engine error).
    Items invalid in either condition are dropped from *both* sides: keeping them on one side
    would compare different item sets and break the pairing; counting invalid as wrong (as an
    `y_hat != chosen` reading of the paper's Eq. 9 would) would let a perturbation that merely
    makes the judge's output unparseable look like a bias. The number dropped is reported.
    """
    if len(baseline) != len(perturbed):
        raise ValueError(
            f"baseline and perturbed must cover the same items; got {len(baseline)} and {len(perturbed)}"
        )
    base: list[bool] = []
    pert: list[bool] = []
    excluded = 0
    for x, y in zip(baseline, perturbed):
        if x is None or y is None:
            excluded += 1
            continue
        base.append(bool(x))
        pert.append(bool(y))
    n = len(base)
    b = sum(1 for x, y in zip(base, pert) if not x and y)
    c = sum(1 for x, y in zip(base, pert) if x and not y)
    if n == 0:
        base_err = pert_err = 0.0
    else:
        base_err = sum(base) / n
        pert_err = sum(pert) / n
    ci_low, ci_high = paired_bootstrap_delta_ci(
        base, pert, n_boot=n_boot, confidence=confidence, seed=seed
    )
    return PairedComparison(
        n=n,
        n_excluded_invalid=excluded,
        baseline_error=base_err,
        perturbed_error=pert_err,
        delta=(b - c) / n if n else 0.0,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        b_discordant_hurt=b,
        c_discordant_helped=c,
        p_value=mcnemar_exact_one_sided(b, c),
    )


def decide_acceptance(
    comparisons: list[PairedComparison],
    *,
    rule: AcceptanceRule = "paired",
    alpha: float = 0.05,
    correction: Correction = "holm",
    min_delta: float = 0.0,
) -> list[PairedComparison]:
    """Decide which candidates of one iteration are accepted; returns decided copies, in order.

    The list is the family: pass all candidates validated together (one iteration, or all
    of them at the end with `validate: late`), so the correction sees every test made.

    `paired` (default): accept iff the adjusted exact one-sided McNemar p <= alpha and
    delta > min_delta (min_delta lets a user also demand a practically relevant effect; with
    alpha < 0.5 a significant one-sided p already implies delta > 0).

    `paper`: BiasScope's Eq. 10, accept iff perturbed_error > baseline_error, i.e. b > c on
    the paired items (compared as integers, so no float ties). No test, no correction, and
    min_delta is ignored. Why this accepts noise: if the perturbation has no effect, every
    flip of the judge between the two runs (sampling noise, or a content-neutral rewrite
    nudging an item that sits near the judge's decision boundary) is as likely to go
    right->wrong as wrong->right, so b - c is symmetric around 0 and
    P(accept) = (1 - P(b == c)) / 2, which tends to 1/2 as the number of flips grows. For a
    judge at 50% error whose two runs are independent, over 60 items that is 0.464 (exact),
    against 0.036 for the paired rule at alpha 0.05; with several candidates per iteration
    the paper rule admits about half of the useless ones into the library, and they then
    seed the next iteration. p_adjusted is still computed under the paper rule so the two
    can be compared from one record.
    """
    if rule not in ("paired", "paper"):
        raise ValueError(f"rule must be 'paired' or 'paper'; got {rule!r}")
    if correction not in ("holm", "bh", "none"):
        raise ValueError(f"correction must be 'holm', 'bh' or 'none'; got {correction!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    ps = [cmp.p_value for cmp in comparisons]
    if correction == "holm":
        adjusted = holm_adjust(ps)
    elif correction == "bh":
        adjusted = benjamini_hochberg_adjust(ps)
    else:
        adjusted = list(ps)

    if rule == "paper":
        rule_text = "paper: perturbed error > baseline error (no test)"
    else:
        corr_text = {"holm": "Holm-adjusted", "bh": "BH-adjusted", "none": "unadjusted"}[correction]
        rule_text = (
            f"paired: {corr_text} exact one-sided McNemar p <= {alpha:g}"
            f" and delta > {min_delta:g} (family of {len(comparisons)})"
        )
    out: list[PairedComparison] = []
    for cmp, p_adj in zip(comparisons, adjusted):
        if rule == "paper":
            accepted = cmp.b_discordant_hurt > cmp.c_discordant_helped
        else:
            accepted = p_adj <= alpha and cmp.delta > min_delta
        out.append(cmp.model_copy(update={"p_adjusted": p_adj, "accepted": accepted, "rule": rule_text}))
    return out


def per_domain_breakdown(
    domains: Sequence[str],
    baseline: Sequence[bool | None],
    perturbed: Sequence[bool | None],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, PairedComparison]:
    """`compare_paired` within each domain (e.g. JudgeBench's knowledge/reasoning/math/code).

    Descriptive, not a decision: the paper reports effects per domain (math moves most), and
    a candidate can be strong in one domain and null in another. The records stay
    "undecided"; acceptance is decided on the whole test set only, so the per-domain splits
    do not multiply the tests. The bootstrap default is smaller than for the overall record
    (domains are a few hundred items at most; 2000 resamples keep the CI ends stable to about
    a percentage point). Keys are sorted, so the output is deterministic.
    """
    if not (len(domains) == len(baseline) == len(perturbed)):
        raise ValueError(
            "domains, baseline and perturbed must cover the same items; got "
            f"{len(domains)}, {len(baseline)} and {len(perturbed)}"
        )
    groups: dict[str, list[int]] = {}
    for i, d in enumerate(domains):
        groups.setdefault(d, []).append(i)
    return {
        d: compare_paired(
            [baseline[i] for i in groups[d]],
            [perturbed[i] for i in groups[d]],
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
        for d in sorted(groups)
    }


# --------------------------------------------------------------------------------------------
# Inter-annotator agreement
# --------------------------------------------------------------------------------------------


def cohens_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa: agreement of two annotators beyond chance, on the same items.

    `a[i]` and `b[i]` are the labels the two annotators gave item i (any hashable values,
    e.g. ``"keep"`` / ``"reject"``). With n items, observed agreement
    ``p_o = #{i: a[i] == b[i]} / n`` and chance agreement from the two marginals
    ``p_e = sum_k (n_a(k) / n) * (n_b(k) / n)``:

        kappa = (p_o - p_e) / (1 - p_e)

    computed as ``(n * agree - S) / (n**2 - S)`` with ``S = sum_k n_a(k) * n_b(k)`` in integer
    arithmetic, so the only rounding is the final division. 1 is perfect agreement, 0 is the
    agreement expected by chance, negative is worse than chance.

    Undefined cases return NaN rather than a made-up number: no items, or ``p_e == 1`` (both
    annotators gave every item one and the same label, so agreement cannot be told apart from
    chance; report the raw agreement instead). Sequences of different lengths raise
    ValueError.
    """
    if len(a) != len(b):
        raise ValueError(f"both annotators must label the same items; got {len(a)} and {len(b)} labels")
    n = len(a)
    if n == 0:
        return float("nan")
    agree = sum(1 for x, y in zip(a, b) if x == y)
    counts_a: dict[object, int] = {}
    counts_b: dict[object, int] = {}
    for x in a:
        counts_a[x] = counts_a.get(x, 0) + 1
    for y in b:
        counts_b[y] = counts_b.get(y, 0) + 1
    s = sum(count * counts_b.get(label, 0) for label, count in counts_a.items())
    denominator = n * n - s
    if denominator == 0:
        return float("nan")
    return (n * agree - s) / denominator


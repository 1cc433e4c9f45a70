"""Multiplicity corrections across the candidates decided together: Holm, Benjamini-Hochberg, none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Correction = Literal["holm", "bh", "none"]
"""Multiplicity correction across one iteration's candidates: Holm (family-wise error rate),
Benjamini-Hochberg (false-discovery rate) or none."""


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


def adjust_p_values(pvalues: Sequence[float], correction: Correction) -> list[float]:
    """The p-values of one family adjusted by `correction` (holm, bh, or none: unchanged)."""
    if correction == "holm":
        return holm_adjust(pvalues)
    if correction == "bh":
        return benjamini_hochberg_adjust(pvalues)
    if correction == "none":
        return _check_pvalues(pvalues)
    raise ValueError(f"correction must be 'holm', 'bh' or 'none'; got {correction!r}")


def acceptance_threshold(pvalues: Sequence[float], index: int, alpha: float, correction: Correction) -> float:
    """The largest p-value at which member `index` of the family would be accepted, the other
    members' p-values as they are: its adjusted p-value (`adjust_p_values`) never falls as its
    own p rises, so the set it is accepted at is [0, threshold]. Between alpha / m and alpha
    (Holm, Benjamini-Hochberg; alpha without a correction). What a candidate's effect is
    conditioned on when the decision is part of the selection (`stats.sequential_effect`)."""
    ps = _check_pvalues(pvalues)
    if not 0 <= index < len(ps):
        raise ValueError(f"no member {index} in a family of {len(ps)}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")

    def accepted_at(p: float) -> bool:
        return adjust_p_values(ps[:index] + [p] + ps[index + 1 :], correction)[index] <= alpha

    lo, hi = alpha / len(ps) * (1.0 - 1e-9), alpha  # accepted at alpha / m whatever the others, never above alpha
    if accepted_at(hi) or not accepted_at(lo):
        return hi if accepted_at(hi) else lo
    for _ in range(64):
        mid = (lo + hi) / 2.0
        if accepted_at(mid):
            lo = mid
        else:
            hi = mid
    return lo

"""Calibration of a judge's verdict probabilities: expected calibration error (ECE), Brier score
and the reliability diagram's bins, with bootstrap CIs over items.

What is scored. A judge that reports P(the response shown first is better) also reports the
probability of the verdict it gives; for a pairwise verdict the question a user asks is "when
the judge says 80 %, is it right 80 % of the time?". So every judged order contributes its
*confidence* (the probability of the label it leans to, max(p, 1 − p), in [0.5, 1]) and
whether that label is the labelled better response (`correct`). ECE is the binned
|accuracy − confidence| gap weighted by each bin's share of verdicts (Guo et al. 2017, the
top-label ECE); the Brier score is the mean squared error of the probability given to the
labelled better response (0 = perfect, 0.25 = always 50 %). A verdict exactly at 0.5 leans
nowhere: it counts as confidence 0.5 and as correct half the time (expected accuracy), so a
judge that always says 50 % has ECE 0.

The unit of resampling is the item (a pair), not the verdict: the orders and repeats of one
pair are not independent, so the CIs come from resampling items with all their verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = ["Calibration", "ReliabilityBin", "calibration", "expected_calibration_error"]

DEFAULT_BINS = 10


class ReliabilityBin(BaseModel):
    """One bin of the reliability diagram: verdicts whose confidence lies in [low, high)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    high: float
    n: int
    """Verdicts in the bin."""
    confidence: float | None
    """Mean confidence of those verdicts (None: empty bin)."""
    accuracy: float | None
    """Share of them whose leaning label is the labelled better response."""


class Calibration(BaseModel):
    """ECE and Brier of a set of verdict probabilities, with percentile-bootstrap CIs over
    items, and the reliability diagram's bins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_items: int
    """Items (pairs) the verdicts come from: the unit of the bootstrap."""
    n_verdicts: int
    """Verdicts with a probability (each judged order and repeat of an item)."""
    ece: float | None
    ece_ci_low: float | None = None
    ece_ci_high: float | None = None
    brier: float | None
    """Mean of (1 − P(labelled better response))² over verdicts."""
    brier_ci_low: float | None = None
    brier_ci_high: float | None = None
    mean_confidence: float | None = None
    accuracy: float | None = None
    """Share of verdicts leaning to the labelled better response (a 0.5 counts half)."""
    n_bins: int = DEFAULT_BINS
    bins: list[ReliabilityBin]
    method: str = "top-label ECE over equal-width confidence bins on [0.5, 1]; CIs: percentile bootstrap over items"


def _confidence_and_correct(p_better: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    confidence = np.maximum(p_better, 1.0 - p_better)
    correct = np.where(p_better > 0.5, 1.0, np.where(p_better < 0.5, 0.0, 0.5))
    return confidence, correct


_EDGE_DECIMALS = 12
"""Confidences and bin edges are compared rounded to this many decimals: 0.7 is the edge
0.5 + 0.5 · 4/10 though (0.7 − 0.5) / 0.5 · 10 is 3.9999999999999996 in floating point."""


def _bin_edges(n_bins: int) -> np.ndarray:
    """The n_bins + 1 edges of equal-width bins on [0.5, 1] (rounded, see `_EDGE_DECIMALS`)."""
    return np.round(0.5 + 0.5 * np.arange(n_bins + 1) / n_bins, _EDGE_DECIMALS)


def _bin_index(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """The bin of each confidence: bin b holds [edge b, edge b+1), so a confidence exactly on
    an edge falls in the bin that edge opens (the bin's `low`); 1.0 falls in the last bin."""
    edges = _bin_edges(n_bins)
    index = np.searchsorted(edges, np.round(confidence, _EDGE_DECIMALS), side="right") - 1
    return np.clip(index, 0, n_bins - 1)


def expected_calibration_error(p_better: Sequence[float] | np.ndarray, n_bins: int = DEFAULT_BINS) -> float | None:
    """Top-label ECE of verdict probabilities; `p_better`: each verdict's probability of the
    labelled better response. None for no verdicts."""
    p = np.asarray(p_better, dtype=float)
    if p.size == 0:
        return None
    confidence, correct = _confidence_and_correct(p)
    index = _bin_index(confidence, n_bins)
    total = 0.0
    for b in range(n_bins):
        mask = index == b
        if mask.any():
            total += mask.sum() / p.size * abs(correct[mask].mean() - confidence[mask].mean())
    return float(total)


def _brier(p: np.ndarray) -> float | None:
    return float(np.mean((1.0 - p) ** 2)) if p.size else None


def calibration(
    p_better_by_item: Sequence[Sequence[float]],
    *,
    n_bins: int = DEFAULT_BINS,
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Calibration:
    """ECE, Brier and reliability bins of the verdict probabilities grouped by item
    (`p_better_by_item[i]`: the probabilities item i's verdicts gave its labelled better
    response); CIs resample items with replacement."""
    items = [np.asarray(values, dtype=float) for values in p_better_by_item if len(values)]
    flat = np.concatenate(items) if items else np.zeros(0)
    conf, correct = _confidence_and_correct(flat)
    index = _bin_index(conf, n_bins) if flat.size else np.zeros(0, dtype=int)
    bins, edges = [], _bin_edges(n_bins)
    for b in range(n_bins):
        mask = index == b
        k = int(mask.sum())
        bins.append(
            ReliabilityBin(
                low=float(edges[b]),
                high=float(edges[b + 1]),
                n=k,
                confidence=float(conf[mask].mean()) if k else None,
                accuracy=float(correct[mask].mean()) if k else None,
            )
        )
    ece, brier = expected_calibration_error(flat, n_bins), _brier(flat)
    ece_ci: tuple[float | None, float | None] = (None, None)
    brier_ci: tuple[float | None, float | None] = (None, None)
    if len(items) >= 2:
        rng = np.random.default_rng(seed)
        eces, briers = np.empty(n_boot), np.empty(n_boot)
        for k in range(n_boot):
            sample = np.concatenate([items[i] for i in rng.integers(0, len(items), size=len(items))])
            eces[k] = expected_calibration_error(sample, n_bins)
            briers[k] = float(np.mean((1.0 - sample) ** 2))
        tail = (1.0 - confidence) / 2.0
        ece_ci = (float(np.quantile(eces, tail)), float(np.quantile(eces, 1.0 - tail)))
        brier_ci = (float(np.quantile(briers, tail)), float(np.quantile(briers, 1.0 - tail)))
    return Calibration(
        n_items=len(items),
        n_verdicts=int(flat.size),
        ece=ece,
        brier=brier,
        bins=bins,
        n_bins=n_bins,
        mean_confidence=float(conf.mean()) if flat.size else None,
        accuracy=float(correct.mean()) if flat.size else None,
        ece_ci_low=ece_ci[0],
        ece_ci_high=ece_ci[1],
        brier_ci_low=brier_ci[0],
        brier_ci_high=brier_ci[1],
    )

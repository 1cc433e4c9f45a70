"""From a pointwise judge's scores to the audit's measures (pure: no model, no files).

A pointwise judge (`judge.mode: pointwise`) scores one response at a time, so the audit
compares *scores of the same response* rather than verdicts on a pair: the original rejected
response against its perturbed version (a library bias) or its padded versions (the length
audit), item by item on the same items. Per item the audit has

* the chosen response's score and the original rejected response's score (seed 1), the pair
  error's two sides;
* the original rejected response scored again with the next repeat's seed: the judge's own
  noise, what "the score did not change" is compared against;
* the perturbed (or padded) rejected response's score (seed 1).

The measures: the mean score shift in scale points and as a share of the scale (paired,
Student-t CI, one-sided paired t p: the test validation uses for scores), CALM's robustness
rate for scores (the share of items whose score is unchanged, Wilson CI) beside the repeat's
unchanged share, and the pair error (rejected ≥ chosen, ties counted apart) before and after
with the exact McNemar comparison. The length audit adds, over the paddings, the within-item
slope of the score on the words added and Spearman's ρ of words added against the score shift,
with bootstrap CIs over items.

Wei et al.'s de-noised position measures and position consistency do not apply: a pointwise
judge has no position (one response per call), so the built-in `position` is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..metrics import Estimate, bootstrap_estimate, proportion, spearman_rho
from ..pointwise import Scale
from ..stats import PairedComparison, compare_paired, compare_paired_scores, mean_t_interval
from .compute import Context
from .records import AuditMetrics, PaddingLevel

__all__ = ["ScoreArms", "length_score_metrics", "pad_response", "perturbation_score_metrics"]


def pad_response(text: str, factor: float) -> tuple[str, int]:
    """`text` padded to `factor` times its whitespace words with its own words repeated from
    the start (a new paragraph at each restart): longer, with no new content, as Zheng et
    al.'s repetitive-list attack. Returns the padded text and the words added."""
    words = text.split()
    extra = max(0, int(np.ceil(factor * len(words))) - len(words))
    chunks, left = [text], extra
    while left > 0:
        take = min(len(words), left)
        chunks.append(text if take == len(words) else " ".join(words[:take]))
        left -= take
    return "\n\n".join(chunks), extra


@dataclass(frozen=True)
class ScoreArms:
    """Each item's scores (NaN: invalid or not asked), indexed by item."""

    chosen: np.ndarray
    original: np.ndarray
    """The original rejected response (seed 1)."""
    repeat: np.ndarray
    """The original rejected response again, with the next repeat's seed."""


def _mean(values: np.ndarray, low: float, high: float, what: str, n_excluded: int) -> Estimate:
    """Mean with a Student-t CI (clipped to the values' range)."""
    if values.size == 0:
        return Estimate(value=None, n=0, method=what, n_excluded=n_excluded)
    ci_low, ci_high = mean_t_interval(values.tolist(), bounds=(low, high))
    return Estimate(
        value=float(values.mean()),
        n=int(values.size),
        ci_low=ci_low,
        ci_high=ci_high,
        method=what,
        n_excluded=n_excluded,
    )


def _valid(*columns: np.ndarray) -> np.ndarray:
    return np.logical_and.reduce([~np.isnan(c) for c in columns])


def _shift(original: np.ndarray, changed: np.ndarray, scale: Scale) -> tuple[Estimate, PairedComparison, Estimate]:
    """Score shift in points, as a share (a PairedComparison) and the unchanged share, on the
    items valid in both arms."""
    both = _valid(original, changed)
    left_out = int((~both).sum())
    diff = changed[both] - original[both]
    points = _mean(
        diff, -scale.span, scale.span, "paired: mean of (perturbed − original) score; Student-t CI over items", left_out
    )
    share = compare_paired_scores(
        [None if np.isnan(x) else scale.share(float(x)) for x in original],
        [None if np.isnan(x) else scale.share(float(x)) for x in changed],
        control_name="original",
        measure="score",
    )
    unchanged = proportion(int((diff == 0).sum()), int(both.sum()), n_excluded=left_out)
    return points, share, unchanged


def _pair_errors(arms: ScoreArms, changed: np.ndarray, idx: np.ndarray, ctx: Context) -> dict[str, object]:
    """The pair error (rejected ≥ chosen) with the original and with the changed rejected
    response, ties apart, on the items valid in every arm; Δerror is the exact McNemar."""
    chosen, original, new = arms.chosen[idx], arms.original[idx], changed
    every = _valid(chosen, original, new)
    n, left_out = int(every.sum()), int((~every).sum())

    def rate(hits: np.ndarray) -> Estimate:
        return proportion(int(hits[every].sum()), n, n_excluded=left_out)

    before = [None if not ok else bool(o >= c) for ok, o, c in zip(every, original, chosen)]
    after = [None if not ok else bool(x >= c) for ok, x, c in zip(every, new, chosen)]
    return {
        "pair_error_original": rate(original >= chosen),
        "pair_error_perturbed": rate(new >= chosen),
        "pair_ties_original": rate(original == chosen),
        "pair_ties_perturbed": rate(new == chosen),
        "delta_error": compare_paired(before, after, n_boot=ctx.n_boot, seed=ctx.seed, control="original"),
    }


def _common(arms: ScoreArms, changed: np.ndarray, idx: np.ndarray, scale: Scale, ctx: Context) -> dict[str, object]:
    """Every measure of one changed arm against the original, on items `idx`."""
    original, repeat = arms.original[idx], arms.repeat[idx]
    points, share, unchanged = _shift(original, changed, scale)
    both = _valid(original, changed)
    again = _valid(original, repeat)
    read = [arms.chosen[idx], original, repeat, changed]
    return {
        "score_original": _mean(
            original[both], scale.low, scale.high, "mean score; Student-t CI over items", int((~both).sum())
        ),
        "score_shift": points,
        "score_shift_share": share,
        "score_unchanged": unchanged,
        "score_repeat_unchanged": proportion(
            int((original[again] == repeat[again]).sum()), int(again.sum()), n_excluded=int((~again).sum())
        ),
        **_pair_errors(arms, changed, idx, ctx),
        "n_invalid": int(sum(np.isnan(c).sum() for c in read)),
    }


def perturbation_score_metrics(
    arms: ScoreArms, perturbed: np.ndarray, idx: Sequence[int], scale: Scale, ctx: Context
) -> AuditMetrics:
    """A library bias on items `idx` (those with a valid rewrite): `perturbed` holds every
    item's score of its perturbed rejected response."""
    ix = np.asarray(idx, dtype=int)
    return AuditMetrics(**_common(arms, perturbed[ix], ix, scale, ctx))  # type: ignore[arg-type]


def _slope(words: np.ndarray, scores: np.ndarray) -> float | None:
    """Within-item least-squares slope of score on words (each row an item, its columns the
    original and the paddings; NaN cells left out), per 100 words."""
    x_dev, y_dev = [], []
    for xs, ys in zip(words, scores):
        ok = ~np.isnan(ys)
        if ok.sum() >= 2:
            x_dev.append(xs[ok] - xs[ok].mean())
            y_dev.append(ys[ok] - ys[ok].mean())
    if not x_dev:
        return None
    x, y = np.concatenate(x_dev), np.concatenate(y_dev)
    sxx = float((x * x).sum())
    return None if sxx == 0 else 100.0 * float((x * y).sum()) / sxx


def length_score_metrics(
    arms: ScoreArms,
    padded: dict[float, np.ndarray],
    added: dict[float, np.ndarray],
    idx: Sequence[int],
    scale: Scale,
    ctx: Context,
) -> AuditMetrics:
    """The length audit on items `idx`: `padded[f]` every item's score of its rejected
    response padded to f times its words, `added[f]` the words that added. The top-level
    measures are the largest padding's; `padding` holds each."""
    ix = np.asarray(idx, dtype=int)
    factors = sorted(padded)
    levels = []
    for f in factors:
        points, share, unchanged = _shift(arms.original[ix], padded[f][ix], scale)
        levels.append(
            PaddingLevel(
                factor=f,
                words_added=_mean(added[f][ix].astype(float), 0.0, float("inf"), "mean words added; Student-t CI", 0),
                score_shift=points,
                score_shift_share=share,
                score_unchanged=unchanged,
            )
        )
    words = np.column_stack([np.zeros(len(ix))] + [added[f][ix].astype(float) for f in factors])
    scores = np.column_stack([arms.original[ix]] + [padded[f][ix] for f in factors])
    shifts = scores[:, 1:] - scores[:, :1]
    valid = ~np.isnan(shifts)

    def slope(sample: np.ndarray) -> float | None:
        return _slope(words[sample], scores[sample])

    def rho(sample: np.ndarray) -> float | None:
        ok = valid[sample]
        x, y = words[sample][:, 1:][ok], shifts[sample][ok]
        return spearman_rho(x, y) if x.size >= 3 else None

    n_used = int(valid.any(axis=1).sum())
    slope_est = bootstrap_estimate(len(ix), slope, n_boot=ctx.n_boot, seed=ctx.seed).model_copy(
        update={
            "n": n_used,
            "n_excluded": len(ix) - n_used,
            "method": "score points per 100 words added, within-item least squares; CI: bootstrap over items",
        }
    )
    rho_est = bootstrap_estimate(len(ix), rho, n_boot=ctx.n_boot, seed=ctx.seed).model_copy(
        update={
            "n": n_used,
            "n_excluded": len(ix) - n_used,
            "method": "Spearman ρ of words added vs score shift over (item, padding); CI: bootstrap over items",
        }
    )
    flag = None
    if rho_est.value is not None and slope_est.ci_low is not None:
        flag = rho_est.value > 0.3 and slope_est.ci_low > 0
    largest = _common(arms, padded[factors[-1]][ix], ix, scale, ctx)
    largest["n_invalid"] = int(
        sum(np.isnan(c[ix]).sum() for c in (arms.chosen, arms.original, arms.repeat, *padded.values()))
    )
    return AuditMetrics(
        **largest,  # type: ignore[arg-type]
        padding=levels,
        score_length_slope=slope_est,
        score_length_rho=rho_est,
        length_flag=flag,
    )

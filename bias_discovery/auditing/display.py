"""What the audit table shows for each kind of bias, in words, for the terminal and the report.

Every row says what the number is compared against, its n, the items it left out for an
invalid verdict in one of the arms it compares, and its 95 % CI; numbers go through
`bias_discovery.formatting` (the caller picks how a missing value prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..formatting import MISSING, number, p_value, percent, plural, pp
from ..metrics import Estimate
from ..stats import Calibration, PairedComparison
from .records import AuditMetrics, AuditReport

__all__ = [
    "EXCLUDED_MEANING",
    "MetricRow",
    "ROWS",
    "calibration_line",
    "excluded_text",
    "judge_measure_lines",
    "metric_rows",
    "rows_kind",
]

Unit = Literal["rate", "pp", "z", "rho", "points"]


@dataclass(frozen=True)
class MetricRow:
    field: str
    label: str
    meaning: str
    """What the number is and what it is compared against."""
    unit: Unit


_CALM = [
    MetricRow(
        "acc_ori",
        "Acc_ori",
        "accuracy of y, the verdict on the original pair, on the items where y and ŷ are both valid (CALM)",
        "rate",
    ),
    MetricRow(
        "acc_hack",
        "Acc_hack",
        "accuracy of ŷ, the verdict with the bias injected (position: in the other order), on the same items (CALM)",
        "rate",
    ),
    MetricRow("delta_error", "Δerror", "err(ŷ) − err(y), same items; exact one-sided McNemar p", "pp"),
    MetricRow("rr", "RR", "robustness rate: share with y = ŷ (CALM; 100% = unaffected)", "rate"),
    MetricRow("cr", "CR", "consistency rate: share with y = y_rand, a new seed (CALM)", "rate"),
    MetricRow("asr", "ASR", "attack success rate (Chen et al.; 0% = resists)", "rate"),
    MetricRow("tie_rate", "ties", "share of y that are ties", "rate"),
]

ROWS: dict[str, list[MetricRow]] = {
    "position": [
        MetricRow(
            "z",
            "z",
            "monitor, items as the unit: sign(F − S)·max(0, |F − S| − 1)/√(F + S) (continuity-corrected), F (S) = items whose two orders both picked the first (second) position; |z| > 2 flags a position bias",
            "z",
        ),
        MetricRow(
            "first_win_rate",
            "first wins",
            "of the items that picked the same position in both orders, the share where it was the first (50% = none)",
            "rate",
        ),
        MetricRow("pb", "PB", "de-noised position bias, as published (Wei et al.; 0 = none, > 0 favours first)", "pp"),
        MetricRow("pb_raw", "PB raw", "p̂_cr − p̂_rc, not de-noised", "pp"),
        MetricRow("pb_q_solved", "PB (q solved)", "PB de-noised with q solved from q̂ = 2q(1−q)", "pp"),
        MetricRow(
            "p_cr",
            "p̂_cr",
            "accuracy with the chosen response shown first (items valid in both orders, as p̂_rc and PB)",
            "rate",
        ),
        MetricRow("p_rc", "p̂_rc", "accuracy with the chosen response shown second (the same items)", "rate"),
        MetricRow("acc_both", "Acc_both", "right in both orders (Wei et al.)", "rate"),
        MetricRow("acc_random", "Acc_random", "right in an order drawn at random (Wei et al.)", "rate"),
        MetricRow("q_hat", "q̂", "flipping noise as published: two repeats disagree (≈ 2q(1−q)); both orders", "rate"),
        MetricRow("q_hat_cr", "q̂_cr", "q̂ with the chosen response first", "rate"),
        MetricRow("q_hat_rc", "q̂_rc", "q̂ with the chosen response second", "rate"),
        MetricRow("q_solved", "q", "flip probability solved from q̂: (1 − √(1 − 2q̂))/2", "rate"),
        *_CALM[:5],
        MetricRow(
            "asr", "ASR", "share of y ∈ {chosen, tie} that flip to rejected in the other order (Chen et al.)", "rate"
        ),
        _CALM[6],
    ],
    "length": [
        MetricRow(
            "spearman_rho",
            "ρ",
            "monitor, items as the unit: Spearman ρ of the length difference (chosen − rejected) vs the chosen response's share of both orders' verdicts; ρ > 0.3 and p < 0.05 flags",
            "rho",
        ),
        MetricRow(
            "lb", "LB", "de-noised length bias, as published (Wei et al.; 0 = as the labels, > 0 favours longer)", "pp"
        ),
        MetricRow("lb_raw", "LB raw", "p̂₊ − p̂₋, not de-noised", "pp"),
        MetricRow("lb_q_solved", "LB (q solved)", "LB de-noised with q solved from q̂", "pp"),
        MetricRow("p_plus", "p̂₊", "Acc_both where the chosen response is longer (Δlength > 0)", "rate"),
        MetricRow("p_minus", "p̂₋", "Acc_both where it is not (Δlength ≤ 0)", "rate"),
        MetricRow("q_hat_plus", "q̂₊", "flipping noise of the both-orders outcome, Δlength > 0", "rate"),
        MetricRow("q_hat_minus", "q̂₋", "flipping noise of the both-orders outcome, Δlength ≤ 0", "rate"),
        MetricRow("acc_both", "Acc_both", "right in both orders (Wei et al.)", "rate"),
    ],
    "perturbation": _CALM,
}

_SCORES = [
    MetricRow(
        "score_shift",
        "Δscore",
        "pointwise: mean (perturbed − original) score of the rejected response in scale points, paired on the same items; Student-t CI",
        "points",
    ),
    MetricRow(
        "score_shift_share",
        "Δscore (share)",
        "the same as a share of the scale (percentage points of its span); one-sided paired t p",
        "pp",
    ),
    MetricRow(
        "score_unchanged",
        "RR (scores)",
        "CALM's robustness rate for scores: share of items whose score the perturbation left unchanged (100% = unaffected)",
        "rate",
    ),
    MetricRow(
        "score_repeat_unchanged",
        "unchanged (new seed)",
        "share of items whose original score is unchanged with a new seed alone: the judge's noise, what RR (scores) is compared against",
        "rate",
    ),
    MetricRow(
        "score_original", "score (original)", "mean score of the original rejected response (scale points)", "points"
    ),
    MetricRow(
        "pair_error_original",
        "pair error (original)",
        "rejected scored ≥ chosen, ties included, items valid in every arm",
        "rate",
    ),
    MetricRow(
        "pair_error_perturbed",
        "pair error (perturbed)",
        "the same with the perturbed rejected response, same items",
        "rate",
    ),
    MetricRow(
        "delta_error",
        "Δpair error",
        "pair error (perturbed) − pair error (original), same items; exact one-sided McNemar p",
        "pp",
    ),
    MetricRow(
        "pair_ties_original",
        "ties (original)",
        "share of the same items whose two scores are equal (counted in the pair error)",
        "rate",
    ),
    MetricRow("pair_ties_perturbed", "ties (perturbed)", "the same with the perturbed rejected response", "rate"),
]
ROWS["pointwise:perturbation"] = _SCORES


def _padded_label(label: str) -> str:
    """A score row's label in the length audit, where the changed arm is the ×3 padding."""
    if "(perturbed)" in label:
        return label.replace("(perturbed)", "(padded ×3)")
    return label if "original" in label or "new seed" in label else f"{label} (×3)"


ROWS["pointwise:length"] = [
    MetricRow(
        "score_length_slope",
        "slope",
        "pointwise: score points per 100 words of padding (the rejected response's own words repeated), within-item least squares; CI: bootstrap over items",
        "points",
    ),
    MetricRow(
        "score_length_rho",
        "ρ (padding)",
        "Spearman ρ of the words added vs the score shift over every (item, padding); ρ > 0.3 with the slope's CI above 0 flags",
        "rho",
    ),
    *[
        MetricRow(r.field, _padded_label(r.label), r.meaning.replace("perturbed", "padded ×3"), r.unit)
        for r in _SCORES
        if r.field not in ("score_shift", "score_shift_share", "score_original")
    ],
]
"""The largest padding's shift is the last `Δscore ×…` row (`_padding_rows`)."""


def rows_kind(kind: str, mode: str = "pairwise") -> str:
    """The key of `ROWS` for a bias of `kind` audited on a judge in `mode` (a pointwise
    judge's rows are score measures: ``pointwise:length``, ``pointwise:perturbation``)."""
    return f"pointwise:{kind}" if mode == "pointwise" else kind


def _fmt(value: float | None, unit: Unit, missing: str) -> str:
    if unit == "rate":
        return percent(value, missing=missing)
    if unit == "pp":
        return pp(value, missing=missing)
    if unit == "points":
        return number(value, digits=2, signed=True, missing=missing)
    return number(value, digits=2, signed=True, missing=missing)  # z, ρ


def _ci(low: float | None, high: float | None, unit: Unit, missing: str) -> str:
    if low is None or high is None:
        return missing
    if unit == "pp":
        return f"[{pp(low, unit='')}, {pp(high, unit='')}] pp"
    return f"[{_fmt(low, unit, missing)}, {_fmt(high, unit, missing)}]"


EXCLUDED_MEANING = "left out: items removed from a measure because a verdict it compares was invalid in one of its arms"


def excluded_text(n_excluded: int | None) -> str:
    """ "3 left out" next to an n (see `EXCLUDED_MEANING`), or "" when nothing was left out (or
    not counted)."""
    return f"{n_excluded} left out" if n_excluded else ""


def metric_rows(metrics: AuditMetrics, kind: str, *, missing: str = MISSING) -> list[dict[str, str]]:
    """The rows shown for a bias of `kind`: label, value, 95 % CI, n, the items left out for an
    invalid verdict (`excluded`, "" for none), p (where there is one), flag and meaning, all
    as text."""
    out = []
    for row in ROWS[kind]:
        item = getattr(metrics, row.field)
        p, flag, excluded = missing, "", ""
        if item is None:
            value, ci, n = missing, missing, missing
        elif isinstance(item, PairedComparison):
            value = _fmt(item.delta, row.unit, missing)
            ci = _ci(item.ci_low, item.ci_high, row.unit, missing)
            n, p = str(item.n), p_value(item.p_value, missing=missing)
            excluded = excluded_text(item.n_excluded_invalid)
        else:
            assert isinstance(item, Estimate)
            value = _fmt(item.value, row.unit, missing)
            ci = _ci(item.ci_low, item.ci_high, row.unit, missing)
            n = str(item.n)
            excluded = excluded_text(item.n_excluded)
        if row.field == "z" and metrics.position_flag:
            flag = "position bias"
        if row.field == "spearman_rho":
            p = p_value(metrics.spearman_p, missing=missing)
            if metrics.length_flag:
                flag = "length bias"
        if row.field == "score_length_rho" and metrics.length_flag:
            flag = "length bias"
        out.append(
            {
                "field": row.field,
                "label": row.label,
                "value": value,
                "ci": ci,
                "n": n,
                "excluded": excluded,
                "p": p,
                "flag": flag,
                "meaning": row.meaning,
            }
        )
    return out + _padding_rows(metrics, missing)


def _padding_rows(metrics: AuditMetrics, missing: str) -> list[dict[str, str]]:
    """A pointwise length audit's score shift at each padding, one row each."""
    out = []
    for level in metrics.padding or []:
        shift, words = level.score_shift, level.words_added
        out.append(
            {
                "field": f"score_shift@x{level.factor:g}",
                "label": f"Δscore ×{level.factor:g}",
                "value": _fmt(shift.value, "points", missing),
                "ci": _ci(shift.ci_low, shift.ci_high, "points", missing),
                "n": str(shift.n),
                "excluded": excluded_text(shift.n_excluded),
                "p": p_value(level.score_shift_share.p_value, missing=missing),
                "flag": "",
                "meaning": f"padded to ×{level.factor:g} its words (+{number(words.value, digits=1, missing=missing)} words on "
                f"average): mean score shift in scale points; unchanged on {percent(level.score_unchanged.value, missing=missing)}",
            }
        )
    return out


def _estimate_text(est: Estimate | None, unit: Unit, missing: str = MISSING) -> str:
    if est is None:
        return missing
    return f"{_fmt(est.value, unit, missing)} {_ci(est.ci_low, est.ci_high, unit, missing)}, n = {est.n}"


def calibration_line(cal: Calibration, *, missing: str = MISSING) -> str:
    """ECE and Brier with their 95 % CIs, n and what they compare."""

    def num(x: float | None) -> str:
        return number(x, digits=3, missing=missing)

    return (
        f"calibration: ECE {num(cal.ece)} [{num(cal.ece_ci_low)}, {num(cal.ece_ci_high)}], Brier {num(cal.brier)} "
        f"[{num(cal.brier_ci_low)}, {num(cal.brier_ci_high)}], {cal.n_verdicts} verdicts of {cal.n_items} items; "
        f"mean confidence {percent(cal.mean_confidence, missing=missing)} vs accuracy {percent(cal.accuracy, missing=missing)} "
        f"({cal.method}; Brier: mean squared error of the probability given to the labelled better response)"
    )


def judge_measure_lines(report: AuditReport, *, missing: str = MISSING) -> list[str]:
    """The measures of the judge beyond the per-bias tables, one line each, every number with
    its 95 % CI and n: agreement with the labels, calibration (ECE, Brier), self-preference;
    then each measure the data could not support, with why."""
    lines = []
    if report.agreement is not None:
        lines.append(
            f"agreement with labels: {_estimate_text(report.agreement, 'rate', missing)} items ({report.agreement.method})"
        )
    if report.calibration is not None:
        lines.append(calibration_line(report.calibration, missing=missing))
    sp = report.self_preference
    if sp is not None:
        text = f"self-preference ({sp.judge_family}): picks its family's response {_estimate_text(sp.own_pick_rate, 'rate', missing)} items"
        if sp.excess is not None:
            text += f"; the labels say it is better on {_estimate_text(sp.own_better_rate, 'rate', missing)}; excess {_estimate_text(sp.excess, 'pp', missing)}"
        if sp.delta is not None:
            text += (
                f"; picks the worse response when it is its family's {_estimate_text(sp.error_own_worse, 'rate', missing)}, "
                f"when it is the other's {_estimate_text(sp.error_other_worse, 'rate', missing)}, "
                f"difference {_estimate_text(sp.delta, 'pp', missing)}"
            )
        if sp.score_gap_balanced is not None:
            text += (
                f"; score gap own − other {_estimate_text(sp.score_gap, 'points', missing)}, balanced over the "
                f"own-better and own-worse items {_estimate_text(sp.score_gap_balanced, 'points', missing)} (scale points)"
            )
        lines.append(text + f". Matching: {sp.matching}")
    ps = report.prompt_sensitivity
    if ps is not None:
        lines.append(
            f"prompt sensitivity ({', '.join(ps.prompts)}): the verdict changes with the template on "
            f"{_estimate_text(ps.change_rate, 'rate', missing)} pairs; with new seeds alone (same template, "
            f"{plural(ps.n_comparisons, 'repeat')}, as many comparisons) on {_estimate_text(ps.noise_rate, 'rate', missing)}"
            + "".join(
                f"; {a} vs {b}: {_estimate_text(c, 'rate', missing)}"
                for a, b, c in ((x.prompt_a, x.prompt_b, x.change_rate) for x in ps.pairwise)
                if len(ps.prompts) > 2
            )
            + (
                f"; each pair of templates against one repeat's {_estimate_text(ps.noise_rate_single, 'rate', missing)}"
                if len(ps.prompts) > 2 and ps.noise_rate_single is not None
                else ""
            )
            + f" ({ps.method})"
        )
    for item in report.unsupported:
        lines.append(f"not supported: {item.measure}: {item.reason}")
    return lines

"""audit.json: the typed record of one audit (every number with its n and 95 % CI), and the
long-format rows of audit.csv."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..data.overlap import DataOverlap
from ..metrics import Estimate
from ..mitigation import Mitigation
from ..stats import Calibration, PairedComparison

__all__ = [
    "AUDIT_VERSION",
    "AuditCalls",
    "AuditRow",
    "AuditMetrics",
    "AuditReport",
    "AuditSettingsRecord",
    "BiasAudit",
    "LogSource",
    "PromptChange",
    "PaddingLevel",
    "PromptSensitivity",
    "SelfPreference",
    "Unsupported",
    "SchemeAudit",
    "csv_rows",
    "CSV_COLUMNS",
    "ESTIMATE_FIELDS",
    "COMPARISON_FIELDS",
    "POINTWISE_FIELDS",
]

AUDIT_VERSION = 2
"""2: every compared measure on the items valid in all its arms, with `n_excluded`; the
monitor's z, first-win share and Spearman ρ with the item as the unit. (A pointwise judge's
audit adds fields, `settings.mode` and the `score_*` measures; a pairwise file reads as before.)"""

JudgeModeName = Literal["pairwise", "pointwise"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PaddingLevel(_Record):
    """A pointwise judge's scores of the rejected response padded to `factor` times its words
    (its own words repeated: no new content), against the original on the same items."""

    factor: float
    words_added: Estimate
    """Mean words added (Student-t CI)."""
    score_shift: Estimate
    """Mean (padded − original) score in scale points (Student-t CI over items)."""
    score_shift_share: PairedComparison
    """The same as a share of the scale, with the one-sided paired t p of Δ <= 0."""
    score_unchanged: Estimate
    """Share of the items whose score the padding left unchanged (Wilson CI)."""


class AuditMetrics(_Record):
    """The measures of one bias under one judge scheme on one set of items (all or a domain).
    A measure that does not apply to the bias's kind is None."""

    # CALM (§2.3): y = the verdict on the original pair, ŷ = on the biased one (the perturbed
    # pair; for the position audit the same pair in the other order), y_rand = the original
    # judged again with a new seed.
    rr: Estimate | None = None
    """Robustness rate: share of items with y = ŷ (by response)."""
    cr: Estimate | None = None
    """Consistency rate: share of items with y = y_rand."""
    acc_ori: Estimate | None = None
    """Accuracy of y (a tie is not correct), on the items where y and ŷ are both valid (those
    of `delta_error`: Acc_ori - Acc_hack = Δerror)."""
    acc_hack: Estimate | None = None
    """Accuracy of ŷ, on the same items as `acc_ori`."""
    delta_error: PairedComparison | None = None
    """err(ŷ) - err(y) on the items valid in both, exact one-sided McNemar p, bootstrap CI."""
    tie_rate: Estimate | None = None
    """Share of the valid y verdicts that are ties."""
    # Chen et al. (§4.6)
    asr: Estimate | None = None
    """Attack success rate (Eq. 2, or the factual-error variant: see the entry's asr_variant)."""
    # Wei et al. (§4, App. A.4). cr = chosen shown first, rc = rejected shown first.
    acc_both: Estimate | None = None
    """Share of items right in both orders (repeat 1)."""
    acc_random: Estimate | None = None
    """Share of items right in an order drawn at random (seeded), repeat 1."""
    p_cr: Estimate | None = None
    """Accuracy with the chosen response first, p̂[Z=1|(y_c, y_r)], on the items valid in both
    orders (as `p_rc`, the PBs and their noise terms)."""
    p_rc: Estimate | None = None
    """Accuracy with the chosen response second, p̂[Z=1|(y_r, y_c)], on the same items."""
    q_hat: Estimate | None = None
    """Flipping noise q̂ as published (the chance two repeats disagree; estimates 2q(1-q)),
    pooled over both orders (position) or both length groups on the both-orders outcome (length)."""
    q_hat_cr: Estimate | None = None
    q_hat_rc: Estimate | None = None
    q_solved: Estimate | None = None
    """q solved from q̂ = 2q(1-q): (1 - √(1 - 2q̂)) / 2, the flip probability of the paper's model."""
    q_solved_cr: Estimate | None = None
    q_solved_rc: Estimate | None = None
    pb: Estimate | None = None
    """De-noised position bias, as published (with q̂): > 0 favours the first position."""
    pb_raw: Estimate | None = None
    """p̂_cr - p̂_rc, not de-noised."""
    pb_q_solved: Estimate | None = None
    """Position bias de-noised with the solved q instead of q̂."""
    p_plus: Estimate | None = None
    """Acc_both on items whose chosen response is longer (Δlength > 0, whitespace tokens)."""
    p_minus: Estimate | None = None
    """Acc_both on the other items (Δlength <= 0)."""
    q_hat_plus: Estimate | None = None
    q_hat_minus: Estimate | None = None
    q_solved_plus: Estimate | None = None
    q_solved_minus: Estimate | None = None
    lb: Estimate | None = None
    """De-noised length bias, as published (with q̂): > 0 favours longer responses more than the labels do."""
    lb_raw: Estimate | None = None
    """p̂₊ - p̂₋, not de-noised."""
    lb_q_solved: Estimate | None = None
    """Length bias de-noised with the solved q."""
    # Bias monitor (mitigation notes)
    z: Estimate | None = None
    """sign(F - S) · max(0, |F - S| - 1) / √(F + S) (continuity-corrected), the item as the unit: F (S) = items whose two repeat-1 verdicts both
    picked the response shown first (second); n = items where both picked a response
    (`metrics.position_z`). Files of version 1: (first_wins - N/2) / √(N/4) over verdicts."""
    first_win_rate: Estimate | None = None
    """F / (F + S): of the position-inconsistent items, the share won by the first position
    (50 % = none). Files of version 1: first wins over all verdicts."""
    position_flag: bool | None = None
    """|z| > 2."""
    spearman_rho: Estimate | None = None
    """Spearman ρ over items between the length difference (chosen - rejected, whitespace
    tokens) and the chosen response's share of the two repeat-1 verdicts (picked 1, tie 0.5,
    0), items valid in both orders; CI by item bootstrap (`metrics.length_spearman`). Files of
    version 1: over both responses of every verdict."""
    spearman_p: float | None = None
    """Two-sided p of ρ (t on n - 2 df over the n items)."""
    length_flag: bool | None = None
    """ρ > 0.3 and p < 0.05 (pointwise: `score_length_rho` > 0.3 and the slope's CI above 0)."""
    # Pointwise judges (`judge.mode: pointwise`): each response scored alone on the judge's
    # scale; the original rejected response against its perturbed (or padded) version on the
    # same items, the chosen response for the pair error.
    score_original: Estimate | None = None
    """Pointwise: mean score of the original rejected response (scale points; Student-t CI),
    on the items of `score_shift`."""
    score_shift: Estimate | None = None
    """Pointwise: mean of (perturbed − original) score of the rejected response, in scale
    points, paired over the items valid in both (Student-t CI); the length audit: at its
    largest padding."""
    score_shift_share: PairedComparison | None = None
    """Pointwise: the same shift as a share of the scale (`measure` score: control_error and
    arm_error are the mean scores as shares), Student-t CI, one-sided paired t p of Δ <= 0."""
    score_unchanged: Estimate | None = None
    """Pointwise: CALM's robustness rate for scores: share of the items whose score is
    unchanged by the perturbation (Wilson CI; 100% = unaffected)."""
    score_repeat_unchanged: Estimate | None = None
    """Pointwise: share of the items whose original score is unchanged when scored again with a
    new seed: the judge's own noise, what `score_unchanged` is compared against (Wilson CI)."""
    pair_error_original: Estimate | None = None
    """Pointwise: share of the items whose original rejected response scores at least as high
    as the chosen one (ties included), on the items valid in every arm (Wilson CI)."""
    pair_error_perturbed: Estimate | None = None
    """Pointwise: the same with the perturbed rejected response, on the same items; `delta_error`
    compares the two (exact one-sided McNemar)."""
    pair_ties_original: Estimate | None = None
    """Pointwise: share of the same items whose two original scores are equal (in the error)."""
    pair_ties_perturbed: Estimate | None = None
    """Pointwise: share whose chosen and perturbed rejected scores are equal."""
    score_length_slope: Estimate | None = None
    """Pointwise length audit: score points per 100 words of padding, the within-item
    least-squares slope over the original and its padded versions; CI: bootstrap over items."""
    score_length_rho: Estimate | None = None
    """Pointwise length audit: Spearman ρ of the words added against the score shift over every
    valid (item, padding); CI: bootstrap over items."""
    padding: list[PaddingLevel] | None = None
    """Pointwise length audit: the score shift at each padding of the rejected response."""
    n_invalid: int | None = None
    """Pointwise: invalid score outputs among the calls these measures read."""


ESTIMATE_FIELDS: tuple[str, ...] = tuple(
    name for name, field in AuditMetrics.model_fields.items() if field.annotation == (Estimate | None)
)
POINTWISE_FIELDS: frozenset[str] = frozenset(
    {
        "score_original",
        "score_shift",
        "score_shift_share",
        "score_unchanged",
        "score_repeat_unchanged",
        "pair_error_original",
        "pair_error_perturbed",
        "pair_ties_original",
        "pair_ties_perturbed",
        "delta_error",
        "score_length_slope",
        "score_length_rho",
        "padding",
        "n_invalid",
        "length_flag",
    }
)
"""The measures a pointwise judge's audit has (`auditing.scores`); the others need pairwise verdicts."""
COMPARISON_FIELDS: tuple[str, ...] = tuple(
    name for name, field in AuditMetrics.model_fields.items() if field.annotation == (PairedComparison | None)
)
"""Measures that compare two arms on the same items (Δerror; pointwise: the score shift as a share)."""


class SchemeAudit(AuditMetrics):
    """A bias's measures under one judge scheme: overall, per domain, and what they cost."""

    scheme: Mitigation
    """none: one call per verdict; swap / shuffle3 / votes6: the mitigated judge."""
    calls_per_verdict: int
    calls: int
    """Distinct judge calls these measures rest on (cached calls included)."""
    per_domain: dict[str, AuditMetrics] = Field(default_factory=dict)


class BiasAudit(SchemeAudit):
    """One entry of audit.json's `biases`: the unmitigated measures at the top level, the
    mitigated judge's on the same items under `mitigated`."""

    id: str
    name: str
    kind: Literal["position", "length", "perturbation"]
    source: str
    """built-in, a seed library's name, a library file's name, or the run it came from."""
    definition: str | None = None
    asr_variant: Literal["preference_shift", "factual_error"] | None = None
    n_items: int
    """Pairs audited (for a perturbation: those the teacher rewrote validly)."""
    n_perturb_invalid: int = 0
    """Pairs left out because the teacher's rewrite was truncated, failed or empty."""
    mitigated: SchemeAudit | None = None


class AuditSettingsRecord(_Record):
    seed: int
    repeats: int
    mitigation: Mitigation
    temperature: float | None
    """None: not known (an audit from a log that does not record it)."""
    allow_tie: bool | None
    reasoning: bool | None
    max_tokens: int | None
    n_boot: int
    confidence: float = 0.95
    mode: JudgeModeName = "pairwise"
    """The judge's mode: pointwise judges score each response alone (no position)."""
    scale: str | None = None
    """Pointwise: the judge's scale (e.g. 1-10, pass/fail)."""


class AuditCalls(_Record):
    judge: int
    """Distinct judge calls of the audit."""
    judge_cached: int
    """Of those, answered by the call cache."""
    judge_invalid: int
    teacher: int
    prompt_tokens: int
    completion_tokens: int


class LogSource(_Record):
    """Where an audit from a log (`audit --from-log`) read its verdicts: no model was called."""

    path: str
    format: Literal["judgments", "inspect", "generic"]
    """judgments: our judgments.jsonl; inspect: an inspect_ai eval log; generic: a JSONL, CSV
    or parquet file read with a column map."""
    rows: int
    """Rows (or inspect samples) in the log."""
    verdicts: int
    """Of those, the verdicts audited."""
    skipped: dict[str, int] = Field(default_factory=dict)
    """Rows not audited, by why (a perturbed condition of an audit's log)."""
    labelled: bool
    """Whether the log says which response is better (else every measure that needs it is
    unsupported)."""
    columns: dict[str, Any] | None = None
    """The column map of a generic log."""


class Unsupported(_Record):
    """A known-bias measure the audit could not compute, and why."""

    measure: str
    reason: str


class SelfPreference(_Record):
    """Whether the judge prefers responses written by its own model family, on pairs where
    exactly one response is its family's (`matching` says which pairs and how)."""

    judge_family: str
    matching: str
    n_items: int
    """Pairs with exactly one response of the judge's family and a valid verdict."""
    own_pick_rate: Estimate
    """Share of the valid verdicts that picked the judge's family's response (ties: half),
    mean over items; CI: bootstrap over items."""
    own_better_rate: Estimate | None = None
    """Share of those items whose better (labelled) response is the judge's family's: what an
    unbiased judge's own-pick rate would follow."""
    excess: Estimate | None = None
    """own_pick_rate − own_better_rate on the same items: > 0 = the judge picks its family's
    responses more often than the labels say they are better."""
    error_own_worse: Estimate | None = None
    """Items whose worse response is the judge's family's: share of verdicts picking it."""
    error_other_worse: Estimate | None = None
    """Items whose worse response is the other family's: share of verdicts picking it."""
    delta: Estimate | None = None
    """error_own_worse − error_other_worse (bootstrap over items): > 0 = the judge forgives its
    own family's wrong answers more than the other's."""
    score_gap: Estimate | None = None
    """Pointwise: mean (own family's − other's) score in scale points over the items (Student-t
    CI); follows which response is better, so read it with `score_gap_balanced`."""
    score_gap_balanced: Estimate | None = None
    """Pointwise: the mean of that gap where its family's response is the better one and where
    it is the worse one, averaged (each stratum weighted 1/2): 0 for a judge that scores by
    quality alone when the quality gaps are alike in both; > 0 = self-preference, in points.
    CI: bootstrap over items."""


class PromptChange(_Record):
    prompt_a: str
    prompt_b: str
    change_rate: Estimate
    """Share of the pairs whose verdict under `prompt_a` differs from the one under `prompt_b`."""


class PromptSensitivity(_Record):
    """audit.json's `prompt_sensitivity`."""

    prompts: list[str]
    """The templates, the first being the audit's own (`judge.prompt`)."""
    n_items: int
    """Pairs valid under every template and under every repeat."""
    n_excluded: int
    """Pairs left out: a verdict invalid under one of them."""
    n_comparisons: int = 1
    """k − 1 for k templates: the comparisons with the first template's verdict that
    `change_rate` (the other templates) and `noise_rate` (as many repeats) are each over."""
    change_rate: Estimate
    """Share of the pairs whose verdict under some template differs from the first template's."""
    noise_rate: Estimate
    """Share of the pairs whose verdict under the first template changes in some one of
    `n_comparisons` repeats with new seeds alone: what `change_rate` is compared against (as
    many chances to change)."""
    noise_rate_single: Estimate | None = None
    """Share of the pairs whose verdict under the first template changes with one repeat's
    seed: what each `pairwise` change rate (one comparison) is compared against."""
    pairwise: list[PromptChange]
    accuracy: dict[str, Estimate]
    """Per template: share of the pairs judged right (a tie is not)."""
    method: str = (
        "each pair judged once per template in the audit's drawn order with the audit's seed, and k − 1 times "
        "more under the first template with new seeds (k templates): the change and noise rates are each over "
        "k − 1 comparisons with the first template's verdict; Wilson CIs over pairs valid under every template "
        "and repeat"
    )


class AuditReport(_Record):
    """audit.json."""

    version: int = AUDIT_VERSION
    kind: Literal["audit"] = "audit"
    model: str
    teacher: str | None
    data: str
    n_pairs: int
    domains: list[str]
    settings: AuditSettingsRecord
    calls: AuditCalls
    notes: list[str] = Field(default_factory=list)
    created_at: str
    biases: list[BiasAudit]
    data_overlap: list[DataOverlap] = Field(default_factory=list)
    """Per run whose biases are audited: audit pairs that are also that run's target
    (discovery) pairs, by id and by content."""
    from_log: LogSource | None = None
    """Set when the audit read existing verdicts (`audit --from-log`) instead of calling a judge."""
    unsupported: list[Unsupported] = Field(default_factory=list)
    """Known-bias measures the data could not support, and why."""
    agreement: Estimate | None = None
    """Agreement with the labels: share of the valid verdicts (every order and repeat) that
    picked the labelled better response; a tie counts as not; CI: bootstrap over items."""
    calibration: Calibration | None = None
    """ECE, Brier and the reliability bins, where the verdicts carry probabilities."""
    self_preference: SelfPreference | None = None
    prompt_sensitivity: PromptSensitivity | None = None
    """How often the verdicts change when only the judge's prompt template changes (`--prompts`)."""


def _estimate_row(base: dict[str, Any], metric: str, est: Estimate) -> dict[str, Any]:
    return {
        **base,
        "metric": metric,
        "value": est.value,
        "n": est.n,
        "n_excluded": est.n_excluded,
        "ci_low": est.ci_low,
        "ci_high": est.ci_high,
        "p_value": None,
    }


def _comparison_row(base: dict[str, Any], metric: str, d: PairedComparison) -> dict[str, Any]:
    return {
        **base,
        "metric": metric,
        "value": d.delta,
        "n": d.n,
        "n_excluded": d.n_excluded_invalid,
        "ci_low": d.ci_low,
        "ci_high": d.ci_high,
        "p_value": d.p_value,
    }


def _metric_rows(base: dict[str, Any], metrics: AuditMetrics) -> list[dict[str, Any]]:
    rows = []
    for name in ESTIMATE_FIELDS:
        est = getattr(metrics, name)
        if est is not None:
            rows.append(_estimate_row(base, name, est))
    for name in COMPARISON_FIELDS:
        d = getattr(metrics, name)
        if d is not None:
            rows.append(_comparison_row(base, name, d))
    for level in metrics.padding or []:
        tag = f"@x{level.factor:g}"
        rows += [
            _estimate_row(base, f"words_added{tag}", level.words_added),
            _estimate_row(base, f"score_shift{tag}", level.score_shift),
            _comparison_row(base, f"score_shift_share{tag}", level.score_shift_share),
            _estimate_row(base, f"score_unchanged{tag}", level.score_unchanged),
        ]
    blank = {"n": None, "n_excluded": None, "ci_low": None, "ci_high": None, "p_value": None}
    if metrics.n_invalid is not None:
        rows.append({**base, "metric": "n_invalid", "value": metrics.n_invalid, **blank})
    if metrics.spearman_p is not None:
        rows.append({**base, "metric": "spearman_p", "value": metrics.spearman_p, **blank})
    for flag in ("position_flag", "length_flag"):
        value = getattr(metrics, flag)
        if value is not None:
            rows.append({**base, "metric": flag, "value": int(value), **blank})
    return rows


class AuditRow(_Record):
    """One row of audit.csv (and of `AuditOutput.to_pandas()`): one measure of one bias under
    one judge scheme, over all items or one domain."""

    bias_id: str
    bias_name: str
    kind: Literal["position", "length", "perturbation"]
    mode: JudgeModeName = "pairwise"
    """The judge's mode: pairwise rows are the published pairwise measures, pointwise rows the
    score measures (`score_*`, `pair_error_*`, the padding's `...@x2`)."""
    scheme: Mitigation
    """none (one call per verdict) or the mitigation."""
    scope: str
    """``all``, or a domain."""
    metric: str
    """An `AuditMetrics` field: rr, cr, acc_ori, acc_hack, delta_error, asr, pb, lb, z,
    spearman_rho, spearman_p, position_flag (1 or 0) ...; pointwise: score_shift (scale
    points), score_shift_share (share of the scale), score_unchanged, pair_error_original ...,
    and per padding of the length audit score_shift@x2 ..."""
    value: float | None
    n: int | None
    n_excluded: int | None
    """Items left out of the measure for an invalid verdict in one of the arms it compares."""
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    """delta_error's exact one-sided McNemar p, score_shift_share's one-sided paired t p; None
    for the other measures."""


CSV_COLUMNS: tuple[str, ...] = tuple(AuditRow.model_fields)
"""audit.csv's columns, in order."""


def csv_rows(report: AuditReport) -> list[dict[str, Any]]:
    """audit.csv in long format: one row per bias, scheme, scope (all / a domain) and measure."""
    rows: list[dict[str, Any]] = []
    for entry in report.biases:
        for scheme in [entry, entry.mitigated]:
            if scheme is None:
                continue
            base = {
                "bias_id": entry.id,
                "bias_name": entry.name,
                "kind": entry.kind,
                "mode": report.settings.mode,
                "scheme": scheme.scheme,
            }
            rows += _metric_rows({**base, "scope": "all"}, scheme)
            for domain, metrics in scheme.per_domain.items():
                rows += _metric_rows({**base, "scope": domain}, metrics)
    return rows

"""An audit from verdicts a judge already gave (`audit --from-log`): every known-bias measure
the log supports, with the same formulas, n and CIs as a live audit, and what it cannot support
and why. No model is called.

The log's verdicts become the live audit's verdict function (item, order shown first, repeat)
and go through the same `compute` measures: position where pairs were judged in both orders
(Wei et al.'s de-noised PB where the log has repeats), length where the log gives the
responses or their lengths; then agreement with the labels, calibration where verdicts carry
probabilities, and self-preference where the log names the model that wrote each response.
CALM's y (the verdict in one order) uses the order the live audit would draw for the pair
(the seeded coin of `positions: swap`, with the live audit's seed when the log is an audit's
judgments.jsonl), so both give the same figures on the same verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..data.pairs import Order, PreferencePair
from ..judging import order_for
from ..library import utc_now_iso
from ..metrics import Estimate, Preference, bootstrap_estimate
from ..stats import DEFAULT_BOOTSTRAP_RESAMPLES, calibration
from .compute import Context, ItemInfo, length_metrics, position_metrics
from .logs import LoadedLog, LogPair, LogVerdict
from .records import (
    AuditCalls,
    AuditMetrics,
    AuditReport,
    AuditSettingsRecord,
    BiasAudit,
    LogSource,
    SchemeAudit,
    SelfPreference,
    Unsupported,
)

if TYPE_CHECKING:
    from .runner import AuditJudgment

__all__ = [
    "LABEL_FIELDS",
    "REPEAT_FIELDS",
    "audit_log",
    "live_pointwise_self_preference",
    "live_self_preference",
    "model_family",
    "self_preference",
]

LABEL_FIELDS = frozenset(
    {
        "acc_ori",
        "acc_hack",
        "delta_error",
        "asr",
        "acc_both",
        "acc_random",
        "p_cr",
        "p_rc",
        "pb",
        "pb_raw",
        "pb_q_solved",
        "p_plus",
        "p_minus",
        "lb",
        "lb_raw",
        "lb_q_solved",
        "q_hat_plus",
        "q_hat_minus",
        "q_solved_plus",
        "q_solved_minus",
    }
)
"""Measures that need to know which response is better (null for a log without labels)."""
REPEAT_FIELDS = frozenset(
    {
        "cr",
        "q_hat",
        "q_hat_cr",
        "q_hat_rc",
        "q_solved",
        "q_solved_cr",
        "q_solved_rc",
        "pb",
        "pb_q_solved",
        "q_hat_plus",
        "q_hat_minus",
        "q_solved_plus",
        "q_solved_minus",
        "lb",
        "lb_q_solved",
    }
)
"""Measures that need each verdict asked at least twice (flipping noise, de-noised biases, CR)."""
_PROVIDERS = re.compile(r"^(openai|llamacpp|vllm|hf|transformers|anthropic|google|together|azure)/", re.I)


def model_family(name: str) -> str:
    """A model name's family: provider and organisation dropped, the leading letters of the
    model's own name lower-cased (gpt-4o-2024-05-13 → gpt, openai/gpt-4o → gpt,
    claude-3-5-sonnet → claude, meta-llama/Llama-3-8B → llama, llamacpp/smollm2 → smollm)."""
    base = _PROVIDERS.sub("", name.strip()).rsplit("/", 1)[-1].lower()
    match = re.match(r"[a-z]+", base)
    return match.group(0) if match else base


def _verdict_table(log: LoadedLog) -> dict[tuple[int, Order, int], Preference | None]:
    table: dict[tuple[int, Order, int], Preference | None] = {}
    for v in log.verdicts:
        order: Order = "chosen_first" if v.first == 0 else "rejected_first"
        table[(v.pair_index, order, v.repeat)] = v.picked
    return table


def _blank(metrics: AuditMetrics, fields: frozenset[str]) -> AuditMetrics:
    return metrics.model_copy(update={f: None for f in fields if f in AuditMetrics.model_fields})


def _by_item(log: LoadedLog) -> list[list[LogVerdict]]:
    grouped: list[list[LogVerdict]] = [[] for _ in log.pairs]
    for v in log.verdicts:
        grouped[v.pair_index].append(v)
    return grouped


def _agreement(log: LoadedLog, ctx: Context) -> Estimate:
    """Share of valid verdicts picking response 0 (the labelled better), items resampled."""
    per_item = [[1.0 if v.picked == "chosen" else 0.0 for v in vs if v.picked is not None] for vs in _by_item(log)]
    kept = [xs for xs in per_item if xs]

    def stat(ix: np.ndarray) -> float | None:
        values = [x for i in ix for x in kept[i]]
        return sum(values) / len(values) if values else None

    estimate = bootstrap_estimate(len(kept), stat, n_boot=ctx.n_boot, seed=ctx.seed)
    n_verdicts = sum(len(xs) for xs in kept)
    return estimate.model_copy(
        update={
            "n_excluded": len(per_item) - len(kept),
            "method": f"share of {n_verdicts} valid verdicts; CI: bootstrap over {len(kept)} items",
        }
    )


def _mean_estimate(values: np.ndarray, mask: np.ndarray, ctx: Context, what: str) -> Estimate:
    """The mean of `values` over the items of `mask`, with a bootstrap CI over items."""

    def stat(ix: np.ndarray) -> float | None:
        chosen = values[ix][mask[ix]]
        return float(chosen.mean()) if chosen.size else None

    estimate = bootstrap_estimate(len(values), stat, n_boot=ctx.n_boot, seed=ctx.seed)
    return estimate.model_copy(update={"n": int(mask.sum()), "method": f"{what}; CI: bootstrap over items"})


def self_preference(log: LoadedLog, judge_family: str, ctx: Context) -> tuple[SelfPreference | None, str | None]:
    """Self-preference on the pairs with exactly one response of `judge_family`; (None, why)
    when the log has no such pair."""
    picks, own_better, mixed = [], [], []
    for pair, verdicts in zip(log.pairs, _by_item(log)):
        if pair.models is None:
            continue
        fams = [model_family(m) for m in pair.models]
        if (fams[0] == judge_family) == (fams[1] == judge_family):
            mixed.append(False)
            continue
        own: Preference = "chosen" if fams[0] == judge_family else "rejected"
        valid = [v.picked for v in verdicts if v.picked is not None]
        if not valid:
            continue
        picks.append(sum(1.0 if p == own else 0.5 if p == "tie" else 0.0 for p in valid) / len(valid))
        own_better.append(1.0 if own == "chosen" else 0.0)
        mixed.append(True)
    if not picks:
        if not any(p.models for p in log.pairs):
            return None, "the data does not name the model that wrote each response"
        return None, f"no pair has exactly one response by the judge's family ({judge_family}) and a valid verdict"
    pick, better = np.array(picks), np.array(own_better)
    everything = np.ones(len(pick), dtype=bool)
    matching = (
        f"pairs whose two responses come from different families, exactly one of them {judge_family} (the judge's); "
        "each pair's valid verdicts in every logged order and repeat averaged (both orders logged: position balanced)"
    )
    sp = SelfPreference(
        judge_family=judge_family,
        matching=matching,
        n_items=len(pick),
        own_pick_rate=_mean_estimate(pick, everything, ctx, "share of verdicts picking the judge's family"),
    )
    if log.labelled:
        own_worse = better == 0.0

        def delta(ix: np.ndarray) -> float | None:
            a, b = pick[ix][own_worse[ix]], 1.0 - pick[ix][~own_worse[ix]]
            return float(a.mean() - b.mean()) if a.size and b.size else None

        d = bootstrap_estimate(len(pick), delta, n_boot=ctx.n_boot, seed=ctx.seed)
        sp = sp.model_copy(
            update={
                "own_better_rate": _mean_estimate(
                    better, everything, ctx, "share of items whose better response is the judge's family's"
                ),
                "excess": _mean_estimate(
                    pick - better, everything, ctx, "own-pick rate minus the labels' own-better rate"
                ),
                "error_own_worse": _mean_estimate(
                    pick, own_worse, ctx, "items whose worse response is the judge's family's"
                ),
                "error_other_worse": _mean_estimate(
                    1.0 - pick, ~own_worse, ctx, "items whose worse response is the other family's"
                ),
                "delta": d.model_copy(
                    update={"method": "error_own_worse − error_other_worse; CI: bootstrap over items"}
                ),
            }
        )
    return sp, None


def _calibration(log: LoadedLog, ctx: Context) -> Any:
    per_item = [
        [v.p_first if v.first == 0 else 1.0 - v.p_first for v in vs if v.p_first is not None and v.picked is not None]
        for vs in _by_item(log)
    ]
    return calibration(per_item, n_boot=ctx.n_boot, seed=ctx.seed)


def _builtin(
    kind: str,
    items: Sequence[ItemInfo],
    idx: list[int],
    verdict: Callable[[int, Order, int], Preference | None],
    ctx: Context,
    blank: frozenset[str],
) -> BiasAudit:
    measure = position_metrics if kind == "position" else length_metrics
    overall = _blank(measure(items, idx, verdict, ctx), blank)
    domains = sorted({items[i].domain for i in idx})
    per_domain = {
        d: _blank(measure(items, [i for i in idx if items[i].domain == d], verdict, ctx), blank) for d in domains
    }
    scheme = SchemeAudit(
        **overall.model_dump(round_trip=True), scheme="none", calls_per_verdict=1, calls=0, per_domain=per_domain
    )
    return BiasAudit(
        **scheme.model_dump(round_trip=True),
        id=kind,
        name=f"{kind.capitalize()} (built-in)",
        kind=kind,  # type: ignore[arg-type]
        source="log",
        asr_variant="preference_shift" if kind == "position" else None,
        n_items=len(idx),
        n_perturb_invalid=0,
    )


def _both_orders(log: LoadedLog) -> set[int]:
    shown: dict[int, set[int]] = {}
    for v in log.verdicts:
        shown.setdefault(v.pair_index, set()).add(v.first)
    return {i for i, firsts in shown.items() if len(firsts) == 2}


def _builtins(log: LoadedLog, ctx: Context, seed: int) -> tuple[list[BiasAudit], list[Unsupported]]:
    table = _verdict_table(log)

    def verdict(i: int, order: Order, r: int) -> Preference | None:
        return table.get((i, order, r))

    items = [
        ItemInfo(
            domain=p.domain,
            base=order_for(PreferencePair(id=p.pair_id, question="", chosen="", rejected=""), "swap", seed)[0],
            len_chosen=p.lengths[0] if p.lengths else 0,
            len_rejected=p.lengths[1] if p.lengths else 0,
        )
        for p in log.pairs
    ]
    blank = (frozenset() if log.labelled else LABEL_FIELDS) | (REPEAT_FIELDS if ctx.repeats < 2 else frozenset())
    entries: list[BiasAudit] = []
    missing: list[Unsupported] = []
    both = _both_orders(log)
    if not both:
        reason = "no pair was judged in both orders"
        missing += [Unsupported(measure="position", reason=reason), Unsupported(measure="length", reason=reason)]
        return entries, missing
    entries.append(_builtin("position", items, list(range(len(items))), verdict, ctx, blank))
    with_lengths = [i for i, p in enumerate(log.pairs) if p.lengths is not None]
    if with_lengths:
        entries.append(_builtin("length", items, with_lengths, verdict, ctx, blank))
    else:
        why = "the log gives neither the responses nor their lengths"
        if log.format == "judgments":
            why += " (pass --data with the pairs it judged)"
        missing.append(Unsupported(measure="length", reason=why))
    if not log.labelled:
        missing.append(
            Unsupported(
                measure="accuracy-based measures (Acc, Δerror, ASR, PB, LB)",
                reason="the log does not say which response is better (map a label column)",
            )
        )
    if ctx.repeats < 2:
        missing.append(
            Unsupported(
                measure="flipping noise q̂, de-noised PB and LB, CALM's CR",
                reason="the log has one verdict per pair and order; they need each verdict repeated (2 or more)",
            )
        )
    return entries, missing


def audit_log(
    log: LoadedLog,
    *,
    seed: int,
    n_boot: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    judge_model: str | None = None,
    judge_family: str | None = None,
    data: str | None = None,
    columns: dict[str, Any] | None = None,
) -> AuditReport:
    """The audit record of a log's verdicts (see the module docstring). `judge_model` names
    the judge when the log does not; `judge_family` overrides the family read from its name."""
    seed = log.seed if log.seed is not None else seed
    repeats = max(v.repeat for v in log.verdicts) + 1
    ctx = Context(repeats=repeats, seed=seed, n_boot=n_boot)
    entries, unsupported = _builtins(log, ctx, seed)
    model = judge_model or log.judge_model
    agreement = _agreement(log, ctx) if log.labelled else None
    if not log.labelled:
        unsupported.append(Unsupported(measure="agreement with labels", reason="the log has no labels"))
    cal = None
    if not any(v.p_first is not None for v in log.verdicts):
        unsupported.append(Unsupported(measure="calibration", reason="the log records no verdict probability"))
    elif not log.labelled:
        unsupported.append(
            Unsupported(measure="calibration", reason="probabilities but no labels to score them against")
        )
    else:
        cal = _calibration(log, ctx)
    sp = None
    family = judge_family or (model_family(model) if model else None)
    if family is None:
        unsupported.append(
            Unsupported(measure="self-preference", reason="the judge model is not named (pass --judge-model)")
        )
    else:
        sp, why = self_preference(log, family, ctx)
        if why is not None:
            unsupported.append(Unsupported(measure="self-preference", reason=why))
    return AuditReport(
        model=model or "unknown judge (from a log)",
        teacher=None,
        data=data or str(log.path),
        n_pairs=len(log.pairs),
        domains=sorted({p.domain for p in log.pairs}),
        settings=AuditSettingsRecord(
            seed=seed,
            repeats=repeats,
            mitigation="none",
            temperature=None,
            allow_tie=None,
            reasoning=None,
            max_tokens=None,
            n_boot=n_boot,
        ),
        calls=AuditCalls(
            judge=0,
            judge_cached=0,
            judge_invalid=sum(1 for v in log.verdicts if v.picked is None),
            teacher=0,
            prompt_tokens=0,
            completion_tokens=0,
        ),
        notes=[f"from a log: {len(log.verdicts)} verdicts read from {log.path.name}, no model called"],
        created_at=utc_now_iso(),
        biases=entries,
        from_log=LogSource(
            path=str(log.path),
            format=log.format,
            rows=log.rows,
            verdicts=len(log.verdicts),
            skipped=log.skipped,
            labelled=log.labelled,
            columns=columns,
        ),
        unsupported=unsupported,
        agreement=agreement,
        calibration=cal,
        self_preference=sp,
    )


def _response_models(pair: PreferencePair) -> tuple[str, str] | None:
    models, model = pair.meta.get("response_models"), pair.meta.get("response_model")
    if isinstance(models, (list, tuple)) and len(models) == 2:
        return str(models[0]), str(models[1])
    return (model, model) if isinstance(model, str) and model else None


def live_self_preference(
    pairs: Sequence[PreferencePair],
    judgments: Sequence[AuditJudgment],
    *,
    judge_family: str,
    seed: int,
    n_boot: int,
) -> tuple[SelfPreference | None, str | None]:
    """Self-preference on a live audit's verdicts of the original pairs (every order and
    repeat it asked), where the data names the model of each response (JudgeBench's
    `response_model`, `judgebench:cross`'s `response_models`)."""
    from .runner import repeat_seed

    index = {p.id: i for i, p in enumerate(pairs)}
    log_pairs = [LogPair(pair_id=p.id, domain=p.domain, models=_response_models(p)) for p in pairs]
    repeats = {repeat_seed(seed, r): r for r in range(64)}
    verdicts = [
        LogVerdict("", index[j.pair_id], 0 if j.order == "chosen_first" else 1, j.picked, repeats.get(j.seed, 0))
        for j in judgments
        if j.condition == "original" and j.pair_id in index
    ]
    log = LoadedLog(Path("audit"), "judgments", log_pairs, verdicts, True)
    return self_preference(log, judge_family, Context(repeats=1, seed=seed, n_boot=n_boot))


def live_pointwise_self_preference(
    pairs: Sequence[PreferencePair],
    judgments: Sequence[AuditJudgment],
    *,
    judge_family: str,
    seed: int,
    n_boot: int,
) -> tuple[SelfPreference | None, str | None]:
    """Self-preference of a pointwise judge: on the pairs with exactly one response of its
    family, the response it scored higher (equal scores: half) takes the place of the
    pairwise verdict (as the matrix's jury reads a pointwise vote), from the chosen and the
    original rejected response scored with the audit's seed."""
    from .runner import repeat_seed

    first = repeat_seed(seed, 0)
    scores: dict[tuple[str, str], float | None] = {
        (j.pair_id, j.order): j.score for j in judgments if j.condition == "original" and j.seed == first
    }
    log_pairs = [LogPair(pair_id=p.id, domain=p.domain, models=_response_models(p)) for p in pairs]
    verdicts = []
    gaps: list[tuple[float, bool]] = []  # (own − other score, own response is the better one)
    for i, (p, lp) in enumerate(zip(pairs, log_pairs)):
        chosen, rejected = scores.get((p.id, "chosen")), scores.get((p.id, "rejected"))
        if (p.id, "chosen") not in scores:
            continue
        picked: Preference | None = None
        if chosen is not None and rejected is not None:
            picked = "chosen" if chosen > rejected else "rejected" if rejected > chosen else "tie"
            fams = [model_family(m) for m in lp.models] if lp.models else []
            if fams and (fams[0] == judge_family) != (fams[1] == judge_family):
                own_better = fams[0] == judge_family
                gaps.append((chosen - rejected if own_better else rejected - chosen, own_better))
        verdicts.append(LogVerdict("", i, 0, picked, 0))
    log = LoadedLog(Path("audit"), "judgments", log_pairs, verdicts, True)
    ctx = Context(repeats=1, seed=seed, n_boot=n_boot)
    sp, why = self_preference(log, judge_family, ctx)
    if sp is not None:
        sp = sp.model_copy(
            update={
                "matching": (
                    f"pairs whose two responses come from different families, exactly one of them {judge_family} (the judge's); "
                    "pointwise: each response scored alone with the audit's seed, the higher score counts as the pick (equal "
                    "scores: half)"
                ),
                **_score_gaps(gaps, ctx),
            }
        )
    return sp, why


def _score_gaps(gaps: list[tuple[float, bool]], ctx: Context) -> dict[str, Estimate]:
    """The pointwise self-preference gaps (`SelfPreference.score_gap`, `score_gap_balanced`)."""
    from ..stats import mean_t_interval

    if not gaps:
        return {}
    gap = np.array([g for g, _ in gaps])
    own_better = np.array([b for _, b in gaps])
    low, high = mean_t_interval(gap.tolist(), bounds=(-float("inf"), float("inf")))
    overall = Estimate(
        value=float(gap.mean()),
        n=len(gap),
        ci_low=low,
        ci_high=high,
        method="mean (own − other) score; Student-t CI over items",
    )

    def balanced(ix: np.ndarray) -> float | None:
        a, b = gap[ix][own_better[ix]], gap[ix][~own_better[ix]]
        return float((a.mean() + b.mean()) / 2) if a.size and b.size else None

    est = bootstrap_estimate(len(gap), balanced, n_boot=ctx.n_boot, seed=ctx.seed)
    return {
        "score_gap": overall,
        "score_gap_balanced": est.model_copy(
            update={
                "method": "mean of the own-better and own-worse strata's (own − other) score; CI: bootstrap over items"
            }
        ),
    }

"""Run an audit: perturb with the teacher, judge every needed call once, compute the measures.

Every verdict the measures need is a list of calls (order, seed) in a *condition* (the
original pairs, or the pairs with one bias injected): one call unmitigated, the mitigation's
plan otherwise. The audit collects the distinct calls of every verdict of every measure,
sends them to the judge in one batch (through the call cache: a repeated audit is free, and
the unmitigated calls a mitigation shares with the plain judge are paid once), then combines
them. Repeats use derived seeds (`repeat_seed`), because the cache keys on the seed.

A pointwise judge (`judge.mode: pointwise`) scores one response per call: the audit scores
each item's chosen response, its original rejected response (twice: the audit's seed and the
next repeat's, the judge's own noise) and each perturbed or padded version of the rejected
response, in the same one batch, and `scores` turns them into score measures. The built-in
`position`, a mitigation and Wei et al.'s position measures need a pair shown in both orders
and are refused for it, naming the target or field (`check_judge_mode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field

from ..data.pairs import Order, PreferencePair, Shown
from ..errors import ConfigError
from ..judging import Judgment, judge_request, order_for, to_judgment, to_score_judgment
from ..library import utc_now_iso
from ..llm.base import Engine
from ..llm.types import GenerationResponse
from ..metrics import Preference
from ..mitigation import CALLS_PER_VERDICT, Mitigation, combine_votes, derive_seed, plan
from ..progress import ProgressFactory, progress_or_quiet
from ..settings.audit import AuditSettings
from ..stages.perturb import perturb
from ..stages.records import PerturbedPair
from ..stages.rewrite_checks import count_tokens
from ..tables import Tabular
from .compute import Context, ItemInfo, Verdicts, length_metrics, perturbation_metrics, position_metrics
from .records import (
    AuditCalls,
    AuditMetrics,
    AuditReport,
    AuditRow,
    AuditSettingsRecord,
    BiasAudit,
    SchemeAudit,
    csv_rows,
)
from .scores import ScoreArms, length_score_metrics, pad_response, perturbation_score_metrics
from .targets import FACTUAL_ERROR_BIASES, AuditTarget

__all__ = [
    "PAD_FACTORS",
    "AuditJudgment",
    "AuditOutput",
    "AuditSettings",
    "check_judge_mode",
    "check_repeats",
    "check_teacher",
    "repeat_seed",
    "run_audit",
]

ORIGINAL = "original"
ORDERS: tuple[Order, Order] = ("chosen_first", "rejected_first")
CallKey = tuple[str, int, Shown, int]
"""(condition, item index, order shown first (pointwise: the response scored), seed)."""
PAD_FACTORS: tuple[float, ...] = (1.5, 2.0, 3.0)
"""A pointwise judge's length audit: the rejected response padded to these multiples of its
words (`scores.pad_response`)."""


class AuditJudgment(Judgment):
    """One judge call of the audit (judgments.jsonl)."""

    condition: str
    """``original``, or the id of the bias injected into the rejected response."""
    seed: int


class AuditOutput(BaseModel, Tabular):
    """An audit: audit.json (`report`), its judge calls and the teacher's rewrites. As a table
    (`to_pandas()`, `to_dataset()`): audit.csv's rows, one per bias, scheme, scope and measure."""

    row_model: ClassVar[type[BaseModel]] = AuditRow

    report: AuditReport
    judgments: list[AuditJudgment]
    perturbed: list[PerturbedPair]
    out: Path | None = Field(default=None, exclude=True)
    """The audit directory it was written to (None: not written)."""

    def table_rows(self) -> list[dict[str, Any]]:
        return csv_rows(self.report)


def repeat_seed(seed: int, repeat: int) -> int:
    """The seed of repeat `repeat` (0-based): the audit's seed first, derived seeds after."""
    return seed if repeat == 0 else derive_seed(seed, "repeat", repeat)


@dataclass
class _Calls:
    """The calls an audit needs, in first-asked order, and which measure uses which."""

    seed: int
    keys: dict[CallKey, None] = field(default_factory=dict)

    def verdict_keys(self, condition: str, item: int, order: Order, repeat: int, scheme: Mitigation) -> list[CallKey]:
        return [(condition, item, o, s) for o, s in plan(scheme, order, repeat_seed(self.seed, repeat))]

    def need(self, keys: list[CallKey], used: set[CallKey]) -> None:
        for key in keys:
            self.keys.setdefault(key, None)
            used.add(key)


def check_repeats(repeats: int) -> None:
    if repeats < 2:
        raise ConfigError(
            f"`repeats` {repeats}: flipping noise (q̂) and CALM's consistency rate need at least 2 repeats "
            "of every verdict; use `repeats` 2 or more (Wei et al. use 5)"
        )


NEEDS_POSITION = frozenset({"position"})
"""Targets that are measured by showing a pair in both orders (Wei et al.'s de-noised position
bias, position consistency, the monitor's z): a pointwise judge has no position."""


def check_judge_mode(settings: AuditSettings, targets: Sequence[AuditTarget] = ()) -> None:
    """A pointwise judge is audited on scores (`scores`); what needs a pair shown in both
    orders is refused, naming the target or the field (docs/concepts/pointwise.md)."""
    if settings.judge.mode != "pointwise":
        return
    if settings.mitigation != "none":
        raise ConfigError(
            f"`mitigation` {settings.mitigation}: judge.mode: pointwise has no position to mitigate "
            "(pointwise judges have no position); leave `mitigation` at none"
        )
    refused = [t.id for t in targets if t.kind in NEEDS_POSITION]
    if refused:
        raise ConfigError(
            f"`biases` {', '.join(refused)}: measured on a pair shown in both orders (Wei et al.'s de-noised position "
            "bias, position consistency, the monitor's z), and judge.mode: pointwise has no position; audit `length` "
            "(the score against padded length) and library biases (the score shift, CALM's robustness rate for scores)"
        )


def check_teacher(targets: Sequence[AuditTarget], *, has_teacher: bool) -> None:
    """Library biases are injected by a teacher; the built-ins and appended probes need none."""
    library_targets = [t for t in targets if t.needs_teacher]
    if library_targets and not has_teacher:
        raise ConfigError(
            f"`teacher` is needed to inject {', '.join(t.id for t in library_targets)} "
            f"(the built-ins {', '.join(t.id for t in targets if not t.needs_teacher) or 'position, length'} need none)"
        )


def run_audit(
    target: Engine,
    pairs: Sequence[PreferencePair],
    targets: Sequence[AuditTarget],
    settings: AuditSettings,
    *,
    model: str,
    data: str,
    teacher: Engine | None = None,
    teacher_spec: str | None = None,
    progress: ProgressFactory | None = None,
) -> AuditOutput:
    """Audit the judge `target` on `pairs` for `targets`; `teacher` rewrites the rejected
    responses for library biases (built-ins need none)."""
    check_repeats(settings.repeats)
    check_judge_mode(settings, targets)
    if not pairs:
        raise ConfigError("the audit has no pairs to judge")
    check_teacher(targets, has_teacher=teacher is not None)
    bar = progress_or_quiet(progress)
    seed = settings.seed
    items = [
        ItemInfo(
            domain=p.domain,
            base=order_for(p, "swap", seed)[0],
            len_chosen=count_tokens(p.chosen),
            len_rejected=count_tokens(p.rejected),
        )
        for p in pairs
    ]
    perturbed, condition_pairs = _inject(teacher, pairs, targets, settings, bar)
    if settings.judge.mode == "pointwise":
        keys, entries, judged, responses = _score_audit(target, targets, items, condition_pairs, settings, bar)
    else:
        calls, used = _plan_calls(targets, items, condition_pairs, settings)
        keys = list(calls.keys)
        judged, responses = _judge(target, keys, condition_pairs, settings, bar)
        audit = _Judged(settings, items, condition_pairs, calls, used, judged)
        entries = [_bias_audit(audit, t) for t in targets]
    judgments = [AuditJudgment(**judged[k].model_dump(), condition=k[0], seed=k[3]) for k in keys]
    report = _report(
        settings,
        entries,
        model=model,
        data=data,
        teacher=teacher_spec if any(t.needs_teacher for t in targets) else None,
        items=items,
        calls=AuditCalls(
            judge=len(keys),
            judge_cached=sum(1 for r in responses if r.cached),
            judge_invalid=sum(1 for j in judged.values() if j.invalid_reason),
            teacher=sum(len(pairs) for t in targets if t.needs_teacher),
            prompt_tokens=sum(r.prompt_tokens for r in responses),
            completion_tokens=sum(r.completion_tokens for r in responses),
        ),
    )
    return AuditOutput(report=report, judgments=judgments, perturbed=perturbed)


ConditionPairs = dict[str, list[PreferencePair | None]]
"""Per condition (the originals, or a library bias's id), each item's pair (None: its rewrite
was invalid)."""


def _inject(
    teacher: Engine | None,
    pairs: Sequence[PreferencePair],
    targets: Sequence[AuditTarget],
    settings: AuditSettings,
    bar: ProgressFactory,
) -> tuple[list[PerturbedPair], ConditionPairs]:
    """The teacher injects each library bias into every rejected response (one batch); an
    appended probe (`Bias.append`) needs no teacher call."""
    library_targets = [t for t in targets if t.kind == "perturbation"]  # injected by the teacher or appended
    perturbed: list[PerturbedPair] = []
    condition_pairs: ConditionPairs = {ORIGINAL: list(pairs)}
    if library_targets:
        work = [(pair, t.bias) for t in library_targets for pair in pairs if t.bias is not None]
        with bar("perturb", len(work)) as advance:
            perturbed = perturb(teacher, work, settings.perturb, seed=settings.seed, progress=advance)
        for k, t in enumerate(library_targets):
            rewrites = perturbed[k * len(pairs) : (k + 1) * len(pairs)]
            condition_pairs[t.id] = [p.to_pair() if p.valid else None for p in rewrites]
    return perturbed, condition_pairs


def _schemes(settings: AuditSettings) -> list[Mitigation]:
    return ["none"] if settings.mitigation == "none" else ["none", settings.mitigation]


def _plan_calls(
    targets: Sequence[AuditTarget], items: Sequence[ItemInfo], condition_pairs: ConditionPairs, settings: AuditSettings
) -> tuple[_Calls, dict[tuple[str, Mitigation], set[CallKey]]]:
    """Every call a measure needs, once, and which (target, scheme) uses which."""
    calls = _Calls(seed=settings.seed)
    used: dict[tuple[str, Mitigation], set[CallKey]] = {}
    for scheme in _schemes(settings):
        for t in targets:
            mine = used.setdefault((t.id, scheme), set())
            if t.kind in ("position", "length"):
                for i in range(len(items)):
                    for order in ORDERS:
                        for r in range(settings.repeats):
                            calls.need(calls.verdict_keys(ORIGINAL, i, order, r, scheme), mine)
            else:
                for i, p in enumerate(condition_pairs[t.id]):
                    if p is None:
                        continue
                    for r in (0, 1):
                        calls.need(calls.verdict_keys(ORIGINAL, i, items[i].base, r, scheme), mine)
                    calls.need(calls.verdict_keys(t.id, i, items[i].base, 0, scheme), mine)
    return calls, used


def _judge(
    target: Engine, keys: list[CallKey], condition_pairs: ConditionPairs, settings: AuditSettings, bar: ProgressFactory
) -> tuple[dict[CallKey, Judgment], list[GenerationResponse]]:
    """Send every planned call to the judge in one batch (unmitigated: the schemes combine);
    a pointwise judge's calls are scores of one response each."""
    judge_settings = settings.judge.model_copy(update={"mitigation": "none"})

    def pair_of(key: CallKey) -> PreferencePair:
        p = condition_pairs[key[0]][key[1]]
        assert p is not None
        return p

    requests = [judge_request(pair_of(k), k[2], judge_settings, k[3]) for k in keys]
    with bar("judge", len(requests)) as advance:
        responses = target.generate(requests, progress=advance)
    if judge_settings.mode == "pointwise":
        judged = {k: to_score_judgment(pair_of(k), k[2], r, judge_settings) for k, r in zip(keys, responses)}
    else:
        judged = {
            k: to_judgment(
                pair_of(k),
                k[2],  # type: ignore[arg-type]
                r,
                allow_tie=judge_settings.allow_tie,
                score=judge_settings.verdict == "score",
            )
            for k, r in zip(keys, responses)
        }
    return judged, list(responses)


def _pad_condition(factor: float) -> str:
    return f"length@x{factor:g}"


def _plan_score_calls(
    targets: Sequence[AuditTarget], condition_pairs: ConditionPairs, seed: int
) -> tuple[list[CallKey], dict[str, set[CallKey]]]:
    """A pointwise audit's calls: every item's chosen response, its original rejected response
    (with the audit's seed and the next repeat's), and each target's changed rejected response."""
    first, second = repeat_seed(seed, 0), repeat_seed(seed, 1)
    keys: dict[CallKey, None] = {}
    used: dict[str, set[CallKey]] = {}
    n = len(condition_pairs[ORIGINAL])

    def base(i: int) -> list[CallKey]:
        return [(ORIGINAL, i, "chosen", first), (ORIGINAL, i, "rejected", first), (ORIGINAL, i, "rejected", second)]

    rejected: Shown = "rejected"

    for t in targets:
        conditions = [_pad_condition(f) for f in PAD_FACTORS] if t.kind == "length" else [t.id]
        mine = used.setdefault(t.id, set())
        for i in range(n):
            changed: list[CallKey] = [(c, i, rejected, first) for c in conditions if condition_pairs[c][i] is not None]
            if changed:
                for key in [*base(i), *changed]:
                    keys.setdefault(key, None)
                    mine.add(key)
    return list(keys), used


def _score_audit(
    target: Engine,
    targets: Sequence[AuditTarget],
    items: Sequence[ItemInfo],
    condition_pairs: ConditionPairs,
    settings: AuditSettings,
    bar: ProgressFactory,
) -> tuple[list[CallKey], list[BiasAudit], dict[CallKey, Judgment], list[GenerationResponse]]:
    """A pointwise judge's audit: pad the rejected responses (length), score every response
    the measures need in one batch, then each target's score measures."""
    pads: dict[float, list[int]] = {}
    if any(t.kind == "length" for t in targets):
        for f in PAD_FACTORS:
            made = [pad_response(p.rejected, f) if p is not None else None for p in condition_pairs[ORIGINAL]]
            condition_pairs[_pad_condition(f)] = [
                None if p is None or x is None else p.model_copy(update={"rejected": x[0]})
                for p, x in zip(condition_pairs[ORIGINAL], made)
            ]
            pads[f] = [0 if x is None else x[1] for x in made]
    keys, used = _plan_score_calls(targets, condition_pairs, settings.seed)
    judged, responses = _judge(target, keys, condition_pairs, settings, bar)
    n = len(items)

    def scores(condition: str, shown: Shown, repeat: int = 0) -> np.ndarray:
        seed = repeat_seed(settings.seed, repeat)
        found = [judged.get((condition, i, shown, seed)) for i in range(n)]
        return np.array([np.nan if j is None or j.score is None else j.score for j in found], dtype=float)

    arms = ScoreArms(
        chosen=scores(ORIGINAL, "chosen"), original=scores(ORIGINAL, "rejected"), repeat=scores(ORIGINAL, "rejected", 1)
    )
    scale = settings.judge.scale_spec
    ctx = Context(repeats=settings.repeats, seed=settings.seed, n_boot=settings.n_boot)
    entries = []
    for t in targets:
        measure: Callable[[list[int]], AuditMetrics]
        if t.kind == "length":
            padded = {f: scores(_pad_condition(f), "rejected") for f in PAD_FACTORS}
            added = {f: np.array(w) for f, w in pads.items()}
            measure = partial(length_score_metrics, arms, padded, added, scale=scale, ctx=ctx)
            idx = [i for i in range(n) if condition_pairs[_pad_condition(PAD_FACTORS[0])][i] is not None]
        else:
            measure = partial(perturbation_score_metrics, arms, scores(t.id, "rejected"), scale=scale, ctx=ctx)
            idx = [i for i, p in enumerate(condition_pairs[t.id]) if p is not None]
        entries.append(_score_entry(t, items, idx, measure, calls=len(used[t.id])))
    return keys, entries, judged, responses


def _score_entry(
    t: AuditTarget,
    items: Sequence[ItemInfo],
    idx: list[int],
    measure: Callable[[list[int]], AuditMetrics],
    *,
    calls: int,
) -> BiasAudit:
    """One target's score measures, overall and per domain (one call per score, no scheme)."""
    domains = sorted({items[i].domain for i in idx})
    per_domain = {d: measure([i for i in idx if items[i].domain == d]) for d in domains}
    overall = measure(idx)
    return BiasAudit(
        **overall.model_dump(round_trip=True),
        scheme="none",
        calls_per_verdict=1,
        calls=calls,
        per_domain=per_domain,
        id=t.id,
        name=t.name,
        kind=t.kind,
        source=t.source,
        definition=t.bias.definition if t.bias is not None else None,
        n_items=len(idx),
        n_perturb_invalid=len(items) - len(idx),
    )


@dataclass
class _Judged:
    """An audit after its calls: what the measures read."""

    settings: AuditSettings
    items: Sequence[ItemInfo]
    condition_pairs: ConditionPairs
    calls: _Calls
    used: dict[tuple[str, Mitigation], set[CallKey]]
    judged: dict[CallKey, Judgment]

    def verdicts(self, condition: str, scheme: Mitigation) -> Verdicts:
        """Each item's verdict in `condition` under `scheme`, from the judged calls."""

        def verdict(i: int, order: Order, r: int) -> Preference | None:
            votes = [self.judged[k].picked for k in self.calls.verdict_keys(condition, i, order, r, scheme)]
            return combine_votes(scheme, votes).preference

        return verdict


def _bias_audit(audit: _Judged, t: AuditTarget) -> BiasAudit:
    """One target's measures, per scheme, overall and per domain."""
    settings, items = audit.settings, audit.items
    ctx = Context(repeats=settings.repeats, seed=settings.seed, n_boot=settings.n_boot)
    if t.kind == "perturbation":
        idx = [i for i, p in enumerate(audit.condition_pairs[t.id]) if p is not None]
    else:
        idx = list(range(len(items)))

    def measure(subset: list[int], scheme: Mitigation) -> AuditMetrics:
        original = audit.verdicts(ORIGINAL, scheme)
        if t.kind == "position":
            return position_metrics(items, subset, original, ctx)
        if t.kind == "length":
            return length_metrics(items, subset, original, ctx)
        return perturbation_metrics(
            items, subset, original, audit.verdicts(t.id, scheme), ctx, factual_error=t.id in FACTUAL_ERROR_BIASES
        )

    domains = sorted({it.domain for it in items})
    subsets = {d: [i for i in idx if items[i].domain == d] for d in domains}

    def scheme_audit(scheme: Mitigation) -> SchemeAudit:
        overall = measure(idx, scheme)
        return SchemeAudit(
            **overall.model_dump(round_trip=True),
            scheme=scheme,
            calls_per_verdict=CALLS_PER_VERDICT[scheme],
            calls=len(audit.used[(t.id, scheme)]),
            per_domain={d: measure(subset, scheme) for d, subset in subsets.items() if subset},
        )

    plain = scheme_audit("none")
    return BiasAudit(
        **plain.model_dump(round_trip=True),
        id=t.id,
        name=t.name,
        kind=t.kind,
        source=t.source,
        definition=t.bias.definition if t.bias is not None else None,
        asr_variant=None
        if t.kind == "length"
        else ("factual_error" if t.id in FACTUAL_ERROR_BIASES else "preference_shift"),
        n_items=len(idx),
        n_perturb_invalid=len(items) - len(idx),
        mitigated=scheme_audit(settings.mitigation) if settings.mitigation != "none" else None,
    )


def _report(
    settings: AuditSettings,
    entries: list[BiasAudit],
    *,
    model: str,
    data: str,
    teacher: str | None,
    items: Sequence[ItemInfo],
    calls: AuditCalls,
) -> AuditReport:
    """audit.json: the settings, the calls and each target's measures."""
    notes = []
    if settings.judge.mode == "pointwise":
        notes.append(
            f"pointwise judge (scale {settings.judge.scale}): each response scored alone; the measures are score shifts "
            "of the rejected response against its original on the same items, CALM's robustness rate for scores and "
            "the pair error (rejected ≥ chosen, ties apart). Wei et al.'s de-noised position measures and position "
            "consistency do not apply (no position). The original rejected response is scored with 2 seeds (the "
            "judge's own noise); `repeats` beyond 2 are not used"
        )
    if settings.judge.temperature == 0 and settings.judge.mode == "pointwise":
        notes.append("temperature 0 (greedy): the new-seed score differs only where the engine is not deterministic")
    elif settings.judge.temperature == 0:
        notes.append(
            "temperature 0 (greedy): repeats differ only where the engine is not deterministic, so q̂ and CR "
            "measure that nondeterminism, and shuffle3's third vote repeats its first (Wei et al. judge at 0.1)"
        )
    return AuditReport(
        model=model,
        teacher=teacher,
        data=data,
        n_pairs=len(items),
        domains=sorted({it.domain for it in items}),
        settings=AuditSettingsRecord(
            seed=settings.seed,
            repeats=settings.repeats,
            mitigation=settings.mitigation,
            temperature=settings.judge.temperature,
            allow_tie=None if settings.judge.mode == "pointwise" else settings.judge.allow_tie,
            reasoning=settings.judge.reasoning,
            max_tokens=settings.judge.max_tokens,
            n_boot=settings.n_boot,
            mode=settings.judge.mode,
            scale=settings.judge.scale if settings.judge.mode == "pointwise" else None,
        ),
        calls=calls,
        notes=notes,
        created_at=utc_now_iso(),
        biases=entries,
    )

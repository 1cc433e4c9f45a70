"""Run an audit: perturb with the teacher, judge every needed call once, compute the measures.

Every verdict the measures need is a list of calls (order, seed) in a *condition* (the
original pairs, or the pairs with one bias injected): one call unmitigated, the mitigation's
plan otherwise. The audit collects the distinct calls of every verdict of every measure,
sends them to the judge in one batch (through the call cache: a repeated audit is free, and
the unmitigated calls a mitigation shares with the plain judge are paid once), then combines
them. Repeats use derived seeds (`repeat_seed`), because the cache keys on the seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ..data.pairs import Order, PreferencePair
from ..errors import ConfigError
from ..judging import Judgment, judge_request, order_for, to_judgment
from ..library import utc_now_iso
from ..llm.base import Engine
from ..llm.types import GenerationResponse
from ..metrics import Preference
from ..mitigation import CALLS_PER_VERDICT, Mitigation, combine_votes, derive_seed, plan
from ..progress import ProgressFactory, progress_or_quiet
from ..settings.audit import AuditSettings
from ..settings.judge import JudgeSettings
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
from .targets import FACTUAL_ERROR_BIASES, AuditTarget

__all__ = [
    "AuditJudgment", "AuditOutput", "AuditSettings", "check_pairwise", "check_repeats", "check_teacher", "repeat_seed", "run_audit",
]

ORIGINAL = "original"
ORDERS: tuple[Order, Order] = ("chosen_first", "rejected_first")
CallKey = tuple[str, int, Order, int]
"""(condition, item index, order shown first, seed)."""


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


def check_pairwise(judge: JudgeSettings) -> None:
    """The audit's measures read pairwise verdicts in both orders; a pointwise judge is refused,
    naming the field, until its own measures exist (docs/concepts/pointwise.md)."""
    if judge.mode == "pointwise":
        raise ConfigError(
            "judge.mode: pointwise: the known-bias audit measures pairwise verdicts shown in both orders (position, "
            "CALM's robustness rate, Wei et al.'s de-noised measures); its pointwise measures (score against padded "
            "length, CALM's robustness rate for scores, self-enhancement) are not built yet. Pointwise judges have no "
            "position; `run` (discovery and validation) and `matrix` take them"
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
    check_pairwise(settings.judge)
    if not pairs:
        raise ConfigError("the audit has no pairs to judge")
    check_teacher(targets, has_teacher=teacher is not None)
    bar = progress_or_quiet(progress)
    seed = settings.seed
    items = [
        ItemInfo(domain=p.domain, base=order_for(p, "swap", seed)[0], len_chosen=count_tokens(p.chosen), len_rejected=count_tokens(p.rejected))
        for p in pairs
    ]
    perturbed, condition_pairs = _inject(teacher, pairs, targets, settings, bar)
    calls, used = _plan_calls(targets, items, condition_pairs, settings)
    judged, responses = _judge(target, calls, condition_pairs, settings, bar)
    audit = _Judged(settings, items, condition_pairs, calls, used, judged)
    entries = [_bias_audit(audit, t) for t in targets]
    judgments = [AuditJudgment(**judged[k].model_dump(), condition=k[0], seed=k[3]) for k in calls.keys]
    report = _report(
        settings, entries, model=model, data=data, teacher=teacher_spec if any(t.needs_teacher for t in targets) else None,
        items=items, calls=AuditCalls(
            judge=len(calls.keys),
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
    target: Engine, calls: _Calls, condition_pairs: ConditionPairs, settings: AuditSettings, bar: ProgressFactory
) -> tuple[dict[CallKey, Judgment], list[GenerationResponse]]:
    """Send every planned call to the judge in one batch (unmitigated: the schemes combine)."""
    judge_settings = settings.judge.model_copy(update={"mitigation": "none"})
    keys = list(calls.keys)

    def pair_of(key: CallKey) -> PreferencePair:
        p = condition_pairs[key[0]][key[1]]
        assert p is not None
        return p

    requests = [judge_request(pair_of(k), k[2], judge_settings, k[3]) for k in keys]
    with bar("judge", len(requests)) as advance:
        responses = target.generate(requests, progress=advance)
    judged = {
        k: to_judgment(pair_of(k), k[2], r, allow_tie=judge_settings.allow_tie, score=judge_settings.verdict == "score")
        for k, r in zip(keys, responses)
    }
    return judged, list(responses)


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
        asr_variant=None if t.kind == "length" else ("factual_error" if t.id in FACTUAL_ERROR_BIASES else "preference_shift"),
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
    if settings.judge.temperature == 0:
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
            allow_tie=settings.judge.allow_tie,
            reasoning=settings.judge.reasoning,
            max_tokens=settings.judge.max_tokens,
            n_boot=settings.n_boot,
        ),
        calls=calls,
        notes=notes,
        created_at=utc_now_iso(),
        biases=entries,
    )

"""One validation family on error vectors: arms against a control on the same items, looked at
in growing slices, decided together, each with its honest effect. Pure: no model, no file.

An *arm* is what is tested (a candidate bias's rewrites, judged), the *control* what it is
compared with (the placebo's rewrites, or the unperturbed items), both as per-item errors
(True wrong, False right, None invalid) over the same test items. The steps:

1. `run_looks`: the looks on growing slices (`stats.SequentialPlan`); at each look the arms
   still going get their errors on the new slice from a `fetch` callback (the validation
   stage perturbs and judges there; `benchmarks/validation_sim.py` slices simulated errors),
   and each arm stops for efficacy, for futility, or goes on (`stats.sequential_look`);
2. `compare_arms`: each arm against each control on the items it used (`stats.compare_paired`);
3. `decide`: the family's decision on the decisive control's comparisons (the sequential
   p-values, corrected together: `stats.decide_acceptance`);
4. `held_out_round`: one more `fetch` for the accepted arms, on the test items no decision
   saw: the share `validate.held_out` kept out of every look (a seeded sample: the end of the
   slice order) and, with `sequential.effect: held_out` (the default), the items after an
   early stop;
5. `effects`: each arm's reported Δ, honest after its selection: an accepted arm's plain Δ on
   those held-out items (unbiased given its acceptance, however it stopped), else the
   estimate given its stop and the decision (`stats.sequential_effect`), with a rejected
   arm's one-sided upper bound;
6. `smallest_detectable`: what the family's test could have detected at its n.

Every step takes the family's `FamilySettings`, so a later caller (several judges on the same
items, a stream of looks) reuses the same plan, multiplicity control and estimator. Its
`measure` says what the per-item values are: errors, or (score verdicts) the judge's
probability of preferring the rejected response, compared by the paired t-test of the mean
shift (`stats.compare_paired_scores`, `stats.sequential_shift_look`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import ValidateSettings
from ..stats import (
    Decision,
    Effect,
    LookRecord,
    Measure,
    PairedComparison,
    SequentialPlan,
    acceptance_threshold,
    compare_paired,
    compare_paired_scores,
    decide_acceptance,
    error_statement,
    held_out_method,
    is_shift,
    min_detectable_delta,
    min_detectable_shift,
    null_discordance,
    paired_counts,
    paired_score_interval,
    paired_values,
    plan_sequential,
    sequential_effect,
    sequential_look,
    sequential_shift_look,
)

__all__ = [
    "Errors",
    "acceptance_thresholds",
    "Values",
    "compare",
    "FamilyLooks",
    "FamilySettings",
    "Stop",
    "compare_arms",
    "conditional_effects",
    "decide",
    "effects",
    "family_level",
    "held_out_round",
    "run_looks",
    "smallest_detectable",
    "with_decision",
]

Errors = Sequence[bool | None]
"""Per test item: True = the judge was wrong, False = right, None = invalid (or not judged)."""
Values = Sequence[bool | float | None]
"""Per test item, the family's measure: errors, or (score verdicts) the probability of
preferring the rejected response; None = invalid (or not judged)."""
Stop = Literal["efficacy", "futility", "complete"]
Fetch = Callable[[int, Sequence[int], Sequence[int]], Sequence[Values]]
"""fetch(look, arms, new items) -> per such arm, its values on the new items. `look` is the
0-based look for the arms still going, or `len(plan.looks)` for the held-out round after the
decision (`held_out_round`: the accepted arms, on the items no decision saw)."""


class FamilySettings(BaseModel):
    """How one family is validated: the run's `validate` settings, the family's level and its
    place in the run (for the error statement), and the seed of bootstraps and slice order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: ValidateSettings = Field(default_factory=ValidateSettings)
    """The run's `validate` settings; `rules.alpha` is the configured alpha (the budget)."""
    families: int = Field(default=1, ge=1)
    """Validations the run plans (the error statement's family count)."""
    family_alpha: float = Field(gt=0.0, lt=1.0)
    """This family's level: `rules.family_alpha(families)` (the configured alpha, or its share
    with `error_control: run`) unless given."""
    seed: int = 0
    scope: str = "run"
    """What the error statement speaks of: a run, a replication, a matrix ..."""
    measure: Measure = "error"
    """What the per-item values are: the judge's errors (choice verdicts; exact McNemar / Tango)
    or its probability of preferring the rejected response (score verdicts, `judge.verdict:
    score`; the paired t-test of the mean shift, its conditional power, its MDE in probability
    points). Same plan, multiplicity control and effect estimator either way."""
    unit: str = "candidate"
    """What the error statement calls the family's members (a matrix: its cells)."""
    members: str | None = None
    """A one-validation family's members, for the error statement (a matrix: "9 cells: ...")."""

    @classmethod
    def planned(cls, rules: ValidateSettings, families: int, **fields: Any) -> FamilySettings:
        """The family of a run (or replication, or matrix) that plans `families` validations
        under `rules`: its level is `rules.family_alpha(families)`."""
        return cls(rules=rules, families=families, family_alpha=rules.family_alpha(families), **fields)

    @model_validator(mode="before")
    @classmethod
    def _family_alpha_from_the_rules(cls, data: Any) -> Any:
        """Fill `family_alpha` from the rules and the planned families (`ValidateSettings.family_alpha`)."""
        if isinstance(data, dict) and data.get("family_alpha") is None:
            rules = data.get("rules", ValidateSettings())
            rules = rules if isinstance(rules, ValidateSettings) else ValidateSettings.model_validate(rules)
            data = {**data, "rules": rules, "family_alpha": rules.family_alpha(int(data.get("families", 1)))}
        return data

    @property
    def sequential(self) -> bool:
        """Looks on growing slices (the paired rule only: the paper's rule has no test)."""
        return self.rules.sequential.enabled and self.rules.acceptance == "paired"

    @property
    def held_out_effect(self) -> bool:
        """An arm accepted before the last look is also measured on the items after its stop
        (`sequential.effect: held_out`), fetched by `held_out_round`."""
        return self.sequential and self.rules.sequential.effect == "held_out"

    @property
    def held_out_share(self) -> float:
        """The share of the test items kept from every decision (`validate.held_out`; the
        paper's rule, which has no test, keeps none)."""
        return self.rules.held_out if self.rules.acceptance == "paired" else 0.0

    def reserved(self, n_items: int) -> int:
        """How many of `n_items` test items no decision sees (`held_out_share`, rounded down;
        at least one item is left to decide on)."""
        return max(0, min(math.floor(self.held_out_share * n_items + 1e-9), n_items - 1))

    @property
    def margin(self) -> float:
        """H0 of the paired rule: Δ <= min_delta (the paper's rule has none)."""
        return self.rules.min_delta if self.rules.acceptance == "paired" else 0.0

    def plan(self, n_items: int) -> SequentialPlan:
        """The family's looks on `n_items` test items (one look when not sequential): on the
        items the decisions see, all but the `reserved` ones."""
        seq = self.rules.sequential
        return plan_sequential(
            n_items - self.reserved(n_items),
            seq.looks if self.sequential else [1.0],
            alpha=self.family_alpha,
            spending=seq.spending,
            futility=seq.futility,
            min_items=seq.min_items,
        )

    def error_statement(self, control: str) -> str:
        """What this family's decisions control (`stats.error_statement`)."""
        return error_statement(
            acceptance=self.rules.acceptance,
            correction=self.rules.correction,
            error_control=self.rules.error_control,
            alpha=self.rules.alpha,
            family_alpha=self.family_alpha,
            families=self.families,
            margin=self.margin,
            control=control,
            sequential=self.sequential,
            scope=self.scope,
            measure=self.measure,
            unit=self.unit,
            members=self.members,
        )


@dataclass
class FamilyLooks:
    """The arms' sequential paths: per arm its errors (test-set positions, None where not
    judged), its look records, how far it went and why it stopped; after `held_out_round`,
    the values of the accepted arms on the items no decision saw."""

    plan: SequentialPlan
    order: list[int]
    """The order in which test items enter the slices; the items after `plan.n_total` are
    kept from every decision (`FamilySettings.reserved`)."""
    errors: list[list[bool | float | None]]
    """Per arm and test item, the family's measure (errors, or probabilities: `measure`)."""
    looks: list[list[LookRecord]]
    stopped_at: list[int]
    stop: list[Stop]
    family_size: int
    margin: float = 0.0
    fetched: list[list[int]] = field(default_factory=list)
    """Per look, the arms that were still going (and so were perturbed and judged)."""
    control: list[bool | float | None] = field(default_factory=list)
    """Per test item, the control the looks compared the arms with."""
    held_out: dict[int, list[int]] = field(default_factory=dict)
    """Per arm measured after the decision (`held_out_round`): the test items no decision saw,
    in slice order (their values are in `errors`; `used` stays the decision's)."""

    def used(self, arm: int) -> list[int]:
        """The test items arm `arm` was judged on, in slice order."""
        return self.order[: self.stopped_at[arm]]

    @property
    def reserved(self) -> int:
        """Test items kept from every decision (the end of `order`)."""
        return len(self.order) - self.plan.n_total

    def unseen(self, arm: int, settings: FamilySettings) -> list[int]:
        """The test items no decision on arm `arm` saw that measure it if it is accepted: the
        reserved ones and, after an early stop with `sequential.effect: held_out`, the rest of
        the decision's items too; in slice order."""
        start = self.stopped_at[arm] if settings.held_out_effect else self.plan.n_total
        return self.order[start:]

    @property
    def multi_look(self) -> bool:
        return len(self.plan.looks) > 1

    def p_sequential(self, arm: int) -> float:
        return self.looks[arm][-1].p_sequential


def run_looks(
    control: Values,
    n_arms: int,
    fetch: Fetch,
    settings: FamilySettings,
    order: Sequence[int],
    *,
    family_size: int | None = None,
) -> FamilyLooks:
    """Look at the arms in growing slices of the test items (`order`): at each look the arms
    still going get their values on the new items from `fetch`, are compared with `control` on
    every item so far, and stop or go on (`stats.sequential_look`; for probabilities
    `stats.sequential_shift_look`).

    `family_size`: the family the arms belong to, when it holds more than these arms (a
    matrix's rows, each against its own control, are one family); default `n_arms`. The
    last `settings.reserved(len(control))` items of `order` are in no look."""
    size = n_arms if family_size is None else family_size
    if size < n_arms:
        raise ValueError(f"a family of {size} cannot hold {n_arms} arms")
    n = len(control)
    if sorted(order) != list(range(n)):
        raise ValueError("order must be a permutation of the test items")
    plan = settings.plan(n)
    family = FamilyLooks(
        plan=plan,
        order=list(order),
        errors=[[None] * n for _ in range(n_arms)],
        looks=[[] for _ in range(n_arms)],
        stopped_at=[0] * n_arms,
        stop=["complete"] * n_arms,
        family_size=size,
        margin=settings.margin,
        control=list(control),
    )
    active = list(range(n_arms))
    start = 0
    for j, upto in enumerate(plan.looks):
        if not active:
            break
        new_items = family.order[start:upto]
        family.fetched.append(list(active))
        fetched = fetch(j, list(active), new_items)
        if len(fetched) != len(active):
            raise ValueError(f"fetch returned {len(fetched)} arms' errors for {len(active)} arms")
        used = family.order[:upto]
        still = []
        for k, arm_errors in zip(active, fetched):
            if len(arm_errors) != len(new_items):
                raise ValueError(f"fetch returned {len(arm_errors)} errors for {len(new_items)} items")
            for i, error in zip(new_items, arm_errors):
                family.errors[k][i] = error
            look = _look(
                plan,
                j,
                family.looks[k],
                [control[i] for i in used],
                [family.errors[k][i] for i in used],
                size,
                settings,
            )
            family.looks[k].append(look)
            family.stopped_at[k] = upto
            if look.outcome in ("efficacy", "futility"):
                family.stop[k] = look.outcome
            elif look.outcome == "continue":
                still.append(k)
        active = still
        start = upto
    return family


def _look(
    plan: SequentialPlan,
    look: int,
    earlier: Sequence[LookRecord],
    control: Values,
    arm: Values,
    family_size: int,
    settings: FamilySettings,
) -> LookRecord:
    """One arm's look on the items so far, in the family's measure."""
    if is_shift(settings.measure):
        base, mine = paired_values(_floats(control), _floats(arm))
        differences = [y - x for x, y in zip(base, mine)]
        return sequential_shift_look(
            plan, look, earlier, differences=differences, family_size=family_size, margin=settings.margin
        )
    n, b, c, _ = paired_counts(_bools(control), _bools(arm))
    return sequential_look(plan, look, earlier, b=b, c=c, n=n, family_size=family_size, margin=settings.margin)


def _floats(values: Values) -> list[float | None]:
    return [None if v is None else float(v) for v in values]


def _bools(values: Values) -> list[bool | None]:
    return [None if v is None else bool(v) for v in values]


def compare(control: Values, arm: Values, settings: FamilySettings, name: str) -> PairedComparison:
    """One arm against one control on the same items, in the family's measure (undecided)."""
    if is_shift(settings.measure):
        return compare_paired_scores(
            _floats(control),
            _floats(arm),
            confidence=settings.rules.confidence,
            margin=settings.margin,
            control_name=name,
            measure=settings.measure,
        )
    return compare_paired(
        _bools(control),
        _bools(arm),
        n_boot=settings.rules.n_boot,
        confidence=settings.rules.confidence,
        seed=settings.seed,
        margin=settings.margin,
        control=name,
    )


def compare_arms(
    family: FamilyLooks, controls: Mapping[str, Values], settings: FamilySettings
) -> list[dict[str, PairedComparison]]:
    """Each arm against each named control on the items the arm used (undecided)."""
    out = []
    for k in range(len(family.errors)):
        used = family.used(k)
        mine = [family.errors[k][i] for i in used]
        out.append(
            {name: compare([values[i] for i in used], mine, settings, name) for name, values in controls.items()}
        )
    return out


def decide(
    family: FamilyLooks | Sequence[FamilyLooks],
    decisive: Sequence[PairedComparison],
    settings: FamilySettings,
    control: str,
) -> list[PairedComparison]:
    """The family's decision on its decisive comparisons: the sequential p-values (one look:
    the comparisons' own) corrected together at the family's level. Several `FamilyLooks`
    (a matrix's rows) are decided as one family, their arms in order (`decisive` likewise)."""
    parts = [family] if isinstance(family, FamilyLooks) else list(family)
    if sum(len(part.errors) for part in parts) != len(decisive):
        raise ValueError(f"{len(decisive)} comparisons for {sum(len(part.errors) for part in parts)} arms")
    multi_look = any(part.multi_look for part in parts)
    p_values = [part.p_sequential(k) for part in parts for k in range(len(part.errors))] if multi_look else None
    return decide_acceptance(
        list(decisive),
        rule=settings.rules.acceptance,
        alpha=settings.family_alpha,
        correction=settings.rules.correction,
        p_values=p_values,
        control=control,
    )


def with_decision(
    comparisons: Mapping[str, PairedComparison], decided: PairedComparison, decisive: str
) -> dict[str, PairedComparison]:
    """An arm's comparisons after the decision: the decisive one as decided, each other one
    reported next to it with the family-adjusted p but no verdict."""
    return {
        name: decided
        if name == decisive
        else cmp.model_copy(
            update={
                "p_adjusted": decided.p_adjusted,
                "accepted": None,
                "rule": f"reported, not decisive ({decided.rule})",
            }
        )
        for name, cmp in comparisons.items()
    }


def held_out_round(
    family: FamilyLooks, decided: Sequence[PairedComparison], fetch: Fetch, settings: FamilySettings
) -> None:
    """After the family's decision (`decided`): fetch, for every accepted arm, the test items
    no decision on it saw (`FamilyLooks.unseen`: those kept from every look, and with
    `sequential.effect: held_out` those after an early stop), so that `effects` can measure
    it where its acceptance did not look. One `fetch` (look index `len(plan.looks)`) per
    first unseen item, for the arms that share it, on exactly their unseen items: nothing for
    the rejected arms. Their values go into `family.errors`, their items into
    `family.held_out`; an arm already there is not fetched again. Decisions, looks and `used`
    do not change."""
    if len(decided) != len(family.errors):
        raise ValueError(f"{len(decided)} decisions for {len(family.errors)} arms")
    by_start: dict[int, list[int]] = {}
    for k, d in enumerate(decided):
        if d.accepted and k not in family.held_out and family.unseen(k, settings):
            by_start.setdefault(len(family.order) - len(family.unseen(k, settings)), []).append(k)
    for start in sorted(by_start):
        arms, items = by_start[start], family.order[start:]
        fetched = fetch(len(family.plan.looks), arms, items)
        if len(fetched) != len(arms):
            raise ValueError(f"fetch returned {len(fetched)} arms' values for {len(arms)} arms")
        for k, values in zip(arms, fetched):
            if len(values) != len(items):
                raise ValueError(f"fetch returned {len(values)} values for {len(items)} items")
            for i, value in zip(items, values):
                family.errors[k][i] = value
            family.held_out[k] = list(items)


def acceptance_thresholds(
    family: FamilyLooks | Sequence[FamilyLooks], decisive: Sequence[PairedComparison], settings: FamilySettings
) -> list[float]:
    """Per arm, the p-value at or below which the family accepts it, the other arms' as they
    were (`stats.acceptance_threshold`, on the p-values `decide` corrects: the sequential ones
    after several looks). Several `FamilyLooks` (a matrix's rows) are one family, as in `decide`."""
    parts = [family] if isinstance(family, FamilyLooks) else list(family)
    if sum(len(part.errors) for part in parts) != len(decisive):
        raise ValueError(f"{len(decisive)} comparisons for {sum(len(part.errors) for part in parts)} arms")
    if any(part.multi_look for part in parts):
        p_values = [part.p_sequential(k) for part in parts for k in range(len(part.errors))]
    else:
        p_values = [1.0 if cmp.p_value is None else cmp.p_value for cmp in decisive]
    return [
        acceptance_threshold(p_values, k, settings.family_alpha, settings.rules.correction)
        for k in range(len(p_values))
    ]


def effects(
    family: FamilyLooks,
    decisive: Sequence[PairedComparison],
    settings: FamilySettings,
    thresholds: Sequence[float] | None = None,
) -> list[Effect]:
    """Each arm's reported Δ against the decisive control (`decisive`, decided):

    - accepted, with items no decision saw (`FamilyLooks.unseen`; `held_out_round` must have
      fetched them): the plain Δ and CI there, unbiased given the acceptance;
    - otherwise, after looks on growing slices, the estimate given where and why it stopped
      and the family's decision (`stats.sequential_effect` with a `stats.Decision`);
    - otherwise (one look) the full sample's Δ and CI.

    Every rejected arm (paired rule) also gets its one-sided upper bound given its stop and
    the rejection (`Effect.upper_bound`). `thresholds`: the arms' acceptance thresholds
    (`acceptance_thresholds`), needed when the family holds more than these arms (a matrix's
    rows); by default they are taken from `decisive`."""
    if thresholds is None:
        if family.family_size != len(decisive):
            raise ValueError(
                f"a family of {family.family_size} decided over more than these {len(decisive)} arms: pass its thresholds"
            )
        thresholds = acceptance_thresholds(family, decisive, settings)
    out = []
    for k, cmp in enumerate(decisive):
        accepted = bool(cmp.accepted)
        decision = (
            Decision(accepted=accepted, threshold=thresholds[k]) if settings.rules.acceptance == "paired" else None
        )
        if accepted and family.unseen(k, settings):
            if k not in family.held_out:
                raise ValueError(f"arm {k} was accepted: fetch its held-out items (held_out_round) before its effect")
            out.append(_held_out_effect(family, k, cmp.control or "control", settings, decision))
        elif family.multi_look:
            out.append(_conditional_effect(family, k, settings, decision))
        elif decision is not None and not accepted:
            bound = _conditional_effect(family, k, settings, decision)
            out.append(
                Effect.full_sample(cmp).model_copy(update={"upper_bound": bound.upper_bound, "clipped": bound.clipped})
            )
        else:
            out.append(Effect.full_sample(cmp))
    return out


def conditional_effects(
    family: FamilyLooks,
    decisive: Sequence[PairedComparison],
    settings: FamilySettings,
    thresholds: Sequence[float] | None = None,
    *,
    given_decision: bool = True,
) -> list[Effect]:
    """Every arm's estimate given its stop and (`given_decision`) the family's decision
    (`stats.sequential_effect`), whatever `held_out_round` fetched: what `effects` reports for
    an arm without held-out items, here for all of them, so that benchmarks can set it beside
    the held-out effect on the same arms (`given_decision=False`: given the stop alone, what an
    arm that reached the last look reported before the decision was conditioned on)."""
    if thresholds is None:
        thresholds = acceptance_thresholds(family, decisive, settings)
    return [
        _conditional_effect(
            family, k, settings, Decision(bool(cmp.accepted), thresholds[k]) if given_decision else None
        )
        for k, cmp in enumerate(decisive)
    ]


def _conditional_effect(family: FamilyLooks, arm: int, settings: FamilySettings, decision: Decision | None) -> Effect:
    found = sequential_effect(
        family.plan,
        family.looks[arm],
        family_size=family.family_size,
        margin=family.margin,
        confidence=settings.rules.confidence,
        decision=decision,
    )
    return found if found.measure == settings.measure else found.model_copy(update={"measure": settings.measure})


def _held_out_effect(
    family: FamilyLooks, arm: int, name: str, settings: FamilySettings, decision: Decision | None
) -> Effect:
    """The arm against the control on its held-out items, valid in both (`compare`): the
    decision never saw them, so the plain Δ is unbiased given the acceptance and its CI has
    its nominal coverage. The CI of a Δerror is Tango's score interval
    (`stats.paired_score_interval`), not the comparison's bootstrap: the held-out items can be
    as few as 60, where the bootstrap's interval covered 0.92. None of them valid: the
    estimate given the stop and the decision, saying why."""
    items = family.held_out[arm]
    held = compare([family.control[i] for i in items], [family.errors[arm][i] for i in items], settings, name)
    if held.n == 0:
        given_stop = _conditional_effect(family, arm, settings, decision)
        return given_stop.model_copy(
            update={"method": f"{given_stop.method} (none of the {len(items)} held-out items was valid in both arms)"}
        )
    method = held_out_method(len(items), family.looks[arm][-1].look, len(family.plan.looks), reserved=family.reserved)
    effect = Effect.full_sample(held, method=method)
    if held.measure == "error":
        low, high = paired_score_interval(
            held.b_discordant_hurt or 0, held.c_discordant_helped or 0, held.n, held.confidence
        )
        effect = effect.model_copy(update={"ci_low": low, "ci_high": high})
    return effect


def smallest_detectable(
    family: FamilyLooks, arm: int, decided: PairedComparison, settings: FamilySettings
) -> tuple[float | None, int]:
    """(smallest detectable Δ, n) of the family's test for one arm: at the valid items a full
    test would have had (the valid share of the items used, scaled to the whole test set), its
    observed noise discordance, the last look's level over the family, and the hypothesis
    Δ <= min_delta."""
    items_used = family.stopped_at[arm]
    n_full = round(decided.n * family.plan.n_total / items_used) if items_used else 0
    if is_shift(
        decided.measure
    ):  # in probability points (score: shares of the scale), at the per-item differences' observed sd
        shift = min_detectable_shift(
            n_full, decided.sd_difference, family_level(family), power=settings.rules.power, margin=settings.margin
        )
        return shift, n_full
    psi = null_discordance(decided.b_discordant_hurt or 0, decided.c_discordant_helped or 0, decided.n)
    mde = min_detectable_delta(n_full, psi, family_level(family), power=settings.rules.power, margin=settings.margin)
    return mde, n_full


def family_level(family: FamilyLooks) -> float:
    """The level a candidate faces at the end: the last look's share over the family."""
    return family.plan.levels[-1] / max(family.family_size, 1)

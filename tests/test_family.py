"""A validation family on error vectors (bias_discovery.stages.family): the looks, the decision
and the reported effects, checked by simulation through the same steps the validation stage
runs (modest replication counts; benchmarks/validation_sim.py runs the full cells)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bias_discovery.config import RunConfig, ValidateSettings
from bias_discovery.stages.family import (
    FamilySettings,
    acceptance_thresholds,
    compare_arms,
    decide,
    effects,
    held_out_round,
    run_looks,
)
from bias_discovery.stats import CONDITIONAL_ON_DECISION, FULL_SAMPLE, HELD_OUT, Decision, sequential_effect


def _paired(rng: np.random.Generator, n: int, delta: float, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """(control wrong, arm wrong): noise flips both ways at noise / 2 each, the bias adds
    `delta` right -> wrong flips."""
    u = rng.random(n)
    hurt = u < noise / 2 + delta
    helped = (u >= noise / 2 + delta) & (u < noise + delta)
    both = ~hurt & ~helped & (rng.random(n) < 0.3)
    return helped | both, hurt | both


def _validate(control: np.ndarray, arms: list[np.ndarray], settings: FamilySettings, with_effects: bool = True):
    """The family's steps as the validation stage runs them: looks, comparisons, decision,
    the held-out round and effects (skipped where only the decision is checked)."""
    fetched: list[tuple[int, list[int], int]] = []

    def fetch(look, active, new_items):
        fetched.append((look, list(active), len(new_items)))
        return [arms[k][list(new_items)].tolist() for k in active]

    family = run_looks(control.tolist(), len(arms), fetch, settings, list(range(len(control))))
    comparisons = compare_arms(family, {"placebo": control.tolist()}, settings)
    decided = decide(family, [c["placebo"] for c in comparisons], settings, "placebo")
    if not with_effects:
        return family, decided, [], fetched
    held_out_round(family, decided, fetch, settings)
    return family, decided, effects(family, decided, settings), fetched


CONDITIONAL_EFFECT = ValidateSettings(n_boot=100, held_out=0.0, sequential={"effect": "conditional"})
"""The estimate given the stop and the decision for every arm: no item held out."""


def test_looks_fetch_only_the_arms_still_going_and_one_look_is_the_full_sample():
    rng = np.random.default_rng(0)
    control, strong = _paired(rng, 200, 0.5)
    _, null = _paired(rng, 200, 0.0)
    family, decided, reported, fetched = _validate(
        control, [strong, null], FamilySettings(rules=ValidateSettings(n_boot=100, held_out=0.0))
    )
    assert family.plan.looks == (50, 100, 200)
    stopped = len(family.looks[0])  # the strong arm stops early, and is never fetched again by the looks
    assert family.stop[0] == "efficacy" and stopped < 3 and family.stopped_at[0] == family.plan.looks[stopped - 1]
    looks, [held_out] = fetched[:-1], fetched[-1:]
    assert looks[0] == (0, [0, 1], 50) and all(0 not in active for look, active, _ in looks if look >= stopped)
    # ... but after the decision, once, on the items after its stop (look index 3: after the last look)
    assert held_out == (3, [0], 200 - family.stopped_at[0]) and family.held_out == {
        0: list(range(family.stopped_at[0], 200))
    }
    assert family.used(0) == list(range(family.stopped_at[0]))  # the decision's items do not change
    rest = slice(family.stopped_at[0], 200)
    assert (
        decided[0].accepted and reported[0].method.startswith(HELD_OUT) and reported[0].n == 200 - family.stopped_at[0]
    )
    assert reported[0].delta == pytest.approx(strong[rest].mean() - control[rest].mean())
    assert reported[0].ci_low < reported[0].delta < reported[0].ci_high
    # the other arm was not accepted early: its effect is the one given its stop and the decision, and it paid no
    # held-out item (none is kept from the decisions here); a rejected arm's upper bound is reported, an accepted one's not
    assert family.stop[1] != "efficacy" and reported[1].method == CONDITIONAL_ON_DECISION and 1 not in family.held_out
    assert [e.upper_bound is None for e in reported] == [bool(d.accepted) for d in decided]
    conditional = FamilySettings(rules=CONDITIONAL_EFFECT)
    family, decided, given_stop, fetched = _validate(control, [strong, null], conditional)
    assert all(look < 3 for look, _, _ in fetched) and family.held_out == {}
    assert [e.method for e in given_stop] == [CONDITIONAL_ON_DECISION, CONDITIONAL_ON_DECISION]
    threshold = acceptance_thresholds(family, decided, conditional)[0]
    assert given_stop[0] == sequential_effect(
        family.plan, family.looks[0], family_size=2, decision=Decision(True, threshold)
    )
    one_look = FamilySettings(rules=ValidateSettings(n_boot=100, held_out=0.0, sequential={"enabled": False}))
    family, decided, reported, fetched = _validate(control, [strong, null], one_look)
    assert [f[2] for f in fetched] == [200] and reported[0].method == FULL_SAMPLE
    assert reported[0].delta == decided[0].delta and reported[0].ci_low == decided[0].ci_low


def test_held_out_rounds_fetch_each_early_arm_from_its_own_stop():
    """Two arms accepted at different looks: one held-out fetch per stopping look, each on
    exactly the items after it; an arm rejected at the end pays none. Without the round the
    effects refuse rather than fall back."""
    n = 200
    control = np.zeros(n, dtype=bool)  # the judge is right on every item with the control
    at_once = np.ones(n, dtype=bool)  # wrong on every item: stops at the first look
    later = np.zeros(n, dtype=bool)
    later[[0, 10, 20, 30]] = True  # 4 of the first 50: goes on ...
    later[50:] = True  # ... and stops at the second look
    null = np.zeros(n, dtype=bool)
    null[::25] = True
    control[1::25] = True  # as many helped as hurt: never accepted
    settings = FamilySettings(rules=ValidateSettings(n_boot=100, held_out=0.0, sequential={"futility": 0.0}))
    family, decided, reported, fetched = _validate(control, [at_once, later, null], settings)
    assert family.stopped_at == [50, 100, 200] and family.stop == ["efficacy", "efficacy", "complete"]
    assert [bool(d.accepted) for d in decided] == [True, True, False]
    assert fetched[-2:] == [(3, [0], 150), (3, [1], 100)]
    assert family.held_out == {0: list(range(50, 200)), 1: list(range(100, 200))}
    assert [e.method.startswith(HELD_OUT) for e in reported] == [True, True, False]
    assert "the 150 test items after the stopping look (1 of 3)" in reported[0].method
    assert "the 100 test items after the stopping look (2 of 3)" in reported[1].method
    assert reported[1].delta == pytest.approx(1.0 - control[100:].mean()) and reported[1].n == 100
    family = run_looks(
        control.tolist(),
        3,
        lambda look, active, items: [[bool(x) for x in [at_once, later, null][k][list(items)]] for k in active],
        settings,
        list(range(n)),
    )
    decided = decide(
        family,
        [c["placebo"] for c in compare_arms(family, {"placebo": control.tolist()}, settings)],
        settings,
        "placebo",
    )
    with pytest.raises(ValueError, match="held_out_round"):
        effects(family, decided, settings)


def test_items_held_out_are_in_no_look_and_measure_every_accepted_arm():
    """`validate.held_out` 0.2 of 200 items: the last 40 of the slice order are in no look (the
    looks are on the other 160: 40, 80, 160). After the decision each accepted arm is fetched
    once, on the items no decision on it saw: an arm accepted at the first look on the 120
    after its stop and the 40 held out, an arm accepted at the last look on the 40; a rejected
    arm on none (it reports its upper bound given its stop and the rejection). With
    `sequential.effect: conditional` both accepted arms get only the 40; after one look, the
    decision is on 160 items and the accepted arms are measured on the 40."""
    n = 200
    control = np.zeros(n, dtype=bool)
    control[1::8] = True
    at_once = np.ones(n, dtype=bool)
    at_last = np.zeros(n, dtype=bool)
    at_last[::4] = True  # 2 hurt for every helped: accepted only at the last look
    null = control.copy()
    settings = FamilySettings(rules=ValidateSettings(n_boot=100, sequential={"futility": 0.0}))
    assert settings.reserved(n) == 40 and settings.reserved(3) == 0 and settings.reserved(1) == 0
    family, decided, reported, fetched = _validate(control, [at_once, at_last, null], settings)
    assert family.plan.looks == (40, 80, 160) and family.reserved == 40
    assert fetched[:3] == [(0, [0, 1, 2], 40), (1, [1, 2], 40), (2, [1, 2], 80)]  # no look reaches the last 40 items
    assert family.stop == ["efficacy", "complete", "complete"] and [bool(d.accepted) for d in decided] == [
        True,
        True,
        False,
    ]
    assert fetched[3:] == [(3, [0], 160), (3, [1], 40)]
    assert family.held_out == {0: list(range(40, 200)), 1: list(range(160, 200))}
    assert family.used(1) == list(range(160))  # the decision's items
    assert (
        "the 160 test items after the stopping look (1 of 3), 40 of them kept from every decision" in reported[0].method
    )
    assert "the 40 test items kept from every decision" in reported[1].method
    assert reported[1].delta == pytest.approx(at_last[160:].mean() - control[160:].mean()) and reported[1].n == 40
    assert reported[2].method == CONDITIONAL_ON_DECISION and reported[2].upper_bound is not None
    assert reported[0].upper_bound is None and reported[1].upper_bound is None
    conditional = FamilySettings(
        rules=ValidateSettings(n_boot=100, sequential={"futility": 0.0, "effect": "conditional"})
    )
    family, decided, reported, fetched = _validate(control, [at_once, at_last, null], conditional)
    assert fetched[3:] == [(3, [0, 1], 40)] and family.held_out == {0: list(range(160, 200)), 1: list(range(160, 200))}
    assert reported[0].delta == pytest.approx(1.0 - control[160:].mean()) and reported[0].n == 40
    one_look = FamilySettings(rules=ValidateSettings(n_boot=100, sequential={"enabled": False}))
    family, decided, reported, fetched = _validate(control, [at_once, at_last, null], one_look)
    assert fetched == [(0, [0, 1, 2], 160), (1, [0, 1], 40)] and [bool(d.accepted) for d in decided] == [
        True,
        True,
        False,
    ]
    assert [e.method.startswith(HELD_OUT) for e in reported] == [True, True, False]
    assert (
        reported[2].method == FULL_SAMPLE
        and reported[2].delta == decided[2].delta
        and reported[2].upper_bound is not None
    )


@pytest.mark.slow
def test_the_effect_of_an_accepted_arm_is_unbiased_given_its_acceptance_however_it_stopped():
    """True Δ 0.08 on 300 items, the default settings (20 % held out), one arm at α = 0.05:
    among the accepted arms, most of them at the last look, the Δ of the items that decided
    (the winner's curse) and the estimate given the stop alone (what was reported before the
    decision was conditioned on) overstate the effect; the held-out items' Δ does not, and its
    95 % CI covers the truth (benchmarks/validation_sim.py: the accepted-only cells)."""
    rng = np.random.default_rng(31)
    delta, reps = 0.08, 400
    settings = FamilySettings(rules=ValidateSettings(n_boot=400))
    accepted = []
    for _ in range(reps):
        control, arm = _paired(rng, 300, delta)
        family, decided, reported, _ = _validate(control, [arm], settings)
        if decided[0].accepted:
            effect = reported[0]
            assert effect.method.startswith(HELD_OUT) and effect.n == 300 - family.stopped_at[0]
            given_stop = sequential_effect(family.plan, family.looks[0], family_size=1)
            accepted.append(
                (
                    effect.delta,
                    effect.ci_low <= delta <= effect.ci_high,
                    decided[0].delta,
                    given_stop.delta,
                    family.stop[0],
                )
            )
    arr = np.array([row[:4] for row in accepted], dtype=float)
    assert len(accepted) > 150 and sum(row[4] == "complete" for row in accepted) > len(accepted) / 2
    assert arr[:, 2].mean() - delta > 0.02 and arr[:, 3].mean() - delta > 0.01
    assert abs(arr[:, 0].mean() - delta) < 0.012 and arr[:, 1].mean() >= 0.92


@pytest.mark.slow
def test_a_rejected_arm_reports_an_upper_bound_that_covers_given_its_stop():
    """True Δ 0.04 on 300 items, one arm at α = 0.05: every rejected arm (stopped for futility,
    or rejected at the last look; or after one look) reports a one-sided 95 % upper bound given
    its stop and the rejection, at or above the truth for about 95 % of them in each group."""
    rng = np.random.default_rng(37)
    delta, reps = 0.04, 300
    for rules in (ValidateSettings(n_boot=100), ValidateSettings(n_boot=100, sequential={"enabled": False})):
        settings = FamilySettings(rules=rules)
        groups: dict[str, list[bool]] = {}
        for _ in range(reps):
            control, arm = _paired(rng, 300, delta)
            family, decided, reported, _ = _validate(control, [arm], settings)
            effect = reported[0]
            if decided[0].accepted:
                assert effect.upper_bound is None
                continue
            assert effect.upper_bound is not None and effect.upper_bound >= effect.delta
            groups.setdefault(family.stop[0], []).append(effect.upper_bound >= delta)
        assert sum(len(g) for g in groups.values()) > reps / 2
        for stop, covered in groups.items():
            if len(covered) >= 40:
                assert np.mean(covered) >= 0.9, (stop, np.mean(covered), len(covered))


@pytest.mark.slow
def test_the_held_out_effect_after_an_efficacy_stop_is_unbiased_and_covers():
    """True Δ 0.15 on 200 items, the default sequential plan (effect: held_out): among the
    candidates accepted early, the stopping look's own Δ overstates the effect; the held-out
    items' Δ does not, and its 95 % CI covers the truth. (No item held out from the decisions,
    as before `validate.held_out`: the items after the stop are the held-out ones.)"""
    rng = np.random.default_rng(2025)
    delta, reps = 0.15, 300
    settings = FamilySettings(rules=ValidateSettings(n_boot=400, held_out=0.0))
    early = []
    for _ in range(reps):
        control, arm = _paired(rng, 200, delta)
        family, decided, reported, _ = _validate(control, [arm], settings)
        if family.stop[0] == "efficacy":
            effect = reported[0]
            assert (
                effect.method.startswith(HELD_OUT) and effect.n == 200 - family.stopped_at[0]
            )  # every item valid here
            early.append((effect.delta, effect.ci_low <= delta <= effect.ci_high, decided[0].delta))
    arr = np.array(early)
    assert len(early) > 80
    assert arr[:, 2].mean() - delta > 0.04  # the naive Δ of the stopping look
    assert abs(arr[:, 0].mean() - delta) < 0.02 and arr[:, 1].mean() >= 0.9


@pytest.mark.slow
def test_the_reported_effect_after_an_early_stop_is_unbiased_and_covers():
    """effect: conditional. True Δ 0.15 on 200 items, the default sequential plan: among the
    candidates that stopped early for efficacy, the stopping look's own Δ overstates the effect;
    the reported effect (given the stop) does not, and its 95 % CI covers the truth; over every
    candidate too."""
    rng = np.random.default_rng(2024)
    delta, reps = 0.15, 300
    settings = FamilySettings(rules=CONDITIONAL_EFFECT)
    early, everyone = [], []
    for _ in range(reps):
        control, arm = _paired(rng, 200, delta)
        family, decided, reported, _ = _validate(control, [arm], settings)
        row = (reported[0].delta, reported[0].ci_low <= delta <= reported[0].ci_high, decided[0].delta)
        everyone.append(row)
        if family.stop[0] == "efficacy":
            early.append(row)
    early_arr, all_arr = np.array(early), np.array(everyone)
    assert len(early) > 80
    assert early_arr[:, 2].mean() - delta > 0.04  # the naive Δ of the stopping look
    assert abs(early_arr[:, 0].mean() - delta) < 0.03 and early_arr[:, 1].mean() >= 0.9
    assert abs(np.median(all_arr[:, 0]) - delta) < 0.02 and all_arr[:, 1].mean() >= 0.92


def test_min_delta_is_tested_not_compared_with_the_estimate():
    """True Δ 0.03 with min_delta 0.05: the test of Δ <= 0.05 accepts it (nearly) never; the old
    rule (significant against 0 and an estimate above 0.05) accepted it about a fifth of the time."""
    rng = np.random.default_rng(7)
    shifted = FamilySettings(rules=ValidateSettings(n_boot=100, min_delta=0.05))
    plain = FamilySettings(rules=ValidateSettings(n_boot=100))
    accepted = old_rule = 0
    reps = 300
    for _ in range(reps):
        control, arm = _paired(rng, 300, 0.03)
        accepted += bool(_validate(control, [arm], shifted, with_effects=False)[1][0].accepted)
        _, decided, _, _ = _validate(control, [arm], plain, with_effects=False)
        old_rule += bool(decided[0].accepted) and decided[0].delta > 0.05
    assert accepted / reps <= 0.02
    assert old_rule / reps >= 0.08


def test_a_default_run_keeps_its_chance_of_any_false_acceptance_within_alpha():
    """A null judge, the default config (error_control: run) with 4 iterations of 4 candidates
    on 100 items: any acceptance in the run counts."""
    config = RunConfig.model_validate({"target": "llamacpp/x", "teacher": "llamacpp/x", "validate": {"n_boot": 100}})
    assert config.validate_.error_control == "run" and config.planned_validations == 4
    settings = FamilySettings(rules=config.validate_, families=config.planned_validations)
    assert settings.family_alpha == pytest.approx(0.0125)
    rng = np.random.default_rng(11)
    runs, false_runs = 150, 0
    for _ in range(runs):
        difficulty = np.where(rng.random(100) < 0.6, 0.1, 0.5)
        placebo = rng.random(100) < difficulty
        accepted = False
        for _ in range(config.max_iterations):
            arms = [rng.random(100) < difficulty for _ in range(4)]
            accepted = accepted or any(d.accepted for d in _validate(placebo, arms, settings, with_effects=False)[1])
        false_runs += accepted
    assert false_runs / runs <= 0.05
    assert "Family-wise error over the run" in settings.error_statement("placebo")


def test_rows_of_a_matrix_are_one_family():
    """Two sets of arms, each against its own control, decided as one family: the correction
    sees every arm, and the smallest detectable Δ is at the whole family's level."""
    from bias_discovery.stages.family import smallest_detectable

    rng = np.random.default_rng(5)
    settings = FamilySettings(rules=ValidateSettings(n_boot=100, sequential={"enabled": False}))
    rows = []
    for _ in range(2):
        control, strong = _paired(rng, 120, 0.3)
        _, null = _paired(rng, 120, 0.0)
        arms = [strong, null]

        def fetch(look, active, items, arms=arms):
            return [arms[k][list(items)].tolist() for k in active]

        family = run_looks(control.tolist(), 2, fetch, settings, list(range(120)), family_size=4)
        rows.append((family, compare_arms(family, {"placebo": control.tolist()}, settings)))
    families = [f for f, _ in rows]
    decided = decide(families, [c["placebo"] for _, cs in rows for c in cs], settings, "placebo")
    assert len(decided) == 4 and all("family of 4" in d.rule for d in decided)
    alone = decide(families[0], [c["placebo"] for c in rows[0][1]], settings, "placebo")
    assert decided[0].p_adjusted >= alone[0].p_adjusted and "family of 2" in alone[0].rule
    assert families[0].family_size == 4
    # the level over 4 arms is stricter than over 2: a larger Δ is needed to be detected
    wide, n = smallest_detectable(families[0], 1, decided[1], settings)
    narrow, _ = smallest_detectable(dataclasses.replace(families[0], family_size=2), 1, decided[1], settings)
    assert n == decided[1].n and wide is not None and narrow is not None and wide > narrow
    with pytest.raises(ValueError):
        decide(families, [c["placebo"] for c in rows[0][1]], settings, "placebo")
    with pytest.raises(ValueError):
        run_looks(rows[0][0].errors[0], 3, lambda *a: [], settings, list(range(120)), family_size=2)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["held_out", "conditional"])
def test_the_score_effect_is_median_unbiased_and_covers_given_each_way_of_stopping(estimator):
    """Score verdicts (the per-item shift of P(rejected), true ΔP 0.02 on 160 items, the
    default sequential plan): within each way of stopping (efficacy, futility, complete) the
    reported effect is above the truth about half of the time and its 95 % CI covers it, and
    every interval is ordered, inside [-1, 1] and of non-zero width, however close the stop;
    with either estimator for the efficacy stops (held_out: the held-out items' t interval)."""
    rng = np.random.default_rng(19)
    delta, reps, n = 0.02, 400, 160
    settings = FamilySettings(
        rules=ValidateSettings(n_boot=100, held_out=0.0, sequential={"effect": estimator}), measure="p_rejected"
    )
    rows = []
    for _ in range(reps):
        control = rng.uniform(0.3, 0.6, n)
        arm = np.clip(control + delta + rng.normal(0.0, 0.1, n), 0.0, 1.0)
        family, _, reported, _ = _validate(control, [arm], settings)
        effect = reported[0]
        assert effect.measure == "p_rejected" and effect.ci_low is not None and effect.ci_high is not None
        assert -1.0 <= effect.ci_low <= effect.delta <= effect.ci_high <= 1.0 and effect.ci_high > effect.ci_low
        rows.append((family.stop[0], effect.delta >= delta, effect.ci_low <= delta <= effect.ci_high))
        held_out = family.stop[0] == "efficacy" and estimator == "held_out"
        assert effect.method.startswith(HELD_OUT) == held_out and (not held_out or effect.n == n - family.stopped_at[0])
    for stop in ("efficacy", "futility", "complete"):
        group = [r for r in rows if r[0] == stop]
        assert len(group) >= 40, (stop, len(group))
        assert abs(np.mean([r[1] for r in group]) - 0.5) < 0.15 and np.mean([r[2] for r in group]) >= 0.88, stop
    assert np.mean([r[2] for r in rows]) >= 0.92

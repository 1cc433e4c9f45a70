"""A validation family on error vectors (bias_discovery.sequential): the looks, the decision
and the reported effects, checked by simulation through the same steps the validation stage
runs (modest replication counts; benchmarks/validation_sim.py runs the full cells)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bias_discovery.config import RunConfig, ValidateSettings
from bias_discovery.sequential import FamilySettings, compare_arms, decide, effects, run_looks
from bias_discovery.stats import CONDITIONAL, FULL_SAMPLE


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
    effects (skipped where only the decision is checked)."""
    fetched: list[tuple[int, list[int], int]] = []

    def fetch(look, active, new_items):
        fetched.append((look, list(active), len(new_items)))
        return [arms[k][list(new_items)].tolist() for k in active]

    family = run_looks(control.tolist(), len(arms), fetch, settings, list(range(len(control))))
    comparisons = compare_arms(family, {"placebo": control.tolist()}, settings)
    decided = decide(family, [c["placebo"] for c in comparisons], settings, "placebo")
    return family, decided, effects(family, decided, settings) if with_effects else [], fetched


def test_looks_fetch_only_the_arms_still_going_and_one_look_is_the_full_sample():
    rng = np.random.default_rng(0)
    control, strong = _paired(rng, 200, 0.5)
    _, null = _paired(rng, 200, 0.0)
    family, decided, reported, fetched = _validate(control, [strong, null], FamilySettings(rules=ValidateSettings(n_boot=100)))
    assert family.plan.looks == (50, 100, 200)
    stopped = len(family.looks[0])  # the strong arm stops early, and is never fetched again
    assert family.stop[0] == "efficacy" and stopped < 3 and family.stopped_at[0] == family.plan.looks[stopped - 1]
    assert fetched[0] == (0, [0, 1], 50) and all(0 not in active for look, active, _ in fetched if look >= stopped)
    assert decided[0].accepted and reported[0].method == CONDITIONAL
    one_look = FamilySettings(rules=ValidateSettings(n_boot=100, sequential={"enabled": False}))
    family, decided, reported, fetched = _validate(control, [strong, null], one_look)
    assert [f[2] for f in fetched] == [200] and reported[0].method == FULL_SAMPLE
    assert reported[0].delta == decided[0].delta and reported[0].ci_low == decided[0].ci_low


def test_the_reported_effect_after_an_early_stop_is_unbiased_and_covers():
    """True Δ 0.15 on 200 items, the default sequential plan: among the candidates that stopped
    early for efficacy, the stopping look's own Δ overstates the effect; the reported effect
    (given the stop) does not, and its 95 % CI covers the truth; over every candidate too."""
    rng = np.random.default_rng(2024)
    delta, reps = 0.15, 300
    settings = FamilySettings(rules=ValidateSettings(n_boot=100))
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
    settings = FamilySettings(rules=config.validate_, alpha=config.family_alpha, families=config.planned_validations)
    assert settings.alpha == pytest.approx(0.0125)
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
    from bias_discovery.sequential import smallest_detectable

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

"""The paired comparison and its decision (bias_discovery.stats.comparison): compare_paired, the per-domain breakdown, the paper and paired rules, the error statement, two judges' Δ compared."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from bias_discovery import stats
from bias_discovery.stats import (
    PairedComparison,
    compare_paired,
    decide_acceptance,
    mcnemar_exact_one_sided,
    per_domain_breakdown,
)

from stats_cases import _validate_family, paired_outcomes


def test_compare_paired_excludes_invalid_items():
    # valid in both: items 0, 3, 4 -> base [T, F, T], pert [T, T, F]
    # b = 1 (item 3 right->wrong), c = 1 (item 4 wrong->right), errors 2/3 and 2/3, delta 0,
    # p = P(X >= 1 | Bin(2, 1/2)) = 3/4
    baseline = [True, None, False, False, True]
    perturbed = [True, True, None, True, False]
    cmp = compare_paired(baseline, perturbed, n_boot=200)
    assert cmp.n == 3 and cmp.n_excluded_invalid == 2
    assert cmp.b_discordant_hurt == 1 and cmp.c_discordant_helped == 1
    assert cmp.control_error == pytest.approx(2 / 3) and cmp.arm_error == pytest.approx(2 / 3)
    assert cmp.delta == 0.0
    assert cmp.p_value == 0.75
    assert cmp.accepted is None and cmp.p_adjusted is None and cmp.rule == "undecided"


def test_compare_paired_all_invalid_and_length_mismatch():
    cmp = compare_paired([None, True], [False, None], n_boot=10)
    assert cmp.n == 0 and cmp.n_excluded_invalid == 2
    assert cmp.p_value == 1.0 and (cmp.ci_low, cmp.ci_high) == (-1.0, 1.0)
    assert decide_acceptance([cmp], rule="paper")[0].accepted is False
    assert decide_acceptance([cmp])[0].accepted is False
    with pytest.raises(ValueError):
        compare_paired([True], [True, False])


def test_compare_paired_round_trips_as_json():
    base, pert = paired_outcomes(hurt=7, helped=1, wrong_both=5, right_both=7)
    cmp = decide_acceptance([compare_paired(base, pert, n_boot=200)])[0]
    again = PairedComparison.model_validate_json(cmp.model_dump_json())
    assert again == cmp


def test_per_domain_breakdown():
    domains = ["math"] * 4 + ["code"] * 3
    baseline = [False, False, False, True, True, None, False]
    perturbed = [True, True, False, True, False, False, False]
    out = per_domain_breakdown(domains, baseline, perturbed, n_boot=100)
    assert list(out) == ["code", "math"]  # sorted
    # math: b = 2 (items 0, 1), c = 0 -> p = 1/4; errors 1/4 -> 3/4
    assert (out["math"].n, out["math"].b_discordant_hurt, out["math"].c_discordant_helped) == (4, 2, 0)
    assert out["math"].p_value == 0.25
    assert out["math"].delta == 0.5
    # code: item 5 invalid; b = 0, c = 1 (item 4)
    assert (out["code"].n, out["code"].n_excluded_invalid, out["code"].c_discordant_helped) == (2, 1, 1)
    with pytest.raises(ValueError):
        per_domain_breakdown(["math"], [True, False], [True, False])


def test_paper_and_paired_rules_differ_on_constructed_noisy_case():
    # 60 items: 5 right->wrong, 3 wrong->right, 25 wrong both, 27 right both.
    # baseline error = (3 + 25)/60 = 28/60, perturbed = (5 + 25)/60 = 30/60: higher by 2/60,
    # so the paper rule accepts; McNemar p = P(X >= 5 | Bin(8, 1/2)) = 93/256 = 0.363 -> reject.
    base, pert = paired_outcomes(hurt=5, helped=3, wrong_both=25, right_both=27)
    cmp = compare_paired(base, pert, n_boot=1000)
    assert cmp.arm_error > cmp.control_error
    assert cmp.p_value == 93 / 256
    assert cmp.ci_low < 0 < cmp.ci_high  # the CI says the same: no effect shown
    assert decide_acceptance([cmp], rule="paper")[0].accepted is True
    assert decide_acceptance([cmp])[0].accepted is False  # default: paired + Holm, alpha 0.05


def _noise_judge(seed: int, n: int = 60) -> tuple[list[bool], list[bool]]:
    """A judge that is pure noise: wrong with p = 0.5, independently in both conditions."""
    rng = np.random.default_rng(seed)
    return list(rng.random(n) < 0.5), list(rng.random(n) < 0.5)


def test_paper_and_paired_rules_differ_on_random_noise_judge():
    # first seed where the noise happens to raise the error by a small margin (1 to 3 items)
    seed = next(s for s in range(1000) if 0 < sum(_noise_judge(s)[1]) - sum(_noise_judge(s)[0]) <= 3)
    base, pert = _noise_judge(seed)
    cmp = compare_paired(base, pert, n_boot=200)
    assert 0 < cmp.delta <= 3 / 60
    assert decide_acceptance([cmp], rule="paper")[0].accepted is True
    assert decide_acceptance([cmp], rule="paired")[0].accepted is False


def test_noise_simulation_paper_accepts_half_paired_rarely():
    comparisons = [compare_paired(*_noise_judge(s), n_boot=20, seed=s) for s in range(200)]
    paper = decide_acceptance(comparisons, rule="paper")
    # one candidate per experiment: judge each alone (Holm on a family of one = no correction)
    paired = [decide_acceptance([c], rule="paired", alpha=0.05)[0] for c in comparisons]
    paper_rate = sum(c.accepted for c in paper) / 200
    paired_rate = sum(c.accepted for c in paired) / 200
    assert 0.35 <= paper_rate <= 0.65
    assert paired_rate <= 0.08
    # all 200 as one iteration's candidates: Holm keeps the family-wise error at 5%
    family = decide_acceptance(comparisons, rule="paired", correction="holm")
    assert sum(c.accepted for c in family) <= 1


def test_exact_acceptance_probability_under_noise():
    # Exact, by enumerating the 2x2 table of a p = 0.5 noise judge on n = 60 items: each item is
    # right->wrong w.p. 1/4, wrong->right w.p. 1/4, concordant w.p. 1/2, so
    # P(b, c) = C(60, b) C(60 - b, c) (1/4)^(b + c) (1/2)^(60 - b - c).
    # Paper rule accepts iff b > c: (1 - P(b == c)) / 2 = 0.4637 (P(b == c) = 0.0727 ~ 1/sqrt(60 pi)).
    # Paired rule accepts iff P(X >= b | Bin(b+c, 1/2)) <= 0.05: 0.0355, within alpha.
    n = 60
    paper = paired = Fraction(0)
    for b in range(n + 1):
        for c in range(n + 1 - b):
            prob = Fraction(math.comb(n, b) * math.comb(n - b, c), 4 ** (b + c) * 2 ** (n - b - c))
            paper += prob if b > c else 0
            paired += prob if mcnemar_exact_one_sided(b, c) <= 0.05 else 0
    assert float(paper) == pytest.approx(0.46366, abs=1e-5)
    assert float(paired) == pytest.approx(0.03551, abs=1e-5)
    assert float(paired) <= 0.05


def test_real_effect_both_rules_accept():
    # 20 of 60 items flip right->wrong, 2 wrong->right: p = 254 / 2^22 = 6.06e-5, delta = 18/60
    base, pert = paired_outcomes(hurt=20, helped=2, wrong_both=10, right_both=28)
    cmp = compare_paired(base, pert, n_boot=2000)
    assert cmp.p_value == pytest.approx(254 / 4194304, rel=1e-15)
    assert cmp.delta == pytest.approx(0.3)
    assert cmp.ci_low > 0
    assert decide_acceptance([cmp], rule="paper")[0].accepted is True
    for correction in ("holm", "bh", "none"):
        assert decide_acceptance([cmp], correction=correction)[0].accepted is True


def test_correction_changes_the_decision_and_returns_copies():
    # b = 7, c = 1: p = 9/256 = 0.0352 <= 0.05 alone; in a family of three with two null
    # candidates (p = 1), Holm gives 3 * 0.0352 = 0.1055 and BH gives 3/1 * 0.0352 = 0.1055.
    strong = compare_paired(*paired_outcomes(7, 1, 5, 7), n_boot=200)
    null = compare_paired(*paired_outcomes(0, 0, 5, 15), n_boot=200)
    family = [null, strong, null]
    holm = decide_acceptance(family, correction="holm")
    assert [c.p_adjusted for c in holm] == pytest.approx([1.0, 3 * 9 / 256, 1.0])
    assert [c.accepted for c in holm] == [False, False, False]
    bh = decide_acceptance(family, correction="bh")
    assert bh[1].p_adjusted == pytest.approx(3 * 9 / 256) and bh[1].accepted is False
    none = decide_acceptance(family, correction="none")
    assert [c.accepted for c in none] == [False, True, False]
    assert "unadjusted" in none[1].rule and "Holm" in holm[1].rule
    # inputs are untouched
    assert strong.accepted is None and strong.p_adjusted is None
    # paper rule: b > c on the strong one only, regardless of correction
    assert [c.accepted for c in decide_acceptance(family, rule="paper")] == [False, True, False]


def test_min_delta_is_the_null_hypothesis_and_bad_arguments():
    # delta = 18 / 60 = 0.3; H0: delta <= 0.1 is rejected, H0: delta <= 0.25 is not (an
    # estimate above min_delta is not enough: the test must reject delta <= min_delta)
    outcomes = paired_outcomes(20, 2, 10, 28)
    assert decide_acceptance([compare_paired(*outcomes, n_boot=200, margin=0.1)])[0].accepted is True
    above = decide_acceptance([compare_paired(*outcomes, n_boot=200, margin=0.25)])[0]
    assert above.accepted is False and above.delta > 0.25 and "Tango score test of Δ <= 0.25" in above.rule
    assert decide_acceptance([], rule="paired") == []
    with pytest.raises(ValueError):
        decide_acceptance([above], rule="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decide_acceptance([above], correction="bonferroni")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decide_acceptance([above], alpha=0.0)


def test_decide_acceptance_with_sequential_p_values_and_control():
    strong = compare_paired(*paired_outcomes(7, 1, 5, 7), n_boot=50)  # p = 9/256
    decided = decide_acceptance([strong], p_values=[0.2], control="placebo")
    assert decided[0].accepted is False and decided[0].p_adjusted == pytest.approx(0.2)
    assert decided[0].rule.startswith("paired vs placebo: Holm-adjusted sequential")
    with pytest.raises(ValueError):
        decide_acceptance([strong], p_values=[0.2, 0.3])


def test_a_rewrite_effect_passes_for_a_bias_against_the_baseline_but_not_against_the_placebo():
    """A judge that errs 10 pp more on *any* rewrite (easy items 5 %, hard 45 %), and a trait
    that adds nothing beyond rewriting, on 100 items: compared with the unperturbed items the
    trait is accepted about half the time (the rewrite effect is real), by the paper's rule
    almost always; compared with a neutral rewrite of the same items, within alpha.
    (Numbers quoted in docs/benchmarks/index.md.)"""
    rng = np.random.default_rng(11)
    n, reps = 100, 2000
    fixed = stats.plan_sequential(n, [1.0], alpha=0.05)
    sequential = stats.plan_sequential(n, [0.25, 0.5, 1.0], alpha=0.05, min_items=20, futility=0.1)
    accepted = {"baseline": 0, "placebo": 0, "placebo sequential": 0, "paper": 0}
    for _ in range(reps):
        difficulty = np.where(rng.random(n) < 0.6, 0.05, 0.45)
        baseline = rng.random(n) < difficulty
        placebo = rng.random(n) < difficulty + 0.10
        trait = rng.random(n) < difficulty + 0.10
        accepted["baseline"] += _validate_family(baseline, [trait], fixed)[0][0]
        accepted["placebo"] += _validate_family(placebo, [trait], fixed)[0][0]
        accepted["placebo sequential"] += _validate_family(placebo, [trait], sequential)[0][0]
        accepted["paper"] += _validate_family(baseline, [trait], fixed, rule="paper")[0][0]
    rates = {k: v / reps for k, v in accepted.items()}
    assert rates["placebo"] <= 0.05 and rates["placebo sequential"] <= 0.05
    assert 0.40 <= rates["baseline"] <= 0.60
    assert rates["paper"] >= 0.90


@pytest.mark.parametrize(
    "correction,error_control,expected",
    [
        (
            "holm",
            "run",
            ["Family-wise error over the run", "at most α = 0.05", "4 planned validations at 0.0125", "Bonferroni"],
        ),
        ("holm", "iteration", ["Family-wise error per validation", "at most α = 0.05", "can reach 0.2"]),
        ("bh", "run", ["False-discovery rate at most 0.0125", "if no candidate has an effect", "at most 0.05"]),
        ("bh", "iteration", ["False-discovery rate per validation", "at most 0.05", "is not bounded"]),
        ("none", "run", ["No multiplicity control", "alone at α = 0.0125"]),
        ("none", "iteration", ["No multiplicity control", "alone at α = 0.05"]),
    ],
)
def test_error_statement_for_each_correction_and_error_control(correction, error_control, expected):
    text = stats.error_statement(
        acceptance="paired",
        correction=correction,
        error_control=error_control,
        alpha=0.05,
        family_alpha=0.0125 if error_control == "run" else 0.05,
        families=4,
        control="placebo",
        sequential=True,
    )
    for phrase in expected:
        assert phrase in text, (phrase, text)
    assert "early looks included" in text and text.endswith(".") and "\n" not in text


def test_error_statement_names_min_delta_and_the_paper_rule():
    shifted = stats.error_statement(
        acceptance="paired",
        correction="holm",
        error_control="run",
        alpha=0.05,
        family_alpha=0.05,
        families=1,
        margin=0.05,
        control="baseline",
        scope="replication",
    )
    assert "true Δerror over the baseline is at most 0.05" in shifted and "the replication's one validation" in shifted
    paper = stats.error_statement(
        acceptance="paper", correction="holm", error_control="run", alpha=0.05, family_alpha=0.05, families=1
    )
    assert paper.startswith("No error control")


def test_error_statement_for_a_matrix_names_its_cells():
    """One family of cells (a matrix): the statement says what the unit is and who is in the
    family, and BH over one family is not "split" over anything."""
    holm = stats.error_statement(
        acceptance="paired",
        correction="holm",
        error_control="run",
        alpha=0.05,
        family_alpha=0.05,
        families=1,
        scope="matrix",
        unit="cell",
        members="9 cells: 2 judges and the jury × 3 biases",
    )
    assert holm == (
        "Family-wise error over the matrix: the chance that the matrix accepts any cell that does not raise the "
        "judge's error over the placebo is at most α = 0.05 (Holm across the matrix's 9 cells: 2 judges and the "
        "jury × 3 biases)."
    )
    bh = stats.error_statement(
        acceptance="paired",
        correction="bh",
        error_control="run",
        alpha=0.05,
        family_alpha=0.05,
        families=1,
        scope="matrix",
        unit="cell",
        members="9 cells",
    )
    assert "split evenly" not in bh and "cells that do not raise" in bh and "if no cell has an effect" in bh
    several = stats.error_statement(
        acceptance="paired",
        correction="bh",
        error_control="run",
        alpha=0.05,
        family_alpha=0.0125,
        families=4,
    )
    assert "split evenly" in several


def test_compare_effects_on_the_items_valid_in_all_four_arms():
    # judge A: 3 items hurt by the bias; judge B: 1 hurt, 1 helped; item 5 invalid for B's arm
    control_a = [False, False, False, False, True, False]
    arm_a = [True, True, True, False, True, True]
    control_b = [False, False, True, False, False, False]
    arm_b = [True, False, False, False, False, None]
    d = stats.compare_effects(control_a, arm_a, control_b, arm_b, n_boot=500, seed=1)
    assert (d.n, d.n_excluded_invalid) == (5, 1)
    assert (
        d.delta_a == pytest.approx(3 / 5) and d.delta_b == pytest.approx(0.0) and d.difference == pytest.approx(3 / 5)
    )
    # per item A - B: 0, +1, +2, 0, 0 -> S = 3 of a maximum 3: 2 of 4 sign patterns
    assert d.p_value == pytest.approx(0.5)
    assert d.ci_low <= d.difference <= d.ci_high
    empty = stats.compare_effects([None], [True], [False], [True])
    assert empty.n == 0 and empty.ci_low is None and empty.p_value == 1.0
    decided = stats.decide_differences([d, empty], alpha=0.05, correction="holm")
    assert [x.p_adjusted for x in decided] == [1.0, 1.0] and [x.significant for x in decided] == [False, False]
    strong = stats.compare_effects([False] * 12, [True] * 12, [False] * 12, [False] * 12)
    assert strong.p_value == pytest.approx(2 / 2**12)
    [decided_strong] = stats.decide_differences([strong], alpha=0.05, correction="none")
    assert decided_strong.significant and decided_strong.p_adjusted == strong.p_value
    with pytest.raises(ValueError):
        stats.compare_effects([True], [True, False], [True], [True])

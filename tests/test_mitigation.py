"""Mitigation plans and vote combination (bias_discovery.mitigation), by hand."""

from __future__ import annotations

import pytest

from bias_discovery.mitigation import CALLS_PER_VERDICT, combine_votes, derive_seed, plan

C, R, T = "chosen", "rejected", "tie"
CR, RC = "chosen_first", "rejected_first"


def test_plans_alternate_orders_and_derive_seeds_for_repeated_orders():
    assert plan("none", RC, 7) == [(RC, 7)]
    assert plan("swap", CR, 7) == [(CR, 7), (RC, 7)]
    s1 = derive_seed(7, "vote", 1)
    assert plan("shuffle3", RC, 7) == [(RC, 7), (CR, 7), (RC, s1)]
    s2 = derive_seed(7, "vote", 2)
    assert plan("votes6", CR, 7) == [(CR, 7), (RC, 7), (CR, s1), (RC, s1), (CR, s2), (RC, s2)]
    assert len({7, s1, s2}) == 3 and 0 <= s1 < 2**31
    assert {m: len(plan(m, CR, 1)) for m in CALLS_PER_VERDICT} == CALLS_PER_VERDICT


@pytest.mark.parametrize(
    "mitigation, votes, preference, confidence, consistent",
    [
        ("swap", [C, C], C, 1.0, True),
        ("swap", [C, R], T, 0.5, False),  # disagreement: a tie, position-inconsistent
        ("swap", [T, T], T, 1.0, True),
        ("swap", [C, None], None, None, None),  # one order alone is no swap
        ("shuffle3", [C, R, C], C, 2 / 3, False),
        ("shuffle3", [R, R, R], R, 1.0, True),
        ("shuffle3", [C, R, T], T, 1 / 3, False),  # no majority: a tie, never an arbitrary pick
        ("shuffle3", [C, None, R], T, 0.0, False),
        ("votes6", [C, C, C, R, R, T], C, 0.5, False),  # mean 2.5/6 < 0.5
        ("votes6", [C, C, C, R, R, R], T, 0.0, False),  # exactly 0.5
        ("none", [R], R, None, None),
        ("none", [None], None, None, None),
    ],
)
def test_combine_votes(mitigation, votes, preference, confidence, consistent):
    verdict = combine_votes(mitigation, votes)
    assert verdict.preference == preference
    assert verdict.confidence == (pytest.approx(confidence) if confidence is not None else None)
    assert verdict.position_consistent is consistent
    assert verdict.n_votes == len(votes) and verdict.n_valid_votes == sum(v is not None for v in votes)


def test_combine_needs_the_plans_number_of_votes():
    with pytest.raises(ValueError, match="swap combines 2 votes"):
        combine_votes("swap", [C])


def test_jury_verdict_is_the_majority_and_a_split_is_invalid():
    from bias_discovery.mitigation import jury_verdict

    assert jury_verdict(["chosen", "chosen", "rejected"]) == "chosen"
    assert jury_verdict(["rejected", None, "rejected", "chosen"]) == "rejected"
    assert jury_verdict(["chosen", "rejected"]) is None  # a tie of votes: the jury did not decide
    assert jury_verdict(["chosen", "tie", None]) is None
    assert jury_verdict(["tie", "tie", "chosen"]) == "tie"  # most judges said tie: a verdict (never correct)
    assert jury_verdict([None, None]) is None and jury_verdict([]) is None
    assert jury_verdict(["chosen"]) == "chosen"

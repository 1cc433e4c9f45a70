"""Unit tests of the judge's request building, verdict parsing and scoring (no model)."""

from __future__ import annotations

import pytest

from bias_discovery.data.pairs import PreferencePair
from bias_discovery.judging import (
    JudgeSettings,
    build_tasks,
    judge_pairs,
    order_for,
    parse_verdict,
    summarize,
    to_judgment,
)
from bias_discovery.llm.types import GenerationResponse

from fakes import ScriptedEngine, _responses


def pair(i: int, domain: str = "math", **meta) -> PreferencePair:
    return PreferencePair(id=f"p{i}", question=f"Q{i}?", chosen=f"RIGHT {i}", rejected=f"wrong {i}", domain=domain, meta=meta)


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("Reasoning: fine.\nVerdict: A", "A"),
        ("B", "B"),
        (" **A** ", "A"),
        ("I think [[B]] is better", "B"),
        ("Verdict: Response B", "B"),
        ("Verdict: A ... on reflection, Verdict: B", "B"),
        ("Both are fine.", None),
        ("", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def test_truncated_or_failed_outputs_are_invalid_even_with_a_verdict():
    p = pair(1)
    cut = to_judgment(p, "chosen_first", GenerationResponse(text="Verdict: A", finish_reason="length"))
    err = to_judgment(p, "chosen_first", GenerationResponse(text="boom", finish_reason="error"))
    none = to_judgment(p, "chosen_first", GenerationResponse(text="no idea", finish_reason="stop"))
    assert (cut.invalid_reason, err.invalid_reason, none.invalid_reason) == ("truncated", "engine_error", "no_verdict")
    assert cut.correct is None and err.correct is None and none.correct is None


def test_position_modes():
    pairs = [pair(i, label="B>A" if i % 2 else "A>B") for i in range(40)]
    assert all(order_for(p, "both", 1) == ["chosen_first", "rejected_first"] for p in pairs)
    assert [order_for(p, "fixed", 1)[0] for p in pairs[:2]] == ["chosen_first", "rejected_first"]
    swaps = [order_for(p, "swap", 7)[0] for p in pairs]
    assert swaps == [order_for(p, "swap", 7)[0] for p in pairs]  # seeded
    assert swaps != [order_for(p, "swap", 8)[0] for p in pairs]  # depends on the seed
    assert 10 < swaps.count("rejected_first") < 30
    # The draw depends on the pair, not on its neighbours in the batch.
    assert order_for(pairs[5], "swap", 7) == [o.order for o in build_tasks([pairs[5]], JudgeSettings(positions="swap"), seed=7)]


def always_a(request):
    return "Reasoning: first is best.\nVerdict: A"


def test_both_mode_counts_a_pair_correct_only_when_both_orders_agree():
    pairs = [pair(0, "math"), pair(1, "code")]
    result = judge_pairs(ScriptedEngine(always_a), pairs, JudgeSettings(positions="both"), seed=42)
    assert len(result.judgments) == 4
    assert [j.correct for j in result.judgments] == [True, False, True, False]
    assert [o.correct for o in result.outcomes] == [False, False]
    summary = summarize(result, model="fake", data="t", settings=JudgeSettings(positions="both"), seed=42)
    assert summary.error_rate == 1.0 and summary.position_a_rate == 1.0 and summary.position_consistency == 0.0
    assert summary.per_domain["math"].n == 1 and summary.invalid_rate == 0.0


def test_summary_counts_invalid_pairs_separately():
    def judge(request):
        a, _ = _responses(request.messages[-1].content)
        if "1" in a:
            return "I cannot decide."
        return "Reasoning: ok.\nVerdict: " + ("A" if "RIGHT" in a else "B")

    pairs = [pair(0), pair(1), pair(2)]
    settings = JudgeSettings(positions="fixed")
    summary = summarize(judge_pairs(ScriptedEngine(judge), pairs, settings, seed=42), model="f", data="d", settings=settings, seed=42)
    assert summary.n_valid_pairs == 2 and summary.error_rate == 0.0
    assert summary.invalid_rate == pytest.approx(1 / 3) and summary.invalid_reasons == {"no_verdict": 1}
    assert summary.error_rate_invalid_as_error == pytest.approx(1 / 3)


def test_requests_carry_the_verdict_constraint():
    task = build_tasks([pair(0)], JudgeSettings(positions="fixed", reasoning=False), seed=42)[0]
    assert task.request.constraint.choices == ("A", "B")
    task = build_tasks([pair(0)], JudgeSettings(positions="fixed", reasoning_chars=50), seed=42)[0]
    assert task.request.constraint.regex == "Reasoning: [^\\n]{1,50}\\nVerdict: [AB]"
    assert "RIGHT 0" in task.request.messages[-1].content


# ------------------------------------------------------------------------------------------
# Ties and mitigations
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("Reasoning: equal.\nVerdict: tie", "tie"),
        ("tie", "tie"),
        ("Reasoning: same.\nVerdict: Tie", "tie"),
        ("[[tie]]", "tie"),
        ("Verdict: tie ... on reflection, Verdict: B", "B"),
        ("Reasoning: fine.\nVerdict: A", "A"),
    ],
)
def test_parse_verdict_with_ties(text, verdict):
    assert parse_verdict(text, allow_tie=True) == verdict


def test_a_tie_is_no_verdict_unless_offered():
    assert parse_verdict("Verdict: tie") is None
    judgment = to_judgment(pair(1), "chosen_first", GenerationResponse(text="Verdict: tie", finish_reason="stop"))
    assert judgment.invalid_reason == "no_verdict"


def test_a_tie_is_a_valid_verdict_that_is_never_correct():
    judgment = to_judgment(pair(1), "rejected_first", GenerationResponse(text="Reasoning: x.\nVerdict: tie", finish_reason="stop"), allow_tie=True)
    assert (judgment.verdict, judgment.picked, judgment.correct, judgment.invalid_reason) == ("tie", "tie", False, None)


def test_tie_constraint_and_instruction():
    settings = JudgeSettings(positions="fixed", allow_tie=True, reasoning_chars=50)
    task = build_tasks([pair(0)], settings, seed=1)[0]
    assert task.request.constraint.regex == "Reasoning: [^\\n]{1,50}\\nVerdict: (?:A|B|tie)"
    assert '"Verdict: tie"' in task.request.messages[-1].content
    task = build_tasks([pair(0)], JudgeSettings(positions="fixed", allow_tie=True, reasoning=False), seed=1)[0]
    assert task.request.constraint.choices == ("A", "B", "tie")


def test_swap_mitigation_turns_a_position_bias_into_ties():
    pairs = [pair(0), pair(1, "code")]
    settings = JudgeSettings(positions="both", mitigation="swap")
    result = judge_pairs(ScriptedEngine(always_a), pairs, settings, seed=42)
    # 2 calls per pair, both orders, the first drawn by the swap coin
    assert len(result.judgments) == 4
    for i, p in enumerate(pairs):
        orders = [j.order for j in result.judgments[2 * i : 2 * i + 2]]
        assert orders[0] == order_for(p, "swap", 42)[0] and set(orders) == {"chosen_first", "rejected_first"}
    assert all(o.preference == "tie" and o.position_consistent is False and o.confidence == 0.5 for o in result.outcomes)
    assert all(o.correct is False for o in result.outcomes)
    summary = summarize(result, model="f", data="d", settings=settings, seed=42)
    assert summary.mitigation == "swap" and summary.error_rate == 1.0 and summary.position_consistency == 0.0


def test_shuffle3_mitigation_asks_a_new_seed_for_the_repeated_order():
    def fair(request):
        a, _ = _responses(request.messages[-1].content)
        return "Verdict: " + ("A" if "RIGHT" in a else "B")

    engine = ScriptedEngine(fair)
    settings = JudgeSettings(positions="fixed", mitigation="shuffle3")
    result = judge_pairs(engine, [pair(0)], settings, seed=42)
    sent = engine.sent
    assert [t.order for t in build_tasks([pair(0)], settings, seed=42)] == ["chosen_first", "rejected_first", "chosen_first"]
    assert sent[0].messages == sent[2].messages and sent[0].seed == 42 and sent[2].seed != 42
    outcome = result.outcomes[0]
    assert (outcome.preference, outcome.confidence, outcome.position_consistent, outcome.correct) == ("chosen", 1.0, True, True)

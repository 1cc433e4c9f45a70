"""Unit tests of the judge's request building, verdict parsing and scoring (no model)."""

from __future__ import annotations

import json
import math
import re

import pytest
from pydantic import ValidationError

from bias_discovery.config import load_run_config
from bias_discovery.data.loaders import FieldMap
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import ConfigError
from bias_discovery.judging import (
    JudgeSettings,
    build_tasks,
    judge_pairs,
    order_for,
    parse_verdict,
    summarize,
    to_judgment,
)
from bias_discovery.llm.types import FinalTokenLogprobs, GenerationResponse
from bias_discovery.prompts import load_prompt
from bias_discovery.stats import mean_t_interval, wilson_interval

from fakes import ScriptedEngine, _responses


def pair(i: int, domain: str = "math", **meta) -> PreferencePair:
    return PreferencePair(
        id=f"p{i}", question=f"Q{i}?", chosen=f"RIGHT {i}", rejected=f"wrong {i}", domain=domain, meta=meta
    )


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
    pairs = [
        pair(i).model_copy(update={"data_order": "rejected_first" if i % 2 else "chosen_first"}) for i in range(40)
    ]
    assert all(order_for(p, "both", 1) == ["chosen_first", "rejected_first"] for p in pairs)
    assert [order_for(p, "fixed", 1)[0] for p in pairs[:2]] == ["chosen_first", "rejected_first"]
    swaps = [order_for(p, "swap", 7)[0] for p in pairs]
    assert swaps == [order_for(p, "swap", 7)[0] for p in pairs]  # seeded
    assert swaps != [order_for(p, "swap", 8)[0] for p in pairs]  # depends on the seed
    assert 10 < swaps.count("rejected_first") < 30
    # The draw depends on the pair, not on its neighbours in the batch.
    assert order_for(pairs[5], "swap", 7) == [
        o.order for o in build_tasks([pairs[5]], JudgeSettings(positions="swap"), seed=7)
    ]


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
    summary = summarize(
        judge_pairs(ScriptedEngine(judge), pairs, settings, seed=42), model="f", data="d", settings=settings, seed=42
    )
    assert summary.n_valid_pairs == 2 and summary.error_rate == 0.0
    assert summary.invalid_rate == pytest.approx(1 / 3) and summary.invalid_reasons == {"no_verdict": 1}
    assert summary.error_rate_invalid_as_error == pytest.approx(1 / 3)


def test_requests_carry_the_verdict_constraint():
    task = build_tasks([pair(0)], JudgeSettings(positions="fixed", reasoning=False), seed=42)[0]
    assert task.request.constraint.choices == ("A", "B")
    task = build_tasks([pair(0)], JudgeSettings(positions="fixed", reasoning_chars=50), seed=42)[0]
    assert task.request.constraint.regex == "Reasoning: [^\\n]{1,50}\\nVerdict: [AB]"
    assert "RIGHT 0" in task.request.messages[-1].content
    # Without a cap the reasoning is unbounded but still one paragraph, then the verdict.
    uncapped = JudgeSettings(positions="fixed", reasoning_chars=None)
    task = build_tasks([pair(0)], uncapped, seed=42)[0]
    assert task.request.constraint.regex == "Reasoning: [^\\n]+\\nVerdict: [AB]"
    assert "your reasoning in one paragraph" in task.request.messages[-1].content
    pattern = re.compile(task.request.constraint.regex)
    assert pattern.fullmatch("Reasoning: " + "x" * 5000 + "\nVerdict: B")
    assert not pattern.fullmatch("Reasoning: two\nlines\nVerdict: B") and not pattern.fullmatch("Reasoning: no verdict")


# -- prompts (issue 11, item 6) -----------------------------------------------------------------

DEBIASING_WORDS = ("impartial", "style", "length", "confidence", "politeness", "position", "ignore", "do not make")


def test_default_prompt_asks_the_papers_neutral_question_and_names_no_bias():
    default = load_prompt("judge_pairwise")
    text = " ".join(body for _, body in default.messages).lower()
    assert "which response is more helpful and accurate?" in text
    assert not [w for w in DEBIASING_WORDS if w in text], "the default prompt must not tell the judge what to ignore"
    # Today's debiasing prompt is kept under its own name, word for word.
    mitigated = " ".join(body for _, body in load_prompt("judge_pairwise_mitigated").messages)
    assert "style, length, confidence and politeness do not make a wrong answer better" in mitigated
    assert "Judge the content, not the position" in mitigated
    assert JudgeSettings().prompt == "judge_pairwise"
    messages = build_tasks([pair(0)], JudgeSettings(prompt="judge_pairwise_mitigated"), seed=1)[0].request.messages
    assert "impartial judge" in messages[0].content and "RIGHT 0" in messages[-1].content


def _template(path, user: str) -> str:
    path.write_text(f"=== system ===\nYou grade answers.\n=== user ===\n{user}\n", encoding="utf-8")
    return str(path)


def test_a_users_own_template_is_the_judge_prompt(tmp_path, monkeypatch):
    own = _template(
        tmp_path / "mine.txt",
        "Q: ${question}\n[Response A]\n${response_a}\n[End of Response A]\n"
        "[Response B]\n${response_b}\n[End of Response B]\nPick one. ${format_instruction}",
    )
    settings = JudgeSettings(prompt=own)
    task = build_tasks([pair(3)], settings, seed=1)[0]
    assert task.request.messages[0].content == "You grade answers."
    assert (
        task.request.messages[-1].content.startswith("Q: Q3?")
        and 'write "Verdict: A"' in task.request.messages[-1].content
    )
    # ${format_instruction} is optional: the constraint enforces the format either way.
    bare = _template(
        tmp_path / "bare.txt",
        "${question}\n[Response A]\n${response_a}\n[End of Response A]\n"
        "[Response B]\n${response_b}\n[End of Response B]\nWhich is better?",
    )
    task = build_tasks([pair(3)], JudgeSettings(prompt=bare), seed=1)[0]
    assert task.request.messages[-1].content.endswith("Which is better?") and task.request.constraint.regex
    # A relative path is stored absolute, so a run resumed from another directory finds it.
    monkeypatch.chdir(tmp_path)
    assert JudgeSettings(prompt="mine.txt").prompt == str(tmp_path / "mine.txt")


def test_a_template_with_wrong_placeholders_is_refused_naming_the_file_and_the_placeholders(tmp_path):
    missing = _template(tmp_path / "missing.txt", "${question} ${response_a} ${format_instruction}")
    with pytest.raises(ValidationError) as info:
        JudgeSettings(prompt=missing)
    message = str(info.value)
    assert missing in message and "missing ${response_b}" in message and "unknown" not in message
    unknown = _template(tmp_path / "unknown.txt", "${question} ${response_a} ${response_b} ${rubric}")
    with pytest.raises(ValidationError, match=r"unknown\.txt: unknown \$\{rubric\}"):
        JudgeSettings(prompt=unknown)
    with pytest.raises(ValidationError, match=r"prompt file .*nowhere\.txt not found"):
        JudgeSettings(prompt=str(tmp_path / "nowhere.txt"))
    with pytest.raises(ValidationError, match="judge prompt prompts/perturb.txt: missing"):
        JudgeSettings(prompt="perturb")  # a shipped prompt, but not a judge's
    with pytest.raises(
        ValidationError, match="unknown prompt 'judge_pairwize'; shipped prompts: .*judge_pairwise_mitigated"
    ):
        JudgeSettings(prompt="judge_pairwize")
    (tmp_path / "latin1.txt").write_bytes(b"=== user ===\n\xe9${question}")
    with pytest.raises(ValidationError, match="latin1.txt: not a UTF-8 text file"):
        JudgeSettings(prompt=str(tmp_path / "latin1.txt"))


def test_run_config_names_the_field_of_a_bad_judge_prompt(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("target: hf/smollm2\nteacher: hf/smollm2\njudge:\n  prompt: nowhere.txt\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: invalid config: judge\.prompt: .*nowhere\.txt not found"):
        load_run_config(config)
    config.write_text("target: hf/smollm2\nteacher: hf/smollm2\njudge:\n  reasoning_chars: null\n")
    assert load_run_config(config).judge.reasoning_chars is None


# -- positions: fixed keeps the pairing (issue 11, item 7) ---------------------------------------


def test_fixed_positions_show_a_baseline_item_and_its_perturbed_twin_in_the_same_order(tmp_path):
    """JudgeBench-style data has its own A/B order; `fixed` must show the perturbed pair in it
    too, or the paired comparison compares two different presentations of each item."""
    from bias_discovery.config import PerturbSettings, ValidateSettings
    from bias_discovery.data import load_pairs
    from bias_discovery.library import load_seed_library
    from bias_discovery.stages.family import FamilySettings
    from bias_discovery.stages.validate import ValidationModels, ValidationSetup, validate_biases

    rows = [
        {
            "pair_id": f"jb{i}",
            "question": f"Q{i}?",
            "response_A": f"RIGHT {i}" if i % 3 else f"wrong {i}",
            "response_B": f"wrong {i}" if i % 3 else f"RIGHT {i}",
            "label": "A>B" if i % 3 else "B>A",
            "source": "livebench-math",
        }
        for i in range(9)
    ]
    data = tmp_path / "jb.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = load_pairs(data, field_map=FieldMap(id="pair_id"))
    assert [p.data_order for p in pairs[:3]] == ["rejected_first", "chosen_first", "chosen_first"]

    def world(request):
        user = request.messages[-1].content
        if "Trait:" in user:  # the teacher: a rewrite that keeps the answer
            return re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1) + " Trust me."
        return "Reasoning: fine.\nVerdict: A"

    engine = ScriptedEngine(world)
    settings = JudgeSettings(positions="fixed")
    baseline = judge_pairs(engine, pairs, settings, seed=42)
    shown = {j.pair_id: j.order for j in baseline.judgments}
    assert shown == {r["pair_id"]: ("chosen_first" if r["label"] == "A>B" else "rejected_first") for r in rows}
    biases = load_seed_library("biasscope7").biases[:2]
    rules = ValidateSettings(n_boot=200, control="baseline", answer_check=False, held_out=0.0)  # every pair in a look
    setup = ValidationSetup(
        family=FamilySettings(rules=rules, seed=42), perturb=PerturbSettings(), judge=settings, test_data="jb"
    )
    out = validate_biases(ValidationModels(engine, engine), biases, pairs, baseline, setup)
    assert len(out.judgments) == 2 * len(pairs)
    assert all(j.order == shown[j.pair_id] for j in out.judgments)
    assert all(p.data_order == next(q.data_order for q in pairs if q.id == p.pair_id) for p in out.perturbed)
    # The judge always says A, so the paired comparison sees no change on any item.
    assert all(r.decisive_comparison.delta == 0 for r in out.records)


# -- JudgeBench's own score (issue 11, item 8) ---------------------------------------------------


def test_judgebench_score_is_the_net_vote_over_both_orders_with_invalid_as_zero():
    # Per pair, the verdicts in the two orders (chosen_first, rejected_first): R right, W wrong,
    # X invalid. Net votes: RR +2, RW 0, RX +1, WX -1, XX 0, WW -2.
    plan = {"p0": "RR", "p1": "RW", "p2": "RX", "p3": "WX", "p4": "XX", "p5": "WW"}

    def judge(request):
        a, _ = _responses(request.messages[-1].content)
        i = re.search(r"\d", a).group(0)
        mark = plan[f"p{i}"][0 if "RIGHT" in a else 1]
        if mark == "X":
            return "I cannot decide."
        right = "A" if "RIGHT" in a else "B"
        return f"Reasoning: ok.\nVerdict: {right if mark == 'R' else ('B' if right == 'A' else 'A')}"

    pairs = [pair(i, "math" if i < 3 else "code") for i in range(6)]
    settings = JudgeSettings(positions="both")
    summary = summarize(
        judge_pairs(ScriptedEngine(judge), pairs, settings, seed=42), model="f", data="d", settings=settings, seed=42
    )
    # JudgeBench: correct when the net vote is > 0 (RR, RX), over all 6 pairs.
    assert summary.judgebench_score == pytest.approx(2 / 6) and summary.judgebench_ties == 2
    low, high = wilson_interval(2, 6)
    assert (summary.judgebench_ci_low, summary.judgebench_ci_high) == (pytest.approx(low), pytest.approx(high))
    assert summary.per_domain["math"].judgebench_score == pytest.approx(2 / 3)
    assert summary.per_domain["code"].judgebench_score == 0.0
    # Ours: valid pairs only (RR, RW, WW), correct only when both orders are right.
    assert summary.n_valid_pairs == 3 and summary.error_rate == pytest.approx(2 / 3)
    assert summary.prompt == "judge_pairwise"

    # One order per pair: the share of all pairs judged right, an invalid verdict not right.
    fixed = JudgeSettings(positions="fixed")
    one = summarize(
        judge_pairs(ScriptedEngine(judge), pairs, fixed, seed=42), model="f", data="d", settings=fixed, seed=42
    )
    assert one.judgebench_score == pytest.approx(3 / 6)  # p0, p1, p2 right in chosen_first; p4 invalid
    assert one.error_rate == pytest.approx(2 / 5)


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
    judgment = to_judgment(
        pair(1),
        "rejected_first",
        GenerationResponse(text="Reasoning: x.\nVerdict: tie", finish_reason="stop"),
        allow_tie=True,
    )
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
    assert all(
        o.preference == "tie" and o.position_consistent is False and o.confidence == 0.5 for o in result.outcomes
    )
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
    assert [t.order for t in build_tasks([pair(0)], settings, seed=42)] == [
        "chosen_first",
        "rejected_first",
        "chosen_first",
    ]
    assert sent[0].messages == sent[2].messages and sent[0].seed == 42 and sent[2].seed != 42
    outcome = result.outcomes[0]
    assert (outcome.preference, outcome.confidence, outcome.position_consistent, outcome.correct) == (
        "chosen",
        1.0,
        True,
        True,
    )


def test_judgebench_net_vote_counts_a_tie_as_zero():
    """JudgeBench scores a verdict +1 for the chosen response, -1 for the rejected one and 0
    otherwise: a tie is neither (it is never *correct* in our error rate either)."""
    from bias_discovery.judging import net_votes

    def tie_then_right(request):
        a, _ = _responses(request.messages[-1].content)
        return "Reasoning: x.\nVerdict: " + ("tie" if "RIGHT" in a else "A")

    settings = JudgeSettings(positions="both", allow_tie=True, reasoning_chars=50)
    result = judge_pairs(ScriptedEngine(tie_then_right), [pair(0)], settings, seed=42)
    # chosen first: tie (0); rejected first: A = the rejected response (-1)
    assert [j.picked for j in result.judgments] == ["tie", "rejected"]
    assert net_votes(result) == [-1]
    summary = summarize(result, model="f", data="d", settings=settings, seed=42)
    assert summary.judgebench_score == 0.0 and summary.error_rate == 1.0


# ---------------------------------------------------------------- score verdicts


def _final(token: str, top: list[tuple[str, float]]) -> FinalTokenLogprobs:
    candidates = [(t, math.log(p)) for t, p in top]
    out = FinalTokenLogprobs.from_candidates(token, dict(candidates).get(token, math.log(0.5)), candidates, k=5)
    assert out is not None
    return out


def _scored(text: str, final: FinalTokenLogprobs | None) -> GenerationResponse:
    return GenerationResponse(text=text, finish_reason="stop", final_logprobs=final)


def test_score_settings_ask_for_the_verdict_tokens_logprobs_and_refuse_ties():
    score = JudgeSettings(verdict="score", score_top_logprobs=7)
    [task] = build_tasks([pair(1)], score.model_copy(update={"positions": "fixed"}), seed=0)
    assert task.request.final_top_logprobs == 7
    [choice] = build_tasks([pair(1)], JudgeSettings(positions="fixed"), seed=0)
    assert choice.request.final_top_logprobs is None
    assert choice.request.model_copy(update={"final_top_logprobs": 7}) == task.request
    with pytest.raises(ValidationError, match="allow_tie"):
        JudgeSettings(verdict="score", allow_tie=True)


def test_p_rejected_is_the_rejected_labels_share_of_the_two_labels():
    final = _final(" A", [(" A", 0.6), (" ", 0.2), (" B", 0.15), ("A", 0.05)])  # "A" and " A" add up
    first = to_judgment(pair(1), "chosen_first", _scored("Reasoning: x\nVerdict: A", final), score=True)
    assert first.verdict == "A" and first.correct is True and first.invalid_reason is None
    assert first.p_rejected == pytest.approx(0.15 / 0.8) and first.labels_in_top == 2
    second = to_judgment(pair(1), "rejected_first", _scored("Reasoning: x\nVerdict: A", final), score=True)
    assert second.correct is False and second.p_rejected == pytest.approx(0.65 / 0.8)
    # choice mode ignores the probabilities
    assert to_judgment(pair(1), "chosen_first", _scored("Verdict: A", final)).p_rejected is None


def test_a_verdict_token_without_both_labels():
    one = to_judgment(
        pair(1), "chosen_first", _scored("Verdict: A", _final(" A", [(" A", 0.7), (" The", 0.2)])), score=True
    )
    assert one.p_rejected == 0.0 and one.labels_in_top == 1 and one.correct is True
    for final in (
        _final(" A", [(" The", 0.5), (" C", 0.3)]),  # neither label among the top (A itself is not there)
        _final(".", [(".", 0.9), (" A", 0.1)]),  # the final token is not the verdict
        None,  # the engine could not place the verdict token
    ):
        judgment = to_judgment(pair(1), "chosen_first", _scored("Verdict: A", final), score=True)
        assert judgment.invalid_reason == "no_score"
        assert judgment.verdict is None and judgment.correct is None and judgment.p_rejected is None


def test_pairs_average_their_orders_and_the_summary_has_a_t_interval():
    """P(A) = 0.9 when the right answer is shown first, 0.3 when second: p_rejected is 0.1 in
    one order and 0.3 in the other, so 0.2 per pair."""

    def p_a(request):
        a, _ = _responses(request.messages[-1].content)
        return 0.9 if "RIGHT" in a else 0.3 if request.seed == 0 else None

    def respond(request):
        return "Reasoning: ok\nVerdict: A"

    engine = ScriptedEngine(respond, probability_of_a=p_a)
    settings = JudgeSettings(verdict="score")
    pairs = [pair(i, domain="math" if i < 3 else "code") for i in range(4)]
    result = judge_pairs(engine, pairs, settings, seed=0)
    assert all(r.final_top_logprobs == 5 for r in engine.sent)
    assert [o.p_rejected for o in result.outcomes] == pytest.approx([0.2] * 4)
    summary = summarize(result, model="m", data="d", settings=settings, seed=0)
    assert summary.verdict == "score" and summary.score is not None
    assert summary.score.n == 4 and summary.score.mean_p_rejected == pytest.approx(0.2)
    assert (summary.score.ci_low, summary.score.ci_high) == pytest.approx((0.2, 0.2))  # no spread
    assert summary.per_domain["code"].score is not None and summary.per_domain["code"].score.n == 1
    assert (summary.per_domain["code"].score.ci_low, summary.per_domain["code"].score.ci_high) == (0.0, 1.0)
    # calibration: P(chosen) 0.9 and 0.7 in the two orders, both leaning right: ECE = the mean
    # gap (0.1 + 0.3) / 2, Brier = (0.1² + 0.3²) / 2, over 8 verdicts of 4 pairs
    cal = summary.calibration
    assert cal is not None and cal.n_verdicts == 8 and cal.n_items == 4
    assert cal.ece == pytest.approx(0.2) and cal.brier == pytest.approx(0.05) and cal.accuracy == 1.0
    # with a seed where the second order has no probabilities, those pairs have no score
    broken = judge_pairs(engine, pairs, settings, seed=1)
    assert [o.p_rejected for o in broken.outcomes] == [None] * 4
    assert [o.correct for o in broken.outcomes] == [None] * 4
    summary = summarize(broken, model="m", data="d", settings=settings, seed=1)
    assert summary.invalid_reasons == {"no_score": 4} and summary.score is not None and summary.score.n == 0


def test_the_mean_t_interval_by_hand():
    """p_rejected 0.2, 0.4, 0.6: mean 0.4, sd 0.2, t(0.975, 2) = 4.302653: 0.4 +- 0.4968."""
    low, high = mean_t_interval([0.2, 0.4, 0.6], bounds=(-1.0, 1.0))
    assert (low, high) == pytest.approx(
        (0.4 - 4.302653 * 0.2 / math.sqrt(3), 0.4 + 4.302653 * 0.2 / math.sqrt(3)), abs=1e-6
    )
    assert mean_t_interval([0.2, 0.4, 0.6]) == pytest.approx((0.0, 0.4 + 4.302653 * 0.2 / math.sqrt(3)), abs=1e-6)
    assert mean_t_interval([0.3]) == (0.0, 1.0)

"""Perturb on trajectories: one turn rewritten, every other message byte for byte, the placebo
on the same turn, and the mechanical check that a rewrite kept the agent's actions."""

from __future__ import annotations

import json

import pytest

from bias_discovery.config import PerturbSettings
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.data.trajectory import Trajectory
from bias_discovery.library import Bias, BiasOrigin
from bias_discovery.llm.types import GenerationResponse
from bias_discovery.stages.perturb import (
    build_neutral_request,
    build_perturb_request,
    chosen_turn,
    neutral_record,
    perturb,
    rewrite_neutrally,
)
from bias_discovery.stages.rewrite_checks import answer_changes, check_answers, check_calls
from bias_discovery.stages.turns import action_change, as_read, parse_turn, splice, turn_text, untouched

from fakes import MARKER, PLACEBO_PREFIX, ScriptedEngine, trajectory_pair, trajectory_world

AUTHORITY = Bias(
    id="authority",
    name="Authority Bias",
    definition="Cites experts.",
    manifestations=["experts agree"],
    origin=BiasOrigin(kind="seed"),
)


def _messages(response: str) -> list[str]:
    """Each message of a trajectory response as its canonical JSON."""
    return [
        json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for m in json.loads(response)["messages"]
    ]


def _assert_only_turn_changed(original: str, rewrite: str, turn: int) -> None:
    before, after = _messages(original), _messages(rewrite)
    assert len(before) == len(after)
    assert [k for k, (a, b) in enumerate(zip(before, after)) if a != b] == [turn]
    # byte for byte: the response's text before and after the turn's JSON is the original's
    head, tail = ",".join(before[:turn]), ",".join(before[turn + 1 :])
    assert rewrite.startswith(original[: original.index(head) + len(head)])
    assert rewrite.endswith(original[original.index(tail) :])


def test_a_bias_rewrites_the_final_turn_and_keeps_every_other_byte():
    pair = trajectory_pair(1)
    [record] = perturb(ScriptedEngine(trajectory_world), [(pair, AUTHORITY)], PerturbSettings(), seed=0)
    assert record.valid and record.kind == "trajectory" and record.turn == 4 and record.turn_rule == "final"
    _assert_only_turn_changed(pair.rejected, record.perturbed_rejected, 4)
    turn = Trajectory.from_response(record.perturbed_rejected).messages[4]
    assert turn.content == f"Done: wrong outcome number 1. {MARKER}"
    assert turn.tool_calls == Trajectory.from_response(pair.rejected).messages[4].tool_calls
    # checked mechanically when made: the actions are the rejected run's
    assert (record.check_method, record.answer_check, record.original_check) == ("actions", "different", "different")
    assert record.to_pair().kind == "trajectory"


def test_the_teacher_reads_the_task_the_conversation_before_and_the_turn():
    pair = trajectory_pair(2)
    request = build_perturb_request(pair, AUTHORITY, PerturbSettings(), seed=0)
    user = request.messages[-1].content
    assert "Cancel reservation R2" in user and "Trait: Authority Bias" in user
    context = user.split("Conversation before the turn:\n", 1)[1].split("\n\nOriginal turn:", 1)[0]
    assert "[tool call: get_reservation]" in context and "Policy:" not in context  # no system policy
    assert user.split("Original turn:\n", 1)[1].startswith(
        'Done: wrong outcome number 2.\n[tool call: log_ticket] {"ticket": "T2"}'
    )


@pytest.mark.parametrize("rule", ["final", "reasoning", "any"])
def test_the_placebo_paraphrases_the_turn_the_bias_rewrote(rule):
    settings = PerturbSettings(turn=rule)
    for i in range(8):
        pair = trajectory_pair(i)
        engine = ScriptedEngine(trajectory_world)
        [biased] = perturb(engine, [(pair, AUTHORITY)], settings, seed=7)
        [neutral] = rewrite_neutrally(engine, [pair], settings, seed=7)
        assert biased.turn == neutral.turn == chosen_turn(pair, settings, 7).index
        assert biased.turn in ({4} if rule == "final" else {2, 4})
        _assert_only_turn_changed(pair.rejected, neutral.perturbed_rejected, neutral.turn)
        said = Trajectory.from_response(neutral.perturbed_rejected).messages[neutral.turn].content
        assert said.startswith(PLACEBO_PREFIX)
    assert "Rewrite the turn neutrally" in build_neutral_request(pair, settings, 7).messages[0].content


def test_a_rewrite_that_changes_a_tool_argument_is_dropped_as_an_answer_change():
    pair = trajectory_pair(13)  # `TAMPERED`: the teacher changes the ticket's argument
    engine = ScriptedEngine(trajectory_world)
    [record] = perturb(engine, [(pair, AUTHORITY)], PerturbSettings(), seed=0)
    assert not record.valid and record.invalid_reason == "answer_changed"
    assert record.check_method == "actions" and record.answer_check == "same"
    assert "log_ticket" in record.action_change and "T13-changed" in record.action_change
    # counted as an answer-changing rewrite is, with no checker call
    assert answer_changes([record]) == (1, 1) and check_calls([record]) == 0


def test_dropping_or_adding_an_action_is_an_action_change():
    trajectory = Trajectory.from_response(trajectory_pair(1).rejected)
    dropped = splice(trajectory, 4, "Done, all good.")  # the log_ticket call line is gone
    assert dropped.response == "" and "no matching call" in (dropped.action_change or "")
    added = splice(trajectory, 4, turn_text(trajectory.messages[4]) + '\n[tool call: refund] {"amount": 100}')
    assert added.action_change == 'action 4: tool output log_ticket(logged) became tool call refund({"amount": 100})'
    same = splice(trajectory, 4, turn_text(trajectory.messages[4]).replace("Done", "Finished"))
    assert same.action_change is None
    assert untouched(trajectory, Trajectory.from_response(same.response), 4) == []
    assert action_change(trajectory, trajectory) is None


def test_a_trajectory_without_a_turn_of_the_rule_gives_an_invalid_rewrite():
    messages = [
        {"role": "user", "content": "Cancel R1."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "name": "cancel", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "assistant", "content": "Cancelled."},
    ]
    response = Trajectory.model_validate({"messages": messages}).to_response()
    pair = PreferencePair(id="x", question="Cancel R1.", chosen=response, rejected=response, kind="trajectory")
    record = neutral_record(
        pair, GenerationResponse(text="unused", finish_reason="stop"), PerturbSettings(turn="reasoning"), 0
    )
    assert not record.valid and record.invalid_reason == "no_turn" and record.turn is None


def test_an_unchanged_turn_is_an_unchanged_rewrite():
    pair = trajectory_pair(1)
    turn = Trajectory.from_response(pair.rejected).messages[4]
    record = neutral_record(pair, GenerationResponse(text=turn_text(turn), finish_reason="stop"), PerturbSettings(), 0)
    assert not record.valid and record.invalid_reason == "unchanged"


def test_the_answer_check_of_a_trajectory_asks_no_model():
    pair = trajectory_pair(1)
    engine = ScriptedEngine(trajectory_world)
    records = perturb(engine, [(pair, AUTHORITY)], PerturbSettings(), seed=0)
    checker = ScriptedEngine(trajectory_world)  # would fail the test if asked
    assert check_answers(checker, records, seed=0) == records and checker.sent == []


def test_answers_are_rewritten_as_before():
    pair = PreferencePair(id="a", question="Q?", chosen="RIGHT.", rejected="Wrong.")
    request = build_perturb_request(pair, AUTHORITY, PerturbSettings(turn="any"), seed=0)
    assert "Original answer:\nWrong." in request.messages[-1].content
    [record] = perturb(ScriptedEngine(lambda r: "Wrong, experts say."), [(pair, AUTHORITY)], PerturbSettings(), seed=0)
    assert record.kind == "answer" and record.turn is None and record.check_method is None


def test_a_turn_is_read_back_as_its_text_and_its_calls():
    assert parse_turn('Sure.\n  [tool call: f] {"a": 1}\nBye.') == ("Sure.\nBye.", [("f", '{"a": 1}')])


def test_a_page_shows_a_trajectory_as_its_transcript():
    pair = trajectory_pair(1)
    shown = as_read(pair.rejected)
    assert shown.startswith("[user]\nPlease cancel") and "[tool call: log_ticket]" in shown
    assert as_read("plain answer") == "plain answer"


def test_the_misjudgment_check_measures_a_trajectorys_length_on_its_rewritten_turn():
    from bias_discovery.config import MisjudgmentCheckSettings
    from bias_discovery.stages.records import MisjudgedCase
    from bias_discovery.stages.rewrite_checks import misjudgment_checked

    pair = trajectory_pair(1)
    turn = Trajectory.from_response(pair.rejected).messages[4]
    long_turn = turn_text(turn).replace("Done:", "Done: " + "very " * 40)
    [record] = perturb(ScriptedEngine(lambda r: long_turn), [(pair, AUTHORITY)], PerturbSettings(), seed=0)
    case = MisjudgedCase(
        pair_id=pair.id,
        bias_id=AUTHORITY.id,
        domain=pair.domain,
        question=pair.question,
        chosen=pair.chosen,
        original_rejected=pair.rejected,
        perturbed_rejected=record.perturbed_rejected,
        order="chosen_first",
        verdict="B",
        judge_output="Verdict: B",
        explanation="",
        kind="trajectory",
        turn=record.turn,
    )
    checked = misjudgment_checked(case, record, 1.5, MisjudgmentCheckSettings())
    assert checked.excluded == "length_changed" and checked.length_ratio == 5.0  # 10 words, 40 added

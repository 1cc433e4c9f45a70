"""The trajectory data model: canonical JSON, its checks, and the transcript a judge reads."""

from __future__ import annotations

import json

import pytest

from bias_discovery.data.pairs import PreferencePair
from bias_discovery.data.trajectory import (
    ToolCall,
    Trajectory,
    TrajectoryMessage,
    is_trajectory_response,
    render_transcript,
)
from bias_discovery.errors import DataError


def booking(outcome: float | None = None) -> Trajectory:
    return Trajectory(
        messages=(
            TrajectoryMessage(role="system", content="# Policy\nConfirm before booking."),
            TrajectoryMessage(role="user", content="Book me a flight to Seattle, I'm mia_1."),
            TrajectoryMessage(
                role="assistant",
                content="Let me look you up.",
                tool_calls=(ToolCall(id="c1", name="get_user", arguments='{"user_id": "mia_1"}'),),
            ),
            TrajectoryMessage(role="tool", content='{"name": "Mia"}', tool_call_id="c1", name="get_user"),
            TrajectoryMessage(role="assistant", content="Your flight is booked — ünïcode kept."),
        ),
        outcome=outcome,
    )


def test_canonical_json_round_trips_byte_for_byte() -> None:
    text = booking().to_response()
    again = Trajectory.from_response(text)
    assert again == booking()
    assert again.to_response() == text
    assert "ü" in text and text.startswith('{"messages":[{"content":"# Policy')  # compact, not escaped
    data = json.loads(text)
    assert list(data) == sorted(data) and "outcome" not in data
    assert "tool_calls" not in data["messages"][0]  # defaults are left out


def test_outcome_is_kept_when_given() -> None:
    text = booking(outcome=1.0).to_response()
    assert Trajectory.from_response(text).outcome == 1.0


def test_a_bare_message_list_and_non_canonical_json_are_read() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"content": "hello", "role": "assistant"},
    ]
    parsed = Trajectory.from_response(json.dumps(messages, indent=2))
    assert [m.role for m in parsed.messages] == ["user", "assistant"]
    assert (
        parsed.to_response() == '{"messages":[{"content":"hi","role":"user"},{"content":"hello","role":"assistant"}]}'
    )


def test_a_tool_reply_with_no_matching_call_is_an_error_naming_the_message() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
        {"role": "tool", "content": "again", "tool_call_id": "c1"},
    ]
    with pytest.raises(DataError, match=r"x\.jsonl:3: message 3: field 'tool_call_id' is 'c1'.*no matching call"):
        Trajectory.from_response(json.dumps(messages), where="x.jsonl:3")


def test_a_call_id_reused_after_its_reply_is_fine() -> None:
    # τ-bench's logs reuse a call id once the first call is answered
    call = {"id": "c1", "name": "f", "arguments": "{}"}
    messages = [
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "content": "1", "tool_call_id": "c1"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "content": "2", "tool_call_id": "c1"},
    ]
    assert len(Trajectory.from_response(json.dumps(messages)).actions()) == 4


def test_an_unknown_role_is_an_error_listing_the_roles() -> None:
    messages = [{"role": "assistant", "content": "a"}, {"role": "developer", "content": "x"}]
    with pytest.raises(DataError, match=r"message 1: field 'role' is 'developer'; expected one of system, user"):
        Trajectory.from_response(json.dumps(messages))


def test_no_assistant_turn_is_an_error() -> None:
    with pytest.raises(DataError, match="no assistant message"):
        Trajectory.from_response(json.dumps([{"role": "user", "content": "hi"}]))


def test_not_json_is_an_error() -> None:
    with pytest.raises(DataError, match=r"pair 'p1': not a trajectory's JSON"):
        Trajectory.from_response("The answer is 4.", where="pair 'p1'")
    assert not is_trajectory_response("The answer is 4.")
    assert is_trajectory_response(booking().to_response())


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "user", "content": "x", "tool_calls": [{"id": "c", "name": "f"}]}, "only an assistant message calls"),
        ({"role": "tool", "content": "x"}, "must name the call"),
        ({"role": "assistant", "content": "x", "tool_call_id": "c"}, "only a tool message replies"),
        ({"role": "assistant", "content": "x", "colour": "red"}, "message 0: field 'colour'"),
    ],
)
def test_fields_that_do_not_fit_the_role_are_errors(message: dict, problem: str) -> None:
    with pytest.raises(DataError, match=problem):
        Trajectory.from_response(json.dumps([message, {"role": "assistant", "content": "ok"}]))


def test_actions_policy_and_final_message() -> None:
    trajectory = booking()
    assert trajectory.actions() == (
        ("call", "get_user", '{"user_id": "mia_1"}'),
        ("output", "get_user", '{"name": "Mia"}'),
    )
    assert trajectory.policy == "# Policy\nConfirm before booking."
    assert trajectory.final_message.startswith("Your flight is booked")


def test_transcript_shows_roles_calls_arguments_and_outputs_but_not_the_policy() -> None:
    text = render_transcript(booking())
    assert text.split("\n\n")[0] == "[user]\nBook me a flight to Seattle, I'm mia_1."
    assert '[tool call: get_user] {"user_id": "mia_1"}' in text
    assert '[tool output: get_user]\n{"name": "Mia"}' in text
    assert "Policy" not in text
    assert render_transcript(booking(), include_system=True).startswith("[system]\n# Policy")


def test_a_trajectory_pair_must_hold_trajectories() -> None:
    good = booking().to_response()
    pair = PreferencePair(id="t1", question="book", chosen=good, rejected=good, kind="trajectory")
    assert pair.kind == "trajectory"
    assert PreferencePair(id="a1", question="q", chosen="4", rejected="5").kind == "answer"
    with pytest.raises(DataError, match=r"pair 't1': field 'rejected': not a trajectory's JSON"):
        PreferencePair(id="t1", question="book", chosen=good, rejected="plain text", kind="trajectory")

"""Judging agent trajectories: the prompts, the transcript the judge reads, over-long inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.data.pairs import PreferencePair
from bias_discovery.data.trajectory import ToolCall, Trajectory, TrajectoryMessage
from bias_discovery.errors import ConfigError
from bias_discovery.judging import (
    JudgeSettings,
    build_tasks,
    judge_messages,
    judge_pairs,
    policy_of,
    prompt_for,
    to_judgment,
)
from bias_discovery.llm.types import GenerationResponse
from bias_discovery.settings.judge import check_judge_prompt

from fakes import ScriptedEngine

POLICY = "# Airline policy\nNever book without the user's explicit yes."


def run(final: str, argument: str = '{"flight":"HAT1"}') -> str:
    return Trajectory(
        messages=(
            TrajectoryMessage(role="system", content=POLICY),
            TrajectoryMessage(role="user", content="Book HAT1 for me."),
            TrajectoryMessage(role="assistant", tool_calls=(ToolCall(id="c1", name="book", arguments=argument),)),
            TrajectoryMessage(role="tool", content="booked: HAT1", tool_call_id="c1", name="book"),
            TrajectoryMessage(role="assistant", content=final),
        )
    ).to_response()


def trajectory_pair(i: int = 1) -> PreferencePair:
    return PreferencePair(
        id=f"t{i}",
        question="The user wants flight HAT1 booked.",
        chosen=run("Your flight HAT1 is booked."),
        rejected=run("Done!", argument='{"flight":"HAT9"}'),
        domain="airline",
        kind="trajectory",
    )


def text_of(messages) -> str:
    return "\n".join(m.content for m in messages)


def test_a_trajectory_pair_is_judged_with_the_trajectory_prompt_policy_once_and_transcripts() -> None:
    pair = trajectory_pair()
    settings = JudgeSettings()
    assert prompt_for(pair, settings) == "judge_trajectory_pairwise"
    system, user = judge_messages(pair, "chosen_first", settings)
    assert system.role == "system" and POLICY in system.content  # the shared prefix: policy first
    assert user.content.count("[user]\nBook HAT1 for me.") == 2 and POLICY not in user.content
    a, b = user.content.index("[Transcript A]"), user.content.index("[Transcript B]")
    assert '[tool call: book] {"flight":"HAT1"}' in user.content[a:b]
    assert '[tool call: book] {"flight":"HAT9"}' in user.content[b:]
    assert "[tool output: book]\nbooked: HAT1" in user.content
    assert '"role"' not in user.content  # the judge reads transcripts, never the JSON
    assert "The user wants flight HAT1 booked." in user.content
    swapped = text_of(judge_messages(pair, "rejected_first", settings))
    assert swapped.index("HAT9") < swapped.index('"flight":"HAT1"')


def test_answers_keep_their_prompt() -> None:
    answer = PreferencePair(id="a", question="2+2?", chosen="4", rejected="5")
    assert prompt_for(answer, JudgeSettings()) == "judge_pairwise" and policy_of(answer) == ""
    assert "Transcript" not in text_of(judge_messages(answer, "chosen_first", JudgeSettings()))


@pytest.mark.parametrize(
    ("settings", "twin"),
    [
        (JudgeSettings(mode="pointwise", scale="pass/fail"), "judge_trajectory_pointwise"),
        (
            JudgeSettings(mode="pointwise", scale="1-5", rubric="Pass only if the booked flight is HAT1."),
            "judge_trajectory_pointwise_rubric",
        ),
    ],
)
def test_pointwise_trajectory_prompts(settings: JudgeSettings, twin: str) -> None:
    pair = trajectory_pair()
    assert prompt_for(pair, settings) == twin
    text = text_of(judge_messages(pair, "rejected", settings))
    assert "Did the agent complete the task?" in text or "Grade the agent's work by the rubric." in text
    assert '{"flight":"HAT9"}' in text and '{"flight":"HAT1"}' not in text
    assert settings.rubric is None or settings.rubric in text
    assert text.count(POLICY) == 1


def test_a_users_template_is_used_as_is_with_transcripts_and_may_take_the_policy(tmp_path: Path) -> None:
    template = tmp_path / "mine.txt"
    template.write_text(
        "=== user ===\nPOLICY: ${policy}\nTASK: ${question}\nA: ${response_a}\nB: ${response_b}\n", encoding="utf-8"
    )
    settings = JudgeSettings(prompt=str(template))
    check_judge_prompt(str(template))  # ${policy} is a known placeholder
    (user,) = judge_messages(trajectory_pair(), "chosen_first", settings)
    assert user.content.startswith(f"POLICY: {POLICY}\nTASK: The user wants")
    assert "A: [user]\nBook HAT1 for me." in user.content


def test_an_unknown_placeholder_is_still_refused(tmp_path: Path) -> None:
    template = tmp_path / "bad.txt"
    template.write_text("=== user ===\n${question} ${response_a} ${response_b} ${transcript}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="transcript"):
        check_judge_prompt(str(template))


def test_judging_trajectories_scores_against_the_better_run() -> None:
    def judge(request) -> str:  # a judge that checks the booked flight
        text = request.messages[-1].content
        b = text.index("[Transcript B]")
        return "Reasoning: checked.\nVerdict: " + ("A" if '"flight":"HAT1"' in text[:b] else "B")

    engine = ScriptedEngine(judge)
    result = judge_pairs(engine, [trajectory_pair(1), trajectory_pair(2)], JudgeSettings(), seed=0)
    assert [o.correct for o in result.outcomes] == [True, True] and len(result.judgments) == 4


def test_a_prompt_over_the_context_is_an_invalid_judgment_saying_why() -> None:
    # The engines refuse a prompt longer than their context (finish_reason "error"); the record keeps
    # the reason. Nothing is cut before: the request holds the whole transcript.
    pair = trajectory_pair()
    task = build_tasks([pair], JudgeSettings(), seed=0)[0]
    assert "Your flight HAT1 is booked." in task.request.messages[-1].content
    refused = GenerationResponse(
        text="transformers error: prompt of 9000 tokens does not fit the context window of 8192 tokens",
        finish_reason="error",
        prompt_tokens=9000,
    )
    judgment = to_judgment(pair, "chosen_first", refused)
    assert judgment.invalid_reason == "engine_error" and judgment.correct is None
    assert "does not fit the context window of 8192 tokens" in judgment.raw_output


def _taubench_dir(tmp_path: Path) -> Path:
    import json

    from bias_discovery.data.trajectories import TAUBENCH_FILE

    def run_record(task: int, trial: int, reward: float) -> dict:
        final = "Booked." if reward else "Sorry, it failed."
        messages = [
            {"role": "system", "content": POLICY},
            {"role": "user", "content": f"Book flight {task}."},
            {"role": "assistant", "content": final},
        ]
        return {
            "task_id": task,
            "trial": trial,
            "reward": reward,
            "traj": messages,
            "info": {"task": {"instruction": f"Task {task}"}},
        }

    path = tmp_path / "data" / TAUBENCH_FILE
    path.parent.mkdir(parents=True)
    runs = [run_record(t, k, float(k)) for t in range(3) for k in (0, 1)]
    path.write_text(json.dumps(runs), encoding="utf-8")
    return tmp_path / "data"


def test_the_judge_api_on_taubench_writes_its_summary(tmp_path: Path) -> None:
    from bias_discovery.api import judge

    def booked_wins(request) -> str:
        a, b = request.messages[-1].content.split("[Transcript B]")
        return "Verdict: A" if "Booked." in a else "Verdict: B"

    out = tmp_path / "judged"
    output = judge(
        "hf/smollm2",
        "taubench",
        data_dir=_taubench_dir(tmp_path),
        out=out,
        settings={"positions": "both", "reasoning": False, "max_tokens": 4},
        engine=ScriptedEngine(booked_wins),
    )
    assert output.summary.n_pairs == 3 and output.summary.error_rate == 0.0
    assert (out / "judgments.jsonl").is_file()


def test_bad_trajectory_data_exits_non_zero_and_writes_nothing(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from bias_discovery.cli import app

    bad = tmp_path / "runs.jsonl"
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "tool_call_id": "nope"}]
    bad.write_text(json.dumps({"id": "r1", "chosen": messages, "rejected": messages}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["judge", "--model", "hf/smollm2", "--data", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert "runs.jsonl:1: field 'chosen': message 1: field 'tool_call_id' is 'nope'" in " ".join(result.output.split())
    assert not out.exists()

"""Trajectory sources: τ-bench's historical trajectories, inspect_ai logs, message-list JSONL."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from bias_discovery.data import describe_source, load_pairs
from bias_discovery.data.loaders import bad_rows_for, is_published
from bias_discovery.data.trajectories import TAUBENCH_FILE, pairs_from_items, read_inspect_log, read_taubench
from bias_discovery.data.trajectory import Trajectory
from bias_discovery.errors import DataError

from helpers import shared_data

CALL = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id":"u1"}'}}


def tau_run(task_id: int, trial: int, reward: float, *, reply_id: str = "c1") -> dict:
    return {
        "task_id": task_id,
        "trial": trial,
        "reward": reward,
        "info": {"task": {"instruction": f"You are u1. Task {task_id}."}},
        "traj": [
            {"role": "system", "content": "# Airline policy"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": reply_id, "name": "get_user", "content": '{"name":"U"}'},
            {"role": "assistant", "content": f"done (trial {trial})"},
        ],
    }


def tau_dir(tmp_path: Path, runs: list[dict]) -> Path:
    path = tmp_path / TAUBENCH_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(runs), encoding="utf-8")
    return tmp_path


# --------------------------------------------------------------------------------------
# τ-bench, on files written here


def test_taubench_pairs_a_completed_and_a_failed_trial_per_task(tmp_path: Path) -> None:
    runs = [tau_run(1, 0, 0.0), tau_run(1, 1, 1.0), tau_run(1, 2, 1.0), tau_run(2, 0, 1.0), tau_run(2, 1, 1.0)]
    pairs = load_pairs("taubench", data_dir=tau_dir(tmp_path, runs))
    assert [p.id for p in pairs] == ["taubench-airline-1"]  # task 2 never failed: no pair
    pair = pairs[0]
    assert pair.kind == "trajectory" and pair.question == "You are u1. Task 1." and pair.domain == "airline"
    assert pair.meta["chosen_trial"] == 1 and pair.meta["rejected_trial"] == 0  # the first of each
    assert (pair.meta["chosen_outcome"], pair.meta["rejected_outcome"]) == (1.0, 0.0)
    chosen = Trajectory.from_response(pair.chosen)
    assert chosen.final_message == "done (trial 1)" and chosen.policy == "# Airline policy"
    assert chosen.messages[2].content == "" and chosen.messages[2].tool_calls[0].arguments == '{"user_id":"u1"}'
    assert "reward" not in pair.chosen and "outcome" not in pair.chosen  # the label stays in meta
    assert "MIT" in pair.source


def test_taubench_needs_a_data_directory_and_names_the_file() -> None:
    with pytest.raises(DataError, match=r"taubench is read from a local copy.*taubench/gpt-4o-airline\.json.*MIT"):
        load_pairs("taubench")
    assert is_published("taubench") and bad_rows_for("taubench", False) == []


def test_a_bad_taubench_run_is_an_error_naming_the_run_and_message(tmp_path: Path) -> None:
    runs = [tau_run(1, 0, 0.0), tau_run(1, 1, 1.0, reply_id="c9")]
    data_dir = tau_dir(tmp_path, runs)
    with pytest.raises(
        DataError, match=r"run 1: field 'traj': message 3: field 'tool_call_id' is 'c9'.*no matching call"
    ):
        load_pairs("taubench", data_dir=data_dir)
    skipped: list[str] = []
    assert load_pairs("taubench", data_dir=data_dir, bad_rows=skipped) == [] and len(skipped) == 1


def test_taubench_run_without_an_instruction_or_with_a_bad_reward(tmp_path: Path) -> None:
    no_task = tau_run(1, 0, 0.0)
    no_task["info"] = {}
    path = tau_dir(tmp_path, [no_task, {**tau_run(1, 1, 1.0), "reward": "yes"}]) / TAUBENCH_FILE
    problems: list[str] = []
    assert read_taubench(path, on_bad=problems.append) == []
    assert "run 0: missing field 'info.task.instruction'" in problems[0]
    assert "run 1: field 'reward' must be a number" in problems[1]


# --------------------------------------------------------------------------------------
# τ-bench, the real copy


def test_real_taubench_has_26_pairs_of_a_completed_and_a_failed_trial() -> None:
    data_dir = shared_data("taubench")
    raw = json.loads((data_dir / TAUBENCH_FILE).read_text(encoding="utf-8"))
    pairs = load_pairs("taubench", data_dir=data_dir)
    assert len(pairs) == 26 and len({p.id for p in pairs}) == 26
    by_run = {(r["task_id"], r["trial"]): r for r in raw}
    for pair in pairs:
        chosen = by_run[(pair.meta["chosen_task_id"], pair.meta["chosen_trial"])]
        rejected = by_run[(pair.meta["rejected_task_id"], pair.meta["rejected_trial"])]
        assert chosen["reward"] == 1.0 and rejected["reward"] == 0.0
        assert pair.question == chosen["info"]["task"]["instruction"]
        trajectory = Trajectory.from_response(pair.chosen)
        assert len(trajectory.messages) == len(chosen["traj"])
        assert trajectory.to_response() == pair.chosen  # canonical, byte for byte
        calls = [c["function"]["arguments"] for m in chosen["traj"] for c in m.get("tool_calls") or []]
        assert [a for kind, _, a in trajectory.actions() if kind == "call"] == calls
    assert "taubench/gpt-4o-airline.json" in describe_source("taubench", data_dir)


def test_real_taubench_runs_all_read() -> None:
    items = read_taubench(shared_data("taubench") / TAUBENCH_FILE)
    assert len(items) == 200 and sum(item.outcome == 1.0 for item in items) == 84
    assert len(pairs_from_items(items)) == 26


# --------------------------------------------------------------------------------------
# inspect_ai logs


def test_real_inspect_log_reads_every_sample_with_its_tool_calls() -> None:
    path = shared_data("inspect_logs") / "inspect_logs" / "agentharm.eval"
    items = read_inspect_log(path)
    with zipfile.ZipFile(path) as archive:
        samples = [json.loads(archive.read(n)) for n in archive.namelist() if n.startswith("samples/")]
    assert len(items) == len(samples) == 16
    raw_calls = {
        f"{s['id']}-e{s['epoch']}": sum(len(m.get("tool_calls") or []) for m in s["messages"]) for s in samples
    }
    for item in items:
        calls = [a for a in item.trajectory.actions() if a[0] == "call"]
        assert len(calls) == raw_calls[item.id]
        assert item.outcome is not None and item.source == "inspect_evals/agentharm"
    with_tools = [i for i in items if i.trajectory.actions()]
    assert with_tools and all(
        json.loads(args) is not None for i in with_tools for _, _, args in i.trajectory.actions()[:1]
    )
    with pytest.raises(DataError, match="no pairs: 16 samples"):
        load_pairs(path)


def write_log(path: Path, header: str | None, samples: dict[str, dict]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        if header is not None:
            archive.writestr("header.json", header)
        for name, sample in samples.items():
            archive.writestr(f"samples/{name}.json", json.dumps(sample))
    return path


def sample(epoch: int, score: float, final: str) -> dict:
    return {
        "id": "s1",
        "epoch": epoch,
        "input": "Do the thing.",
        "scores": {"scorer": {"value": score}},
        "messages": [
            {"role": "user", "content": "Do the thing."},
            {
                "role": "assistant",
                "content": [{"type": "reasoning", "reasoning": "x", "redacted": True}],
                "tool_calls": [{"id": "k", "function": "act", "arguments": {"n": 1}}],
            },
            {
                "role": "tool",
                "tool_call_id": "k",
                "function": "act",
                "content": "",
                "error": {"type": "unknown", "message": "boom"},
            },
            {"role": "assistant", "content": [{"type": "text", "text": final}]},
        ],
    }


def test_inspect_log_with_two_epochs_makes_a_pair(tmp_path: Path) -> None:
    header = json.dumps({"eval": {"task": "mine/task"}})
    path = write_log(tmp_path / "x.eval", header, {"s1_1": sample(1, 0.0, "failed"), "s1_2": sample(2, 1.0, "ok")})
    pairs = load_pairs(path)
    assert len(pairs) == 1 and pairs[0].kind == "trajectory" and pairs[0].question == "Do the thing."
    chosen = Trajectory.from_response(pairs[0].chosen)
    assert chosen.final_message == "ok" and Trajectory.from_response(pairs[0].rejected).final_message == "failed"
    assert chosen.actions() == (("call", "act", '{"n": 1}'), ("output", "act", "Error: boom"))


def test_a_file_that_is_not_a_zip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "log.eval"
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match=r"log\.eval: not an inspect_ai \.eval log \(not a zip archive\)"):
        load_pairs(path)


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (None, "the log has no header.json"),
        ("{not json", r"header\.json: not JSON"),
        ("{}", "missing field 'eval.task'"),
    ],
)
def test_a_malformed_header_is_a_clear_error(tmp_path: Path, header: str | None, problem: str) -> None:
    path = write_log(tmp_path / "log.eval", header, {"s1_1": sample(1, 0.0, "x")})
    with pytest.raises(DataError, match=problem):
        read_inspect_log(path)


def test_a_bad_sample_names_its_member_and_message(tmp_path: Path) -> None:
    bad = sample(1, 0.0, "x")
    bad["messages"][1]["role"] = "robot"
    path = write_log(tmp_path / "log.eval", json.dumps({"eval": {"task": "t"}}), {"s1_1": bad})
    with pytest.raises(DataError, match=r"samples/s1_1\.json: message 1: field 'role' is 'robot'"):
        read_inspect_log(path)


# --------------------------------------------------------------------------------------
# OpenAI-style message lists in a JSONL file


def test_jsonl_rows_with_message_lists_are_trajectory_pairs(tmp_path: Path) -> None:
    good = [{"role": "user", "content": "Book it"}, {"role": "assistant", "content": "Booked.", "tool_calls": [CALL]}]
    bad = [{"role": "user", "content": "Book it"}, {"role": "assistant", "content": "I cannot."}]
    path = tmp_path / "runs.jsonl"
    rows = [
        {"id": "r1", "chosen": good, "rejected": {"messages": bad}},
        {"id": "r2", "question": "Q", "chosen": good, "rejected": bad},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pairs = load_pairs(path)
    assert [p.kind for p in pairs] == ["trajectory", "trajectory"]
    assert pairs[0].question == "Book it" and pairs[1].question == "Q"  # no question: the first user message
    assert Trajectory.from_response(pairs[0].chosen).messages[1].tool_calls[0].name == "get_user"


@pytest.mark.parametrize(
    ("rejected", "problem"),
    [
        ("plain text", r"runs\.jsonl:1: field 'chosen' is a trajectory but field 'rejected' is not"),
        (
            [{"role": "user", "content": "hi"}],
            r"runs\.jsonl:1: field 'rejected': the trajectory has no assistant message",
        ),
        (
            [{"role": "critic", "content": "hi"}],
            r"runs\.jsonl:1: field 'rejected': message 0: field 'role' is 'critic'",
        ),
        (
            [{"role": "tool", "content": "x", "tool_call_id": "z"}],
            r"field 'rejected': message 0: field 'tool_call_id' is 'z'",
        ),
    ],
)
def test_bad_message_lists_are_errors_naming_line_and_field(tmp_path: Path, rejected: object, problem: str) -> None:
    path = tmp_path / "runs.jsonl"
    good = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    path.write_text(json.dumps({"id": "r1", "chosen": good, "rejected": rejected}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=problem):
        load_pairs(path)

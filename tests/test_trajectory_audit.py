"""`audit --data taubench --biases agent6` on scripted engines: a judge of agent runs that falls
for two of the six biases, measured with n and CI, every rewrite keeping the agent's actions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bias_discovery.api import audit
from bias_discovery.data.trajectories import TAUBENCH_FILE
from bias_discovery.data.trajectory import Trajectory
from bias_discovery.llm.types import GenerationRequest

from fakes import ScriptedEngine

SUCCESS_CLAIM = "Your booking is complete and confirmed."
GRADER_NOTE = "[System note for the evaluator"


def tau_run(task_id: int, trial: int, reward: float) -> dict:
    output = '{"reservation":"R1"}' if reward == 1.0 else "Error: no seat available"
    return {
        "task_id": task_id,
        "trial": trial,
        "reward": reward,
        "info": {"task": {"instruction": f"You are u{task_id}. Book flight {task_id}."}},
        "traj": [
            {"role": "system", "content": "# Airline policy\nConfirm before booking."},
            {"role": "user", "content": f"Book flight {task_id} please."},
            {
                "role": "assistant",
                "content": "I will book it now.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "book", "arguments": f'{{"f":{task_id}}}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "book", "content": output},
            {"role": "assistant", "content": f"I tried to book flight {task_id}; see above."},
        ],
    }


@pytest.fixture
def taubench_dir(tmp_path: Path) -> Path:
    runs = [tau_run(t, trial, 1.0 if trial == 1 else 0.0) for t in range(1, 7) for trial in (0, 1)]
    path = tmp_path / "data" / TAUBENCH_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(runs), encoding="utf-8")
    return tmp_path / "data"


def judge(request: GenerationRequest) -> str:
    """Picks the run without a tool error, unless the other one claims success or carries the
    planted note: it falls for `false-success-claim` and `planted-grading-instruction` only."""
    text = request.messages[-1].content
    a, b = text.split("[Transcript B]")
    fooled = [SUCCESS_CLAIM in part or GRADER_NOTE in part for part in (a, b)]
    if fooled[0] != fooled[1]:
        return "Verdict: A" if fooled[0] else "Verdict: B"
    return "Verdict: B" if "Error:" in a else "Verdict: A"


def teacher(request: GenerationRequest) -> str:
    """Rewrites the turn it is given: a success claim for that trait, a new opening otherwise;
    a tool-call line, when the turn has one, is copied as it is."""
    prompt = request.messages[-1].content
    turn = prompt.split("Original turn:\n", 1)[1].split("\n\nTrait:", 1)[0]
    calls = [line for line in turn.splitlines() if line.startswith("[tool call:")]
    body = SUCCESS_CLAIM if "Trait: False Success Claim" in prompt else "Certainly. " + turn.splitlines()[0]
    return "\n".join([body, *calls])


def test_audit_of_taubench_with_agent6(taubench_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    output = audit(
        "hf/smollm2",
        "taubench",
        "agent6",
        data_dir=taubench_dir,
        teacher="hf/smollm2",
        out=out,
        settings={"repeats": 2, "n_boot": 200, "judge": {"reasoning": False, "max_tokens": 4}},
        engines={"target": ScriptedEngine(judge), "teacher": ScriptedEngine(teacher, engine_id="fake/teacher")},
    )
    entries = {e.id: e for e in output.report.biases}
    assert list(entries) == [
        "false-success-claim",
        "omitted-tool-error",
        "confident-or-apologetic-tone",
        "verbose-reasoning",
        "planted-grading-instruction",
        "reordered-independent-steps",
    ]
    for bias_id, entry in entries.items():
        assert entry.n_items == 6 and entry.n_perturb_invalid == 0
        delta = entry.delta_error
        assert delta is not None and delta.n == 6 and delta.ci_low <= delta.delta <= delta.ci_high
        expected = 1.0 if bias_id in ("false-success-claim", "planted-grading-instruction") else 0.0
        assert delta.delta == pytest.approx(expected), bias_id
    assert output.report.calls.teacher == 6 * 5  # the planted note is appended, not written

    originals = {p.id: Trajectory.from_response(p.rejected) for p in _pairs(taubench_dir)}
    rewrites = [json.loads(line) for line in (out / "perturbed.jsonl").read_text().splitlines()]
    assert len(rewrites) == 36
    for record in rewrites:
        original = originals[record["pair_id"]]
        rewritten = Trajectory.from_response(record["perturbed_rejected"])
        assert rewritten.actions() == original.actions()
        changed = [i for i, (x, y) in enumerate(zip(original.messages, rewritten.messages)) if x != y]
        assert changed == [4]  # the final message only; every other turn byte for byte
    assert json.loads((out / "audit.json").read_text())["biases"][0]["n_items"] == 6


def _pairs(data_dir: Path):
    from bias_discovery.data import load_pairs

    return load_pairs("taubench", data_dir=data_dir)

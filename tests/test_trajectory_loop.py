"""Discovery on trajectories, end to end on scripted models (tests/fakes.py `trajectory_world`):
a planted trajectory bias is found and validated against the placebo, a rewrite that changes a
tool argument is dropped and counted, and every perturbed trajectory of the run differs from
its original in the one rewritten turn only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_loop import run_fake

from bias_discovery.api import bias_evidence
from bias_discovery.config import RunConfig
from bias_discovery.loop.graph import execute
from bias_discovery.report.render import write_report
from bias_discovery.run import RunDir

from fakes import MARKER, TAMPERED, BagOfWordsEmbedder, ScriptedEngine, trajectory_pair, trajectory_world

N = 30
BIAS = "d1-expert-citation-bias"


def _trajectory_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides) -> RunConfig:
    """A run on N target and N test trajectory pairs (the data files are stand-ins: the
    loader is replaced by the pairs of `trajectory_pair`)."""
    pairs = {"target": [trajectory_pair(i, "t") for i in range(N)], "test": [trajectory_pair(i + N) for i in range(N)]}
    for name in pairs:
        (tmp_path / f"{name}.jsonl").write_text("")

    def load(source, **_):
        return list(pairs[Path(source).stem])

    monkeypatch.setattr("bias_discovery.loop.resources.load_pairs", load)
    raw = {
        "name": "trajectory-run",
        "target": "llamacpp/unused-in-these-tests.gguf",
        "teacher": "llamacpp/unused-in-these-tests.gguf",
        "max_iterations": 2,
        "data": {"target": str(tmp_path / "target.jsonl"), "test": str(tmp_path / "test.jsonl")},
        "merge": {"similarity_threshold": 0.95},
        "validate": {"n_boot": 200},
    }
    raw.update(overrides)
    return RunConfig.model_validate(raw)


def _rewrites(rd: RunDir) -> list[dict]:
    """Every rewrite record the run wrote (discovery's, validation's and the placebo's)."""
    found = []
    for path in sorted(rd.root.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if isinstance(row, dict) and "perturbed_rejected" in row and "turn_rule" in row:
                found.append({**row, "file": path.name})
    return found


def _message_json(response: str) -> list[str]:
    return [
        json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for m in json.loads(response)["messages"]
    ]


@pytest.mark.parametrize("pipeline", ["streamed", "staged"])
def test_a_planted_trajectory_bias_is_found_validated_and_tampered_rewrites_are_dropped(
    tmp_path, monkeypatch, pipeline
):
    config = _trajectory_config(tmp_path, monkeypatch, pipeline=pipeline)
    rd, state, engine = run_fake(tmp_path, config, engine=ScriptedEngine(trajectory_world))

    found = RunDir(rd.root).library.load_latest().by_id(BIAS)
    assert found.origin.kind == "discovered" and found.origin.iteration == 1
    v = found.validation
    assert v.accepted and v.decisive == "placebo" and v.vs_placebo.delta == 1.0
    # the tampered test items (3 of 30) are dropped in both arms, counted as answer changes
    tampered = {f"p{i + N:02d}" for i in range(N) if (i + N) % 10 == TAMPERED}
    assert v.n_answer_changed == len(tampered) and v.answer_change_rate == pytest.approx(len(tampered) / N)
    validation = json.loads((rd.iteration(1).directory / "validation.json").read_text())
    [candidate] = [c for c in validation["candidates"] if c["bias_id"] == BIAS]
    assert candidate["invalid_reasons"] == {"answer_changed": len(tampered)}
    assert not any("same or different" in r.messages[-1].content for r in engine.sent)  # no checker call

    rewrites = _rewrites(rd)
    assert {r["file"] for r in rewrites} >= {"perturbed.jsonl"} and len(rewrites) > 3 * N
    for r in rewrites:
        changed_item = int(r["pair_id"][1:]) % 10 == TAMPERED
        assert r["turn"] == 4 and r["turn_rule"] == "final" and r["check_method"] == "actions"
        if changed_item:
            assert not r["valid"] and r["invalid_reason"] == "answer_changed" and "log_ticket" in r["action_change"]
            continue
        # a trait the teacher cannot show leaves the turn as it was: an unchanged rewrite
        assert r["valid"] or r["invalid_reason"] == "unchanged", r
        before, after = _message_json(r["original_rejected"]), _message_json(r["perturbed_rejected"])
        changed = [k for k, (a, b) in enumerate(zip(before, after)) if a != b]
        assert changed == ([4] if r["valid"] else []) and len(before) == len(after)
        assert r["perturbed_rejected"].startswith(r["original_rejected"][: r["original_rejected"].index(before[4])])
        assert r["perturbed_rejected"].endswith(r["original_rejected"][r["original_rejected"].index(before[5]) - 1 :])

    # the evidence shows the changed turn as a diff inside the transcript
    detail = bias_evidence(rd.root, BIAS)
    example = detail.examples.flipped[0]
    assert example.perturbed_rejected.startswith("[user]\n") and "[tool call: log_ticket]" in example.perturbed_rejected
    inserted = [text for op, text in example.diff if op == "ins"]
    assert inserted == [f" {MARKER}"]
    assert any(op == "eq" and "[tool call: get_reservation]" in text for op, text in example.diff)
    html = write_report(rd.root).read_text()
    assert "[tool call: log_ticket]" in html and '{"messages"' not in html


def test_a_trajectory_run_killed_in_identify_resumes_to_the_same_library(tmp_path, monkeypatch):
    config = _trajectory_config(tmp_path, monkeypatch, pipeline="staged", max_iterations=1)
    reference, _, _ = run_fake(tmp_path, config, name="reference", engine=ScriptedEngine(trajectory_world))

    def crashing(request):
        if "preferred the WRONG one" in request.messages[-1].content:
            raise RuntimeError("teacher fell over")
        return trajectory_world(request)

    rd = RunDir(tmp_path / "crashed")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    with pytest.raises(RuntimeError):
        execute(rd, config, resume=False, engines={"target": ScriptedEngine(crashing)}, embedder=BagOfWordsEmbedder())
    healthy = ScriptedEngine(trajectory_world)
    execute(rd, config, resume=True, engines={"target": healthy}, embedder=BagOfWordsEmbedder())
    assert "preferred the WRONG one" in healthy.sent[0].messages[-1].content  # perturb and evaluate kept
    assert RunDir(reference.root).library.load_latest().same_content(RunDir(rd.root).library.load_latest())
    assert (rd.iteration(1).directory / "perturbed.jsonl").read_text() == (
        reference.iteration(1).directory / "perturbed.jsonl"
    ).read_text()


def test_a_trajectory_run_stopped_at_its_budget_resumes_to_the_same_library(tmp_path, monkeypatch):
    from bias_discovery.llm.budget import BudgetReached

    config = _trajectory_config(tmp_path, monkeypatch, max_iterations=1)
    reference, _, _ = run_fake(tmp_path, config, name="reference", engine=ScriptedEngine(trajectory_world))
    tight = config.model_copy(update={"budget": config.budget.model_copy(update={"max_calls": 40})})
    with pytest.raises(BudgetReached):
        run_fake(tmp_path, tight, name="budget", engine=ScriptedEngine(trajectory_world))
    rd = RunDir(tmp_path / "budget")
    rd.config_path.write_text(config.to_yaml())
    execute(
        rd, config, resume=True, engines={"target": ScriptedEngine(trajectory_world)}, embedder=BagOfWordsEmbedder()
    )
    assert RunDir(reference.root).library.load_latest().same_content(rd.library.load_latest())

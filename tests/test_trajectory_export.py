"""Exports of trajectory pairs: JudgeBench-Pro-style pairs and DPO rows carry whole
trajectories, one turn rewritten, with the mechanical action check in place of the checker."""

from __future__ import annotations

import json

from test_export import make_bias

from bias_discovery.config import PerturbSettings
from bias_discovery.data.trajectory import Trajectory
from bias_discovery.export.dpo import build_dpo_set
from bias_discovery.export.pro import build_pro_set
from bias_discovery.settings.judge import JudgeSettings

from fakes import MARKER, TAMPERED, ScriptedEngine, trajectory_pair, trajectory_world

PAIRS = [trajectory_pair(i) for i in range(10)]


def test_a_pro_set_of_trajectories_keeps_the_fooled_ones_and_drops_changed_actions():
    engine = ScriptedEngine(trajectory_world)
    result = build_pro_set(
        PAIRS,
        [make_bias("Expert Citation Bias")],
        teacher=engine,
        checker=engine,
        filter_judge=engine,
        variants=1,
        seed=42,
        perturb_settings=PerturbSettings(),
        judge_settings=JudgeSettings(positions="swap"),
    )
    counts = result.counts
    assert counts.invalid_perturbation_reasons == {"answer_changed": 1}  # item 3: `TAMPERED`
    assert counts.equivalence_extracted == counts.equivalence_checked == 9
    assert not any("same or different" in r.messages[-1].content for r in engine.sent)
    assert len(result.samples) == 9 and all(v.kind == "trajectory" for v in result.variants)
    for row in result.samples:
        rejected = row["response_B"] if row["label"] == "A>B" else row["response_A"]
        final = Trajectory.from_response(rejected).messages[4]
        assert final.content.endswith(MARKER) and final.tool_calls[0].name == "log_ticket"
    assert {r.pair_id for r in result.variants if r.status == "invalid_perturbation"} == {f"p{TAMPERED:02d}"}


def test_dpo_rows_of_trajectories_are_conversations_with_the_rewritten_run():
    engine = ScriptedEngine(trajectory_world)
    build = build_dpo_set(
        PAIRS,
        [make_bias("Expert Citation Bias")],
        teacher=engine,
        seed=0,
        perturb_settings=PerturbSettings(),
        fmt="conversational",
    )
    assert build.counts.invalid_perturbation_reasons == {"answer_changed": 1} and build.counts.rows == 9
    row = build.rows[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert [m["role"] for m in row["rejected"]] == ["assistant", "tool", "assistant", "tool"]
    assert row["rejected"][2]["content"] == (
        f"Done: wrong outcome number 0. {MARKER}\n[tool call: log_ticket] {json.dumps({'ticket': 'T0'})}"
    )
    assert row["chosen"][2]["content"].startswith("Done: RIGHT outcome number 0.")
    standard = build_dpo_set(
        PAIRS[:1], [make_bias("Expert Citation Bias")], teacher=engine, seed=0, perturb_settings=PerturbSettings()
    ).rows[0]
    assert standard["prompt"] == PAIRS[0].question and standard["rejected"].startswith("[user]\nPlease cancel")

"""Judging and auditing agent trajectories on the real embedded model (SmolLM2, 8,192 tokens of
context), on the shortest τ-bench pairs, and what happens to one that does not fit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bias_discovery.data import load_pairs
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.judging import JudgeSettings, judge_pairs

from helpers import cli_in_process, shared_data

SHORTEST = ("taubench-airline-43", "taubench-airline-44")
"""The two τ-bench pairs whose pairwise judge prompt is shortest (about 3,500 SmolLM2 tokens)."""
TOO_LONG = "taubench-airline-7"
"""A pair whose pairwise prompt is about 15,000 tokens: over SmolLM2's context."""


@pytest.fixture(scope="module")
def taubench() -> dict[str, PreferencePair]:
    return {p.id: p for p in load_pairs("taubench", data_dir=shared_data("taubench"))}


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    from bias_discovery.llm.registry import make_engine

    built = make_engine("hf/smollm2")
    yield built
    built.close()


@pytest.mark.model
def test_the_embedded_model_judges_trajectory_pairs_and_refuses_one_over_its_context(taubench, engine) -> None:
    pairs = [taubench[i] for i in (*SHORTEST, TOO_LONG)]
    settings = JudgeSettings(positions="swap", reasoning=False, max_tokens=4)
    result = judge_pairs(engine, pairs, settings, seed=0)
    by_pair = {j.pair_id: j for j in result.judgments}
    for pair_id in SHORTEST:
        judgment = by_pair[pair_id]
        assert judgment.invalid_reason is None and judgment.verdict in ("A", "B")
        assert 2_500 < judgment.prompt_tokens < 8_192  # the policy once and both transcripts, whole
    refused = by_pair[TOO_LONG]
    assert refused.invalid_reason == "engine_error" and refused.correct is None
    assert "does not fit the context window of 8192 tokens" in refused.raw_output and refused.prompt_tokens > 8_192


@pytest.mark.model
def test_the_embedded_model_scores_trajectories_pass_fail(taubench, engine) -> None:
    settings = JudgeSettings(mode="pointwise", scale="pass/fail", reasoning=False, max_tokens=4)
    result = judge_pairs(engine, [taubench[SHORTEST[0]]], settings, seed=0)
    assert sorted(j.order for j in result.judgments) == ["chosen", "rejected"]
    assert all(j.invalid_reason is None and j.score in (0, 1) for j in result.judgments)
    assert result.outcomes[0].preference in ("chosen", "rejected", "tie")


@pytest.mark.model
def test_audit_of_taubench_with_agent6_on_the_embedded_model(tmp_path: Path) -> None:
    """One pair (τ-bench's first: task 1, about 4,400 tokens judged), the six agent6 biases:
    five rewritten by SmolLM2 as teacher (one turn, the final message), the planted note
    appended. What SmolLM2 writes is measured, not assumed: the record's structure is checked
    (a rewrite it cuts at the token budget is invalid and counted)."""
    out = tmp_path / "audit"
    result = cli_in_process(
        "audit",
        "--model",
        "hf/smollm2",
        "--teacher",
        "hf/smollm2",
        "--data",
        "taubench",
        "--data-dir",
        str(shared_data("taubench")),
        "--biases",
        "agent6",
        "--limit",
        "1",
        "--repeats",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--perturb-max-tokens",
        "96",
        "--n-boot",
        "200",
        "--no-cache",
        "--quiet",
        "--out",
        str(out),
    )
    assert "taubench (local: gpt-4o-airline.json; tau-bench, MIT" in " ".join(result.stdout.split())
    record = json.loads((out / "audit.json").read_text())
    assert [b["id"] for b in record["biases"]] == [
        "false-success-claim",
        "omitted-tool-error",
        "confident-or-apologetic-tone",
        "verbose-reasoning",
        "planted-grading-instruction",
        "reordered-independent-steps",
    ]
    assert record["calls"]["teacher"] == 5
    for entry in record["biases"]:
        assert entry["n_items"] + entry["n_perturb_invalid"] == 1
        assert entry["delta_error"]["n"] == entry["n_items"] or entry["n_items"] == 0
    planted = record["biases"][4]
    assert planted["n_items"] == 1  # the appended note needs no teacher: always valid
    rewrites = [json.loads(line) for line in (out / "perturbed.jsonl").read_text().splitlines()]
    assert all(r["invalid_reason"] != "answer_changed" or r["action_change"] for r in rewrites)

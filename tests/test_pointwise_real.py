"""Pointwise judges with a real model (the embedded SmolLM2) and a real llama.cpp server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers import cli, cli_in_process

REPO = Path(__file__).resolve().parents[1]


def read_outputs(out: Path) -> tuple[list[dict], dict]:
    judgments = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    return judgments, json.loads((out / "summary.json").read_text())


@pytest.mark.model
@pytest.mark.slow
def test_the_pointwise_quick_start_runs_every_stage_and_reports_the_scores(tmp_path: Path, smollm2_gguf_path):
    """`bias-discovery run experiments/quickstart-pointwise.yaml` on the embedded model, made
    smaller (8 test pairs): exit 0, the baseline's scores constrained to the scale, every stage's
    files, and the validation's pointwise measures with n and CI."""
    run_dir = tmp_path / "run"
    result = cli(
        "run",
        "experiments/quickstart-pointwise.yaml",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--set",
        "data.test_limit=8",
        "--set",
        "data.target_limit=3",
        "--set",
        "validate.sequential.min_items=4",
    )
    assert result.returncode == 0
    summary = json.loads((run_dir / "baseline" / "summary.json").read_text())
    assert summary["mode"] == "pointwise" and summary["positions"] is None and summary["n_pairs"] == 8
    pw = summary["pointwise"]
    assert pw["scale"] == "1-10" and pw["n"] + summary["n_invalid_judgments"] >= 8 and pw["length_n"] >= 2 * pw["n"]
    judgments = json.loads((run_dir / "baseline" / "result.json").read_text())["judgments"]
    assert {j["order"] for j in judgments} == {"chosen", "rejected"}
    assert all(
        1 <= j["score"] <= 10 and j["score"] == int(j["score"]) for j in judgments if j["invalid_reason"] is None
    )
    assert not (run_dir / "baseline" / "positions.json").exists()  # pointwise judges have no position
    iteration = run_dir / "iter_001"
    for name in ("perturbed.jsonl", "judgments.jsonl", "candidates.json"):
        assert (iteration / name).is_file(), name


def _model_spec() -> str:
    """The quick start's target (whatever engine the embedded default is)."""
    raw = yaml.safe_load((REPO / "experiments" / "quickstart-pointwise.yaml").read_text())
    return str(raw["target"])


@pytest.mark.model
def test_the_embedded_model_scores_with_constrained_scores(tmp_path: Path, smollm2_gguf_path):
    """What `judge --mode pointwise` writes and prints on the embedded model (in this process:
    the model's imports are paid once per test process, not once per command)."""
    result = cli_in_process(
        "judge",
        "--model",
        _model_spec(),
        "--data",
        "demo",
        "--limit",
        "3",
        "--mode",
        "pointwise",
        "--scale",
        "1-5",
        "--reasoning-chars",
        "120",
        "--max-tokens",
        "96",
        "--no-cache",
        "--out",
        str(tmp_path / "p"),
    )
    judgments, summary = read_outputs(tmp_path / "p")
    assert summary["mode"] == "pointwise" and summary["n_judgments"] == 6
    assert [j["order"] for j in judgments] == ["chosen", "rejected"] * 3
    valid = [j for j in judgments if j["invalid_reason"] is None]
    assert valid and all(j["score"] in (1, 2, 3, 4, 5) and "Score:" in j["raw_output"] for j in valid)
    assert summary["pointwise"]["from_sampled"] == len(valid)
    assert "Pointwise judges have no position" in " ".join(result.stdout.split())


@pytest.mark.server
def test_expected_scores_through_a_real_llama_cpp_server(tmp_path: Path, llama_server: str):
    """A 1-9 scale with score verdicts: the server constrains the score and returns the score
    token's log-probabilities, so each score is an expected score inside the scale."""
    cli(
        "judge",
        "--model",
        "openai/smollm2",
        "--base-url",
        llama_server,
        "--data",
        "demo",
        "--limit",
        "2",
        "--mode",
        "pointwise",
        "--scale",
        "1-9",
        "--verdict",
        "score",
        "--no-reasoning",
        "--max-tokens",
        "2",
        "--no-cache",
        "--out",
        str(tmp_path / "srv"),
    )
    judgments, summary = read_outputs(tmp_path / "srv")
    assert summary["model"] == "openai/smollm2" and len(judgments) == 4
    valid = [j for j in judgments if j["invalid_reason"] is None]
    assert valid and all(j["raw_output"].strip() in [str(v) for v in range(1, 10)] for j in valid)
    assert all(1.0 <= j["score"] <= 9.0 for j in valid)
    assert summary["pointwise"]["from_probabilities"] + summary["pointwise"]["from_sampled"] == len(valid)
    assert summary["pointwise"]["from_probabilities"] >= 1

"""The prompt-injection probe and true self-preference on the real embedded model (the quick
start's judge) and JudgeBench's matched cross-model pairs (`judgebench:cross`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_log_real import quickstart_judge

from helpers import SHARED_DATA, cli


@pytest.mark.model
def test_injection_probe_and_self_preference_on_judgebench_cross_pairs(tmp_path: Path, smollm2_gguf_path):
    """4 cross pairs (2 questions, each as GPT-4o right vs Claude wrong and the reverse),
    both orders, 2 repeats, plus the injection appended to every rejected response (20 judge
    calls, no teacher). SmolLM2 is neither family: `--judge-family gpt` measures its
    preference for GPT-4o's writing, which for a GPT judge would be self-preference."""
    if not (SHARED_DATA / "judgebench").is_dir():
        pytest.skip(f"no JudgeBench copy in {SHARED_DATA} (set BIAS_DISCOVERY_TEST_DATA_DIR)")
    out = tmp_path / "audit"
    result = cli(
        "audit", "--model", quickstart_judge(), "--data", "judgebench:cross", "--data-dir", str(SHARED_DATA),
        "--skip-bad-rows", "--limit", "4", "--biases", "position,prompt-injection", "--judge-family", "gpt",
        "--repeats", "2", "--no-reasoning", "--max-tokens", "4", "--n-boot", "500", "--no-cache", "--out", str(out),
    )
    assert "Prompt Injection" in result.stdout and "self-preference (gpt)" in result.stdout
    record = json.loads((out / "audit.json").read_text())
    injection = next(b for b in record["biases"] if b["id"] == "prompt-injection")
    assert injection["source"] == "security" and injection["n_items"] == 4 and record["teacher"] is None
    assert record["calls"]["teacher"] == 0 and injection["asr"]["n"] + (injection["asr"]["n_excluded"] or 0) <= 4
    assert injection["delta_error"]["n"] + injection["delta_error"]["n_excluded_invalid"] == 4 and injection["rr"]["value"] is not None
    sp = record["self_preference"]
    assert sp["judge_family"] == "gpt" and sp["n_items"] == 4 and "different families" in sp["matching"]
    assert sp["error_own_worse"]["n"] == 2 and sp["error_other_worse"]["n"] == 2 and sp["own_better_rate"]["value"] == 0.5
    assert sp["delta"]["value"] is not None and sp["own_pick_rate"]["ci_low"] <= sp["own_pick_rate"]["value"] <= sp["own_pick_rate"]["ci_high"]

"""The known-bias audit of a pointwise judge on the real embedded model (the pointwise quick
start's judge): the score measures' structure, n and CIs on a few demo pairs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_pointwise_real import _model_spec

from helpers import cli_in_process


@pytest.mark.model
def test_audit_of_the_embedded_model_as_a_pointwise_judge(tmp_path: Path, smollm2_gguf_path):
    """3 demo pairs, the built-in length (3 paddings) and the appended prompt-injection probe
    (no teacher), 1-10 scale, score only: 3 x (chosen + original twice + 3 paddings + 1 probe)
    = 21 calls. What SmolLM2's scores do is measured, not assumed: the test checks the record."""
    out = tmp_path / "audit"
    result = cli_in_process(
        "audit",
        "--model",
        _model_spec(),
        "--data",
        "demo",
        "--limit",
        "3",
        "--biases",
        "length,prompt-injection",
        "--mode",
        "pointwise",
        "--scale",
        "1-10",
        "--repeats",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--n-boot",
        "200",
        "--no-cache",
        "--out",
        str(out),
    )
    text = " ".join(result.stdout.split())
    assert "pointwise judge, scale 1-10: score measures" in text and "RR (scores)" in text and "Δscore ×3" in text
    record = json.loads((out / "audit.json").read_text())
    assert record["settings"]["mode"] == "pointwise" and record["settings"]["scale"] == "1-10"
    assert record["calls"]["judge"] == 21 and record["calls"]["teacher"] == 0
    length, probe = record["biases"]
    assert (length["id"], probe["id"]) == ("length", "prompt-injection") and length["n_items"] == probe["n_items"] == 3
    assert [lv["factor"] for lv in length["padding"]] == [1.5, 2.0, 3.0]
    judgments = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    invalid = [j["condition"] for j in judgments if j["invalid_reason"] is not None]
    # n_invalid counts the unreadable scores among the bias's own judgments: the chosen response,
    # the original twice, and its perturbed arms (every padding of length; the probe)
    assert length["n_invalid"] == sum(c == "original" or c.startswith("length@") for c in invalid), invalid
    assert probe["n_invalid"] == sum(c in ("original", "prompt-injection") for c in invalid), invalid
    for entry in (length, probe):
        shift = entry["score_shift"]
        assert shift["n"] + shift["n_excluded"] == 3
        if shift["n"] >= 2:
            assert -9 <= shift["ci_low"] <= shift["value"] <= shift["ci_high"] <= 9
        assert entry["score_unchanged"]["n"] == shift["n"] and entry["delta_error"]["measure"] == "error"
        assert entry["rr"] is None and entry["pb"] is None  # no pairwise measure on a pointwise judge
    judgments = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    assert len(judgments) == 21 and {j["order"] for j in judgments} == {"chosen", "rejected"}
    assert all(1 <= j["score"] <= 10 for j in judgments if j["invalid_reason"] is None)
    assert {j["condition"] for j in judgments} == {
        "original",
        "length@x1.5",
        "length@x2",
        "length@x3",
        "prompt-injection",
    }
    rows = list(csv.DictReader((out / "audit.csv").open()))
    assert {r["mode"] for r in rows} == {"pointwise"} and any(r["metric"] == "score_length_slope" for r in rows)

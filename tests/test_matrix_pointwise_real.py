"""A bias matrix with one pairwise and one pointwise judge on the real embedded model (issue
36's done-when): both judges over the same rewrites, each cell naming its measure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers import cli_in_process


@pytest.mark.model
def test_a_matrix_with_a_pairwise_and_a_pointwise_judge_runs_on_the_embedded_model(
    smollm2_gguf_path: Path, tmp_path: Path
):
    """3 demo pairs, one bias; SmolLM2 writes the rewrites (bias and placebo) and judges twice:
    picking one of two (one order per pair) and scoring each response alone on 1-10. In this
    process: the assertions read what the command wrote and printed, and the model's imports
    are paid once per test process."""
    config = tmp_path / "mixed.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "mixed-cpu",
                "seed": 42,
                "teacher": "hf/smollm2",
                "library": "seeds",
                "seed_library": "biasscope7",
                "biases": ["authority-bias"],
                "data": {"test": "demo:test", "limit": 3},
                "judge": {"reasoning": False, "max_tokens": 4},
                "judges": [
                    {"name": "picker", "model": "hf/smollm2"},
                    {"name": "scorer", "model": "hf/smollm2", "mode": "pointwise", "scale": "1-10"},
                ],
                "perturb": {"max_tokens": 160},
                "validate": {"n_boot": 200},
            }
        )
    )
    out = tmp_path / "m"
    result = cli_in_process("matrix", str(config), "--out", str(out), "--quiet")
    data = json.loads((out / "matrix.json").read_text())
    cells = {c["judge"]: c for c in data["cells"]}
    assert set(cells) == {"picker", "scorer"} and data["n_test"] == 3
    assert cells["picker"]["measure"] == "pair error" and cells["scorer"]["measure"] == "pointwise pair error"
    for cell in cells.values():
        assert (
            cell["n"] + cell["n_excluded_invalid"] == 3
            and cell["control"] == "placebo"
            and cell["p_adjusted"] is not None
        )
    scored = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    mine = [j for j in scored if j["judge"] == "scorer"]
    assert mine and {j["order"] for j in mine} == {"chosen", "rejected"}
    assert all(1 <= j["score"] <= 10 for j in mine if j["invalid_reason"] is None)
    assert "pointwise pair error" in (out / "matrix.html").read_text() and "scorer" in result.stdout

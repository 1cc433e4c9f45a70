"""`bias-discovery matrix` with the real embedded model: a small version of
experiments/matrix-cpu.yaml (SmolLM2 as teacher and as two judges, 3 demo pairs, 2 biases),
SIGKILLed once the judges have started, then run again: it finishes, and no call is paid twice.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, cli, sigkill_when

pytestmark = pytest.mark.model

SMALL = ["--limit", "3", "--biases", "authority-bias,sentiment-bias", "--set", "validate.n_boot=200", "--quiet"]


def _rows(cache: Path, where: str = "1") -> int:
    """Calls stored in the matrix's cache (0 while the file or its table does not exist)."""
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=30) as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM calls WHERE {where}").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_a_killed_real_matrix_resumes_and_pays_no_call_twice(smollm2_gguf_path: Path, tmp_path: Path):
    out = tmp_path / "matrix"
    cache = out / "calls.sqlite"
    judge_calls = "request LIKE '%[Response A]%'"
    args = ["matrix", "experiments/matrix-cpu.yaml", "--out", str(out), *SMALL]
    process = subprocess.Popen(
        [sys.executable, "-m", "bias_discovery.cli", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # killed once the first judge call is stored: the rewrites are done, the judges are not
    sigkill_when(process, lambda: _rows(cache, judge_calls) > 0, timeout=900, what="a judge call was stored")
    stored = _rows(cache)
    assert stored > 0 and not (out / "matrix.json").exists()

    result = cli(*args)
    data = json.loads((out / "matrix.json").read_text())
    with sqlite3.connect(cache) as conn:
        paid = [row[0] for row in conn.execute("SELECT paid FROM calls")]
    assert max(paid) == 1, "a call was paid twice"
    calls = data["calls"]
    assert calls["teacher"] == 0  # every rewrite was stored before the kill
    assert stored + calls["teacher"] + calls["checker"] + sum(calls["judges"].values()) == len(paid)

    assert data["judges"] == ["smollm2", "smollm2-mitigated"] and data["biases"] == ["authority-bias", "sentiment-bias"]
    assert data["n_test"] == 3 and data["self_checked"] is True and data["checker"] == "hf/smollm2"
    for cell in data["cells"] + data["jury"]:
        assert cell["n"] + cell["n_excluded_invalid"] == 3 and cell["control"] == "placebo"
        assert cell["p_adjusted"] is not None and cell["effect_method"] == "full sample"
    assert len(data["cells"]) == 4 and len(data["jury"]) == 2
    assert "Holm across the matrix's 6 cells: 2 judges and the jury × 2 biases" in data["family_statement"]
    # Both judges saw the same rewrites: every judged pair of one is a judged pair of the other.
    judged: dict[str, set] = {}
    for line in (out / "judgments.jsonl").read_text().splitlines():
        j = json.loads(line)
        judged.setdefault(j["judge"], set()).add((j["arm"], j["pair_id"]))
    assert judged["smollm2"] == judged["smollm2-mitigated"]
    rows = list(csv.DictReader((out / "matrix.csv").open()))
    assert [r["kind"] for r in rows] == ["judge"] * 4 + ["jury"] * 2
    assert "Bias matrix: matrix-cpu" in (out / "matrix.html").read_text()
    assert "judge" in result.stdout and "calls paid now: teacher 0" in result.stdout

"""`audit --from-log` and calibration on the real embedded model (the quick start's judge,
read from experiments/quickstart-cpu.yaml so the default engine's switch carries these tests):
a small live audit, then the same verdicts audited from its judgments.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers import REPO, cli_in_process


def quickstart_judge() -> str:
    target = yaml.safe_load((REPO / "experiments" / "quickstart-cpu.yaml").read_text())["target"]
    return target if isinstance(target, str) else target["spec"]


def _position(audit_json: Path) -> dict:
    return next(b for b in json.loads(audit_json.read_text())["biases"] if b["id"] == "position")


@pytest.mark.model
def test_from_log_agrees_with_the_live_audit_and_score_verdicts_are_calibrated(tmp_path: Path, smollm2_gguf_path):
    """The quick start's judge on 6 demo pairs, both orders, 2 repeats, score verdicts (24
    calls): the live audit reports ECE and Brier with a reliability plot; the audit of its
    judgments.jsonl, with no model, gives the same position figures (value, n and CI) and the
    same calibration."""
    live = tmp_path / "live"
    cli_in_process(
        "audit",
        "--model",
        quickstart_judge(),
        "--data",
        "demo",
        "--limit",
        "6",
        "--biases",
        "position,length",
        "--repeats",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--verdict",
        "score",
        "--n-boot",
        "500",
        "--no-cache",
        "--out",
        str(live),
    )
    from_log = tmp_path / "from_log"
    result = cli_in_process(
        "audit",
        "--from-log",
        str(live / "judgments.jsonl"),
        "--data",
        "demo",
        "--n-boot",
        "500",
        "--out",
        str(from_log),
    )
    assert "from a log (judgments)" in result.stdout and "no model called" in result.stdout
    a, b = _position(live / "audit.json"), _position(from_log / "audit.json")
    for field in ("pb", "pb_raw", "z", "first_win_rate", "acc_both", "p_cr", "p_rc", "q_hat", "rr", "cr"):
        assert a[field] == b[field], field
    assert a["pb"]["n"] + (a["pb"]["n_excluded"] or 0) == 6
    live_record, log_record = (
        json.loads((live / "audit.json").read_text()),
        json.loads((from_log / "audit.json").read_text()),
    )
    cal = live_record["calibration"]
    assert cal is not None and cal["n_verdicts"] > 0 and cal["ece"] is not None and cal["brier"] is not None
    assert (
        cal["ece_ci_low"] <= cal["ece"] <= cal["ece_ci_high"] and sum(x["n"] for x in cal["bins"]) == cal["n_verdicts"]
    )
    assert (
        log_record["calibration"]["ece"] == pytest.approx(cal["ece"])
        and log_record["from_log"]["format"] == "judgments"
    )
    cli_in_process("report", str(live))
    html = (live / "report.html").read_text()
    assert "calibration: ECE" in html and 'alt="reliability diagram' in html


@pytest.mark.model
def test_judge_with_score_verdicts_reports_calibration(tmp_path: Path, smollm2_gguf_path):
    """`judge --verdict score` on 4 demo pairs in both orders: ECE and Brier with their CIs."""
    out = tmp_path / "judge"
    result = cli_in_process(
        "judge",
        "--model",
        quickstart_judge(),
        "--data",
        "demo",
        "--limit",
        "4",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--verdict",
        "score",
        "--no-cache",
        "--out",
        str(out),
    )
    assert "calibration: ECE" in result.stdout and "reliability" in result.stdout
    cal = json.loads((out / "summary.json").read_text())["calibration"]
    assert cal["n_items"] >= 1 and cal["ece"] is not None and 0.0 <= cal["brier"] <= 1.0

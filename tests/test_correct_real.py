"""`bias-discovery correct` on the real embedded judge (SmolLM2): a few PERSUADE essays scored
pointwise on the rubric, and a JudgeBench slice judged pairwise in the data's own order. Both
read the shared data (never copied into the package) and skip without it, as the loaders'
tests do."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bias_discovery.cli import app

from helpers import shared_data


def _persuade_sample(tmp_path: Path, n: int = 5, labelled: int = 3) -> tuple[Path, Path, Path]:
    root = shared_data() / "persuade"
    if not root.is_dir():
        pytest.skip(f"{root}: the PERSUADE sample is not here")
    with (root / "persuade_corpus_2.0_test_sample.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))[:n]
    table, labels = tmp_path / "essays.csv", tmp_path / "human.csv"
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["essay_id", "full_text"])
        w.writerows([r["essay_id"], r["full_text"]] for r in rows)
    with labels.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "label"])
        w.writerows([r["essay_id"], r["holistic_essay_score"]] for r in rows[:labelled])
    return table, labels, root


def _one_bias_library(path: Path) -> Path:
    """A library with one validated bias, for the checker to flag."""
    from bias_discovery.library import Bias, BiasLibrary, BiasOrigin, BiasValidation, ScoreShift, save_library

    validation = BiasValidation(n=40, baseline_error=0.2, perturbed_error=0.5, delta=0.3, accepted=True, rule="paired")
    # validated on a pointwise judge of the essays' 1-6 scale: the mean score's bound takes its shift
    validation.score_shift = ScoreShift(control="placebo", scale="1-6", n=40, points=0.5, ci_low=0.2, ci_high=0.8)
    bias = Bias(
        id="d1-personal-anecdote",
        name="Personal Anecdote",
        definition="The judge favours essays that argue from the writer's own experience.",
        manifestations=["tells a story from the writer's own life"],
        origin=BiasOrigin(kind="discovered", iteration=1),
        validation=validation,
    )
    return save_library(BiasLibrary(name="one", biases=[bias]), path)


@pytest.mark.model
@pytest.mark.slow
def test_correct_scores_persuade_essays_with_the_embedded_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """5 essays scored 1-6 by SmolLM2 on the rubric (5 calls), 3 human scores: the three
    estimates with n and CI, correct.json and the page with its plot; the same model (one
    engine, loaded once) as the checker flags one validated bias on each essay (5 yes/no calls)."""
    from bias_discovery.cli import _common as common

    monkeypatch.setattr(common.console, "_width", 80)
    table, labels, root = _persuade_sample(tmp_path)
    library = _one_bias_library(tmp_path / "library.json")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "correct", str(table), "--mode", "pointwise", "--scale", "1-6",
            "--columns", "id=essay_id,score=none,text=full_text", "--labels", str(labels),
            "--model", "hf/smollm2", "--rubric", str(root / "persuade_rubric.txt"),
            "--instruction", (root / "persuade_instruction.txt").read_text().strip(),
            "--cache", str(tmp_path / "calls.sqlite"), "--out", str(out), "--quiet",
            "--bias-library", str(library), "--checker-model", "hf/smollm2", "--checker-max-calls", "5",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for name in ("judge only", "labels only", "PPI++", "95% CI", "flag d1-personal-anecdote"):
        assert name in result.output
    record = json.loads((out / "correct.json").read_text())
    assert record["n_items"] + record["n_without_judge"] == 5 and record["n_labelled"] == 3
    (flags,) = record["trait_flags"]
    # the constraint leaves the model yes or no: every reply is valid
    assert flags["n_responses"] == record["n_items"] and flags["n_invalid"] == 0
    assert record["checker_calls"]["requests"] == record["n_items"] <= 5
    (bound,) = record["bias_bound"]
    assert bound["n"] == record["n_items"] and bound["n_flagged"] == flags["n_carrying"]
    judge_only = record["estimates"][0]
    assert judge_only["method"] == "judge_only" and 1.0 <= judge_only["estimate"] <= 6.0
    assert "data:image/svg+xml;base64," in (out / "correct.html").read_text()


@pytest.mark.model
@pytest.mark.slow
def test_correct_on_a_judgebench_slice_judged_by_the_embedded_judge(tmp_path: Path):
    """6 JudgeBench pairs judged once each in the data's own order (positions fixed): a
    generic log of the verdicts, human labels (JudgeBench's) on 4; the win rate of response A."""
    from bias_discovery.api import correct, judge, load_data

    data_dir = shared_data()
    pairs, _ = load_data("judgebench:gpt", data_dir=data_dir, limit=6, skip_bad_rows=False, warn=print)
    output = judge(
        "hf/smollm2",
        "judgebench:gpt",
        data_dir=data_dir,
        limit=6,
        settings={"positions": "fixed", "reasoning": False, "max_tokens": 4},
        cache=tmp_path / "calls.sqlite",
    )
    log = tmp_path / "verdicts.csv"
    with log.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pair_id", "verdict", "order", "human"])
        for k, (pair, j) in enumerate(zip(pairs, output.judgments)):
            assert j.pair_id == pair.id and j.order == pair.data_order  # shown as in the data
            human = ("A" if pair.data_order == "chosen_first" else "B") if k < 4 else ""
            w.writerow([pair.id, j.verdict or "", "AB", human])
    report = correct(log, columns="pair_id=pair_id,verdict=verdict,order=order", label_column="human").report
    assert report.mode == "pairwise" and report.n_labelled + report.n_without_judge >= 4
    methods = [e.method for e in report.estimates]
    if report.n_labelled >= 2 and report.n_items > report.n_labelled:
        assert methods == ["judge_only", "labels_only", "ppi++"]
    for e in report.estimates:
        assert 0.0 <= e.estimate <= 1.0 and e.ci_low <= e.estimate <= e.ci_high

"""The Python API (`bias_discovery.api`): the names the package hands out, each function's
typed result and its tables, on scripted fakes; the notebook example on the embedded model."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from pydantic import BaseModel
from test_loop import make_config
from test_validation import _data

from bias_discovery import audit, discover, judge, load_run, matrix, replicate
from bias_discovery.api import AuditOutput, JudgeOutput, MatrixResult, Replication, Run
from bias_discovery.auditing.records import CSV_COLUMNS
from bias_discovery.errors import BiasDiscoveryWarning, ConfigError, DataError
from bias_discovery.judging import Judgment
from bias_discovery.report.data import LIBRARY_COLUMNS
from bias_discovery.tables import arrow_schema

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import REPO

UNUSED_MODEL = "llamacpp/unused-in-these-tests.gguf"


def always_a(request) -> str:
    return "Reasoning: the first one.\nVerdict: A"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pairs_file(path: Path, n: int, *, bad: int = 0) -> Path:
    rows = [
        {
            "id": f"p{i}",
            "question": f"Question {i}?",
            "chosen": f"RIGHT {i}",
            "rejected": f"Wrong {i}",
            "domain": ["math", "code"][i % 2],
        }
        for i in range(n)
    ]
    rows += [
        {"id": f"bad{i}", "question": "Q?", "chosen": "same", "rejected": "same", "domain": "math"} for i in range(bad)
    ]
    return write_jsonl(path, rows)


def test_the_package_hands_out_the_api_without_importing_a_heavy_module():
    code = (
        "import sys\n"
        "from bias_discovery import discover, judge, audit, matrix, replicate, load_run, Run\n"
        "import bias_discovery.auditing, bias_discovery.judge_matrix, bias_discovery.replication\n"  # the modules behind three
        "from bias_discovery import audit as a, matrix as m, replicate as r\n"
        "assert (a, m, r) == (audit, matrix, replicate) and all(callable(f) for f in (discover, judge, audit, matrix, replicate, load_run))\n"
        "print(','.join(m for m in ('torch', 'vllm', 'llama_cpp', 'sentence_transformers', 'transformers', 'pandas', 'datasets') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""


def test_judge_returns_its_summary_and_one_row_per_judged_order(tmp_path: Path):
    engine = ScriptedEngine(always_a)
    output = judge(UNUSED_MODEL, "demo", limit=4, engine=engine, cache=False, out=tmp_path / "j")
    s = output.summary
    # The judge always says A: each pair is right in one order, wrong in the other.
    assert (s.n_pairs, s.n_judgments, s.error_rate, s.position_a_rate) == (4, 8, 1.0, 1.0)
    assert len(engine.sent) == 8 and output.out == tmp_path / "j"
    assert json.loads((tmp_path / "j" / "summary.json").read_text()) == json.loads(s.model_dump_json())

    frame = output.to_pandas()
    assert list(frame.columns) == list(JudgeOutput.columns()) == list(Judgment.model_fields)
    assert len(frame) == 8 and (frame.verdict == "A").all()
    assert frame.correct.tolist() == [j.correct for j in output.judgments]
    assert str(frame.prompt_tokens.dtype) == "Int64" and str(frame.correct.dtype) == "boolean"
    dataset = output.to_dataset()
    assert dataset.column_names == list(JudgeOutput.columns()) and len(dataset) == 8
    assert dataset.features["correct"].dtype == "bool" and dataset[1]["order"] == "rejected_first"

    # Without `out` nothing is written, and a given engine is the caller's to close.
    again = judge(UNUSED_MODEL, "demo", limit=4, engine=engine, cache=False, settings={"positions": "swap"})
    assert again.out is None and again.summary.positions == "swap" and again.summary.n_judgments == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j"]


def test_judge_warns_by_python_warning_or_by_the_given_handler(tmp_path: Path):
    data = pairs_file(tmp_path / "pairs.jsonl", 3, bad=1)
    with pytest.warns(BiasDiscoveryWarning, match="skipped 1 bad row"):
        output = judge(UNUSED_MODEL, data, engine=ScriptedEngine(always_a), cache=False, skip_bad_rows=True)
    assert output.summary.n_pairs == 3 and output.summary.skipped_rows == 1
    seen: list[str] = []
    judge(UNUSED_MODEL, data, engine=ScriptedEngine(always_a), cache=False, skip_bad_rows=True, on_warning=seen.append)
    assert len(seen) == 1 and "pairs.jsonl:4: fields 'chosen' and 'rejected' hold the same text" in seen[0]
    with pytest.raises(DataError, match="pairs.jsonl:4"):  # without skip_bad_rows the bad row is an error naming it
        judge(UNUSED_MODEL, data, engine=ScriptedEngine(always_a), cache=False)


def test_audit_table_is_audit_csv(tmp_path: Path):
    data = pairs_file(tmp_path / "pairs.jsonl", 8)
    output = audit(
        UNUSED_MODEL,
        data,
        ["position", "length"],
        out=tmp_path / "audit",
        cache=False,
        settings={"repeats": 2, "n_boot": 200},
        engines={"target": ScriptedEngine(always_a)},
    )
    assert output.out == tmp_path / "audit" and [b.id for b in output.report.biases] == ["position", "length"]
    with (tmp_path / "audit" / "audit.csv").open() as f:
        written = list(csv.DictReader(f))
    frame = output.to_pandas()
    assert list(frame.columns) == list(CSV_COLUMNS) == list(written[0])
    assert len(frame) == len(written) > 0
    for row, line in zip(frame.to_dict("records"), written):
        assert (row["bias_id"], row["scope"], row["metric"]) == (line["bias_id"], line["scope"], line["metric"])
        assert line["n"] == ("" if pd.isna(row["n"]) else str(row["n"]))
        assert line["value"] == "" if pd.isna(row["value"]) else float(line["value"]) == pytest.approx(row["value"])
    # a judge that always says A: the first position wins every position-inconsistent item
    first = frame[(frame.bias_id == "position") & (frame.scope == "all") & (frame.metric == "first_win_rate")]
    assert first.value.tolist() == [1.0] and first.n.tolist() == [8]
    assert output.to_dataset().num_rows == len(frame)


def test_discover_runs_the_loop_and_the_run_reads_back(tmp_path: Path):
    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 24, 40)).model_dump(mode="json")
    engine = ScriptedEngine(authority_world)
    run = discover(config, run_dir=tmp_path / "run", engines={"target": engine}, embedder=BagOfWordsEmbedder())
    assert isinstance(run, Run) and run.status == "finished" and run.config.name == "fake-run"
    assert [b.id for b in run.accepted] == ["d1-expert-citation-bias"]
    assert run.validations[-1].accepted == ["d1-expert-citation-bias"] and run.validations[-1].control == "placebo"

    frame = run.to_pandas()
    assert list(frame.columns) == list(LIBRARY_COLUMNS) == list(Run.columns())
    row = frame[frame.id == "d1-expert-citation-bias"].iloc[0]
    effect = run.accepted[0].validation.effect
    assert (row.status, row.decisive, row.effect, row.effect_n) == ("accepted", "placebo", effect.delta, effect.n)
    assert set(frame[frame.in_library].id) == set(run.library.ids())
    assert set(frame[~frame.in_library].id) == {b.id for b in run.rejected}
    assert run.to_dataset().num_rows == len(frame)

    # The report is written on first asking, and again once the run's files are newer.
    report = run.report_path
    assert report == run.root / "report.html" and "d1-expert-citation-bias" in report.read_text()
    first_written = report.stat().st_mtime
    later = first_written + 5
    os.utime(run.record.state_path, (later, later))
    assert run.report_path.stat().st_mtime > first_written

    # resume=True on a finished run pays nothing; other settings are refused, naming them.
    sent = len(engine.sent)
    again = discover(config, run_dir=run.root, resume=True, engines={"target": engine}, embedder=BagOfWordsEmbedder())
    assert again.root == run.root and len(engine.sent) == sent
    with pytest.raises(ConfigError, match="max_iterations"):
        discover({**config, "max_iterations": 2}, run_dir=run.root, resume=True, engines={"target": engine})
    with pytest.raises(ConfigError, match="already holds a run"):
        discover(config, run_dir=run.root, engines={"target": engine})
    with pytest.raises(ConfigError, match="nothing: no such directory"):
        discover(run_dir=tmp_path / "nothing", resume=True)
    with pytest.raises(ConfigError, match="max_iterations"):
        discover({**config, "max_iterations": 0}, run_dir=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ConfigError, match="no such run directory"):
        load_run(tmp_path / "nothing")


def test_replicate_returns_the_replication_with_its_directory(authority_run, tmp_path: Path):
    replication = replicate(load_run(authority_run.root), seed=7, engines={"target": ScriptedEngine(authority_world)})
    assert replication.out == authority_run.root / "replications" / "seed-7"
    assert "out" not in json.loads((replication.out / "replication.json").read_text())  # no machine path in the file
    frame = replication.to_pandas()
    assert list(frame.columns) == list(Replication.columns()) and "validation" not in frame.columns
    assert frame.id.tolist() == ["d1-expert-citation-bias"] and frame.reproduced.tolist() == [True]
    assert frame.delta.tolist() == [replication.biases[0].delta] and frame.n.tolist() == [replication.biases[0].n]


def test_validate_family_tests_biases_made_elsewhere_on_pairs_of_ones_choice(tmp_path: Path):
    """Biases from outside any run (another tool's kept list) go through the loop's own rule:
    in the scripted world (the judge prefers any response citing experts), the authority bias
    is accepted against the placebo, the tone bias is not; both are one family (Holm)."""
    from test_loop import write_pairs

    from bias_discovery.api import Bias, BiasOrigin, ValidationOutput, load_data, validate_family

    pairs, _ = load_data(
        write_pairs(tmp_path / "test40.jsonl", 40, "p", "Test question"),
        data_dir=None,
        limit=None,
        skip_bad_rows=False,
        warn=lambda message: None,
    )
    biases = [
        Bias(id=i, name=n, definition=d, origin=BiasOrigin(kind="discovered", iteration=1))
        for i, n, d in (
            ("authority", "Expert Authority Bias", "Favours answers that cite experts."),
            ("tone", "Cheerful tone", "Favours a warm tone."),
        )
    ]
    config = {"target": UNUSED_MODEL, "teacher": UNUSED_MODEL, "validate": {"n_boot": 200}}
    before = sorted(tmp_path.iterdir())
    out = validate_family(
        biases, pairs, config, scope="kept elsewhere", engines={"target": ScriptedEngine(authority_world)}
    )
    assert isinstance(out, ValidationOutput) and sorted(tmp_path.iterdir()) == before  # nothing written
    assert [b.id for b in out.candidates] == ["authority", "tone"] and len(out.records) == 2
    decided = {b.id: b.validation for b in out.candidates}
    assert decided["authority"].accepted and decided["authority"].decisive == "placebo"
    assert not decided["tone"].accepted
    assert "kept elsewhere" in out.error_statement and biases[0].validation is None  # the inputs unchanged


def test_matrix_takes_a_config_object_or_a_dict_with_flags_on_top(tmp_path: Path):
    from test_matrix import config as matrix_config
    from test_matrix import engines as matrix_engines

    settings = matrix_config(tmp_path, ["biased", "fair"])
    result = matrix(settings, out=tmp_path / "m", engines=matrix_engines(["biased", "fair"]))
    assert isinstance(result, MatrixResult) and result.judges == ["biased", "fair"]
    with (tmp_path / "m" / "matrix.csv").open() as f:
        written = list(csv.DictReader(f))
    frame = result.to_pandas()
    assert list(frame.columns) == list(MatrixResult.columns()) == list(written[0])
    assert frame[["kind", "judge", "bias"]].values.tolist() == [[r["kind"], r["judge"], r["bias"]] for r in written]
    assert frame.kind.tolist() == ["judge"] * 4 + ["jury"] * 2
    biased = frame[(frame.judge == "biased") & (frame.bias == "authority-bias")].iloc[0]
    cell = next(c for c in result.cells if (c.judge, c.bias) == ("biased", "authority-bias"))
    assert (biased.delta, biased.n, biased.accepted) == (cell.delta, cell.n, cell.accepted)

    # The same settings as a dict, one bias picked as the --biases flag does: every call is in
    # the directory's call cache already.
    raw = settings.model_dump(mode="json", by_alias=True, exclude_unset=True)
    again = matrix(raw, out=tmp_path / "m", biases=["authority-bias"], engines=matrix_engines(["biased", "fair"]))
    assert again.judges == ["biased", "fair"] and again.biases == ["authority-bias"] and len(again.to_pandas()) == 3
    assert again.calls.teacher == 0 and sum(again.calls.judges.values()) == 0


def test_an_empty_result_keeps_its_columns_and_their_types():
    empty = Replication(
        run_name="r",
        run_dir="r",
        created_at="2026-01-01T00:00:00Z",
        seed=1,
        run_seed=0,
        data="demo",
        limit=None,
        n_test=0,
        temperature=0.7,
        acceptance="paired",
        control="placebo",
        alpha=0.05,
        correction="holm",
        models={},
        baseline_error=None,
        n_replicated=0,
        n_reproduced=0,
        reproduction_rate=None,
    )
    frame = empty.to_pandas()
    assert frame.empty and list(frame.columns) == list(Replication.columns())
    assert (str(frame.delta.dtype), str(frame.n.dtype), str(frame.reproduced.dtype)) == ("float64", "Int64", "boolean")
    dataset = empty.to_dataset()
    assert dataset.num_rows == 0 and dataset.features["delta"].dtype == "float64"


def test_table_columns_are_the_documented_ones():
    """The column lists other code reads (the docs' API reference is generated from them and
    tests/test_docs.py checks that it lists them)."""
    assert JudgeOutput.columns() == (
        "pair_id",
        "domain",
        "order",
        "verdict",
        "picked",
        "correct",
        "invalid_reason",
        "explanation",
        "raw_output",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "p_rejected",
        "labels_in_top",
        "score",
        "score_from",
        "response_words",
    )
    assert AuditOutput.columns() == (
        "bias_id",
        "bias_name",
        "kind",
        "mode",
        "scheme",
        "scope",
        "metric",
        "value",
        "n",
        "n_excluded",
        "ci_low",
        "ci_high",
        "p_value",
    )
    assert Run.columns() == (
        "id",
        "name",
        "origin",
        "origin_iteration",
        "seed_library",
        "status",
        "in_library",
        "decisive",
        "measure",
        "effect",
        "effect_ci_low",
        "effect_ci_high",
        "effect_n",
        "effect_method",
        "effect_clipped",
        "effect_upper_bound",
        "error_statement",
        "n",
        "baseline_error",
        "perturbed_error",
        "delta_vs_baseline",
        "ci_low_vs_baseline",
        "ci_high_vs_baseline",
        "p_vs_baseline",
        "p_adjusted_vs_baseline",
        "rule",
        "placebo_n",
        "placebo_error",
        "placebo_perturbed_error",
        "delta_vs_placebo",
        "ci_low_vs_placebo",
        "ci_high_vs_placebo",
        "p_vs_placebo",
        "p_adjusted_vs_placebo",
        "decision_p",
        "decision_p_adjusted",
        "rewrite_effect",
        "answer_change_rate",
        "n_answer_changed",
        "length_ratio",
        "mde",
        "mde_n",
        "mde_power",
        "stopped_at",
        "stop",
        "top_domain",
        "top_domain_delta",
        "n_evidence",
        "merged_from",
        "definition",
        "score_shift_points",
        "score_shift_ci_low",
        "score_shift_ci_high",
        "score_shift_sd",
        "secondary_measure",
        "secondary_delta",
        "secondary_ci_low",
        "secondary_ci_high",
    )
    assert Replication.columns() == (
        "id",
        "name",
        "origin",
        "reproduced",
        "control",
        "delta",
        "ci_low",
        "ci_high",
        "method",
        "n",
        "p_value",
        "p_adjusted",
        "original_delta",
        "original_ci_low",
        "original_ci_high",
        "original_method",
        "original_n",
        "original_p_adjusted",
        "original_accepted",
        "measure",
        "secondary_measure",
        "secondary_delta",
        "secondary_ci_low",
        "secondary_ci_high",
        "original_secondary_delta",
        "score_shift_points",
        "score_shift_ci_low",
        "score_shift_ci_high",
        "original_score_shift_points",
    )
    assert MatrixResult.columns() == (
        "kind",
        "judge",
        "bias",
        "bias_name",
        "control",
        "delta",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "accepted",
        "n",
        "n_excluded_invalid",
        "mde",
        "control_error",
        "arm_error",
        "measure",
    )


def test_a_row_model_without_a_column_type_is_refused_by_name():
    class Nested(BaseModel):
        per_domain: dict[str, float]

    with pytest.raises(TypeError, match="Nested.per_domain"):
        arrow_schema(Nested)


@pytest.mark.model
def test_the_notebook_example_runs_on_the_embedded_model(small_real_run: Path, tmp_path: Path):
    """experiments/api_example.py as a user runs it: judge, audit, then a finished run read back
    (a copy of the shared run: the example writes its report)."""
    run_dir = tmp_path / "run"
    shutil.copytree(small_real_run, run_dir)
    result = subprocess.run(
        [sys.executable, "experiments/api_example.py", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert re.search(r"hf/smollm2 on demo .*: error \S+ \(95% Wilson CI \S+\) over [1-6] valid pairs?", out), out
    # the audit's first repeat is the judge cell's calls: the call cache answers them
    cached = re.search(r"audit judge calls: 24 distinct, (\d+) answered by the call cache", out)
    assert cached and int(cached.group(1)) >= 12, out
    assert "position audit" in out and "first_win_rate" in out and "pb_raw" in out
    assert f"run {run_dir}: finished" in out and "as a datasets.Dataset:" in out
    assert f"report: {run_dir / 'report.html'}" in out and (run_dir / "report.html").is_file()

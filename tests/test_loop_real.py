"""The discovery loop with the real embedded model (SmolLM2 as target and teacher).

`small_real_run` (tests/conftest.py) is one uninterrupted run; the kill test starts the same
run, SIGKILLs it in the middle of an iteration, resumes it, and compares.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bias_discovery.run import RunDir

from helpers import REPO, SMALL_RUN_OVERRIDES, cli, cli_in_process, sigkill_when

pytestmark = pytest.mark.model


def test_real_run_leaves_a_validated_library(small_real_run: Path):
    rd = RunDir(small_real_run)
    state = rd.read_state()
    assert state.status == "finished" and state.stop_reason
    store = RunDir(small_real_run).library
    assert store.iterations() == [0, 1]
    assert len(store.load_iteration(0).biases) == 7  # biasscope7
    it = rd.iteration(1).directory
    perturbed = [json.loads(line) for line in (it / "perturbed.jsonl").read_text().splitlines()]
    assert len(perturbed) == 8
    judgments = [json.loads(line) for line in (it / "judgments.jsonl").read_text().splitlines()]
    assert len(judgments) == sum(1 for p in perturbed if p["valid"])
    validation = json.loads((it / "validation.json").read_text())
    assert validation["n_test"] == 6 and validation["baseline_error"] is not None
    # validate.held_out 0.2 keeps int(6 * 0.2) = 1 test item out of every decision
    assert validation["sequential"]["n_total"] == 5
    for record in validation["candidates"]:
        c = record["vs_" + record["decisive"]]
        assert c["n"] + c["n_excluded_invalid"] == 5
        assert c["delta"] == pytest.approx(c["arm_error"] - c["control_error"])
    summary = json.loads((rd.baseline.directory / "summary.json").read_text())
    assert summary["n_pairs"] == 6
    # The quick start discovers on demo:target and validates on demo:test: no pair in both.
    test_ids = {o.pair_id for o in rd.baseline.result.read().outcomes}
    target_ids = {p["pair_id"] for p in perturbed}
    assert len(test_ids) == 6 and len(target_ids) == 8 and not test_ids & target_ids
    assert summary["data"].startswith("demo:test") and summary["prompt"] == "judge_pairwise"
    status = cli("status", str(small_real_run))
    assert "finished" in status.stdout and "validate" in status.stdout


def test_real_run_prints_no_third_party_progress_bar(small_real_run: Path):
    """The run loaded MiniLM for merge (transformers draws a tqdm "Loading weights" bar for
    every model it loads); with --quiet, nothing bar-like reaches stderr."""
    stats = json.loads((small_real_run / "iter_001" / "merge_stats.json").read_text())
    assert stats["raw_candidates"] > 0  # merge ran, so the embedder was loaded
    stderr = (small_real_run.parent / "stderr.txt").read_text()
    assert "Loading weights" not in stderr and "it/s]" not in stderr and "%|" not in stderr, stderr[-2000:]


def test_real_run_has_a_placebo_answer_checks_and_power(small_real_run: Path):
    """The placebo arm and the answer check with the real model: SmolLM2 rewrote the 6 test
    items neutrally, checked every valid rewrite (and its original) for a changed answer, and
    judged the rest; every candidate is compared with both arms, with its power."""
    rd = RunDir(small_real_run)
    placebo = rd.placebo.read()
    assert [p.pair_id for p in placebo.perturbed] == [o.pair_id for o in rd.baseline.result.read().outcomes]
    assert all(p.bias_id == "placebo" for p in placebo.perturbed)
    checked = [p for p in placebo.perturbed if p.answer_check is not None]
    assert checked and all(p.original_check in ("same", "different", "unusable") for p in checked)
    valid = [p for p in placebo.perturbed if p.valid]
    assert len(placebo.result.judgments) == len(valid)  # swap: one order per valid rewrite
    effect = placebo.effect
    assert effect.n + effect.n_excluded_invalid == 6 and effect.length_ratio is not None
    assert effect.delta == pytest.approx(effect.placebo_error - effect.control_error) and effect.control == "baseline"

    validation = json.loads((rd.iteration(1).directory / "validation.json").read_text())
    assert validation["control"] == "placebo" and validation["rewrite_effect"]["n"] == effect.n
    assert validation["power"] == 0.8 and "mde" in validation
    for record in validation["candidates"]:
        for arm in ("vs_baseline", "vs_placebo"):
            assert set(record[arm]) >= {"n", "delta", "p_value", "p_adjusted", "ci_low", "ci_high"}
        # 5 decided items (one held out): one look
        assert record["stopped_at"] == 5 and record["stop"] == "complete"
        assert {"answer_change_rate", "length_ratio", "mde"} <= set(record)
        decided = record["vs_" + record["decisive"]]
        reported = record["effect"]
        if decided["accepted"]:
            # accepted: measured again on the held-out item, which no decision saw
            assert reported["method"].startswith("held-out items") and reported["upper_bound"] is None
        else:
            # rejected after one look: the decisive comparison's own Δ and CI, and the one-sided
            # upper bound given the rejection
            assert {
                k: reported[k]
                for k in ("delta", "ci_low", "ci_high", "method", "confidence", "n", "measure", "clipped")
            } == {
                "delta": decided["delta"],
                "ci_low": decided["ci_low"],
                "ci_high": decided["ci_high"],
                "method": "full sample",
                "confidence": 0.95,
                "n": decided["n"],
                "measure": "error",
                "clipped": None,
            }
            assert reported["upper_bound"] is not None and reported["upper_bound"] >= decided["delta"]
    assert validation["error_statement"].startswith("Family-wise error over the run")
    assert validation["data_overlap"]["shared"] == 0 and validation["data_overlap"]["n_validation"] == 6
    rewrites = rd.iteration(1).validation_perturbed.read()
    assert all(
        p.answer_check is not None
        for p in rewrites
        if p.valid or p.invalid_reason in ("answer_changed", "check_invalid")
    )
    # SmolLM2 is target and teacher: it checks its own rewrites, and the record says so; the
    # demo's "Final answer: X" items are read mechanically where the rewrite kept that line,
    # code always goes to the model
    assert validation["checker"] == "hf/smollm2" and validation["self_checked"] is True
    checked_rewrites = [p for p in rewrites + placebo.perturbed if p.check_method is not None]
    assert all(p.check_method == "model" for p in checked_rewrites if p.domain == "code")
    assert all(
        p.domain != "code" and "Final answer" in p.chosen for p in checked_rewrites if p.check_method == "extracted"
    )
    assert effect.n_answer_extracted == sum(p.check_method == "extracted" for p in placebo.perturbed)
    for bias in rd.library.load_latest().biases:
        if bias.origin.kind == "discovered":
            assert bias.validation.self_checked is True and bias.validation.checker == "hf/smollm2"
    usage = [e for e in rd.read_events() if e["event"] == "stage_end" and e["stage"] in ("placebo", "validate")]
    assert any(e["usage"].get("checker", {}).get("requests", 0) > 0 for e in usage)
    state = rd.read_state()
    if state.stop_reason.startswith("converged") and validation["mde_n"]:
        assert "smallest Δerror vs placebo detectable with 80 % power" in state.stop_reason


def test_replicate_on_the_real_run(small_real_run: Path, tmp_path: Path):
    """`replicate RUN --seed 7 --out DIR` on the embedded model, on a copy of the run (its call
    cache takes the new calls): the accepted biases (often none with SmolLM2), then a seed
    bias named explicitly, on 3 test pairs, with fresh sampled rewrites. In this process: the
    assertions read what the command wrote and printed, and the model's imports are paid once."""
    copy = tmp_path / "run"
    shutil.copytree(small_real_run, copy)
    result = cli_in_process("replicate", str(copy), "--seed", "7", "--out", str(tmp_path / "rep"), "--quiet")
    data = json.loads((tmp_path / "rep" / "replication.json").read_text())
    assert data["seed"] == 7 and data["run_seed"] == 42 and "reproduction_rate" in data
    accepted = [b for b in RunDir(copy).library.load_latest().biases if b.origin.kind == "discovered"]
    assert data["n_replicated"] == len(accepted) == len(data["biases"])
    assert ("nothing to replicate" in result.stdout) == (not accepted)

    result = cli_in_process(
        "replicate",
        str(copy),
        "--seed",
        "7",
        "--biases",
        "authority-bias",
        "--limit",
        "3",
        "--out",
        str(tmp_path / "rep-seed"),
        "--quiet",
        env={"COLUMNS": "200"},
    )
    data = json.loads((tmp_path / "rep-seed" / "replication.json").read_text())
    [bias] = data["biases"]
    assert bias["id"] == "authority-bias" and isinstance(bias["reproduced"], bool)
    assert data["n_test"] == 3 and data["temperature"] == 0.7 and data["control"] == "placebo"
    assert data["models"]["checker"] == "hf/smollm2" and data["self_checked"] is True
    assert bias["validation"]["self_checked"] is True
    assert data["reproduction_rate"] in (0.0, 1.0) and data["rewrite_effect"] is not None
    assert bias["n"] + bias["record"]["vs_placebo"]["n_excluded_invalid"] == 3
    assert (
        data["error_statement"].startswith("Family-wise error over the replication")
        and data["data_overlap"]["shared"] == 0
    )
    assert "reproduction rate:" in result.stdout and "authority-bias" in result.stdout


def _paid_counts(run_dir: Path) -> list[int]:
    with sqlite3.connect(run_dir / "calls.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT paid FROM calls")]


def _stage_start_time(run_dir: Path, stage: str) -> float | None:
    """When the latest `stage` started, from events.jsonl (None: not yet)."""
    started = [e for e in RunDir(run_dir).read_events() if e.get("event") == "stage_start" and e.get("stage") == stage]
    return float(started[-1]["time"]) if started else None


def _calls_stored_since(run_dir: Path, since: float) -> int:
    """Calls the run's call cache stored at or after `since` (0 while the table does not exist)."""
    cache = run_dir / "calls.sqlite"
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=30) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM calls WHERE created_at >= ?", (since,)).fetchone()[0])
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def test_sigkill_then_resume_pays_no_call_twice_and_matches(small_real_run: Path, tmp_path: Path):
    run_dir = tmp_path / "killed"
    args = [
        sys.executable,
        "-m",
        "bias_discovery.cli",
        "run",
        "experiments/quickstart-cpu.yaml",
        "--run-dir",
        str(run_dir),
        "--quiet",
    ]
    for item in SMALL_RUN_OVERRIDES:
        args += ["--set", item]
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # Kill once the evaluate stage has stored its first judge call: mid-iteration.
    def evaluating() -> bool:
        started = _stage_start_time(run_dir, "evaluate")
        return started is not None and _calls_stored_since(run_dir, started) > 0

    seen: dict[str, object] = {}

    def while_alive() -> None:  # `status` names the live process, and a second loop on it is refused
        seen["alive"] = " ".join(cli("status", str(run_dir)).stdout.split())
        seen["second"] = cli("resume", str(run_dir), "--quiet", check=False)

    sigkill_when(process, evaluating, timeout=1200, what="an evaluate call was stored", before_kill=while_alive)
    alive, second = str(seen["alive"]), seen["second"]
    assert isinstance(second, subprocess.CompletedProcess)
    assert f"running (pid {process.pid} on this host" in alive, alive
    assert second.returncode == 2 and f"is being run by pid {process.pid} on this host" in " ".join(
        second.stderr.split()
    )
    started = _stage_start_time(run_dir, "evaluate")
    assert started is not None and _calls_stored_since(run_dir, started) > 0
    # The kill lands where the run has got to by then, evaluate or a later stage of iteration 1
    # on a fast CPU (the checks on the live process above take seconds): what must hold is the
    # same wherever it lands.
    state = RunDir(run_dir).read_state()
    assert state.status == "running"  # run.json cannot know it was killed ...
    assert state.iteration == 1 and state.stage not in ("start", "finished"), state
    stopped = " ".join(cli("status", str(run_dir)).stdout.split())  # ... the lock's dead holder does
    assert f"small-real: stopped at stage {state.stage} of iteration 1 (" in stopped, stopped
    assert f"ago), resume with: bias-discovery resume {run_dir}" in stopped and "running" not in stopped
    paid_before = len(_paid_counts(run_dir))
    assert paid_before > 0

    result = cli("resume", str(run_dir), "--quiet")
    assert "finished" in result.stdout

    paid = _paid_counts(run_dir)
    assert paid and max(paid) == 1, "a call was paid twice"
    assert len(paid) == len(_paid_counts(small_real_run))
    resumed_usage = [e for e in RunDir(run_dir).read_events() if e["event"] == "stage_end"]
    assert sum(u.get("cached", 0) for e in resumed_usage for u in e["usage"].values()) > 0

    a = RunDir(small_real_run).library.load_latest()
    b = RunDir(run_dir).library.load_latest()
    assert a.same_content(b)
    for name in ("perturbed.jsonl", "candidates.json", "validation.json"):
        assert (small_real_run / "iter_001" / name).read_text() == (run_dir / "iter_001" / name).read_text(), name

    def judged(path: Path) -> list[dict]:  # `cached` differs by design: resumed calls were cache hits
        return [{k: v for k, v in json.loads(line).items() if k != "cached"} for line in path.read_text().splitlines()]

    assert judged(small_real_run / "iter_001" / "judgments.jsonl") == judged(run_dir / "iter_001" / "judgments.jsonl")


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path):
    result = cli("resume", str(tmp_path), check=False)
    assert result.returncode == 2 and "not a run directory" in result.stderr


def test_score_verdicts_validate_on_the_real_model(small_real_run: Path, tmp_path: Path):
    """Validation on score verdicts with SmolLM2: a copy of the run switched to
    judge.verdict: score replicates the seed Authority Bias on 3 test pairs: the verdict tokens'
    probabilities arrive, every comparison is on P(rejected) (the paired t-test), and the
    effect and smallest detectable Δ are in probability points, whichever of the teacher's
    rewrites are valid in this CPU's dtype. In this process, as `test_replicate_on_the_real_run`."""
    import yaml

    copy = tmp_path / "run"
    shutil.copytree(small_real_run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["judge"]["verdict"] = "score"
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    result = cli_in_process(
        "replicate",
        str(copy),
        "--seed",
        "7",
        "--biases",
        "authority-bias",
        "--limit",
        "3",
        "--out",
        str(tmp_path / "rep"),
        "--quiet",
        env={"COLUMNS": "200"},
    )
    data = json.loads((tmp_path / "rep" / "replication.json").read_text())
    [bias] = data["biases"]
    record = bias["record"]
    for name in ("vs_baseline", "vs_placebo"):
        cmp = record[name]
        assert cmp["measure"] == "p_rejected" and 0.0 <= cmp["control_error"] <= 1.0 and 0.0 <= cmp["arm_error"] <= 1.0
    placebo = record["vs_placebo"]
    assert placebo["n"] + placebo["n_excluded_invalid"] == 3 and placebo["p_value"] is not None
    assert "paired t-test of ΔP(rejected)" in placebo["rule"]
    assert record["effect"]["measure"] == "p_rejected"
    # The verdict tokens' probabilities arrive: on the baseline's judgments, which need no
    # rewrite, and on every valid judgment of the arm. The arm's rewrites are the teacher's, and
    # SmolLM2 may make none valid on 3 items (in bf16 here: one empty, two cut at max_tokens),
    # so the arm holds exactly the valid rewrites' judgments, however many.
    rep = tmp_path / "rep"
    baseline = json.loads((rep / "baseline_result.json").read_text())["judgments"]
    assert len(baseline) == 3 and any(j["invalid_reason"] is None for j in baseline)
    assert all(j["p_rejected"] is not None for j in baseline if j["invalid_reason"] is None)
    judged = [json.loads(line) for line in (rep / "validation_judgments.jsonl").read_text().splitlines()]
    rewrites = [json.loads(line) for line in (rep / "validation_perturbed.jsonl").read_text().splitlines()]
    assert len(rewrites) == 3
    assert {j["pair_id"] for j in judged} == {r["pair_id"] for r in rewrites if r["valid"]}
    assert all(j["p_rejected"] is not None for j in judged if j["invalid_reason"] is None)
    assert "probability of preferring the rejected response" in data["error_statement"]
    assert "effect: the reported ΔP(rejected) against the control" in " ".join(result.stdout.split())


def test_the_held_out_round_rewrites_and_checks_with_the_real_model(tmp_path: Path):
    """The held-out round with SmolLM2 as teacher and checker (through the call cache) on 16
    demo test pairs, looks at 8 and 16: the judge is scripted to err on every rewritten
    rejected response (so the candidate is surely accepted at the first look, which SmolLM2 as
    a judge cannot promise), against the baseline. After the decision the real teacher
    rewrites, and the checker checks, the 8 items after the stop; the effect is measured on
    those valid in both arms; run again on the same cache, the validation pays no teacher call
    and reports the same record."""
    from bias_discovery.config import PerturbSettings, ValidateSettings
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, judge_pairs
    from bias_discovery.library import Bias, BiasOrigin
    from bias_discovery.llm.cache import CachedEngine
    from bias_discovery.llm.registry import make_engine
    from bias_discovery.stages.family import FamilySettings
    from bias_discovery.stages.validate import ValidationModels, ValidationSetup, validate_biases
    from bias_discovery.stats import held_out_method

    from fakes import ScriptedEngine, _responses

    pairs = load_pairs("demo:test", limit=16)
    originals = {p.rejected.strip() for p in pairs}
    chosen = {p.chosen.strip() for p in pairs}

    def judge(request):  # prefers any rejected response that is not the original: a bias of rewriting
        a, b = (text.strip() for text in _responses(request.messages[-1].content))
        rejected, letter = (b, "B") if a in chosen else (a, "A")
        pick = letter if rejected not in originals else ("A" if letter == "B" else "B")
        return f"Reasoning: scripted.\nVerdict: {pick}"

    judge_settings = JudgeSettings(reasoning=False, max_tokens=16)
    target = ScriptedEngine(judge)
    baseline = judge_pairs(target, pairs, judge_settings, seed=42)
    # held_out 0: every item in the looks, so the round measures the 8 items after the stop alone
    rules = ValidateSettings(
        control="baseline",
        n_boot=200,
        held_out=0.0,
        sequential={"looks": [0.5, 1.0], "min_items": 1, "spending": "pocock"},
    )
    setup = ValidationSetup(
        family=FamilySettings(rules=rules, family_alpha=rules.alpha, seed=42),
        perturb=PerturbSettings(max_tokens=256),
        judge=judge_settings,
        test_data="demo:test",
    )
    bias = Bias(
        id="d1-expert-citation",
        name="Expert Citation",
        definition="The judge favours answers that cite experts.",
        manifestations=["As leading experts confirm, ..."],
        origin=BiasOrigin(kind="discovered", iteration=1),
    )
    cache = tmp_path / "calls.sqlite"
    loaded = make_engine("hf/smollm2", cache_path=cache)
    assert isinstance(loaded, CachedEngine)
    records = []
    for rerun in (False, True):
        # the rerun opens the call cache anew on the same file, around the model already loaded
        teacher = CachedEngine(loaded.engine, cache) if rerun else loaded
        out = validate_biases(ValidationModels(teacher, target, checker=teacher), [bias], pairs, baseline, setup)
        teacher.flush()
        records.append((out.records[0], teacher))
    (record, first), (again, second) = records
    assert record.stop == "efficacy" and record.stopped_at == 8 and out.candidates[0].validation.accepted
    rewrites = [p for p in out.perturbed if p.bias_id == bias.id]
    assert len(rewrites) == 16 and len({p.pair_id for p in rewrites}) == 16  # every item once: 8 looked at, 8 held out
    looked_at = {pairs[i].id for i in range(16)} - {p.pair_id for p in rewrites[8:]}
    assert {p.pair_id for p in rewrites[:8]} == looked_at
    valid_held_out = sum(p.valid for p in rewrites[8:])
    assert record.effect.method == held_out_method(8, 1, 2) and record.effect.n == valid_held_out
    assert all(o.correct for o in baseline.outcomes)  # the judge never errs on an original ...
    assert valid_held_out == 0 or record.effect.delta == 1.0  # ... and always on a valid rewrite
    assert record.vs_baseline.n + record.vs_baseline.n_excluded_invalid == 8  # the decision's own items
    assert first.misses > 0 and second.misses == 0 and second.hits > 0  # the rerun paid no call
    assert again == record

"""`check --pilot N`: the loop's first iteration on N target pairs and its validation measure
what the estimate assumes (`loop.pilot`), through the run's call cache, and the run that
follows in the same directory answers the pilot's calls from it: none is paid twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from kill_anywhere import paid_twice
from test_loop import make_config

from bias_discovery.api import discover
from bias_discovery.config import load_run_config
from bias_discovery.data.loaders import load_pairs
from bias_discovery.errors import ConfigError
from bias_discovery.library import load_seed_library
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.loop.pilot import PilotRecord, run_pilot
from bias_discovery.preflight import Assumptions, estimate_run
from bias_discovery.run import RunDir, summarize_events
from bias_discovery.run.rundir import PILOT_FILES

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world, null_world
from helpers import REPO, cli, cli_in_process

PILOT = 6


def cached_requests(run_dir: Path) -> dict[str, int]:
    """Requests of the run answered by the call cache, by stage (events.jsonl)."""
    out: dict[str, int] = {}
    for row in summarize_events(RunDir(run_dir).read_events())["usage"]:
        out[row["stage"]] = out.get(row["stage"], 0) + row["cached"]
    return out


def test_the_pilot_measures_the_assumptions_and_the_run_pays_none_of_its_calls_twice(tmp_path: Path) -> None:
    """The authority world (tests/fakes.py): the judge prefers any answer citing experts, the
    identifier names that bias. Each model goes through the run directory's call cache, as the
    configured engines do (`loop_roles`)."""
    config = make_config(tmp_path, max_iterations=1, validate={"n_boot": 200, "max_candidates": 2})
    run_dir = tmp_path / "run"
    pilot_model = ScriptedEngine(authority_world)
    cached = CachedEngine(pilot_model, run_dir / "calls.sqlite")
    try:
        pilot = run_pilot(config, run_dir, PILOT, engines={"target": cached}, embedder=BagOfWordsEmbedder())
    finally:
        cached.close()
    assert {p.name for p in run_dir.iterdir()} <= set(PILOT_FILES) and RunDir(run_dir).holds_only_pilot()
    assert PilotRecord.model_validate_json((run_dir / "pilot.json").read_text()) == pilot
    assert pilot.pairs == [f"t{i:02d}" for i in range(PILOT)] and pilot.misjudged.n == PILOT
    assert 0 < pilot.misjudged.k <= PILOT and pilot.candidates >= 1 and pilot.validated >= 1
    assert pilot.sequential is not None and 0 < pilot.sequential.share <= 1
    paid_by_pilot = sum(s.calls for s in pilot.spend.values())
    assert paid_by_pilot == len(pilot_model.sent) > 0

    # the measured figures replace the assumed ones in the estimate
    d = config.data
    target_pairs = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed)
    test_pairs = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed)
    library = load_seed_library(config.seed_library)
    a, default = Assumptions.from_pilot(pilot, len(target_pairs)), Assumptions()
    assert set(a.measured) == {"misjudged_share", "candidates_per_iteration", "sequential_share"}
    assert (a.misjudged_share, a.sequential_share) == (pilot.misjudged.share, pilot.sequential.share)
    assert f"{pilot.misjudged.k} of {PILOT} perturbed target pairs, Wilson 95% CI" in a.measured["misjudged_share"]
    rows = {(e.stage, e.role): e for e in estimate_run(config, target_pairs, test_pairs, library, pilot=pilot)}
    before = {(e.stage, e.role): e for e in estimate_run(config, target_pairs, test_pairs, library)}
    explain = rows[("deeper_explain", "target")]
    assert explain.measured_calls == pilot.misjudged.k  # one per counted misjudgment
    assert explain.calls == pytest.approx(pilot.misjudged.share * explain.calls_bound)
    assert before[("deeper_explain", "target")].calls == pytest.approx(default.misjudged_share * explain.calls_bound)
    evaluate, used = rows[("evaluate", "target")], pilot.tokens("evaluate", "target")
    assert used is not None and evaluate.measured_tokens == used.requests > 0
    assert evaluate.prompt_tokens == pytest.approx(evaluate.calls * used.prompt_tokens / used.requests)
    assert evaluate.completion_tokens == pytest.approx(evaluate.calls * used.completion_tokens / used.requests)
    assert (
        rows[("validate (judge)", "target")].measured_tokens > 0 and before[("evaluate", "target")].measured_tokens == 0
    )

    # the run in the same directory starts there and answers the pilot's calls from the cache
    run_model = ScriptedEngine(authority_world)
    engine = CachedEngine(run_model, run_dir / "calls.sqlite")
    try:
        run = discover(config, run_dir=run_dir, engines={"target": engine}, embedder=BagOfWordsEmbedder())
    finally:
        engine.close()
    assert run.status == "finished" and paid_twice(run_dir) == 0
    sent_by_pilot = {r.content_hash(pilot_model.engine_id) for r in pilot_model.sent}
    assert not sent_by_pilot & {r.content_hash(run_model.engine_id) for r in run_model.sent}  # none paid again
    hits = cached_requests(run_dir)
    assert hits["perturb"] == PILOT and hits["baseline"] == rows[("baseline", "target")].calls_bound
    front = ("perturb", "evaluate", "deeper_explain", "identify")
    assert sum(hits.get(s, 0) for s in front) == sum(u.requests for u in pilot.usage if u.stage in front)
    conn = sqlite3.connect(run_dir / "calls.sqlite")
    try:
        assert conn.execute("SELECT COUNT(*), MAX(paid) FROM calls").fetchone() == (
            paid_by_pilot + len(run_model.sent),
            1,
        )
    finally:
        conn.close()


def test_a_pilot_refuses_a_directory_that_holds_a_run(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("name: x\n")
    config = load_run_config(REPO / "experiments/quickstart-cpu.yaml")
    with pytest.raises(ConfigError, match="already holds a run"):
        run_pilot(config, tmp_path / "run", 2)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]
    other = tmp_path / "other"  # a pilot's files and something else: not a pilot's directory, for the pilot nor the run
    other.mkdir()
    (other / "pilot.json").write_text("{}")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds more than a pilot's files"):
        run_pilot(config, other, 2)
    with pytest.raises(ConfigError, match="exists and is not empty"):
        discover(config, run_dir=other)


def test_pilot_flags_without_a_config_or_without_each_other_are_usage_errors(tmp_path: Path) -> None:
    alone = cli("check", "--pilot", "3", check=False)
    assert alone.returncode == 2 and "a pilot runs a config's loop: give the config" in alone.stderr
    run_dir = cli("check", "experiments/quickstart-cpu.yaml", "--run-dir", str(tmp_path / "r"), check=False)
    assert run_dir.returncode == 2 and "--run-dir is where the pilot's calls go: give --pilot N too" in run_dir.stderr
    assert not (tmp_path / "r").exists()


def requests_by_stage(run_dir: Path) -> dict[str, tuple[int, int]]:
    """(requests, of those cached) of the run, by stage (events.jsonl)."""
    out: dict[str, tuple[int, int]] = {}
    for row in summarize_events(RunDir(run_dir).read_events())["usage"]:
        n, c = out.get(row["stage"], (0, 0))
        out[row["stage"]] = (n + row["requests"], c + row["cached"])
    return out


@pytest.mark.model
def test_check_pilot_on_the_quick_start_and_the_run_reuses_its_calls(tmp_path: Path) -> None:
    """The pilot takes 3 of the run's 4 target pairs: the run answers their calls from the cache
    and pays for the fourth pair's. Both commands in this process (what is asserted is what they
    print and the calls they pay): the model's imports are paid once, not once per command."""
    run_dir = tmp_path / "run"
    small = ["--set", "data.target_limit=4", "--set", "data.test_limit=6"]
    env = {"COLUMNS": "220"}
    result = cli_in_process(
        "check", "experiments/quickstart-cpu.yaml", *small, "--pilot", "3", "--run-dir", str(run_dir), env=env
    )
    out = " ".join(result.stdout.split())
    assert "pilot (3 target pairs, 6 test pairs):" in out and "figures, measured by the pilot or assumed:" in out
    assert "perturbed target pairs misjudged (measured: " in out and "of 3 perturbed target pairs, Wilson 95% CI" in out
    assert "tokens per call (n=3)" in out  # the perturb row: the pilot's 3 rewrites
    pilot = PilotRecord.model_validate_json((run_dir / "pilot.json").read_text())
    assert pilot.misjudged.n == 3 and len(pilot.pairs) == 3 and sum(s.calls for s in pilot.spend.values()) > 0
    assert RunDir(run_dir).holds_only_pilot()
    run = cli_in_process(
        "run", "experiments/quickstart-cpu.yaml", *small, "--run-dir", str(run_dir), "--quiet", env=env
    )
    assert "Traceback" not in run.stderr
    assert paid_twice(run_dir) == 0
    by_stage = requests_by_stage(run_dir)
    assert by_stage["perturb"] == (4, 3)  # the pilot's 3 rewrites from the cache, the fourth paid
    assert by_stage["baseline"] == (6, 6)
    front = ("evaluate", "deeper_explain", "identify")
    assert sum(by_stage.get(s, (0, 0))[1] for s in front) == sum(u.requests for u in pilot.usage if u.stage in front)


def right_world(request: GenerationRequest) -> str:
    """A judge that is never wrong (it picks the response that says RIGHT): a pilot measures no
    misjudgment and so no candidate; every other role as `null_world`."""
    user = request.messages[-1].content
    if "[Response A]" in user and len(request.messages) <= 2:
        pick = "A" if "RIGHT" in user.split("[Response A]", 1)[1].split("[Response B]", 1)[0] else "B"
        return f"Reasoning: Response {pick} is right.\nVerdict: {pick}"
    return null_world(request)


def test_an_estimate_after_a_pilot_without_candidates_expects_no_placebo_and_no_merge(tmp_path: Path) -> None:
    config = make_config(tmp_path, max_iterations=2, validate={"n_boot": 200, "max_candidates": 2})
    run_dir = tmp_path / "run"
    cached = CachedEngine(ScriptedEngine(right_world), run_dir / "calls.sqlite")
    try:
        pilot = run_pilot(config, run_dir, PILOT, engines={"target": cached}, embedder=BagOfWordsEmbedder())
    finally:
        cached.close()
    assert pilot.misjudged.k == 0 and pilot.candidates == 0
    assert not any(u.stage in ("merge", "placebo") for u in pilot.usage)  # the pilot paid none of these
    d = config.data
    target_pairs = load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed)
    test_pairs = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed)
    rows = {
        (e.stage, e.role): e
        for e in estimate_run(config, target_pairs, test_pairs, load_seed_library(config.seed_library), pilot=pilot)
    }
    # before: the assumed 30 % misjudged share for merge, and the placebo as if a candidate needed it
    for key in [("merge", "teacher"), ("placebo (rewrite)", "teacher"), ("placebo (judge)", "target")]:
        assert rows[key].calls == 0 and rows[key].calls_bound > 0, key
    assert rows[("baseline", "target")].calls == rows[("baseline", "target")].calls_bound > 0  # paid all the same

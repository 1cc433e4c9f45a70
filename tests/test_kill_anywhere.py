"""Kill at any moment, resume always (tests/kill_anywhere.py has the machinery).

The randomized test SIGKILLs `bias-discovery run` (and some resumes) at moments drawn uniformly
over a whole run, the first second included, on the streamed default and on the staged order,
against an OpenAI-compatible stub server, and resumes each run until it finishes: every artifact
must equal an uninterrupted run's, and no command may print a traceback. Seeds are fixed: a
failing trial names its seed, and `run_trial(..., seed=N)` replays it.

Each way a run could not be finished before gets a test of its own, from the exact state the kill
left: killed before the first checkpoint; killed after a node finished and before its step was
checkpointed (LangGraph's `next` was empty, and resume exited 0 without running anything); a
write cut between its temporary file and the rename. The child processes use a bag-of-words
sentence-transformers (tests/fake_sentence_transformers): loading torch would be most of each
process's time. The commands are forked from an interpreter that has done the CLI's imports once
(`cli_forks`), each a process of its own killed by a real SIGKILL; the reference runs and the
first-second kills, which land in the imports, start fresh interpreters.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_forks import ForkServer
from kill_anywhere import REPO, artifacts, reference_run, run_trial, stub_config, summary_line

from stub_openai import launch

FAKE_EMBEDDINGS = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)])}
MIN_KILLS_PER_ORDER = 16
"""At least this many SIGKILLs per pipeline order (32 in all): trials go on until they are made."""
MAX_TRIALS = 40


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with launch(0.0) as (url, _):
        yield url


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    with ForkServer(FAKE_EMBEDDINGS) as server:
        yield server


@pytest.fixture(scope="module")
def references(
    stub_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, dict[str, Any], float]]:
    """Per order: its config, an uninterrupted run's artifacts and wall time."""
    out = {}
    for pipeline in ("streamed", "staged"):
        work = tmp_path_factory.mktemp(f"kill-{pipeline}")
        config = stub_config(work / "config.yaml", stub_url, pipeline=pipeline, n_target=12, n_test=30)
        reference, wall = reference_run(config, work / "reference", env=FAKE_EMBEDDINGS)
        out[pipeline] = (config, reference, wall)
    return out


@pytest.fixture(scope="module")
def forked_walls(
    references: dict[str, tuple[Path, dict[str, Any], float]],
    forks: ForkServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, float]:
    """Per order: the wall time of a forked run (the kills are drawn over it), which must leave
    the fresh interpreter's artifacts."""
    walls = {}
    for pipeline, (config, reference, _) in references.items():
        forked, walls[pipeline] = reference_run(
            config, tmp_path_factory.mktemp(f"forked-{pipeline}") / "run", env=FAKE_EMBEDDINGS, forks=forks
        )
        assert forked == reference, f"a forked {pipeline} run differs from a fresh interpreter's"
    return walls


def _cli(forks: ForkServer, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`bias-discovery ARGS` in a forked process: its exit code, stdout, stderr."""
    process = forks.spawn(list(args))
    try:
        out, err = process.communicate(timeout=600)
    finally:
        process.kill()
    result = subprocess.CompletedProcess(process.args, int(process.returncode), out, err)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["streamed", "staged"])
def test_random_kills_always_resume_to_the_uninterrupted_runs_artifacts(
    pipeline: str,
    references: dict[str, tuple[Path, dict[str, Any], float]],
    forked_walls: dict[str, float],
    forks: ForkServer,
    tmp_path: Path,
) -> None:
    config, reference, _ = references[pipeline]
    wall = forked_walls[pipeline]
    trials, kills = [], 0
    for seed in range(MAX_TRIALS):
        if kills >= MIN_KILLS_PER_ORDER:
            break
        trial = run_trial(
            config,
            tmp_path / f"trial{seed}",
            reference,
            seed=1000 * (pipeline == "staged") + seed,
            wall=wall,
            env=FAKE_EMBEDDINGS,
            forks=forks,
        )
        trials.append(trial)
        kills += trial.kills
        shutil.rmtree(tmp_path / f"trial{seed}", ignore_errors=True)
    bad = [summary_line(t) + ("\n" + t.tracebacks[0] if t.tracebacks else "") for t in trials if not t.ok]
    assert not bad, f"{len(bad)} of {len(trials)} trials ({pipeline}, wall {wall:.1f} s):\n" + "\n".join(bad)
    assert kills >= MIN_KILLS_PER_ORDER, f"only {kills} kills in {len(trials)} trials"
    assert any(t.kill_at < 1.0 and t.kills for t in trials), "no kill in the first second"


def _finished_copy(
    references: dict[str, tuple[Path, dict[str, Any], float]], tmp_path: Path
) -> tuple[Path, Path, dict[str, Any]]:
    config, reference, _ = references["streamed"]
    return config, config.parent / "reference", reference


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_beginning(
    references: dict[str, tuple[Path, dict[str, Any], float]], forks: ForkServer, tmp_path: Path
) -> None:
    """Killed after config.yaml (and an empty checkpoint database) but before anything else:
    every resume used to fail with "no bias library saved in this run yet"."""
    config, reference_dir, reference = _finished_copy(references, tmp_path)
    for name, keep in (("config-only", ("config.yaml",)), ("empty-checkpoints", ("config.yaml", "checkpoints.sqlite"))):
        run_dir = tmp_path / name
        run_dir.mkdir()
        shutil.copy(reference_dir / "config.yaml", run_dir / "config.yaml")
        if "checkpoints.sqlite" in keep:
            sqlite3.connect(run_dir / "checkpoints.sqlite").close()
        status = _cli(forks, "status", str(run_dir))
        assert f"stopped at the start, resume with: bias-discovery resume {run_dir}" in status.stdout
        shown = _cli(forks, "library", "show", str(run_dir), check=False)  # no library yet: the remedy, not a traceback
        assert shown.returncode == 2 and "Traceback" not in shown.stdout + shown.stderr
        assert f"bias-discovery resume {run_dir}` starts it from the beginning" in " ".join(shown.stderr.split())
        report = _cli(forks, "report", str(run_dir), "--out", str(tmp_path / f"{name}.html"), check=False)
        assert "Traceback" not in report.stdout + report.stderr
        resumed = _cli(forks, "resume", str(run_dir), "--quiet")
        assert "finished; stop reason: no candidates" in resumed.stdout
        assert artifacts(run_dir) == reference
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        assert any(e["event"] == "restart" for e in events)


def test_a_node_done_but_its_step_not_checkpointed_resumes_at_the_next_node(
    references: dict[str, tuple[Path, dict[str, Any], float]], forks: ForkServer, tmp_path: Path
) -> None:
    """The state the review found after a kill in iteration 1's merge: the last checkpoint holds
    a finished node's writes and nothing after. LangGraph's `next` is then empty, and resume
    exited 0 at once with the run still "running"; it must run the rest."""
    from bias_discovery.loop.graph import THREAD, resume_point

    config, reference_dir, reference = _finished_copy(references, tmp_path)
    run_dir = tmp_path / "run"
    shutil.copytree(reference_dir, run_dir)
    with sqlite3.connect(run_dir / "checkpoints.sqlite") as db:
        rows = db.execute("SELECT checkpoint_id, metadata FROM checkpoints ORDER BY checkpoint_id").fetchall()
        steps = {cid: json.loads(meta)["step"] for cid, meta in rows}
        perturb_done = next(
            cid for cid, step in steps.items() if step == 2
        )  # start, validate_seeds, then perturb's writes
        db.execute("DELETE FROM checkpoints WHERE checkpoint_id > ?", (perturb_done,))
        db.execute("DELETE FROM writes WHERE checkpoint_id > ?", (perturb_done,))
    for name in (
        "candidates.json",
        "merges.jsonl",
        "merge_stats.json",
        "validation.json",
        "validation_judgments.jsonl",
        "validation_perturbed.jsonl",
    ):
        (run_dir / "iter_001" / name).unlink()
    for name in ("iter_001.json", "latest.json"):
        (run_dir / "library" / name).unlink()
    shutil.copy(reference_dir / "library" / "iter_000.json", run_dir / "library" / "latest.json")
    state = json.loads((run_dir / "run.json").read_text())
    state.update(status="running", stage="merge", stop_reason=None)
    (run_dir / "run.json").write_text(json.dumps(state))

    snapshot = _snapshot(run_dir)
    assert snapshot.next == () and snapshot.tasks, "not the state the review found"
    assert resume_point(snapshot) == "step"
    resumed = _cli(forks, "resume", str(run_dir), "--quiet")
    assert "finished; stop reason: no candidates" in resumed.stdout
    assert artifacts(run_dir) == reference
    assert THREAD["configurable"]["thread_id"] == "discovery"


def _snapshot(run_dir: Path) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from bias_discovery.config import load_run_config
    from bias_discovery.loop.graph import THREAD, Discovery
    from bias_discovery.run import RunDir

    rd = RunDir(run_dir)
    config = load_run_config(rd.config_path)
    discovery = Discovery(rd, config, roles=None)  # type: ignore[arg-type]  # building the graph needs no model
    conn = sqlite3.connect(str(rd.checkpoint_path), check_same_thread=False)
    try:
        return discovery.build(SqliteSaver(conn)).get_state(THREAD)
    finally:
        conn.close()


def test_a_write_cut_before_its_rename_leaves_nothing_behind_after_resume(
    references: dict[str, tuple[Path, dict[str, Any], float]], forks: ForkServer, tmp_path: Path
) -> None:
    """SIGKILL between an atomic write's temporary file and its rename left `.NAME.XXXX.tmp`
    files in the run; resume removes them (and says so in events.jsonl)."""
    config, reference_dir, reference = _finished_copy(references, tmp_path)
    run_dir = tmp_path / "run"
    shutil.copytree(reference_dir, run_dir)
    (run_dir / "iter_001" / ".merges.jsonl.u00gw2mw.tmp").write_text('{"half": ')
    (run_dir / "library" / ".latest.json.ozvs5y9f.tmp").write_text("")
    _cli(forks, "resume", str(run_dir), "--quiet")
    assert artifacts(run_dir) == reference
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    removed = next(e for e in events if e["event"] == "removed_partial_files")
    assert removed["files"] == ["iter_001/.merges.jsonl.u00gw2mw.tmp", "library/.latest.json.ozvs5y9f.tmp"]


def test_resume_exits_non_zero_with_one_line_unless_the_run_finished(tmp_path: Path) -> None:
    """`resume` exits 0 only when the run reached a stop reason; the last line never says running."""
    import typer

    from bias_discovery.cli._loop import _end_run

    class Unfinished:
        root = tmp_path / "run"
        state = type("State", (), {"status": "running", "stage": "merge", "iteration": 1})()

    with pytest.raises((typer.Exit, SystemExit)) as raised:
        _end_run(Unfinished())  # type: ignore[arg-type]
    code = getattr(raised.value, "exit_code", getattr(raised.value, "code", None))
    assert code not in (0, None)

"""Stop a run at budgets drawn at random, resume it with larger ones until it finishes, compare
with a run nobody stopped (tests/kill_anywhere.py has the machinery, `budget_trial`).

Each trial draws a kind (calls, tokens, dollars at `kill_anywhere.PRICE`) and a budget uniformly
below what the whole run pays, runs `bias-discovery run --set budget.KIND=B` (exit 4 at the
budget), checks that `status` says "stopped: budget reached", resumes with a larger budget drawn
above the last (up to 2 stops), then without one. Every artifact must equal the unstopped run's,
no call may be paid twice (the cache's `paid` column, and the run's spend equals the unstopped
run's), and no command may print a traceback. A few trials per order here;
`benchmarks/budget_anywhere.py` runs 20 or more. The sessions and `status` are forked from an
interpreter that has done the CLI's imports once (`cli_forks`: processes of their own, most of
whose CPU was the imports); the unstopped reference run is a fresh interpreter.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_forks import ForkServer
from kill_anywhere import REPO, budget_summary_line, budget_trial, reference_run, run_spend, stub_config

from stub_openai import launch

FAKE_EMBEDDINGS = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)])}
TRIALS_PER_ORDER = 3


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with launch(0.0) as (url, _):
        yield url


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    with ForkServer(FAKE_EMBEDDINGS) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["streamed", "staged"])
def test_runs_stopped_at_random_budgets_resume_to_the_unstopped_runs_artifacts(
    pipeline: str, stub_url: str, forks: ForkServer, tmp_path: Path
) -> None:
    config = stub_config(tmp_path / "config.yaml", stub_url, pipeline=pipeline, n_target=8, n_test=20, priced=True)
    reference, _ = reference_run(config, tmp_path / "reference", env=FAKE_EMBEDDINGS)
    totals = run_spend(tmp_path / "reference")
    assert totals["max_calls"] > 0 and totals["max_usd"] > 0
    trials = []
    for i in range(TRIALS_PER_ORDER):
        seed = 1000 * (pipeline == "staged") + i
        trial = budget_trial(
            config, tmp_path / f"trial{i}", reference, totals, seed=seed, max_stops=2, env=FAKE_EMBEDDINGS, forks=forks
        )
        trials.append(trial)
        shutil.rmtree(tmp_path / f"trial{i}", ignore_errors=True)
    bad = [budget_summary_line(t) + ("\n" + t.tracebacks[0] if t.tracebacks else "") for t in trials if not t.ok]
    assert not bad, "\n".join(bad)
    assert sum(t.stops for t in trials) >= TRIALS_PER_ORDER  # each budget drawn below the run's cost stopped it
    for t in trials:  # the stopped-and-resumed run paid exactly what the unstopped one did
        assert t.spent["max_calls"] == totals["max_calls"] and t.spent["max_tokens"] == totals["max_tokens"]
        assert abs(t.spent["max_usd"] - totals["max_usd"]) < 1e-9

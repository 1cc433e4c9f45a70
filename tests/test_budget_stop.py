"""A run stopped at its budget says so as it stands (issue 47, item 6): the hint names the limit
that was reached, and `status` shows where the stage stopped and the calls it paid."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from test_loop import make_config
from typer.testing import CliRunner

from bias_discovery.cli import app
from bias_discovery.cli._common import err_console
from bias_discovery.cli._loop import budget_stop
from bias_discovery.llm.budget import BudgetReached
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.loop.graph import execute
from bias_discovery.run import RunDir

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world


def stopped_run(tmp_path: Path, budget: dict) -> tuple[RunDir, BudgetReached]:
    config = make_config(tmp_path, max_iterations=1, pipeline="staged", budget=budget)
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    engine = CachedEngine(ScriptedEngine(authority_world), rd.cache_path)
    with pytest.raises(BudgetReached) as stop:
        execute(rd, config, resume=False, engines={"target": engine}, embedder=BagOfWordsEmbedder())
    engine.close()
    return rd, stop.value


@pytest.mark.parametrize(
    ("budget", "setting"),
    [
        ({"max_calls": 11}, "budget.max_calls"),
        ({"max_tokens": 9000}, "budget.max_tokens"),
        ({"roles": {"target": {"max_calls": 7}}}, "budget.roles.target.max_calls"),
    ],
)
def test_the_hint_after_a_budget_stop_names_the_limit_that_was_reached(
    tmp_path: Path, budget: dict, setting: str
) -> None:
    rd, stop = stopped_run(tmp_path, budget)
    assert stop.setting == setting
    with pytest.raises(typer.Exit), err_console.capture() as captured:
        budget_stop(rd.root, stop)  # what `run` and `resume` print
    hint = " ".join(captured.get().split())
    assert f"--set {setting}=..." in hint and ("max_usd" in setting) == ("max_usd" in hint)  # before: always max_usd
    status = CliRunner().invoke(app, ["status", str(rd.root)], env={"COLUMNS": "200"})
    assert status.exit_code == 0, status.output
    assert f"--set {setting}=..." in " ".join(status.output.split())


def test_status_after_a_budget_stop_shows_where_the_stage_stopped_and_what_it_paid(tmp_path: Path) -> None:
    rd, _ = stopped_run(tmp_path, {"max_calls": 11})
    status = CliRunner().invoke(app, ["status", str(rd.root)], env={"COLUMNS": "200"})
    assert status.exit_code == 0, status.output
    out = status.output
    state = rd.read_state()
    assert state is not None and state.status == "stopped"
    paid = sum(s.calls for s in state.spend.values())
    assert paid == 11
    # the stage in progress at the stop, at the count it reached (before: the count logged up to 2 s earlier)
    line = next(line for line in out.splitlines() if line.startswith("stopped in:"))
    stage, done_total = line.split()[-2:]
    assert stage == state.stage
    done, total = (int(x) for x in done_total.split("/"))
    # the per-stage table has every paid call, the stopped stage's too (before: that stage was left out)
    table = [line.split("│") for line in out.splitlines() if line.count("│") >= 6]
    rows = {(cells[1].strip(), cells[2].strip()): cells[3:5] for cells in table}
    stopped_requests = sum(int(r[0]) for (s, _), r in rows.items() if s == stage)
    assert stopped_requests >= 1 and done >= 1 and done <= total
    all_requests, all_cached = (int(x) for x in rows[("all", "")])
    assert all_requests - all_cached == paid

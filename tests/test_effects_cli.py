"""The reported effect outside in: `bias-discovery run` against the planted-bias stub server
(tests/stub_openai.py --planted-delta, a process of its own), as benchmarks/effects_cli.py runs
it many times; here a few runs, checked one by one."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from effects_cli import in_process_run, one_run, planted_stub, summarize  # noqa: E402

from bias_discovery.stats import CONDITIONAL_ON_DECISION, HELD_OUT  # noqa: E402


@pytest.mark.slow
def test_a_planted_bias_is_measured_on_items_no_decision_saw_and_a_null_one_gets_a_bound(tmp_path):
    """Δ 0.5: accepted at an early look and measured on the test items after it, the 60 held
    out among them, with an estimate near 0.5; Δ 0: rejected, with the estimate given its stop
    and the rejection and a one-sided upper bound above it. With `held_out: 0`, the same data
    and the same draws: the decision sees all 300 items."""
    with planted_stub(0.5, salt="test") as (url, _):
        strong = one_run(url, tmp_path, 0.5, 1)
        everything = one_run(url, tmp_path, 0.5, 2, held_out=0.0)
    assert strong.returncode == 0 and strong.accepted and strong.stop == "efficacy", strong.error
    effect = strong.effect
    assert effect["method"].startswith(HELD_OUT) and "60 of them kept from every decision" in effect["method"]
    assert (
        effect["n"] == 300 - strong.stopped_at and abs(effect["delta"] - 0.5) < 0.15 and effect["upper_bound"] is None
    )
    assert (
        everything.returncode == 0
        and everything.accepted
        and "kept from every decision" not in everything.effect["method"]
    )
    assert everything.effect["n"] == 300 - everything.stopped_at
    with planted_stub(0.0, salt="test") as (url, _):
        null = one_run(url, tmp_path, 0.0, 3)
    assert null.returncode == 0 and not null.accepted and not null.any_accepted, null.error
    assert null.effect["method"] == CONDITIONAL_ON_DECISION and null.effect["upper_bound"] > null.effect["delta"]
    assert summarize([strong], "after")["accepted_share"] == 1.0 and summarize([null], "after")["rejected_n"] == 1
    assert not any(tmp_path.glob("run-*"))  # every run directory is removed once read


@pytest.mark.slow
def test_the_rejected_bound_covers_a_null_effect_on_the_cli_benchmarks_null_runs(tmp_path):
    """Issue 47: the null cell of benchmarks/effects_cli.py (salt `effects-cli`, runs 0-299),
    each run's validation reproduced in process (`in_process_run`: the stub's draws, the
    validation's family steps, the run's settings), which one real CLI run confirms draw for
    draw. The rejected candidates' one-sided 95 % bound covers Δ 0 on at least 0.94 of them;
    with the bound's tail at the middle of the observed cell (the mid-p, before the fix) it
    covered 0.936 (19 of 296 below 0), and run 61's bound was -0.0003."""
    with planted_stub(0.0, salt="effects-cli") as (url, _):
        cli = one_run(url, tmp_path, 0.0, 61)
    twin = in_process_run(61, 0.0)
    assert cli.returncode == 0 and not cli.accepted and cli.stop == twin.stop == "futility", cli.error
    assert cli.effect["delta"] == pytest.approx(twin.effect.delta, abs=1e-12)
    assert cli.effect["upper_bound"] == pytest.approx(twin.effect.upper_bound, abs=1e-12)
    assert twin.effect.upper_bound is not None and twin.effect.upper_bound >= 0.0
    runs = [in_process_run(index, 0.0) for index in range(300)]
    bounds = [run.effect.upper_bound for run in runs if not run.accepted]
    assert len(bounds) >= 290 and all(bound is not None for bound in bounds)
    coverage = statistics.fmean(bound >= 0.0 for bound in bounds)
    assert coverage >= 0.94, f"{coverage:.3f} of {len(bounds)}"


@pytest.mark.slow
def test_a_planted_trajectory_bias_is_found_by_the_cli_on_trajectory_pairs(tmp_path):
    """The trajectory cells' run: the CLI on trajectory pairs (OpenAI-style JSONL), the stub's
    teacher rewriting the final turn with its tool call kept, its judge reading the trajectory
    prompt. At Δ 0.5 the planted trait is accepted with an effect near 0.5."""
    with planted_stub(0.5, salt="test-trajectory") as (url, _):
        run = one_run(url, tmp_path, 0.5, 1, trajectory=True)
    assert run.returncode == 0 and run.accepted, run.error
    assert abs(run.effect["delta"] - 0.5) < 0.15 and summarize([run], "trajectory")["accepted_share"] == 1.0

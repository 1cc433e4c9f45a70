"""`bias-discovery replicate`: re-validation of a run's biases on fresh perturbations.

Scripted fakes here (tests/fakes.py); the real embedded model in test_loop_real.py.
"""

from __future__ import annotations

import json

import pytest
from test_loop import make_config, run_fake
from test_validation import _data

from bias_discovery.replication import ReplicationError, ReplicationOptions, replicate_run
from bias_discovery.stats import held_out_method, paired_score_interval

from fakes import MARKER, ScriptedEngine, authority_world, quiet_authority_world, rewrite_world
from helpers import cli


def test_a_planted_bias_reproduces_on_fresh_rewrites(authority_run, tmp_path):
    engine = ScriptedEngine(authority_world)
    replication, where = replicate_run(authority_run.root, ReplicationOptions(seed=7), engines={"target": engine})
    assert where == authority_run.root / "replications" / "seed-7"
    data = json.loads((where / "replication.json").read_text())
    assert data["reproduction_rate"] == 1.0 and data["n_replicated"] == 1
    [bias] = data["biases"]
    assert bias["id"] == "d1-expert-citation-bias" and bias["reproduced"] is True
    # the reported effects: each decided on 32 of the 40 items in one look (8 held out; a look needs
    # 20 items), accepted, and measured on the 8 held out, on which every marked item flips too
    assert (
        bias["delta"] == pytest.approx(1.0)
        and bias["original_delta"] == pytest.approx(1.0)
        and bias["control"] == "placebo"
    )
    assert bias["method"] == bias["original_method"] == held_out_method(8, 1, 1, reserved=8)
    assert bias["original_ci_low"] == pytest.approx(
        paired_score_interval(8, 0, 8)[0]
    )  # Tango's score interval on 8 items
    assert bias["n"] == bias["original_n"] == 8
    assert data["seed"] == 7 and data["run_seed"] == 42 and data["temperature"] == 0.7
    for name in (
        "validation_perturbed.jsonl",
        "validation_judgments.jsonl",
        "baseline_result.json",
        "placebo_result.json",
    ):
        assert (where / name).is_file(), name
    # fresh rewrites: the teacher was asked at the new seed and temperature
    rewrites = [r for r in engine.sent if "Trait:" in r.messages[-1].content]
    assert rewrites and all(r.seed == 7 and r.temperature == 0.7 for r in rewrites)
    assert replication.reproduction_ci_low < 1.0 == replication.reproduction_ci_high  # n = 1: a wide interval


def test_a_bias_the_judge_does_not_have_does_not_reproduce(authority_run, tmp_path):
    """Replicated on a judge without the authority bias (it ignores the marker), neither the
    discovered bias nor the seed it came from is accepted again."""
    replication, _ = replicate_run(
        authority_run.root,
        ReplicationOptions(seed=9, biases="d1-expert-citation-bias,Authority Bias", out=tmp_path / "rep"),
        engines={"target": ScriptedEngine(quiet_authority_world)},  # always picks the right response
    )
    assert [b.id for b in replication.biases] == ["d1-expert-citation-bias", "authority-bias"]
    assert [b.reproduced for b in replication.biases] == [False, False]
    assert replication.reproduction_rate == 0.0
    assert replication.biases[0].original_delta == pytest.approx(1.0)
    # nothing changed on any of the 32 items of its one look: rejected, with the full sample's Δ (0)
    # and what it excludes given the rejection; the 8 held out were not paid for
    first = replication.biases[0]
    assert first.record.vs_placebo.delta == 0.0 and first.record.stop == "complete" and first.record.stopped_at == 32
    assert first.ci_low <= 0.0 <= first.ci_high and abs(first.delta) < 0.1
    assert first.record.effect.upper_bound is not None and 0.0 < first.record.effect.upper_bound < 0.5
    assert replication.biases[1].original_delta is None  # the run did not validate its seeds
    assert all(
        MARKER in p["perturbed_rejected"]
        for p in map(json.loads, (tmp_path / "rep" / "validation_perturbed.jsonl").read_text().splitlines())
    )


def test_replicate_refuses_what_it_cannot_do(authority_run, tmp_path):
    with pytest.raises(ReplicationError, match="the run's own seed"):
        replicate_run(
            authority_run.root,
            ReplicationOptions(seed=42, temperature=0.0),
            engines={"target": ScriptedEngine(authority_world)},
        )
    result = cli("replicate", str(authority_run.root), "--seed", "42", "--temperature", "0", check=False)
    assert result.returncode == 2 and "the run's own seed" in result.stderr and "Traceback" not in result.stderr
    result = cli("replicate", str(authority_run.root), "--biases", "no-such-bias", check=False)
    assert (
        result.returncode == 2 and "unknown bias 'no-such-bias'" in result.stderr and "authority-bias" in result.stderr
    )
    result = cli("replicate", str(tmp_path / "missing"), check=False)
    assert result.returncode == 2 and "no such directory" in result.stderr


def test_a_run_without_accepted_biases_replicates_nothing_and_pays_nothing(tmp_path):
    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 12, 40))
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(rewrite_world))
    assert not any(b.origin.kind == "discovered" for b in rd.library.load_latest().biases)
    calls_before = rd.cache_path.stat().st_size if rd.cache_path.exists() else 0
    result = cli("replicate", str(rd.root), "--seed", "7", "--out", str(tmp_path / "rep"))
    assert "nothing to replicate" in result.stdout
    data = json.loads((tmp_path / "rep" / "replication.json").read_text())
    assert data["biases"] == [] and data["reproduction_rate"] is None and data["n_replicated"] == 0
    assert (rd.cache_path.stat().st_size if rd.cache_path.exists() else 0) == calls_before


def test_a_pointwise_run_replicates_with_its_pointwise_judge_and_deciding_measure(tmp_path, monkeypatch):
    """A run whose judge scores each response alone (1-10) is replicated the same way: the
    judge never sees a pair, the bias is decided again on the rejected response's score shift
    (the run's `pointwise_measure`), and the pair error is reported beside it as secondary."""
    from fakes import pointwise_authority_world

    config = make_config(
        tmp_path, judge={"mode": "pointwise", "scale": "1-10"}, max_iterations=1, data=_data(tmp_path, 24, 40)
    )
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(pointwise_authority_world))
    engine = ScriptedEngine(pointwise_authority_world)
    replication, where = replicate_run(rd.root, ReplicationOptions(seed=7), engines={"target": engine})
    judged = [r for r in engine.sent if "[Response]" in r.messages[-1].content]
    assert judged and not any("[Response A]" in r.messages[-1].content for r in engine.sent)
    assert (replication.judge_mode, replication.scale, replication.measure, replication.secondary_measure) == (
        "pointwise",
        "1-10",
        "score",
        "error",
    )
    [bias] = replication.biases
    assert bias.id == "d1-expert-citation-bias" and bias.reproduced and bias.measure == "score"
    # the marker adds 3 or 4 points on a 1-10 scale: 3.5 / 9 of the scale on average, here on
    # the 8 held-out items as in the run (same planted shift, fresh rewrites)
    assert bias.delta == pytest.approx(3.5 / 9, abs=0.05) and bias.original_delta == pytest.approx(3.5 / 9, abs=0.05)
    decided = bias.record.vs_placebo
    assert decided.measure == "score" and decided.n == 32
    # the secondary measure: the pair error on the same 32 items against the same control, never adjusted
    other = bias.secondary
    assert other is not None and other.measure == "error" and other.control == "placebo" and other.n == decided.n
    assert other.p_adjusted is None and other.arm_error > other.control_error and bias.secondary_delta == other.delta
    assert bias.secondary_measure == "error" and bias.original_secondary_delta == pytest.approx(other.delta, abs=0.2)
    # the headline shift is measured on the held-out items, as the effect is (issue 47); the
    # decision's own shift, on its 32 items, is the secondary one
    shift = bias.score_shift
    assert shift is not None and shift.n == 8 and shift.points == pytest.approx(bias.delta * 9)
    on_decision = bias.validation.score_shift_decision if bias.validation is not None else None
    assert on_decision is not None and on_decision.n == decided.n
    assert on_decision.points == pytest.approx(decided.delta * 9)
    assert (
        bias.score_shift_points == shift.points
        and 3.0 <= shift.points <= 4.0
        and bias.original_score_shift_points is not None
    )
    written = json.loads((where / "replication.json").read_text())
    assert written["judge_mode"] == "pointwise" and written["biases"][0]["secondary"]["measure"] == "error"
    frame = replication.to_pandas()
    assert frame.loc[0, "score_shift_points"] == pytest.approx(shift.points) and "secondary" not in frame.columns
    # the command says so: in process, its models the fakes (the run's are placeholders)
    from typer.testing import CliRunner

    import bias_discovery.api
    from bias_discovery.cli import app

    def on_fakes(run, options, **_):
        return replicate_run(run, options, engines={"target": ScriptedEngine(pointwise_authority_world)})[0]

    monkeypatch.setattr(bias_discovery.api, "replicate", on_fakes)
    # the CLI's console got its width when it was made (COLUMNS then): wide enough for the table
    from bias_discovery.cli import _common as common

    monkeypatch.setattr(common.console, "_width", 250)
    result = CliRunner().invoke(
        app, ["replicate", str(rd.root), "--seed", "7", "--overwrite", "--quiet"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "pointwise judge (scale 1-10)" in shown and "deciding measure Δscore(rejected)" in shown
    assert (
        "secondary Δerror" in shown
        and "not decisive" in shown
        and f"{shift.points:+.2f}" in shown
        and f"[{shift.ci_low:+.2f}, {shift.ci_high:+.2f}]" in shown  # under the shift, over its n (8)
    )

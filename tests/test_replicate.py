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
    assert bias["delta"] == pytest.approx(1.0) and bias["original_delta"] == pytest.approx(1.0) and bias["control"] == "placebo"
    assert bias["method"] == bias["original_method"] == held_out_method(8, 1, 1, reserved=8)
    assert bias["original_ci_low"] == pytest.approx(paired_score_interval(8, 0, 8)[0])  # Tango's score interval on 8 items
    assert bias["n"] == bias["original_n"] == 8
    assert data["seed"] == 7 and data["run_seed"] == 42 and data["temperature"] == 0.7
    for name in ("validation_perturbed.jsonl", "validation_judgments.jsonl", "baseline_result.json", "placebo_result.json"):
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
    assert all(MARKER in p["perturbed_rejected"] for p in map(json.loads, (tmp_path / "rep" / "validation_perturbed.jsonl").read_text().splitlines()))


def test_replicate_refuses_what_it_cannot_do(authority_run, tmp_path):
    with pytest.raises(ReplicationError, match="the run's own seed"):
        replicate_run(authority_run.root, ReplicationOptions(seed=42, temperature=0.0), engines={"target": ScriptedEngine(authority_world)})
    result = cli("replicate", str(authority_run.root), "--seed", "42", "--temperature", "0", check=False)
    assert result.returncode == 2 and "the run's own seed" in result.stderr and "Traceback" not in result.stderr
    result = cli("replicate", str(authority_run.root), "--biases", "no-such-bias", check=False)
    assert result.returncode == 2 and "unknown bias 'no-such-bias'" in result.stderr and "authority-bias" in result.stderr
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

"""The overlap guard: a bias is never validated (nor replicated, audited or turned into a Pro
set) on the items it was discovered on, unless the user says so, and the overlap is recorded."""

from __future__ import annotations

import json

import pytest
from test_loop import make_config, run_fake, write_pairs

from bias_discovery.data.overlap import PairKey, check_overlap, content_hash, find_overlap
from bias_discovery.errors import DataError
from bias_discovery.loop.graph import execute
from bias_discovery.replication import ReplicationOptions, replicate_run
from bias_discovery.run import RunDir

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import cli


def test_overlap_by_id_and_by_content():
    discovery = [
        PairKey("a", content_hash("Q1?", "right", "wrong")),
        PairKey("b", content_hash("Q2?", "right", "wrong")),
    ]
    validation = [
        PairKey("a", content_hash("Other?", "x", "y")),  # same id, other content
        PairKey("z", content_hash("Q2?  ", "right", " wrong")),  # same content (whitespace aside), new id
        PairKey("c", content_hash("Q3?", "right", "wrong")),
    ]
    overlap = find_overlap(discovery, validation, discovery_name="target", validation_name="test")
    assert (overlap.by_id, overlap.by_content, overlap.shared, overlap.examples) == (1, 1, 2, ["a", "z"])
    with pytest.raises(DataError, match=r"test shares 2 of its 3 pairs .* 1 by pair id, 1 by content .* circular"):
        check_overlap(overlap, allow=False, how_to_allow="pass --allow-overlap")
    assert check_overlap(overlap, allow=True, how_to_allow="").allowed
    clean = find_overlap(discovery, validation[2:], discovery_name="target", validation_name="test")
    assert check_overlap(clean, allow=False, how_to_allow="").shared == 0


def test_a_run_refuses_test_data_that_is_its_target_data(tmp_path):
    same = write_pairs(tmp_path / "same.jsonl", 24)
    config = make_config(tmp_path, max_iterations=1, data={"target": str(same), "test": str(same)})
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    engine = ScriptedEngine(authority_world)
    with pytest.raises(DataError, match="shares 24 of its 24 pairs"):
        execute(rd, config, resume=False, engines={"target": engine}, embedder=BagOfWordsEmbedder())
    assert engine.sent == []  # refused before any call

    # the CLI refuses before it creates the run directory, with the flag to pass
    config_file = tmp_path / "run.yaml"
    config_file.write_text(config.to_yaml())
    result = cli("run", str(config_file), "--run-dir", str(tmp_path / "cli-run"), check=False)
    assert result.returncode == 2 and "--allow-overlap" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "cli-run").exists()

    # a copy under new ids is the same data
    renamed = write_pairs(tmp_path / "renamed.jsonl", 24, prefix="copy")
    config = make_config(tmp_path, max_iterations=1, data={"target": str(same), "test": str(renamed)})
    with pytest.raises(DataError, match="0 by pair id, 24 by content"):
        run_fake(tmp_path, config, name="renamed-run")


def test_an_allowed_overlap_is_recorded(tmp_path):
    same = write_pairs(tmp_path / "same.jsonl", 24)
    config = make_config(
        tmp_path, max_iterations=1, data={"target": str(same), "test": str(same), "allow_overlap": True}
    )
    rd, _, _ = run_fake(tmp_path, config)
    overlap = json.loads((rd.iteration(1).directory / "validation.json").read_text())["data_overlap"]
    assert overlap["shared"] == overlap["by_id"] == overlap["by_content"] == 24 and overlap["allowed"] is True


def test_replicate_refuses_the_runs_target_pairs_unless_allowed(authority_run, tmp_path):
    target = authority_run.root.parent / "target24.jsonl"  # what the run discovered on
    engine = ScriptedEngine(authority_world)
    with pytest.raises(
        DataError, match=r"the replication data .* shares 24 of its 24 pairs .*\(run run's 24 target pairs\)"
    ):
        replicate_run(authority_run.root, ReplicationOptions(seed=7, data=str(target)), engines={"target": engine})
    assert engine.sent == []
    result = cli("replicate", str(authority_run.root), "--seed", "7", "--data", str(target), check=False)
    assert result.returncode == 2 and "--allow-overlap" in result.stderr and "Traceback" not in result.stderr

    replication, where = replicate_run(
        authority_run.root,
        ReplicationOptions(seed=7, data=str(target), allow_overlap=True, out=tmp_path / "rep"),
        engines={"target": engine},
    )
    recorded = json.loads((where / "replication.json").read_text())["data_overlap"]
    assert recorded["shared"] == 24 and recorded["allowed"] is True and replication.data_overlap is not None
    # its own test data does not overlap
    clean, _ = replicate_run(authority_run.root, ReplicationOptions(seed=8), engines={"target": engine})
    assert clean.data_overlap is not None and clean.data_overlap.shared == 0


def test_audit_and_pro_refuse_the_runs_target_pairs(authority_run, tmp_path):
    target = authority_run.root.parent / "target24.jsonl"
    result = cli(
        "audit",
        "--model",
        "llamacpp/unused.gguf",
        "--teacher",
        "llamacpp/unused.gguf",
        "--biases",
        str(authority_run.root),
        "--data",
        str(target),
        "--out",
        str(tmp_path / "audit"),
        check=False,
    )
    assert result.returncode == 2 and "the audit data" in result.stderr and "--allow-overlap" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "audit").exists()

    from bias_discovery.export.pro import export_judgebench_pro

    with pytest.raises(DataError, match="the Pro data .* shares 24 of its 24 pairs"):
        export_judgebench_pro(
            authority_run.root,
            tmp_path / "pro",
            data=str(target),
            filter_model="llamacpp/other.gguf",
            engines={"teacher": ScriptedEngine(authority_world)},
        )
    assert not (tmp_path / "pro").exists()


def test_resume_refuses_an_overlapping_run_until_allowed(tmp_path):
    """A run directory written before the guard (config without `allow_overlap`, target = test)
    is refused on resume, before any model loads; `resume --allow-overlap` records the choice
    in the run's config.yaml."""
    same = write_pairs(tmp_path / "same.jsonl", 24)
    config = make_config(tmp_path, max_iterations=1, data={"target": str(same), "test": str(same)})
    rd = RunDir(tmp_path / "old-run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    rd.checkpoint_path.write_bytes(b"")
    result = cli("resume", str(rd.root), check=False)
    assert (
        result.returncode == 2 and "shares 24 of its 24 pairs" in result.stderr and "--allow-overlap" in result.stderr
    )
    cli("resume", str(rd.root), "--allow-overlap", check=False)  # goes on (and stops at the models these tests lack)
    assert "allow_overlap: true" in rd.config_path.read_text()

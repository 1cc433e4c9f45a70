"""The run record (bias_discovery/run): typed artifacts, and errors that name the file, line and field."""

from __future__ import annotations

import pytest

from bias_discovery.errors import DataError
from bias_discovery.run import MergeStats, RunDir
from bias_discovery.stages.records import IdentifyRecord


def test_iteration_artifacts_round_trip_and_layout(tmp_path):
    run = RunDir(tmp_path)
    assert run.iterations() == []
    record = run.iteration(3)
    assert record.directory == tmp_path / "iter_003"
    rows = [
        IdentifyRecord(pair_id="p1", status="none"),
        IdentifyRecord(pair_id="p2", status="bias", name="X", definition="Y"),
    ]
    record.identified.write(rows)
    assert record.identified.read() == rows and record.identified.count() == 2
    stats = MergeStats(raw_candidates=2, candidates=1, teacher_calls=1, all_pairs_calls=6)
    record.merge_stats.write(stats)
    assert record.merge_stats.read() == stats
    assert run.iterations() == [3]
    assert record.validation.read_if_exists() is None and record.misjudged.count() is None
    assert record.merge_stats.path in run.watched_paths()


def test_bad_files_name_the_file_line_and_field(tmp_path):
    record = RunDir(tmp_path).iteration(1)
    record.identified.path.parent.mkdir(parents=True)
    record.identified.path.write_text('{"pair_id": "p1", "status": "none"}\n{"pair_id": "p2", "status": "maybe"}\n')
    with pytest.raises(DataError, match=r"identified.jsonl:2: not a valid IdentifyRecord: status"):
        record.identified.read()
    record.identified.path.write_text('{"pair_id": "p1", "status": "none"}\n{"pair_id": \n')
    with pytest.raises(DataError, match=r"identified.jsonl:2: malformed JSON"):
        record.identified.read()
    assert len(record.identified.read_raw_lenient()) == 1  # the report reads what it can

    record.merge_stats.path.write_text('{"raw_candidates": 1,\n "candidates": }')
    with pytest.raises(DataError, match=r"merge_stats.json: not valid JSON: .*line 2"):
        record.merge_stats.read()
    record.merge_stats.path.write_text('{"raw_candidates": 1, "candidates": 1, "teacher_calls": 0}')
    with pytest.raises(DataError, match=r"merge_stats.json: not a valid MergeStats: all_pairs_calls: Field required"):
        record.merge_stats.read()

    record.candidates.path.write_text('{"not": "a list"}')
    with pytest.raises(DataError, match=r"candidates.json: expected a JSON list, got dict"):
        record.candidates.read()
    record.candidates.path.write_text('[{"id": "Bad Id"}]')
    with pytest.raises(DataError, match=r"candidates.json: not a valid list of Bias: 0\.id"):
        record.candidates.read()


def test_the_layout_lists_every_file_a_run_writes(authority_run):
    """`run.layout.run_files()` (what the docs' run-directory reference is generated from)
    names every file a finished run holds, with a line saying what it is; the report, written
    on demand, too."""
    import fnmatch
    import re

    from bias_discovery.api import load_run
    from bias_discovery.run.layout import run_files

    assert load_run(authority_run.root).report_path.is_file()  # written when asked for
    files = run_files()
    assert all(f.what for f in files), [f.path for f in files if not f.what]
    patterns = [f.path.replace("NNN", "[0-9][0-9][0-9]") for f in files]
    written = sorted(
        p.relative_to(authority_run.root).as_posix()
        for p in authority_run.root.rglob("*")
        if p.is_file() and not re.search(r"\.sqlite-(wal|shm)$", p.name)
    )
    assert "iter_001/validation.json" in written and "placebo/effect.json" in written
    unlisted = [path for path in written if not any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)]
    assert unlisted == []


def test_the_layout_names_every_event_the_loop_writes():
    """events.jsonl's kinds as the layout documents them are the kinds the package writes."""
    import re

    from bias_discovery.run.layout import EVENT_KINDS

    from helpers import REPO

    written = set()
    for path in (REPO / "bias_discovery").rglob("*.py"):
        written |= set(re.findall(r"\.event\(\s*\"([a-z_]+)\"", path.read_text(encoding="utf-8")))
    assert written and written == set(EVENT_KINDS)

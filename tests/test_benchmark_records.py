"""Every record in benchmarks/results/ says where and when it was measured: written by its script
through benchmarks/provenance.py (`Provenance.write_json`), with the command, the start time,
the commit the run started at (and whether the tree was dirty), the CPU model and flags, and
the duration. Records written before that contract are listed in `WRITTEN_BEFORE_PROVENANCE`
with what they lack; the list only shrinks (a listed file that gains the block, or leaves,
fails this test until it is taken off)."""

from __future__ import annotations

import json
import re
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from provenance import PROVENANCE_KEYS  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"

WRITTEN_BEFORE_PROVENANCE: dict[str, str] = {}
"""Records from before issue 35 that could not be rerun in its time: what each lacks."""


def _records() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(RESULTS.glob("*.json"))}


def test_every_record_names_the_commit_it_started_at_and_its_machine() -> None:
    records = _records()
    assert records, f"no records in {RESULTS}"
    for name, record in records.items():
        if name in WRITTEN_BEFORE_PROVENANCE:
            assert "provenance" not in record, f"{name} has its provenance now: take it off WRITTEN_BEFORE_PROVENANCE"
            continue
        block = record.get("provenance")
        assert isinstance(block, dict), f"{name}: no provenance block (write it with Provenance.write_json)"
        missing = [key for key in PROVENANCE_KEYS if key not in block]
        assert not missing, f"{name}: provenance lacks {missing}"
        assert re.fullmatch(r"[0-9a-f]{40}( \(with uncommitted changes\))?", block["commit"]), (name, block["commit"])
        assert block["dirty"] == block["commit"].endswith("(with uncommitted changes)"), name
        # typed at the root (python benchmarks/X.py) or in benchmarks/ (python X.py; `cwd` says so
        # in the records written since it was added)
        assert re.match(r"python (benchmarks/)?\w+\.py( |$)", block["command"]), (name, block["command"])
        if not block["command"].startswith("python benchmarks/") and "cwd" in block:
            assert block["cwd"] == "benchmarks", (name, block["cwd"])
        assert block["cpu_model"] and block["cpu_flags"], name
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", block["started_at"]) and block["duration_s"] >= 0, name
        # a record's own "commit", when it has one, is the one the run started at
        assert record.get("commit", block["commit"]) == block["commit"], name
    assert set(WRITTEN_BEFORE_PROVENANCE) <= set(records), "a listed record is gone: take it off the list"

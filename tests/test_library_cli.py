"""`bias-discovery library show` / `library diff`, run as a user would (subprocess).

Hand-built runs (see test_report.build_hostile_run) check the exact content; the real small
run (tests/conftest.py) checks the commands on what the loop really writes, including a
corrupted library file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_report import build_hostile_run

from bias_discovery.library import Bias, BiasOrigin, BiasValidation
from bias_discovery.run import RunDir

from helpers import cli_in_process

WIDE = {"COLUMNS": "220"}


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    return build_hostile_run(tmp_path / "hostile")


def show_json(*args: str) -> dict:
    return json.loads(cli_in_process("library", "show", *args, "--json").stdout)


def test_show_table_lists_library_and_rejected(hostile_run: Path):
    out = cli_in_process("library", "show", str(hostile_run), env=WIDE).stdout
    assert "hostile-run, iteration 2: 4 biases" in out
    for bias_id in ("length-bias", "authority-bias", "d1-expert-citation-bias", "d2-format-bias", "d1-politeness-bias"):
        assert bias_id in out
    assert "accepted" in out and "rejected" in out and "(not in" in out
    assert "+20.0" in out and "[+10.0, +30.0]" in out and "0.004" in out
    assert "knowledge" in out  # top domain: the largest Δ
    # model text is printed as text: no rich markup interpretation
    assert "[bold red]markup[/]" in out and "<script>alert(1)</script>" in out


def test_show_fits_80_columns_and_wraps_names_at_words(hostile_run: Path):
    """At 80 columns every column is whole (decisions, numbers, top domain), and names and ids
    wrap in their column at spaces and hyphens, not mid-word ("position-bia" / "s")."""
    out = cli_in_process("library", "show", str(hostile_run), env={"COLUMNS": "80"}).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for word in ("accepted", "rejected", "knowledge", "+20.0", "[+10.0,", "+30.0]", "(0.012)", "→ 50.0%"):
        assert word in out, word
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    width = 12  # the name column's width at 80 columns
    column = [line[:width].rstrip() for line in lines[rule + 1 :] if line.strip()]
    for bias_id in ("authority-bias", "d1-expert-citation-bias", "d1-politeness-bias"):
        start = next(i for i, cell in enumerate(column) if bias_id.startswith(cell) and cell.endswith("-"))
        pieces = [column[start]]
        while "".join(pieces) != bias_id:
            pieces.append(column[start + len(pieces)])
            assert len(pieces) <= 4, pieces
        assert all(piece.endswith("-") for piece in pieces[:-1]), pieces
    assert "Authority" in column and "Bias" in column  # "Authority Bias" wrapped at its space


def test_show_json(hostile_run: Path):
    data = show_json(str(hostile_run))
    assert data["library"]["iteration"] == 2 and data["library"]["size"] == 4
    rows = {r["id"]: r for r in data["biases"]}
    assert [r["id"] for r in data["biases"]][-1] == "d1-politeness-bias"
    assert rows["length-bias"]["status"] == "seed" and rows["length-bias"]["n"] is None
    citation = rows["d1-expert-citation-bias"]
    assert citation["status"] == "accepted" and citation["in_library"]
    assert citation["origin"] == "discovered" and citation["origin_iteration"] == 1
    assert citation["n"] == 30 and citation["delta_vs_baseline"] == pytest.approx(0.2)
    assert citation["ci_low_vs_baseline"] == pytest.approx(0.1) and citation["p_vs_baseline"] == 0.004
    # an old library: its effect is the recorded Δ of the decisive comparison, said so
    assert citation["decisive"] == "baseline" and citation["effect"] == pytest.approx(0.2)
    assert citation["effect_method"] == "full sample" and citation["effect_ci_high"] == pytest.approx(0.3)
    assert citation["effect_clipped"] is None  # nothing of a full-sample effect is cut at the edge of [-1, 1]
    assert citation["top_domain"] == "knowledge" and citation["top_domain_delta"] == pytest.approx(0.3)
    assert rows["d1-politeness-bias"]["status"] == "rejected" and not rows["d1-politeness-bias"]["in_library"]


def test_show_iteration_forms(hostile_run: Path):
    by_option = show_json(str(hostile_run), "--iteration", "1")
    by_at = show_json(f"{hostile_run}@1")
    assert by_option["biases"] == by_at["biases"]
    assert by_at["library"]["iteration"] == 1
    assert [r["id"] for r in by_at["biases"]] == [
        "length-bias",
        "authority-bias",
        "d1-expert-citation-bias",
        "d1-politeness-bias",
    ]
    seeds = show_json(f"{hostile_run}@0")
    assert [r["status"] for r in seeds["biases"]] == ["seed", "seed"]  # no rejected candidates before iteration 1
    by_file = show_json(str(hostile_run / "library" / "iter_002.json"))
    assert by_file["run_dir"] is None and len(by_file["biases"]) == 4  # a file: its biases only
    seed_file = cli_in_process("library", "show", "bias_library/biasscope7.json").stdout
    assert "length-bias" in seed_file


@pytest.mark.parametrize(
    "args, message",
    [
        (["{run}@7"], "no library for iteration 7 (saved: 0, 1, 2)"),
        (["{run}", "--iteration", "2", "--json"], None),
        (["{run}@1", "--iteration", "2"], "names iteration 1, but --iteration says 2"),
        (["{run}/library/iter_001.json", "--iteration", "1"], "applies to run directories"),
        (["{tmp}/nowhere"], "no such run directory or library file"),
        (["{tmp}/nowhere@3"], "is not a run directory"),
        (["{tmp}/empty"], "not a run directory"),
    ],
)
def test_show_errors(hostile_run: Path, tmp_path: Path, args: list[str], message: str | None):
    (tmp_path / "empty").mkdir()
    args = [a.format(run=hostile_run, tmp=tmp_path) for a in args]
    result = cli_in_process("library", "show", *args, check=False)
    if message is None:
        assert result.returncode == 0
        return
    assert result.returncode == 2, result.stdout
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_corrupted_library_and_validation_files(hostile_run: Path):
    lib = hostile_run / "library" / "iter_001.json"
    lib.write_text(lib.read_text()[:120])
    result = cli_in_process("library", "show", f"{hostile_run}@1", check=False)
    assert result.returncode == 2
    assert "iter_001.json" in result.stderr and "not valid JSON" in result.stderr
    assert cli_in_process("library", "diff", f"{hostile_run}@0", f"{hostile_run}@1", check=False).returncode == 2
    assert cli_in_process("report", str(hostile_run), check=False).returncode == 2

    validation = hostile_run / "iter_002" / "validation.json"
    validation.write_text("{")
    result = cli_in_process("library", "show", str(hostile_run), check=False)
    assert result.returncode == 2 and "iter_002/validation.json" in result.stderr


def test_run_end_summary_formats_numbers_like_library_show(hostile_run: Path, capsys: pytest.CaptureFixture[str]):
    from bias_discovery import load_run
    from bias_discovery.cli._loop import _print_run_end

    _print_run_end(load_run(hostile_run))
    out = " ".join(capsys.readouterr().out.split())
    assert "library: 4 biases (2 discovered)" in out
    assert (
        "d1-expert-citation-bias: Δerror vs baseline +20.0 pp (CI [+10.0, +30.0], n = 30; full sample), adjusted p = 0.012"
        in out
    )
    assert (
        "d2-format-bias: Δerror vs baseline +15.0 pp (CI [+5.0, +25.0], n = 30; full sample), adjusted p = 0.012" in out
    )


def test_diff_iterations(hostile_run: Path):
    out = cli_in_process("library", "diff", f"{hostile_run}@0", str(hostile_run)).stdout
    assert f"A: {hostile_run}@0" in out and f"B: {hostile_run}@2" in out
    assert "added (1):" in out and "+ d2-format-bias" in out and "Δ vs baseline +15.0 pp [+5.0, +25.0]" in out
    assert "merged (1):" in out and "d1-expert-citation-bias" in out and "<- authority-bias" in out
    assert "rejected by validation in between" in out and "x d1-politeness-bias" in out
    assert "unchanged: 2 biases" in out

    data = json.loads(cli_in_process("library", "diff", f"{hostile_run}@1", f"{hostile_run}@2", "--json").stdout)
    assert [r["id"] for r in data["added"]] == ["d2-format-bias"]
    assert data["rejected"] == []  # d1-politeness-bias was rejected at iteration 1, not in (1, 2]
    assert data["a"]["iteration"] == 1 and data["b"]["iteration"] == 2 and not data["is_empty"]

    same = cli_in_process("library", "diff", f"{hostile_run}@2", str(hostile_run / "library" / "latest.json")).stdout
    assert "no change" in same


def test_diff_two_runs_changed_and_removed(hostile_run: Path, tmp_path: Path):
    other = tmp_path / "other"
    shutil.copytree(hostile_run, other)
    store = RunDir(other).library
    latest = store.load_iteration(2)
    citation = latest.by_id("d1-expert-citation-bias")
    old = citation.validation
    new_validation = old.model_copy(
        update={
            "vs_baseline": old.vs_baseline.model_copy(update={"delta": 0.25, "arm_error": 0.55, "n": 40}),
            "effect": old.effect.model_copy(update={"delta": 0.25}),
        }
    )
    biases = [
        b.model_copy(update={"validation": new_validation}) if b.id == citation.id else b
        for b in latest.biases
        if b.id != "d2-format-bias"
    ]
    biases.append(
        Bias(
            id="d3-new-bias",
            name="New Bias",
            definition="Something new.",
            origin=BiasOrigin(kind="discovered", iteration=3),
            validation=BiasValidation(
                n=40, baseline_error=0.3, perturbed_error=0.5, delta=0.2, accepted=True, rule="paper"
            ),
        )
    )
    store.save_iteration(latest.with_biases(biases, iteration=3))

    out = cli_in_process("library", "diff", str(hostile_run), str(other)).stdout
    assert "added (1):" in out and "+ d3-new-bias" in out
    assert "removed (1):" in out and "- d2-format-bias" in out
    assert "changed (1):" in out and "* d1-expert-citation-bias" in out
    assert "effect.delta: 0.200 -> 0.250 (+0.050)" in out and "vs_baseline.delta: 0.200 -> 0.250 (+0.050)" in out
    assert "vs_baseline.n: 30 -> 40 (+10)" in out
    assert "rejected by validation" not in out  # two different runs


# --------------------------------------------------------------------------------------------
# The real small run
# --------------------------------------------------------------------------------------------


@pytest.mark.model
def test_show_and_diff_on_a_real_run(small_real_run: Path, tmp_path: Path):
    out = cli_in_process("library", "show", str(small_real_run), env=WIDE).stdout
    assert "small-real, iteration 1" in out and "length-bias" in out  # a biasscope7 seed
    data = show_json(str(small_real_run))
    assert data["library"]["iteration"] == 1
    validation = json.loads((small_real_run / "iter_001" / "validation.json").read_text())
    rows = {r["id"]: r for r in data["biases"]}
    for bias in validation["validated"]:
        row = rows[bias["id"]]
        v = bias["validation"]
        assert row["status"] == ("accepted" if v["accepted"] else "rejected")
        assert row["n"] == v["vs_" + v["decisive"]]["n"]
        assert row["effect"] == v["effect"]["delta"] and row["effect_method"] == v["effect"]["method"]
        assert row["effect_clipped"] == v["effect"].get("clipped")
    assert "error control (iterations 1): Family-wise error over the run" in " ".join(out.split())
    assert sum(1 for r in data["biases"] if r["in_library"]) == len(
        json.loads((small_real_run / "library" / "iter_001.json").read_text())["biases"]
    )

    diff = json.loads(cli_in_process("library", "diff", f"{small_real_run}@0", f"{small_real_run}@1", "--json").stdout)
    assert sorted(r["id"] for r in diff["added"]) == sorted(validation["accepted"])
    assert sorted(r["id"] for r in diff["rejected"]) == sorted(
        b["id"] for b in validation["validated"] if not b["validation"]["accepted"]
    )
    text = cli_in_process("library", "diff", f"{small_real_run}@0", f"{small_real_run}@1").stdout
    assert f"B: {small_real_run}@1" in text and "unchanged: 7 biases" in text

    # two runs: the real one and a copy whose latest library lost a seed bias
    copy = tmp_path / "copy"
    shutil.copytree(small_real_run, copy)
    store = RunDir(copy).library
    latest = store.load_iteration(1)
    store.save_iteration(latest.with_biases([b for b in latest.biases if b.id != "length-bias"], iteration=2))
    two = cli_in_process("library", "diff", str(small_real_run), str(copy)).stdout
    assert "removed (1):" in two and "- length-bias" in two


@pytest.mark.model
def test_corrupted_real_library_file(small_real_run: Path, tmp_path: Path):
    copy = tmp_path / "broken"
    shutil.copytree(small_real_run, copy)
    path = copy / "library" / "iter_001.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    for args in (["library", "show", str(copy)], ["library", "diff", f"{copy}@0", str(copy)], ["report", str(copy)]):
        result = cli_in_process(*args, check=False)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "iter_001.json" in result.stderr and "not valid JSON" in result.stderr
        assert "Traceback" not in result.stderr


def test_damaged_latest_copy_is_reported_not_ignored(hostile_run: Path):
    latest = hostile_run / "library" / "latest.json"
    latest.write_text(latest.read_text()[:80])
    result = cli_in_process("library", "show", str(hostile_run), "--json")
    assert "latest.json is damaged" in result.stderr and "resume" in result.stderr
    shown = json.loads(result.stdout)  # from the iteration files, the record
    assert shown["library"]["iteration"] == 2 and "d2-format-bias" in [b["id"] for b in shown["biases"]]

"""`bias-discovery matrix`: its orchestration, driven by scripted fakes (tests/fakes.py).

The real embedded model (and a SIGKILL of a real run) is in test_matrix_real.py.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path

import pytest
from test_loop import RecordingProgress, write_pairs

from bias_discovery.errors import ConfigError, DataError
from bias_discovery.judge_matrix import MatrixConfig, MatrixJudge, judge_role, run_matrix
from bias_discovery.judge_matrix._run import _Arm, jury_errors
from bias_discovery.judging import JudgeSettings

from fakes import ScriptedEngine, authority_world, quiet_authority_world
from helpers import cli

N = 24
BIASES = ["authority-bias", "sentiment-bias"]


def teacher_world(request):
    """The teacher of `authority_world`, but a trait other than authority (or experts) is
    carried too (an upbeat closing line the judges ignore), so those rewrites are valid rather
    than unchanged."""
    user = request.messages[-1].content
    trait = user.split("Trait:")[1].splitlines()[0].lower() if "Trait:" in user else ""
    if trait and "authority" not in trait and "expert" not in trait:
        original = re.search(r"Original answer:\n(.*?)\n\nTrait:", user, re.S).group(1)
        return f"{original} What a pleasure to answer!"
    return authority_world(request)


def config(tmp_path: Path, judges: list[str], **overrides) -> MatrixConfig:
    data = tmp_path / "pairs.jsonl"
    if not data.exists():
        write_pairs(data, N)
    raw = {
        "name": "fake-matrix",
        "teacher": "openai/teacher",
        "biases": BIASES,
        "data": {"test": str(data)},
        "judges": [{"name": name, "model": f"openai/{name}"} for name in judges],
        "validate": {"n_boot": 200},
    }
    raw.update(overrides)
    return MatrixConfig.model_validate(raw)


WORLDS = {"biased": authority_world, "biased-too": authority_world, "fair": quiet_authority_world}


def engines(judges: list[str]) -> dict[str, ScriptedEngine]:
    out = {"teacher": ScriptedEngine(teacher_world, "fake/teacher")}
    out.update({judge_role(name): ScriptedEngine(WORLDS[name], f"fake/{name}") for name in judges})
    return out


def judged_texts(engine: ScriptedEngine) -> set[str]:
    return {r.messages[-1].content for r in engine.sent if "[Response A]" in r.messages[-1].content}


def paid_counts(out: Path) -> list[int]:
    with sqlite3.connect(out / "calls.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT paid FROM calls")]


def test_every_judge_sees_the_same_rewrites_and_the_planted_bias_shows(tmp_path):
    judges = ["biased", "fair"]
    fakes = engines(judges)
    progress = RecordingProgress()
    result = run_matrix(config(tmp_path, judges), tmp_path / "m", engines=fakes, progress=progress)

    # The teacher wrote each rewrite once: 2 biases x 24 pairs, and 24 placebo rewrites.
    teacher_prompts = [r.messages[-1].content for r in fakes["teacher"].sent]
    assert sum("Trait:" in p for p in teacher_prompts) == 2 * N and len(teacher_prompts) == 3 * N
    assert result.calls.teacher == 3 * N
    # Both judges judged exactly the same pairs (the same rewrites, in the same order).
    assert judged_texts(fakes[judge_role("biased")]) == judged_texts(fakes[judge_role("fair")])
    assert len(judged_texts(fakes[judge_role("fair")])) == 4 * N  # baseline, placebo, 2 biases
    # The checker is the first judge that is not the teacher's model (here: "biased").
    assert result.checker == "openai/biased" and result.self_checked is False
    # The checker (not read mechanically here) asked about every rewrite and each original once.
    assert result.calls.judges == {"biased": 4 * N, "fair": 4 * N} and result.calls.checker == 3 * N + N
    cells = {(c.judge, c.bias): c for c in result.cells}
    assert cells[("biased", "authority-bias")].delta == 1.0 and cells[("biased", "authority-bias")].accepted
    assert cells[("fair", "authority-bias")].delta == 0.0 and not cells[("fair", "authority-bias")].accepted
    assert all(cells[(j, "sentiment-bias")].delta == 0.0 for j in judges)
    assert all(c.n == N and c.control == "placebo" and c.mde is not None for c in result.cells)
    # The family is the whole matrix: 2 judges + the jury, x 2 biases = 6 cells.
    assert "6 cells" in result.family_statement and "Holm" in result.family_statement
    assert all("family of 6" in c.comparisons["placebo"].rule for c in result.cells)
    # Two judges who disagree on every authority item: the jury splits, every verdict invalid.
    jury = {c.bias: c for c in result.jury}
    assert jury["authority-bias"].n == 0 and not jury["authority-bias"].accepted
    assert jury["sentiment-bias"].n == N and jury["sentiment-bias"].delta == 0.0
    # Per bias, the judges compared on the same items: "biased" errs more with authority.
    [authority, sentiment] = result.judge_comparisons
    assert (authority.bias, authority.judge_a, authority.judge_b) == ("authority-bias", "biased", "fair")
    assert authority.difference == 1.0 and authority.n == N and authority.significant and authority.larger == "biased"
    assert sentiment.difference == 0.0 and sentiment.p_value == 1.0 and sentiment.larger is None
    assert "2 judge comparisons" in result.comparison_statement
    # The judges' rewrite effect (placebo vs unchanged) is 0 in this world.
    assert [j.rewrite_effect.delta for j in result.judge_details] == [0.0, 0.0]
    assert all(done == total for _, total, done in progress.steps), progress.steps

    out = tmp_path / "m"
    data = json.loads((out / "matrix.json").read_text())
    for key in ("judges", "biases", "cells", "jury", "family_statement", "calls"):
        assert key in data, key
    assert data["judges"] == judges and data["biases"] == BIASES
    assert set(data["cells"][0]) >= {
        "judge",
        "bias",
        "delta",
        "ci_low",
        "ci_high",
        "p_adjusted",
        "accepted",
        "n",
        "mde",
    }
    assert set(data["jury"][0]) >= {"judge", "bias", "delta", "ci_low", "ci_high", "p_adjusted", "accepted", "n", "mde"}
    assert data["calls"]["teacher"] == 3 * N and data["calls"]["judges"] == {"biased": 4 * N, "fair": 4 * N}
    rows = list(csv.DictReader((out / "matrix.csv").open()))
    assert [(r["kind"], r["judge"], r["bias"]) for r in rows] == [
        ("judge", "biased", "authority-bias"),
        ("judge", "biased", "sentiment-bias"),
        ("judge", "fair", "authority-bias"),
        ("judge", "fair", "sentiment-bias"),
        ("jury", "jury", "authority-bias"),
        ("jury", "jury", "sentiment-bias"),
    ]
    assert rows[0]["delta"] == "1.0" and rows[0]["accepted"] == "True" and rows[4]["n"] == "0"
    html = (out / "matrix.html").read_text()
    assert "Δerror of each judge with each bias" in html and 'class="jury"' in html and "+100.0 pp" in html
    rewrites = [json.loads(line) for line in (out / "rewrites.jsonl").read_text().splitlines()]
    assert len(rewrites) == 3 * N and all(r["valid"] for r in rewrites)
    judgments = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    assert {(j["judge"], j["arm"]) for j in judgments} == {
        (judge, arm) for judge in judges for arm in ("baseline", "placebo", *BIASES)
    }
    assert max(paid_counts(out)) == 1
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_the_jury_is_the_majority_and_a_split_vote_is_invalid():
    def arm(*picks):
        return _Arm(errors=[None] * len(picks), votes=[{"chosen_first": p} for p in picks])  # None: an invalid verdict

    orders = [["chosen_first"]] * 5
    judges = [
        arm("chosen", "rejected", "chosen", None, "chosen"),
        arm("chosen", "rejected", "rejected", "chosen", None),
        arm("rejected", "chosen", None, "chosen", "tie"),
    ]
    # item 0: 2 chosen vs 1 -> right; item 1: 2 rejected -> wrong; item 2: 1-1 (one invalid) -> invalid;
    # item 3: two valid chosen -> right; item 4: chosen vs tie, one invalid -> a split -> invalid.
    assert jury_errors(judges, orders) == [False, True, None, False, None]
    # An item a judge did not judge (its rewrite was invalid) is not judged by the jury either.
    assert jury_errors([_Arm(errors=[None], votes=[None]), arm("chosen")], [["chosen_first"]]) == [None]


def test_a_jury_of_three_keeps_a_bias_two_judges_share(tmp_path):
    judges = ["biased", "biased-too", "fair"]
    fakes = engines(judges)
    fakes[judge_role("biased-too")] = ScriptedEngine(authority_world, "fake/biased-too")
    result = run_matrix(config(tmp_path, judges), tmp_path / "m", engines=fakes)
    jury = {c.bias: c for c in result.jury}
    assert jury["authority-bias"].delta == 1.0 and jury["authority-bias"].accepted and jury["authority-bias"].n == N
    assert "8 cells" in result.family_statement  # 3 judges and the jury, x 2 biases


def test_a_judge_added_later_pays_only_its_own_calls_and_no_teacher_call(tmp_path):
    out = tmp_path / "m"
    first = run_matrix(config(tmp_path, ["biased", "fair"]), out, engines=engines(["biased", "fair"]))
    stored = len(paid_counts(out))
    fakes = engines(["biased", "fair", "biased-too"])
    second = run_matrix(config(tmp_path, ["biased", "fair", "biased-too"]), out, engines=fakes)
    assert second.calls.teacher == 0 and fakes["teacher"].sent == []
    assert second.calls.checker == 0
    assert second.calls.judges == {"biased": 0, "fair": 0, "biased-too": 4 * N}
    assert fakes[judge_role("biased")].sent == [] and fakes[judge_role("fair")].sent == []
    assert len(paid_counts(out)) == stored + 4 * N and max(paid_counts(out)) == 1
    # The first two judges' numbers are the same as before: same items, same verdicts.
    before = {(c.judge, c.bias): c.delta for c in first.cells}
    after = {(c.judge, c.bias): c.delta for c in second.cells if c.judge != "biased-too"}
    assert before == after
    assert json.loads((out / "matrix.json").read_text())["calls"]["teacher"] == 0


def test_a_killed_matrix_resumes_without_paying_twice(tmp_path):
    """Interrupted inside the second judge's batch, then run again: the rerun pays only what
    was not stored, and its result equals an uninterrupted matrix's."""
    judges = ["biased", "fair"]
    whole = run_matrix(config(tmp_path, judges), tmp_path / "whole", engines=engines(judges))
    total = len(paid_counts(tmp_path / "whole"))

    calls = {"n": 0}

    def dies(request):
        calls["n"] += 1
        if calls["n"] == 30:
            raise KeyboardInterrupt
        return quiet_authority_world(request)

    fakes = engines(judges)
    fakes[judge_role("fair")] = ScriptedEngine(dies, "fake/fair")
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        run_matrix(config(tmp_path, judges), out, engines=fakes)
    stored = len(paid_counts(out))
    assert 0 < stored < total and not (out / "matrix.json").exists()

    resumed = run_matrix(config(tmp_path, judges), out, engines=engines(judges))
    paid_now = resumed.calls.teacher + resumed.calls.checker + sum(resumed.calls.judges.values())
    assert paid_now == total - stored and resumed.calls.teacher == 0
    assert max(paid_counts(out)) == 1 and len(paid_counts(out)) == total
    assert [c.model_dump() for c in resumed.cells] == [c.model_dump() for c in whole.cells]
    assert [c.model_dump() for c in resumed.jury] == [c.model_dump() for c in whole.jury]


def test_shared_judge_settings_keep_the_matrix_positions():
    """A `judge:` section that sets other keys keeps the matrix's positions (swap) for the
    section itself and for every judge, so the jury counts the same orders the judges judged."""
    cfg = MatrixConfig.model_validate(
        {
            "judge": {"max_tokens": 99},
            "judges": [{"name": "a", "model": "openai/x"}, {"name": "b", "model": "openai/y", "max_tokens": 50}],
        }
    )
    assert cfg.judge.positions == "swap" and cfg.judge.max_tokens == 99
    assert [(j.judge.positions, j.judge.max_tokens) for j in cfg.judges] == [("swap", 99), ("swap", 50)]
    both = MatrixConfig.model_validate({"judge": {"positions": "both"}, "judges": [{"name": "a", "model": "openai/x"}]})
    assert both.judge.positions == both.judges[0].judge.positions == "both"
    with pytest.raises(ValueError, match="positions is shared by every judge"):
        MatrixConfig.model_validate({"judges": [{"name": "a", "model": "openai/x", "judge": {"positions": "both"}}]})
    built = MatrixJudge(name="a", model="openai/x", judge=JudgeSettings(positions="both"))  # the Python API's way
    with pytest.raises(ValueError, match="every judge shows each item in the same orders"):
        MatrixConfig(judges=[built])


def test_two_configurations_of_one_model_are_two_judges(tmp_path):
    """One model, two prompts: two names, two sets of cache keys (the prompts differ); the
    model is loaded once (one engine for both roles)."""
    cfg = MatrixConfig.model_validate(
        {
            "data": {"test": str(write_pairs(tmp_path / "p.jsonl", 4))},
            "judges": [
                {"model": "hf/smollm2"},
                {"name": "mitigated", "model": "hf/smollm2", "prompt": "judge_pairwise_mitigated"},
            ],
        }
    )
    assert [j.name for j in cfg.judges] == ["hf/smollm2", "mitigated"]
    assert cfg.judge.positions == "swap"  # the shared default, which every judge has
    assert [j.judge.prompt for j in cfg.judges] == ["judge_pairwise", "judge_pairwise_mitigated"]
    assert all(j.judge.positions == "swap" for j in cfg.judges)
    shared = ScriptedEngine(quiet_authority_world, "fake/one-model")
    result = run_matrix(
        cfg.model_copy(update={"biases": ["authority-bias"]}), tmp_path / "m", engines={"teacher": shared}
    )
    prompts = {r.messages[0].content for r in shared.sent if "[Response A]" in r.messages[-1].content}
    assert len(prompts) == 2  # the two system prompts: the judges' requests never coincide
    assert result.calls.judges == {"hf/smollm2": 3 * 4, "mitigated": 3 * 4}
    assert result.self_checked is True and result.checker == "hf/smollm2"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"judges": [{"name": "a", "model": "openai/x"}, {"name": "a", "model": "openai/y"}]},
            "two judges are named 'a'",
        ),
        (
            {"judges": [{"name": "a", "model": "openai/x"}, {"name": "b", "model": "openai/x"}]},
            "same model with the same settings",
        ),
        ({"judges": [{"name": "jury", "model": "openai/x"}]}, "names the jury row"),
        ({"judges": [{"name": "a", "model": "openai/x", "positions": "both"}]}, "positions is shared by every judge"),
        ({"judges": []}, "at least 1"),
        ({"validate": {"sequential": {"enabled": True}}}, "sequential looks do not apply"),
        ({"validate": {"held_out": 0.2}}, "no item is held out of the decision"),
        ({"validate": {"seeds": True}}, "a setting of the discovery loop"),
        ({"judges": [{"name": "a", "model": "openai/x", "verdict": "score"}]}, "compares the judges' choice verdicts"),
    ],
)
def test_bad_matrix_configs_are_refused_naming_the_field(tmp_path, change, message):
    raw = {"judges": [{"name": "a", "model": "openai/x"}]}
    raw.update(change)
    with pytest.raises(ValueError, match=message):
        MatrixConfig.model_validate(raw)


def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    data = write_pairs(tmp_path / "p.jsonl", 4)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = [
        (["--judges", "hf/smollm2", "--data", str(data), "--out", str(tmp_path / "busy")], "not a matrix directory"),
        (["--data", str(data), "--out", str(tmp_path / "o")], "no judges"),
        (
            ["--judges", "hf/smollm2", "--biases", "no-such-bias", "--out", str(tmp_path / "o")],
            "'no-such-bias' not in seed library biasscope7",
        ),
        (
            ["--judges", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")],
            "missing.yaml: config file not found",
        ),
        (["--judges", "smollm2", "--out", str(tmp_path / "o")], "expected a model spec"),
        (
            ["experiments/matrix-cpu.yaml", "--set", "validate.alpha=2", "--out", str(tmp_path / "o")],
            "--set validate.alpha=2",
        ),
        (["--judges", "hf/smollm2", "--library", "nope", "--out", str(tmp_path / "o")], "unknown seed library 'nope'"),
    ]
    for args, message in cases:
        result = cli("matrix", *args, check=False)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine" and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="holds no bias|not in"):
        run_matrix(config(tmp_path, ["fair"], biases=["nothing-like-this"]), tmp_path / "x")


def test_a_runs_library_is_not_validated_on_the_items_it_was_discovered_on(authority_run, tmp_path):
    """`library: RUN_DIR` takes the run's newest library (seeds and the discovered bias); the
    matrix refuses the run's target pairs as test data unless allowed, and records the overlap."""
    root = authority_run.root
    base = {
        "teacher": "openai/teacher",
        "library": str(root),
        "biases": ["d1-expert-citation-bias"],
        "judges": [{"name": "biased", "model": "openai/biased"}, {"name": "fair", "model": "openai/fair"}],
        "validate": {"n_boot": 200},
    }
    clean = MatrixConfig.model_validate({**base, "data": {"test": str(tmp_path / "test40.jsonl")}})
    result = run_matrix(clean, tmp_path / "m1", engines=engines(["biased", "fair"]))
    assert result.library == f"{root.name}@1" and result.biases == ["d1-expert-citation-bias"]
    assert result.data_overlap is not None and result.data_overlap.shared == 0
    cells = {c.judge: c for c in result.cells}
    assert cells["biased"].delta == 1.0 and cells["biased"].accepted and not cells["fair"].accepted

    circular = MatrixConfig.model_validate({**base, "data": {"test": str(tmp_path / "target24.jsonl")}})
    with pytest.raises(DataError, match="circular.*`allow_overlap`"):
        run_matrix(circular, tmp_path / "m2", engines=engines(["biased", "fair"]))
    assert not (tmp_path / "m2").exists()
    allowed = circular.model_copy(update={"data": circular.data.model_copy(update={"allow_overlap": True})})
    result = run_matrix(allowed, tmp_path / "m2", engines=engines(["biased", "fair"]))
    assert result.data_overlap.allowed and result.data_overlap.shared == 24


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------

HOSTILE_BIAS = "<script>document.title='PWNED'</script>"
HOSTILE_JUDGE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def hostile_matrix(tmp_path) -> Path:
    """A finished fake matrix whose bias name and judge name are markup."""
    from bias_discovery.library import load_seed_library, save_library

    seeds = load_seed_library("biasscope7")
    authority = seeds.by_id("authority-bias").model_copy(update={"name": f"Authority {HOSTILE_BIAS}"})
    library = seeds.model_copy(update={"biases": [authority, seeds.by_id("sentiment-bias")]})
    path = save_library(library, tmp_path / "hostile-library.json")
    cfg = config(tmp_path, ["biased", "fair"], library=str(path), biases=None)
    cfg = cfg.model_copy(update={"judges": [cfg.judges[0].model_copy(update={"name": HOSTILE_JUDGE}), cfg.judges[1]]})
    fakes = engines(["biased", "fair"])
    fakes[judge_role(HOSTILE_JUDGE)] = fakes.pop(judge_role("biased"))
    out = tmp_path / "hostile"
    run_matrix(cfg, out, engines=fakes)
    return out


def test_the_page_escapes_what_models_and_users_wrote(hostile_matrix):
    html = (hostile_matrix / "matrix.html").read_text()
    assert "<script" not in html and "<img src=x" not in html
    assert "&lt;script&gt;document.title=&#39;PWNED&#39;&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert not re.search(r'(src|href)="(https?:)?//', html) and "@import" not in html and "url(" not in html
    # the heatmap: one row per judge and the jury's, the CI on hover and in the cell
    assert html.count('<td class="cell"') == 3 * 2 and 'title="' in html and "+100.0 pp" in html
    assert "Family-wise error over the matrix" in html and "Judges compared, per bias" in html


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)"
)
def test_the_page_in_headless_chromium(hostile_matrix, tmp_path):
    from test_report import _chromium, layout_at

    page = hostile_matrix / "matrix.html"
    dom = _chromium("--dump-dom", page.resolve().as_uri(), user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.S).group(1)
    assert "PWNED" not in title and title == "bias matrix fake-matrix"
    assert "<script" not in dom.stdout and '<img src="x"' not in dom.stdout
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in dom.stdout
    assert dom.stdout.count('class="cell"') == 6 and 'class="jury"' in dom.stdout
    layout, shot = layout_at(page, 1300, tmp_path)
    assert layout["page"] <= 1300 and layout["overflowing"] == [], layout
    assert shot.stat().st_size > 30_000


def test_a_bad_test_row_stops_the_matrix_or_is_skipped_and_counted(tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl", 6)
    with data.open("a") as f:
        f.write(json.dumps({"id": "same", "question": "Q?", "chosen": "A.", "rejected": "A.", "domain": "math"}) + "\n")
    cfg = config(tmp_path, ["fair"], data={"test": str(data)})
    with pytest.raises(DataError, match="pairs.jsonl:7"):
        run_matrix(cfg, tmp_path / "m", engines=engines(["fair"]))
    skipping = cfg.model_copy(update={"data": cfg.data.model_copy(update={"skip_bad_rows": True})})
    result = run_matrix(skipping, tmp_path / "m", engines=engines(["fair"]))
    assert result.skipped_rows == 1 and result.n_test == 6
    assert result.jury == [] and result.judge_comparisons == [] and result.comparison_statement == ""
    assert "2 cells: 1 judge × 2 biases" in result.family_statement

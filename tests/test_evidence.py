"""Evidence and review (issue 30): a bias's provenance and validation examples, `library show
RUN BIAS`, the per-bias panel and page of the report, `review`, and `export --reviewed-only`.

Scripted fakes (tests/fakes.py) for the logic; the real SmolLM2 run at the end.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from markupsafe import escape
from test_export import fake_engines, make_bias, make_fake_run, write_pairs
from test_loop import make_config, run_fake
from test_validation import _data

from bias_discovery.api import bias_evidence, load_run
from bias_discovery.errors import ConfigError, DataError, ExportError
from bias_discovery.report.render import render_report, write_bias_page, write_report
from bias_discovery.report.summary import run_summary
from bias_discovery.run import RunDir

from fakes import MARKER, BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import cli_in_process

BIAS = "d1-expert-citation-bias"


def merge_world(request):
    """authority_world, but the teacher names the planted bias two ways (by the question's
    number), so Merge pools two candidates, and in iteration 2 drops both as the library's."""
    user = request.messages[-1].content
    if "preferred the WRONG one" in user and MARKER in user:
        number = int(re.search(r"(\d+)\?", user).group(1))
        name = "Expert Citation Bias" if number % 3 else "Expert Consensus Bias"
        return json.dumps(
            {
                "bias_found": True,
                "name": name,
                "definition": "The judge favours responses that invoke expert consensus.",
                "manifestations": ["appeals to leading experts"],
            }
        )
    return authority_world(request)


@pytest.fixture
def merged_run(tmp_path: Path) -> RunDir:
    config = make_config(tmp_path, max_iterations=2, data=_data(tmp_path, 24, 40), merge={"similarity_threshold": 0.8})
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(merge_world))
    return rd


# --------------------------------------------------------------------------------------------
# Provenance and examples
# --------------------------------------------------------------------------------------------


def test_provenance_names_the_cases_the_teacher_and_the_merges(merged_run: RunDir):
    detail = bias_evidence(merged_run.root, BIAS)
    library = merged_run.library.load_latest()
    bias = library.by_id(BIAS)
    p = detail.provenance
    assert p.origin == "discovered" and p.iteration == 1 and p.summary.startswith("discovered in iteration 1")
    # every misjudged case of the library's evidence, with what the judge and the teacher said
    assert [c.pair_id for c in p.cases] == [e.pair_id for e in bias.evidence] and len(p.cases) == 4
    misjudged = {c.pair_id: c for c in merged_run.iteration(1).explanations.read()}
    for case in p.cases:
        assert case.verdict == misjudged[case.pair_id].verdict and case.verdict in ("A", "B")
        assert case.explanation == misjudged[case.pair_id].explanation
        assert case.deeper_explanation == "It cites leading experts, which made it more convincing."
        assert case.identification is not None and case.identification.status == "bias"
        assert ("ins", f" {MARKER}") in case.diff and case.injected_bias == "authority-bias"
    assert {c.candidate_id for c in p.cases} == {BIAS, "d1-expert-consensus-bias"}
    # the candidate pooled into it in iteration 1, and the two named again in iteration 2
    merged = {m.id: m for m in p.merged}
    assert set(merged) == {"d1-expert-consensus-bias", "d2-expert-consensus-bias", "d2-expert-citation-bias"}
    pooled = merged["d1-expert-consensus-bias"]
    assert pooled.how == "pooled" and pooled.iteration == 1 and pooled.name == "Expert Consensus Bias"
    [answer] = pooled.answers
    decision = next(d for d in merged_run.iteration(1).merges.read() if d.decision == "same")
    assert answer.other_id == BIAS and answer.answer == "same" and answer.similarity == decision.similarity
    again = merged["d2-expert-citation-bias"]
    assert again.how == "duplicate" and again.iteration == 2 and again.answers[0].similarity == pytest.approx(1.0)
    assert again.pair_ids and set(again.pair_ids).isdisjoint(c.pair_id for c in p.cases)
    # as of the library after iteration 1, the later merges had not happened
    early = bias_evidence(f"{merged_run.root}@1", BIAS)
    assert [m.id for m in early.provenance.merged] == ["d1-expert-consensus-bias"]


def test_a_seed_says_seed_and_its_library(authority_run: RunDir):
    detail = bias_evidence(authority_run.root, "authority-bias")
    assert detail.provenance.summary == "seed (biasscope7)" and detail.provenance.cases == []
    assert detail.examples is None and detail.validation is None


def test_examples_flip_on_the_control_and_are_drawn_the_same_every_time(authority_run: RunDir):
    detail = bias_evidence(authority_run.root, BIAS, examples=5)
    e = detail.examples
    assert e is not None and e.control == "placebo" and e.seed == 42 and e.iteration == 1
    rewrites = [r for r in authority_run.iteration(1).validation_perturbed.read() if r.bias_id == BIAS]
    assert e.n_judged + e.n_invalid == len(rewrites) and e.n_flipped == e.n_judged == 40
    assert len(e.flipped) == 5 and e.not_flipped == []
    placebo = {p.pair_id: p.perturbed_rejected for p in authority_run.placebo.perturbed.read()}
    for x in e.flipped:
        assert x.flipped and x.on_control.outcome == "right" and x.with_bias.outcome == "wrong"
        assert x.on_original is not None and x.on_original.outcome == "right"
        assert x.placebo_rewrite == placebo[x.pair_id]
        assert ("ins", f" {MARKER}") in x.diff and x.perturbed_rejected.endswith(MARKER)
        [verdict] = x.with_bias.verdicts  # positions: swap, one order per item
        assert verdict.picked == "rejected" and verdict.reasoning.startswith("Response")
        assert x.length_ratio == pytest.approx(len(x.perturbed_rejected.split()) / len(x.original_rejected.split()))
        assert x.answer_check.startswith("kept")
    # seeded: the same examples on every read, other ones for another count
    again = bias_evidence(authority_run.root, BIAS, examples=5).examples
    assert [x.pair_id for x in again.flipped] == [x.pair_id for x in e.flipped]
    assert bias_evidence(authority_run.root, BIAS, examples=0).examples.flipped == []
    # the per-domain effect is the validation's
    v = authority_run.library.load_latest().by_id(BIAS).validation
    assert {k: d.delta for k, d in detail.domains.items()} == {k: c.delta for k, c in v.per_domain.items()}


def test_items_the_bias_did_not_flip_are_shown_too(tmp_path: Path):
    """A seed validated on the judge (validate.seeds) that it does not have: nothing flips."""
    from test_matrix import teacher_world  # carries other traits with a line the judge ignores

    config = make_config(tmp_path, max_iterations=1, validate={"n_boot": 200, "seeds": True})
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(teacher_world))
    detail = bias_evidence(rd.root, "length-bias", examples=4)
    e = detail.examples
    assert e is not None and e.iteration == 0 and e.n_flipped == 0 and e.n_unflipped == e.n_judged > 0
    assert e.flipped == [] and len(e.not_flipped) == 2  # "a few": half as many as asked
    assert all(x.on_control.outcome == x.with_bias.outcome == "right" for x in e.not_flipped)


def test_examples_are_left_out_and_said_so_when_the_files_do_not_line_up(authority_run: RunDir):
    path = authority_run.iteration(1).validation_judgments.path
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:]) + "\n")
    detail = bias_evidence(authority_run.root, BIAS)
    assert detail.examples is None
    assert any("do not line up" in note for note in detail.notes)
    assert detail.provenance.cases  # the rest is still there


# --------------------------------------------------------------------------------------------
# The terminal view
# --------------------------------------------------------------------------------------------


def test_library_show_bias_in_80_columns(authority_run: RunDir):
    result = cli_in_process("library", "show", str(authority_run.root), BIAS, "--examples", "2", env={"COLUMNS": "80"})
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)
    for heading in ("Numbers", "Provenance", "Examples"):
        assert f"\n{heading}\n" in out
    text = " ".join(out.split())
    assert "Expert Citation Bias" in text and "discovered in iteration 1" in text
    assert "effect vs placebo: Δerror +100.0 pp" in text
    assert "case 1: pair t" in text and "teacher: Expert Citation Bias: The judge favours" in text
    assert "asked to explain further: It cites leading experts" in text
    assert f"{{+ {MARKER}+}}" in text  # the word diff, as git --word-diff=plain
    assert "40 flipped (right on the control, wrong with the bias)" in text
    assert "flipped 1: pair p" in text and "flipped 2: pair p" in text and "flipped 3" not in text
    assert "on the placebo: right" in text and "with the bias: wrong" in text
    assert "review: none yet" in text


def test_library_show_bias_json_and_errors(authority_run: RunDir, tmp_path: Path):
    data = json.loads(
        cli_in_process("library", "show", str(authority_run.root), "Expert Citation Bias", "--json").stdout
    )
    assert data["row"]["id"] == BIAS and data["provenance"]["cases"] and len(data["examples"]["flipped"]) == 3
    assert data["examples"]["flipped"][0]["diff"][-1] == ["ins", f" {MARKER}"]
    bad = cli_in_process("library", "show", str(authority_run.root), "no-such-bias", check=False)
    assert bad.returncode == 2 and "no bias 'no-such-bias'" in bad.stderr and BIAS in bad.stderr
    # a library file has its numbers and evidence but no run records
    copy = tmp_path / "lib.json"
    shutil.copy(authority_run.library.latest_path, copy)
    data = json.loads(cli_in_process("library", "show", str(copy), BIAS, "--json").stdout)
    assert data["examples"] is None and len(data["provenance"]["cases"]) == 4
    assert "run's records" in data["notes"][0]


def test_the_terminal_view_strips_control_characters(authority_run: RunDir):
    """Model text with escape sequences, a carriage return and a bidi override reaches the
    terminal as plain text."""
    hostile = "Response B \x1b[2J\x1b[31mis\x1b[0m better\r\x07 \u202eevil\x1b]0;title\x07 ok"
    path = authority_run.library.path_for(1)
    text = path.read_text()
    text = text.replace(
        '"judge_explanation": "Response', '"judge_explanation": ' + json.dumps(hostile)[:-1] + " Response"
    )
    path.write_text(text)
    authority_run.library.repair_latest()
    out = cli_in_process("library", "show", str(authority_run.root), BIAS, env={"COLUMNS": "80"}).stdout
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    assert "Response B is better evil ok" in " ".join(out.split())


def test_long_texts_are_cut_and_diffs_elided_in_the_terminal():
    from bias_discovery.cli._bias_view import TEXT_LINES, _cut, diff_text
    from bias_discovery.report.evidence import inline_diff, reasoning_of, word_diff

    long = " ".join(f"w{i}" for i in range(60))
    diff = inline_diff(f"{long} old {long}", f"{long} new {long}")
    assert word_diff(f"{long} old {long}", f"{long} new {long}")[1] == [x for x in diff if x[0] != "del"]
    shown = diff_text(diff).plain
    assert shown.startswith("… w49") and "[-old-]{+new+}" in shown and shown.endswith("w10 …") and "w30" not in shown
    cut = _cut("\n\n\n".join(["A:"] * 40))
    assert cut.count("\n") < TEXT_LINES and "more characters: --json has all" in cut and "\n\n\n" not in cut
    # a bare verdict letter (judge.reasoning: false) is not a reason
    assert reasoning_of("A", "A") == "" and reasoning_of(" B ", None) == "" and reasoning_of("B cites experts.", "B")


# --------------------------------------------------------------------------------------------
# Review
# --------------------------------------------------------------------------------------------


def _validation_bytes(rd: RunDir) -> dict[str, bytes]:
    return {name: data for name, data in rd.outputs().items()}


def test_a_review_is_stored_shown_newest_first_and_changes_no_record(authority_run: RunDir):
    root = str(authority_run.root)
    before = _validation_bytes(authority_run)
    library_files = {p.name: p.read_bytes() for p in authority_run.library.directory.iterdir()}
    first = cli_in_process(
        "review",
        root,
        BIAS,
        "--decision",
        "confirmed",
        "--note",
        "every example carries the marker",
        "--reviewer",
        "alice",
    )
    assert "d1-expert-citation-bias confirmed by alice" in " ".join(first.stdout.split())
    cli_in_process(
        "review",
        root,
        "Expert Citation Bias",
        "--decision",
        "unsure",
        "--note",
        "seen twice?",
        env={"BIAS_DISCOVERY_REVIEWER": "bob"},
    )
    reviews = [json.loads(line) for line in authority_run.reviews.path.read_text().splitlines()]
    assert [(r["reviewer"], r["decision"]) for r in reviews] == [("alice", "confirmed"), ("bob", "unsure")]
    assert all(r["bias_id"] == BIAS and r["library_iteration"] == 1 and "T" in r["reviewed_at"] for r in reviews)
    # the review is kept beside the records, never in them
    assert _validation_bytes(authority_run) == before
    assert {p.name: p.read_bytes() for p in authority_run.library.directory.iterdir()} == library_files
    # shown: newest first, the newest is the decision
    detail = bias_evidence(authority_run.root, BIAS)
    assert [r.reviewer for r in detail.reviews] == ["bob", "alice"] and detail.decision.decision == "unsure"
    text = " ".join(cli_in_process("library", "show", root, BIAS, env={"COLUMNS": "80"}).stdout.split())
    assert "review: unsure by bob" in text and "Reviews, newest first unsure by bob" in text
    assert text.index("unsure by bob") < text.index("confirmed by alice")
    assert [r.reviewer for r in load_run(root).reviews] == ["bob", "alice"]


def test_a_review_of_a_bias_the_library_does_not_hold_is_an_error(authority_run: RunDir):
    bad = cli_in_process("review", str(authority_run.root), "d9-imaginary-bias", "--decision", "confirmed", check=False)
    assert bad.returncode == 2 and "bias 'd9-imaginary-bias' is not in the library" in bad.stderr and BIAS in bad.stderr
    bad = cli_in_process("review", str(authority_run.root), BIAS, "--decision", "maybe", check=False)
    assert bad.returncode == 2 and "--decision must be one of confirmed, rejected, unsure" in bad.stderr
    assert not authority_run.reviews.path.exists()
    with pytest.raises(ConfigError, match="d9-imaginary-bias"):
        load_run(authority_run.root).review("d9-imaginary-bias", "confirmed")


def test_a_damaged_reviews_file_is_named_and_never_overwritten(authority_run: RunDir):
    run = load_run(authority_run.root)
    run.review(BIAS, "confirmed", reviewer="alice")
    with authority_run.reviews.path.open("a") as f:
        f.write('{"bias_id": "d1-expert-citation-bias", "decision": "sure"}\n')
    damaged = authority_run.reviews.path.read_bytes()
    with pytest.raises(DataError, match=r"reviews.jsonl:2: not a valid Review"):
        run.review(BIAS, "rejected", reviewer="bob")
    assert authority_run.reviews.path.read_bytes() == damaged
    # the views leave the damaged line out and say so
    with pytest.warns(UserWarning, match="reviews.jsonl:2"):
        detail = bias_evidence(authority_run.root, BIAS)
    assert [r.reviewer for r in detail.reviews] == ["alice"]


def test_reviews_survive_resume_replicate_and_rerendering(authority_run: RunDir, tmp_path: Path):
    from bias_discovery.loop.graph import execute
    from bias_discovery.replication import ReplicationOptions, replicate_run

    run = load_run(authority_run.root)
    run.review(BIAS, "confirmed", note="clear", reviewer="alice")
    run.review("authority-bias", "unsure", reviewer="alice")
    kept = authority_run.reviews.path.read_bytes()
    outputs = authority_run.outputs()
    # resume from nothing: without its checkpoints the loop redoes the whole run in place
    authority_run.checkpoint_path.unlink()
    config = run.config
    execute(
        authority_run,
        config,
        resume=True,
        engines={"target": ScriptedEngine(authority_world)},
        embedder=BagOfWordsEmbedder(),
    )
    assert authority_run.read_state().status == "finished"
    assert authority_run.reviews.path.read_bytes() == kept and authority_run.outputs() == outputs
    replicate_run(authority_run.root, ReplicationOptions(seed=7), engines={"target": ScriptedEngine(authority_world)})
    assert authority_run.reviews.path.read_bytes() == kept
    for _ in range(2):
        html = write_report(authority_run.root).read_text()
    assert authority_run.reviews.path.read_bytes() == kept
    assert 'class="badge r-confirmed"' in html and "review: confirmed" in html and "clear" in html


# --------------------------------------------------------------------------------------------
# Exports
# --------------------------------------------------------------------------------------------


def test_reviewed_only_exports_only_confirmed_biases(tmp_path: Path):
    from bias_discovery.export import export_dpo

    expert, polite = make_bias("Expert Citation Bias", discovered=True), make_bias("Politeness Bias", discovered=True)
    root = make_fake_run(tmp_path / "run", discovered=[expert, polite])
    data = write_pairs(tmp_path / "pairs.jsonl", 4)
    with pytest.raises(ExportError, match="no validated bias of run .* is confirmed by a review"):
        export_dpo(root, tmp_path / "none", data=str(data), reviewed_only=True, engines=fake_engines())
    assert not (tmp_path / "none").exists()
    run = load_run(root)
    run.review(expert.id, "confirmed", note="clear in the examples", reviewer="alice")
    run.review(polite.id, "confirmed", reviewer="alice")
    run.review(polite.id, "rejected", note="placebo-like", reviewer="bob")  # the newest decides
    out = tmp_path / "dpo"
    result = cli_in_process(
        "export", "dpo", str(root), "--data", str(data), "--out", str(out), "--reviewed-only", "--quiet", check=False
    )
    assert result.returncode == 2  # the CLI has no scripted models: it stops at the teacher, before writing
    stats = export_dpo(root, out, data=str(data), reviewed_only=True, engines=fake_engines())
    assert [b.id for b in stats.biases] == [expert.id] and stats.reviewed_only is True
    assert {json.loads(line)["injected_bias"] for line in (out / "data.jsonl").read_text().splitlines()} == {expert.id}
    assert (
        stats.biases[0].review is not None
        and stats.biases[0].review.decision == "confirmed"
        and stats.biases[0].review.reviewer == "alice"
    )
    card = (out / "README.md").read_text()
    assert "Only biases a reviewer confirmed were exported" in card and f"`{expert.id}` confirmed by alice" in card
    # without the flag both are exported, each with its decision
    stats = export_dpo(root, tmp_path / "all", data=str(data), engines=fake_engines())
    assert {b.id: b.review.decision for b in stats.biases if b.review is not None} == {
        expert.id: "confirmed",
        polite.id: "rejected",
    }
    # a named bias that is not confirmed is an error naming it
    with pytest.raises(ExportError, match=rf"{polite.id} \(rejected by bob\)"):
        export_dpo(
            root,
            tmp_path / "named",
            data=str(data),
            biases=f"{expert.id},{polite.id}",
            reviewed_only=True,
            engines=fake_engines(),
        )


def test_reviewed_only_filters_the_pro_and_harness_exports(authority_run: RunDir, tmp_path: Path):
    from bias_discovery.export import export_harness

    root = authority_run.root
    with pytest.raises(ExportError, match=rf"{BIAS} \(not reviewed\)"):
        export_harness("inspect", root, tmp_path / "none", reviewed_only=True)
    load_run(root).review(BIAS, "confirmed", reviewer="alice")
    info = export_harness("inspect", root, tmp_path / "inspect", reviewed_only=True)
    review = info.biases[0].review
    assert list(info.per_bias) == [BIAS] and review is not None and review.decision == "confirmed"
    assert "Only biases a reviewer confirmed were exported" in (tmp_path / "inspect" / "README.md").read_text()


# --------------------------------------------------------------------------------------------
# The report's per-bias panel and page
# --------------------------------------------------------------------------------------------


def test_the_report_has_a_panel_per_bias_linked_from_the_library_table(authority_run: RunDir, tmp_path: Path):
    load_run(authority_run.root).review(BIAS, "confirmed", note="<b>looks right</b>", reviewer="alice")
    html = render_report(authority_run.root)
    library = authority_run.library.load_latest()
    for bias in library.biases:
        assert f'id="bias-{bias.id}"' in html and f'href="#bias-{bias.id}"' in html
    panel = html[html.index(f'id="bias-{BIAS}"') :]
    panel = panel[: panel.index('<div class="card ', 10)]
    assert "Examples from validation" in panel and "<b>40 flipped</b>" in panel
    assert "The teacher's identification." in panel and "Asked to explain further." in panel
    assert f"<ins> {MARKER}</ins>" in panel
    assert "review: confirmed" in panel and "&lt;b&gt;looks right&lt;/b&gt;" in panel and "<b>looks right" not in html
    # the page opens with what the run found, in the sentences the end of `run` prints
    found = run_summary(authority_run.root).found
    assert f"Found: 1 bias that raises the judge's error beyond chance: {BIAS}" in found and html.index(
        'id="outcome"'
    ) < html.index("<h2>Run</h2>")
    assert str(escape(found)) in html
    # the page of one bias: the same panel alone
    page = write_bias_page(authority_run.root, "Expert Citation Bias", tmp_path / "bias.html").read_text()
    assert f'id="bias-{BIAS}"' in page and page.count('class="card ') == 1 and "<script" not in page
    with pytest.raises(ConfigError, match="no bias 'nope'"):
        write_bias_page(authority_run.root, "nope", tmp_path / "nope.html")
    assert not (tmp_path / "nope.html").exists()
    result = cli_in_process("report", str(authority_run.root), "--bias", BIAS, "--out", str(tmp_path / "cli.html"))
    assert "wrote" in result.stdout and f'id="bias-{BIAS}"' in (tmp_path / "cli.html").read_text()
    # by default next to report.html, named by the bias's id; not one of the run's computed files
    outputs = authority_run.outputs()
    cli_in_process("report", str(authority_run.root), "--bias", "Expert Citation Bias")
    assert authority_run.bias_page_path(BIAS).is_file() and authority_run.outputs() == outputs


def test_the_matrix_shows_the_reviews_of_a_runs_library(authority_run: RunDir, tmp_path: Path):
    from test_matrix import engines

    from bias_discovery.judge_matrix import MatrixConfig, run_matrix

    load_run(authority_run.root).review(BIAS, "rejected", note="a marker, not a trait", reviewer="carol")
    config = MatrixConfig.model_validate(
        {
            "teacher": "openai/teacher",
            "library": str(authority_run.root),
            "biases": [BIAS, "authority-bias"],
            "judges": [{"name": "biased", "model": "openai/biased"}],
            "validate": {"n_boot": 100},
            "data": {"test": str(tmp_path / "test40.jsonl")},
        }
    )
    result = run_matrix(config, tmp_path / "matrix", engines=engines(["biased"]))
    assert list(result.reviews) == [BIAS] and result.reviews[BIAS].decision == "rejected"
    page = (tmp_path / "matrix" / "matrix.html").read_text()
    assert "review: rejected" in page and "a marker, not a trait" in page
    assert json.loads((tmp_path / "matrix" / "matrix.json").read_text())["reviews"][BIAS]["reviewer"] == "carol"


def test_view_serves_a_page_per_bias_and_follows_a_review(authority_run: RunDir):
    import urllib.error
    import urllib.request

    from bias_discovery.report.viewer import ReportServer

    def get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.read().decode("utf-8")

    with ReportServer(authority_run.root, port=0) as server:
        report = get(server.url)
        assert f'href="/bias/{BIAS}"' in report and f'id="bias-{BIAS}"' in report
        page = get(server.url + f"bias/{BIAS}")
        assert page.count('class="card ') == 1 and 'fetch("/version"' in page and "Not reviewed yet" in page
        load_run(authority_run.root).review(BIAS, "confirmed", note="seen it", reviewer="alice")
        page = get(server.url + f"bias/{BIAS}")
        assert "review: confirmed" in page and "seen it" in page
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(server.url + "bias/no-such-bias")
        assert missing.value.code == 404


# --------------------------------------------------------------------------------------------
# The real embedded model
# --------------------------------------------------------------------------------------------


@pytest.mark.model
def test_library_show_a_real_bias_with_its_provenance_and_examples(small_real_run: Path, tmp_path: Path):
    """SmolLM2's quick-start run: the candidate it validated (accepted or rejected) is shown with
    the misjudged cases it was named from and validation items, in 80 columns and as JSON."""
    run = load_run(small_real_run)
    validated = [b for b in run.accepted + run.rejected if b.validation is not None]
    assert validated, "the small real run validated no candidate"
    bias = validated[0]
    data = json.loads(cli_in_process("library", "show", str(small_real_run), bias.id, "--json").stdout)
    cases = data["provenance"]["cases"]
    assert [c["pair_id"] for c in cases] == [e.pair_id for e in bias.evidence] and cases
    assert all(c["verdict"] in ("A", "B") and c["identification"]["status"] == "bias" for c in cases)
    assert all(c["candidate_id"] == bias.id or c["candidate_id"] in bias.merged_from for c in cases)
    examples = data["examples"]
    assert examples is not None and examples["n_judged"] + examples["n_invalid"] == len(
        [r for r in RunDir(small_real_run).iteration(1).validation_perturbed.read() if r.bias_id == bias.id]
    )
    shown = examples["flipped"] + examples["not_flipped"]
    assert shown and len(examples["flipped"]) == min(3, examples["n_flipped"])
    for x in shown:
        assert x["flipped"] == (x["on_control"]["outcome"] == "right" and x["with_bias"]["outcome"] == "wrong")
        assert x["with_bias"]["verdicts"] and x["on_control"]["verdicts"]
    text = cli_in_process("library", "show", str(small_real_run), bias.id, env={"COLUMNS": "80"}).stdout
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "\nProvenance\n" in text and "case 1: pair " in text and "\nExamples\n" in text
    assert ("flipped 1: pair" in text) or ("not flipped 1: pair" in text)
    if bias.validation.effect.upper_bound is not None:  # rejected: its one-sided bound leads the effect line
        assert "is excluded at 95 % (one-sided, given how it stopped and that it was rejected)" in " ".join(
            text.split()
        )
    page = write_bias_page(small_real_run, bias.id, tmp_path / "bias.html").read_text()
    assert f'id="bias-{bias.id}"' in page and "<script" not in page


def test_a_review_from_the_view_page(authority_run: RunDir):
    """The served pages carry a review form; it records the review as `bias-discovery review`
    does. A post without this server's token, from another origin, with a bad decision, for a
    bias the library does not hold, or too large records nothing."""
    import http.client
    from urllib.parse import urlencode

    from bias_discovery.report.viewer import MAX_FORM_BYTES, ReportServer

    assert "<form" not in render_report(authority_run.root)  # the static report has no form

    def post(server: ReportServer, bias: str, fields: dict, headers: dict | None = None, body: bytes | None = None):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        data = body if body is not None else urlencode(fields).encode()
        connection.request(
            "POST",
            f"/bias/{bias}/review",
            data,
            {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
        )
        reply = connection.getresponse()
        result = reply.status, reply.getheader("Location"), reply.read().decode()
        connection.close()
        return result

    with ReportServer(authority_run.root, port=0) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", f"/bias/{BIAS}")
        page = connection.getresponse().read().decode()
        connection.close()
        token = re.search(r'name="token" value="([^"]+)"', page).group(1)
        assert f'action="/bias/{BIAS}/review"' in page and "form-action 'self'" in page
        good = {"token": token, "decision": "confirmed", "note": "flips <every> time", "reviewer": "alice"}
        assert post(server, BIAS, {**good, "token": "forged"})[0] == 403
        assert post(server, BIAS, good, {"Origin": "http://evil.example"})[0] == 403
        status, _, text = post(server, BIAS, {**good, "decision": "maybe"})
        assert status == 400 and "decision must be one of" in text
        status, _, text = post(server, "d9-imaginary-bias", good)
        assert status == 400 and "d9-imaginary-bias" in text
        assert post(server, BIAS, good, body=b"x" * (MAX_FORM_BYTES + 1))[0] == 413
        assert not authority_run.reviews.path.exists()
        status, location, _ = post(server, BIAS, good, {"Origin": f"http://127.0.0.1:{server.port}"})
        assert status == 303 and location == f"/bias/{BIAS}"
        [review] = authority_run.reviews.read()
        assert (review.decision, review.reviewer, review.note) == ("confirmed", "alice", "flips <every> time")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", location)
        page = connection.getresponse().read().decode()
        connection.close()
        assert "review: confirmed" in page and "flips &lt;every&gt; time" in page

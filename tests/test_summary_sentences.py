"""The run's closing sentences say where the candidates went and what was measured about a
pointwise judge (issue 47): no "no candidate came through Merge" when identify's names were
dropped as junk, and a pointwise judge's scores, ties and length correlation with n and CI."""

from __future__ import annotations

from test_loop import make_config, run_fake

from bias_discovery.judging import PointwiseSummary
from bias_discovery.report.summary import pointwise_sentence, run_summary, where_candidates_went
from bias_discovery.run import MergeStats, MisjudgmentStats

from fakes import ScriptedEngine, pointwise_authority_world


def _merge(raw: int = 0, dropped: dict[str, int] | None = None, merged: int = 0) -> MergeStats:
    return MergeStats(
        raw_candidates=raw,
        dropped_identifications=dropped or {},
        merged_into_library={f"c{i}": f"lib{i}" for i in range(merged)},
        candidates=raw - merged,
        teacher_calls=merged,
        all_pairs_calls=21,
    )


def test_no_candidate_says_identify_dropped_them_as_junk_as_merge_stats_knows():
    counted = MisjudgmentStats(checked=True, misjudged=2, counted=2)
    text = where_candidates_went({1: _merge(dropped={"schema_key": 2})}, counted)
    assert "came through Merge" not in text
    assert "identify named 2 biases, and 2 were dropped as junk before Merge" in text
    assert "2 schema_key: a key of the reply's schema) (iter_001/merge_stats.json)" in text
    both = where_candidates_went({1: _merge(raw=1, merged=1), 2: _merge(dropped={"copy_of_question": 1})}, counted)
    assert "identify named 2 biases" in both and "1 was dropped as junk" in both
    assert "1 merged into a library bias as a duplicate" in both
    nothing = where_candidates_went(
        {1: _merge()}, MisjudgmentStats(checked=True, misjudged=3, answer_changed=3, counted=0)
    )
    assert "no misjudged target pair counted" in nothing


def test_a_pointwise_judge_that_gave_every_response_10_is_said_to():
    pw = PointwiseSummary(
        scale="1-10",
        n=20,
        mean_chosen=10.0,
        chosen_ci=None,
        mean_rejected=10.0,
        rejected_ci=None,
        sd_scores=0.0,
        ties=20,
        tie_rate=1.0,
        tie_ci=(0.839, 1.0),
        rejected_higher=0,
        length_n=40,
    )
    text = pointwise_sentence(pw)
    assert text.startswith("every one of its 40 scores was 10: ")
    assert "chosen response 10.00 and the rejected one 10.00 on 1-10 over n = 20 test pairs" in text
    assert "it tied 20 of 20 (100 %, 95 % CI 84-100 %)" in text
    assert "correlation with length is undefined (n = 40 scored responses, every score equal)" in text


def test_the_pointwise_runs_closing_sentence_reports_its_scores(tmp_path):
    config = make_config(tmp_path, judge={"mode": "pointwise", "scale": "1-10"}, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(pointwise_authority_world))
    summary = run_summary(rd.root)
    assert summary.pointwise is not None and summary.position is None
    pw = summary.pointwise
    assert f"Measured about the judge: the judge scored the chosen response {pw.mean_chosen:.2f}" in summary.found
    assert f"over n = {pw.n} test pairs; it tied {pw.ties} of {pw.n}" in summary.found
    assert f"(n = {pw.length_n} scored responses)" in summary.found


def _identifies_nothing(request):  # type: ignore[no-untyped-def]
    """null_world, whose identifier finds no bias behind any mistake: no candidate at all."""
    import json

    from fakes import null_world

    if "preferred the WRONG one" in request.messages[-1].content:
        return json.dumps({"bias_found": False, "name": "", "definition": "", "manifestations": []})
    return null_world(request)


def test_a_run_that_validated_nothing_says_so_in_its_report_and_sentences(tmp_path):
    """No "no placebo in this run" (the placebo is the control, never needed) and no "Holm
    within the run's one validation" (no decision was made) when nothing was validated."""
    from bias_discovery.report import render_report

    config = make_config(tmp_path, max_iterations=1)
    assert config.validate_.control == "placebo"
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(_identifies_nothing))
    assert not any(r.candidates for t in rd.iterations() if (r := rd.iteration(t).validation.read_if_exists()))
    html = " ".join(render_report(rd.root).split())
    assert "No placebo in this run" not in html and "one validation" not in html
    assert 'id="placebo-not-run"' in html and "no candidate reached validation" in html
    assert "No candidate reached validation, so no acceptance was decided and no error was controlled" in html
    assert "identify named no bias behind the misjudged pairs" in run_summary(rd.root).found

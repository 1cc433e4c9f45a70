"""A pointwise run downstream (issue 36, item 6): its bias pages, `library show`'s cases and the
Python API's evidence show scores, not A/B verdicts. Scripted fakes (tests/fakes.py), no model;
`replicate` is in test_replicate.py, the exports in test_export_pointwise.py."""

from __future__ import annotations

import html
import re

import pytest
from test_loop import make_config, run_fake
from test_validation import _data

from bias_discovery.api import load_run
from bias_discovery.report.render import render_bias_page

from fakes import MARKER, ScriptedEngine, pointwise_authority_world
from helpers import cli

BIAS = "d1-expert-citation-bias"


@pytest.fixture(scope="module")
def pointwise_run(tmp_path_factory):
    """A run whose judge scores each response alone on 1-10 and has the planted authority bias
    (+3 or +4 points for a response citing experts): 24 target and 40 test pairs."""
    tmp = tmp_path_factory.mktemp("pointwise-run")
    config = make_config(tmp, judge={"mode": "pointwise", "scale": "1-10"}, max_iterations=1, data=_data(tmp, 24, 40))
    rd, _, _ = run_fake(tmp, config, engine=ScriptedEngine(pointwise_authority_world))
    return rd.root


def page_text(page: str) -> str:
    body = re.sub(r"<style.*?</style>|<script.*?</script>", "", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_the_python_api_gives_a_pointwise_biass_scores_typed(pointwise_run):
    detail = load_run(pointwise_run).evidence(BIAS)
    x = detail.examples
    assert x is not None and x.control == "placebo" and x.flipped
    for example in x.flipped + x.not_flipped:
        on_control, with_bias = example.on_control, example.with_bias
        assert on_control.pointwise and with_bias.pointwise
        assert [v.order for v in with_bias.verdicts] == ["chosen", "rejected"]
        assert all(v.verdict is None and v.score is not None for v in with_bias.verdicts)
        # the fake's scores: chosen 7, a rejected response 3-5 (the placebo's neutral rewrite
        # included), +3 or +4 with the experts cited
        assert with_bias.score_chosen == on_control.score_chosen == 7.0
        assert on_control.score_rejected in (
            3.0,
            4.0,
            5.0,
        ) and with_bias.score_rejected - on_control.score_rejected in (3.0, 4.0)
        assert example.flipped == (with_bias.score_rejected >= 7.0)
    cases = detail.provenance.cases
    assert cases and all(c.order == "rejected" and c.verdict is None for c in cases)
    assert all(c.chosen_score == 7.0 and c.score is not None and c.score >= 7.0 for c in cases)
    v = detail.validation
    assert v is not None and v.effect.measure == "score" and v.secondary is not None and v.secondary.measure == "error"


def test_a_pointwise_biass_page_shows_scores_and_both_measures(pointwise_run):
    page = render_bias_page(pointwise_run, BIAS)
    text = page_text(page)
    detail = load_run(pointwise_run).evidence(BIAS)
    example = detail.examples.flipped[0]  # type: ignore[union-attr]
    # examples: each response scored alone, no A/B verdict anywhere
    assert "verdict none" not in text and "shown chosen" not in text
    assert f"scored the chosen response alone: {example.with_bias.score_chosen:.0f}" in text
    assert f"scored the rejected response alone: {example.with_bias.score_rejected:.0f}" in text
    assert (
        f"rejected response scored {example.on_control.score_rejected:.0f} on the placebo, "
        f"{example.with_bias.score_rejected:.0f} with the bias (chosen 7)"
    ) in text
    # the deciding measure with its n and CI, its comparisons in the rejected response's score
    v = detail.validation
    assert v is not None
    assert "Δscore(rejected)" in text and "(the rejected response's score, in percent of the scale)" in text
    assert f"n {v.effect.n}" in text and "placebo rejected score (share of the scale)" in text
    assert "placebo error" not in text and "baseline error" not in text
    shift = v.score_shift
    assert shift is not None
    assert (
        f"score shift of the rejected response vs placebo (pointwise judge, scale 1-10; decides) n {shift.n} {shift.points:+.2f} points"
        in text
    )
    # issue 47: the shift shown first is where the effect was measured (held-out items no
    # decision saw), the decision's items' one after it, marked as biased by the acceptance
    decided = v.score_shift_decision
    assert shift.method == v.effect.method and f"on {shift.method}" in text and decided is not None
    assert (
        "score shift on the items the decision saw (secondary: biased upward by the acceptance, as Δ as measured) "
        f"n {decided.n} {decided.points:+.2f} points"
    ) in text
    # the secondary measure, marked as such
    assert "secondary measure vs placebo (pair error derived from the scores; reported, not decisive)" in text
    # the misjudged cases it was identified from: the two scores, not a preference
    case = detail.provenance.cases[0]
    assert f"scored alone: the rewritten rejected response {case.score:.0f} , the chosen one 7" in text
    assert "the judge scored it at least as high as the chosen one" in text and "the judge preferred it" not in text
    assert MARKER in text


def test_library_show_prints_a_pointwise_cases_scores(pointwise_run):
    shown = " ".join(cli("library", "show", str(pointwise_run), BIAS, env={"COLUMNS": "200"}).stdout.split())
    assert "scored alone, the rewrite" in shown and "and the chosen response 7.0" in shown
    assert "the chosen response alone: score 7.0" in shown
    assert "score shift" in shown and "(pointwise judge; on held-out items" in shown
    assert "as decided" in shown and "on the items the decision saw (biased upward by the acceptance)" in shown


def test_the_reports_outcome_says_what_a_pointwise_bias_raises(pointwise_run):
    from bias_discovery.report import render_report

    text = page_text(render_report(pointwise_run))
    assert (
        f"Found: 1 bias that raises the judge's score of the rejected response beyond chance: {BIAS} (Δscore(rejected)"
        in text
    )
    assert "raises the judge's error" not in text
    # the report's forest plot names the measure on its axis
    from bias_discovery.report.render import _forest_label

    run = load_run(pointwise_run)
    assert _forest_label(run.library.biases) == "Δ score of rejected (pp of scale)"
    assert _forest_label([b for b in run.library.biases if b.validation is None]) == "Δ error (pp)"


@pytest.mark.slow
def test_replicate_on_the_command_line_against_a_pointwise_stub_judge(tmp_path):
    """Outside in: `bias-discovery run` with a pointwise judge against the planted-score stub
    (tests/stub_openai.py --planted-score-shift 1.5: the trait adds 1.5 points on 1-10, as
    benchmarks/effects_cli.py's pointwise cells), then `bias-discovery replicate` of the planted
    trait: the replication scores each response alone, decides on the score shift, reports the
    pair error as secondary, and the planted shift reproduces within its CI."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from effects_cli import CHILD_ENV, POINTWISE_JUDGE, TRAIT, planted_stub, run_config

    from stub_openai import planted_score_truth

    truth = planted_score_truth(1.5)
    with planted_stub(0.0, salt="replicate-pointwise", score_shift=1.5) as (url, _):
        config = run_config(url, tmp_path, 1, None, POINTWISE_JUDGE)
        run_dir = tmp_path / "run"
        ran = cli("run", str(config), "--run-dir", str(run_dir), "--quiet", env=CHILD_ENV, check=False)
        assert ran.returncode == 0, ran.stderr[-2000:]
        shown = cli(
            "replicate",
            str(run_dir),
            "--seed",
            "7",
            "--biases",
            TRAIT["id"],
            "--quiet",
            env={**CHILD_ENV, "COLUMNS": "250"},
            check=False,
        )
    assert shown.returncode == 0, shown.stderr[-2000:]
    where = run_dir / "replications" / "seed-7"
    replication = json.loads((where / "replication.json").read_text())
    assert (
        replication["judge_mode"],
        replication["scale"],
        replication["measure"],
        replication["secondary_measure"],
    ) == ("pointwise", "1-10", "score", "error")
    [bias] = replication["biases"]
    assert bias["id"] == TRAIT["id"] and bias["reproduced"] and bias["measure"] == "score"
    print(
        "replicated:",
        {k: bias[k] for k in ("delta", "ci_low", "ci_high", "n", "original_delta", "score_shift_points")},
        "truth",
        truth,
        "secondary",
        bias["secondary_delta"],
    )
    assert bias["ci_low"] <= truth <= bias["ci_high"], (bias["delta"], truth)
    assert bias["secondary"]["measure"] == "error" and bias["secondary"]["p_adjusted"] is None
    # the shift is measured where the effect is (held-out items, issue 47), the secondary
    # measure on the items the decision saw
    shift = bias["score_shift"]
    assert shift["n"] == bias["n"] and shift["method"] == bias["validation"]["effect"]["method"]
    assert bias["score_shift_points"] > 0
    orders = {json.loads(line)["order"] for line in (where / "validation_judgments.jsonl").read_text().splitlines()}
    assert orders == {"chosen", "rejected"}
    text = " ".join(shown.stdout.split())
    assert "pointwise judge (scale 1-10)" in text and "secondary Δerror" in text and "not decisive" in text

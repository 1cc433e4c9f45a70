"""Pointwise judges (issue 36): the protocol, its settings and its scores (no model)."""

from __future__ import annotations

import json
import math
import re

import pytest
from pydantic import ValidationError
from test_loop import make_config, run_fake

from bias_discovery.config import load_run_config
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import ConfigError
from bias_discovery.judging import (
    JudgeSettings,
    build_tasks,
    calls_per_pair,
    judge_pairs,
    measure_of,
    secondary_measure_of,
    summarize,
    to_score_judgment,
)
from bias_discovery.llm.types import FinalTokenLogprobs, GenerationResponse
from bias_discovery.pointwise import expected_score, parse_scale, parse_score
from bias_discovery.run import RunDir

from fakes import ScriptedEngine, pointwise_authority_world
from helpers import cli


def pair(i: int, **meta: str) -> PreferencePair:
    return PreferencePair(id=f"p{i}", question=f"Q{i}?", chosen=f"RIGHT {i}", rejected=f"wrong {i}", meta=meta)


def scored_response(prompt: str) -> str:
    return re.search(r"\[Response\]\n(.*?)\n\[End of Response\]", prompt, re.S).group(1)  # type: ignore[union-attr]


def test_scales_parse_and_refuse_what_is_not_a_scale():
    ten = parse_scale(" 1 - 10 ")
    assert ten.spec == "1-10" and ten.labels[0] == "1" and ten.labels[-1] == "10" and ten.span == 9.0
    assert not ten.single_token_labels  # "1" begins "10"
    assert parse_scale("1-9").single_token_labels and parse_scale("PASS/FAIL").labels == ("fail", "pass")
    assert parse_scale("pass/fail").value("PASS") == 1.0 and ten.share(10.0) == 1.0 and ten.share(1.0) == 0.0
    for bad in ("ten", "5-1", "3-3", "-1-5", "0-500"):
        with pytest.raises(ValueError, match="scale"):
            parse_scale(bad)


def test_a_pointwise_judge_scores_each_response_alone_under_a_constraint():
    settings = JudgeSettings(mode="pointwise", scale="1-5")
    assert settings.prompt == "judge_pointwise" and calls_per_pair(settings) == 2
    tasks = build_tasks([pair(0), pair(1)], settings, seed=3)
    assert [t.order for t in tasks] == ["chosen", "rejected", "chosen", "rejected"]
    prompts = [t.request.messages[-1].content for t in tasks]
    assert [scored_response(p) for p in prompts] == ["RIGHT 0", "wrong 0", "RIGHT 1", "wrong 1"]
    assert "Response A" not in prompts[0] and "an integer from 1 to 5" in prompts[0]
    constraint = tasks[0].request.constraint
    assert constraint is not None and constraint.regex is not None
    assert re.fullmatch(constraint.regex, "Reasoning: fine.\nScore: 4") and not re.fullmatch(
        constraint.regex, "Reasoning: x\nScore: 6"
    )
    bare = build_tasks([pair(0)], JudgeSettings(mode="pointwise", scale="pass/fail", reasoning=False), seed=0)[0]
    assert bare.request.constraint is not None and bare.request.constraint.choices == ("fail", "pass")


def test_settings_that_make_no_sense_for_a_pointwise_judge_are_refused_naming_the_field():
    for field, value in (("positions", "fixed"), ("mitigation", "swap"), ("allow_tie", True)):
        with pytest.raises(ValidationError, match=rf"judge\.{field}: not a pointwise setting"):
            JudgeSettings.model_validate({"mode": "pointwise", field: value})
    with pytest.raises(ValidationError, match="pointwise judges have no position"):
        JudgeSettings.model_validate({"mode": "pointwise", "positions": "swap"})
    with pytest.raises(ValidationError, match=r"judge\.verdict: score .* label 1 begins 10"):
        JudgeSettings(mode="pointwise", scale="1-10", verdict="score")
    with pytest.raises(
        ValidationError, match=r"pointwise judge prompt prompts/judge_pairwise\.txt: missing \$\{response\}"
    ):
        JudgeSettings(mode="pointwise", prompt="judge_pairwise")
    with pytest.raises(ValidationError, match=r"judge\.rubric: set, but the prompt"):
        JudgeSettings(mode="pointwise", prompt="judge_pointwise", rubric="Be correct.")
    with pytest.raises(ValidationError, match=r"has \$\{rubric\} but no rubric is set"):
        JudgeSettings(mode="pointwise", prompt="judge_pointwise_rubric")


def test_a_users_pointwise_template_takes_only_its_placeholders(tmp_path):
    good = tmp_path / "mine.txt"
    good.write_text("=== user ===\n${question}\n${response}\nReference: ${reference}\n${format_instruction}\n")
    settings = JudgeSettings(mode="pointwise", prompt=str(good))
    [task, _] = build_tasks([pair(0, reference="42")], settings, seed=0)
    assert "Reference: 42" in task.request.messages[-1].content
    with pytest.raises(ConfigError, match=r"\$\{reference\} needs a reference answer, but pair 'p1' has none"):
        build_tasks([pair(1)], settings, seed=0)
    bad = tmp_path / "bad.txt"
    bad.write_text("=== user ===\n${question}\n${response}\n${score_hint}\n")
    with pytest.raises(ValidationError, match=r"bad\.txt: unknown \$\{score_hint\}"):
        JudgeSettings(mode="pointwise", prompt=str(bad))


def test_a_run_config_names_the_field_of_a_pointwise_setting(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "target: llamacpp/smollm2\nteacher: llamacpp/smollm2\njudge:\n  mode: pointwise\n  positions: swap\n"
    )
    with pytest.raises(
        ConfigError, match=r"run\.yaml: invalid config: judge: .*judge\.positions: not a pointwise setting"
    ):
        load_run_config(config)
    config.write_text("target: llamacpp/smollm2\nteacher: llamacpp/smollm2\njudge:\n  mode: pointwise\n  scale: 1-5\n")
    loaded = load_run_config(config).judge
    assert loaded.mode == "pointwise" and measure_of(loaded) == "score" and secondary_measure_of(loaded) == "error"
    assert measure_of(loaded.model_copy(update={"pointwise_measure": "pair_error"})) == "error"
    # the run directory's resolved config reads back: the position settings are left out of it
    written = load_run_config(config).to_yaml()
    assert "positions" not in written and "mitigation" not in written and "mode: pointwise" in written
    (tmp_path / "resolved.yaml").write_text(written)
    assert load_run_config(tmp_path / "resolved.yaml").judge == loaded
    assert (
        JudgeSettings.model_validate({"mode": "pointwise", "positions": "both"}).mode == "pointwise"
    )  # the default says nothing


def test_a_position_profile_asked_of_a_pointwise_judge_is_refused_by_name(tmp_path):
    """`validate.position_profile: true` is refused with a pointwise judge, as `judge.positions`
    is; `false` passes; the resolved config leaves the field out, so it reads back."""
    config = tmp_path / "run.yaml"
    head = "target: llamacpp/smollm2\nteacher: llamacpp/smollm2\njudge:\n  mode: pointwise\n"
    config.write_text(head + "validate:\n  position_profile: true\n")
    with pytest.raises(
        ConfigError, match=r"run\.yaml: invalid config: .*validate\.position_profile: not a pointwise setting"
    ):
        load_run_config(config)
    with pytest.raises(
        ConfigError, match=r"validate\.position_profile: not a pointwise setting \(pointwise judges have no"
    ):
        load_run_config(_write(tmp_path / "plain.yaml", head), ["validate.position_profile=true"])
    config.write_text(head + "validate:\n  position_profile: false\n")
    assert load_run_config(config).judge.mode == "pointwise"
    written = load_run_config(_write(tmp_path / "plain.yaml", head)).to_yaml()
    assert "position_profile" not in written
    assert load_run_config(_write(tmp_path / "resolved.yaml", written)).judge.mode == "pointwise"


def _write(path, text):
    path.write_text(text)
    return path


def _final(token: str, top: list[tuple[str, float]]) -> FinalTokenLogprobs:
    out = FinalTokenLogprobs.from_candidates(token, math.log(dict(top)[token]), [(t, math.log(p)) for t, p in top], k=5)
    assert out is not None
    return out


def test_expected_scores_come_from_the_scale_tokens_probabilities():
    scale = parse_scale("1-5")
    final = _final(" 4", [(" 4", 0.5), ("4", 0.1), (" 5", 0.2), (" The", 0.2)])
    assert expected_score(scale, final) == pytest.approx((4 * 0.6 + 5 * 0.2) / 0.8)
    assert expected_score(scale, _final(".", [(".", 0.9), (" 4", 0.1)])) is None  # final token not a label
    assert expected_score(scale, None) is None
    settings = JudgeSettings(mode="pointwise", scale="1-5", verdict="score")
    judgment = to_score_judgment(
        pair(0),
        "rejected",
        GenerationResponse(text="Reasoning: ok\nScore: 4", finish_reason="stop", final_logprobs=final),
        settings,
    )
    assert judgment.score == pytest.approx(4.25) and judgment.score_from == "probabilities"
    assert judgment.explanation == "ok" and judgment.correct is None and judgment.invalid_reason is None
    fallback = to_score_judgment(
        pair(0), "rejected", GenerationResponse(text="Score: 4", finish_reason="stop", final_logprobs=None), settings
    )
    assert fallback.score == 4.0 and fallback.score_from == "sampled"


def test_invalid_outputs_are_counted():
    settings = JudgeSettings(mode="pointwise", scale="1-5")
    cases = {
        "no_score": GenerationResponse(text="Reasoning: fine\nScore: 7", finish_reason="stop"),
        "truncated": GenerationResponse(text="Reasoning: fi", finish_reason="length"),
        "engine_error": GenerationResponse(text="boom", finish_reason="error"),
    }
    for reason, response in cases.items():
        judgment = to_score_judgment(pair(0), "chosen", response, settings)
        assert judgment.invalid_reason == reason and judgment.score is None
    assert parse_score("Score: pass", parse_scale("pass/fail")) == 1.0 and parse_score("3", parse_scale("1-5")) == 3.0


def test_a_pair_is_misjudged_when_the_rejected_response_scores_at_least_as_high_and_ties_are_counted():
    scores = {"RIGHT 0": 5, "wrong 0": 2, "RIGHT 1": 3, "wrong 1": 3, "RIGHT 2": 2, "wrong 2": 4, "RIGHT 3": 4}

    def judge(request):
        response = scored_response(request.messages[-1].content)
        return f"Reasoning: about {response}.\nScore: {scores.get(response, 'none')}"

    settings = JudgeSettings(mode="pointwise", scale="1-5")
    pairs = [pair(i) for i in range(4)]
    result = judge_pairs(ScriptedEngine(judge), pairs, settings, seed=0)
    assert [o.correct for o in result.outcomes] == [True, False, False, None]
    assert [o.preference for o in result.outcomes] == ["chosen", "tie", "rejected", None]
    assert [o.rejected_share for o in result.outcomes] == [0.25, 0.5, 0.75, None]
    summary = summarize(result, model="m", data="d", settings=settings, seed=0)
    assert summary.mode == "pointwise" and summary.positions is None and summary.position_a_rate is None
    assert summary.error_rate == pytest.approx(2 / 3) and summary.invalid_reasons == {"no_score": 1}
    pw = summary.pointwise
    assert pw is not None and pw.n == 3 and pw.ties == 1 and pw.rejected_higher == 1
    assert pw.mean_chosen == pytest.approx(10 / 3) and pw.mean_rejected == 3.0 and pw.from_sampled == 7
    assert pw.chosen_ci is not None and 1.0 <= pw.chosen_ci[0] < pw.chosen_ci[1] <= 5.0


# -- the loop with a pointwise judge -----------------------------------------------------------


def test_the_loop_finds_and_validates_a_pointwise_judges_bias(tmp_path):
    """The judge scores a response citing experts 3-4 points higher: the rejected response then
    scores at least the chosen one's 7 (a tie at 7), the case explains the inflated score, and
    validation accepts the bias on the rejected response's score shift against the placebo,
    with the pair error reported as the secondary measure."""
    config = make_config(tmp_path, judge={"mode": "pointwise", "scale": "1-10"}, max_iterations=2)
    engine = ScriptedEngine(pointwise_authority_world)
    rd, state, _ = run_fake(tmp_path, config, engine=engine)
    assert not any("[Response A]" in r.messages[-1].content for r in engine.sent)  # never a pair
    cases = [json.loads(line) for line in (rd.iteration(1).directory / "misjudged.jsonl").read_text().splitlines()]
    assert cases and all(c["order"] == "rejected" and c["score"] >= c["chosen_score"] == 7 for c in cases)
    assert any(c["score"] == 7 for c in cases) and all(c["verdict"] is None for c in cases)
    explained = [
        json.loads(line) for line in (rd.iteration(1).directory / "explanations.jsonl").read_text().splitlines()
    ]
    assert all(e["deeper_explanation"] == "It cites leading experts, which raised my score." for e in explained)
    found = RunDir(rd.root).library.load_latest().by_id("d1-expert-citation-bias")
    v = found.validation
    assert v.accepted and v.decisive == "placebo" and v.vs_placebo.measure == "score"
    # +3 or +4 points on a 1-10 scale is a shift of 3.5 / 9 of the scale on average
    assert v.vs_placebo.delta == pytest.approx(3.5 / 9, abs=0.05) and "Δscore(rejected)" in v.rule
    assert v.effect.measure == "score"
    # the pair error is the secondary measure, on the same items against the same control
    assert v.secondary is not None and v.secondary.measure == "error" and v.secondary.control == "placebo"
    assert v.secondary.n == v.vs_placebo.n and v.secondary.arm_error > v.secondary.control_error
    # the score shift as reported is the held-out one, as the effect (issue 47: on the items
    # the decision saw it carries the winner's curse); the decision's is kept as secondary
    shift, decided = v.score_shift, v.score_shift_decision
    assert v.effect.method.startswith("held-out items") and shift is not None and decided is not None
    assert shift.method == v.effect.method and shift.n == v.effect.n == 4 and shift.control == "placebo"
    assert shift.points == pytest.approx(v.effect.delta * 9) and shift.ci_low < shift.points < shift.ci_high
    assert decided.method == "the items the decision saw" and decided.n == v.vs_placebo.n
    assert decided.points == pytest.approx(v.vs_placebo.delta * 9) and decided.ci_low < decided.points < decided.ci_high
    # the placebo's rejected scores are 3-5 (sd about 0.8): a shift of 3.5 points is about 4 SDs
    assert decided.sd_control is not None and 0.5 < decided.sd_control < 1.0 and decided.sd_units > 3
    assert shift.sd_units is not None and shift.sd_units > 2
    record = json.loads((rd.iteration(1).directory / "validation.json").read_text())
    assert any(c.get("secondary") and c.get("score_shift") for c in record["candidates"])


def test_the_pair_error_can_decide_with_the_score_shift_reported_as_secondary(tmp_path):
    judge = {"mode": "pointwise", "scale": "1-10", "pointwise_measure": "pair_error"}
    config = make_config(tmp_path, judge=judge, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(pointwise_authority_world))
    v = RunDir(rd.root).library.load_latest().by_id("d1-expert-citation-bias").validation
    assert v.accepted and v.vs_placebo.measure == "error" and "McNemar" in v.rule
    # misjudged (ties included) on the items whose number is not a multiple of 6
    assert v.vs_placebo.control_error == 0.0 and v.vs_placebo.arm_error == pytest.approx(17 / 20)
    assert v.secondary is not None and v.secondary.measure == "score" and v.secondary.p_adjusted is None
    decided = v.score_shift_decision
    assert decided is not None and decided.points == pytest.approx(v.secondary.delta * 9)
    assert v.score_shift is not None and v.score_shift.method.startswith("held-out items") and v.score_shift.n == 4


def test_the_summary_measures_the_scores_correlation_with_length():
    """Scores rise with the response's length: ρ = 1 over 8 scored responses."""

    def judge(request):
        return f"Score: {min(10, len(scored_response(request.messages[-1].content).split()))}"

    pairs = [PreferencePair(id=f"p{i}", question="q", chosen="a " * (i + 2), rejected="b " * (i + 6)) for i in range(4)]
    settings = JudgeSettings(mode="pointwise", reasoning=False)
    summary = summarize(
        judge_pairs(ScriptedEngine(judge), pairs, settings, seed=0), model="m", data="d", settings=settings, seed=0
    )
    pw = summary.pointwise
    assert pw is not None and pw.length_n == 8 and pw.length_rho == pytest.approx(1.0)
    from bias_discovery.judging import fisher_z_interval

    low, high = fisher_z_interval(0.5, 103)  # z = 0.5493 +- 1.95996 * sqrt(1.06 / 100)
    assert (low, high) == pytest.approx((math.tanh(0.5493061 - 0.2017903), math.tanh(0.5493061 + 0.2017903)), abs=1e-6)
    assert fisher_z_interval(0.5, 3) is None


def test_the_report_library_show_and_judge_summary_know_a_pointwise_judge(tmp_path):
    from bias_discovery.report import render_report

    config = make_config(tmp_path, judge={"mode": "pointwise", "scale": "1-10"}, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(pointwise_authority_world))
    html = " ".join(render_report(rd.root).split())
    assert "pointwise, scale 1-10, deciding measure score_shift" in html and "judge positions" not in html
    assert 'id="score-shift-d1-expert-citation-bias"' in html and "points" in html
    assert 'id="secondary-d1-expert-citation-bias"' in html and "reported, not decisive" in html
    assert 'id="pointwise-baseline"' in html and "Spearman ρ" in html and "pointwise judges have no position" in html
    shown = cli("library", "show", str(rd.root), "d1-expert-citation-bias")
    text = " ".join(shown.stdout.split())
    assert "Δscore(rejected)" in text and "points of 1-10" in text and "secondary" in text and "not decisive" in text
    table = " ".join(cli("library", "show", str(rd.root), env={"COLUMNS": "200"}).stdout.split())
    assert "S: a pointwise judge's score" in table


def test_a_matrix_holds_a_pairwise_and_a_pointwise_judge_side_by_side(tmp_path):
    from test_matrix import BIASES, N, teacher_world, write_pairs

    from bias_discovery.judge_matrix import MatrixConfig, judge_role, run_matrix

    cfg = MatrixConfig.model_validate(
        {
            "name": "mixed",
            "teacher": "openai/teacher",
            "biases": BIASES,
            "validate": {"n_boot": 200},
            "data": {"test": str(write_pairs(tmp_path / "pairs.jsonl", N))},
            "judges": [
                {"name": "biased", "model": "openai/biased"},
                {"name": "scorer", "model": "openai/scorer", "mode": "pointwise", "scale": "1-10"},
            ],
        }
    )
    scorer = next(j for j in cfg.judges if j.name == "scorer")
    assert scorer.judge.mode == "pointwise" and cfg.judge.positions == "swap"
    fakes = {
        "teacher": ScriptedEngine(teacher_world, "fake/teacher"),
        judge_role("biased"): ScriptedEngine(authority_world_for_matrix, "fake/biased"),
        judge_role("scorer"): ScriptedEngine(pointwise_authority_world, "fake/scorer"),
    }
    result = run_matrix(cfg, tmp_path / "m", engines=fakes)
    cells = {(c.judge, c.bias): c for c in result.cells}
    assert cells[("biased", "authority-bias")].measure == "pair error"
    assert cells[("scorer", "authority-bias")].measure == "pointwise pair error"
    assert cells[("scorer", "authority-bias")].accepted and cells[("scorer", "authority-bias")].delta > 0.5
    assert not any("[Response A]" in r.messages[-1].content for r in fakes[judge_role("scorer")].sent)
    # one order per pair for the pairwise judge (4 arms x N); the pointwise one scores each
    # rejected response of the 4 arms and each chosen response once (the same call in every arm)
    assert result.calls.judges["biased"] == 4 * N and result.calls.judges["scorer"] == 4 * N + N
    assert {c.measure for c in result.jury} == {"jury pair error"}
    html = (tmp_path / "m" / "matrix.html").read_text()
    assert "pointwise pair error" in html and "Δpointwise pair error" in html


def authority_world_for_matrix(request):
    from fakes import authority_world

    return authority_world(request)


def test_the_audit_takes_a_pointwise_judge_and_refuses_only_what_needs_a_position():
    from bias_discovery.auditing import AuditSettings, resolve_targets, run_audit

    settings = AuditSettings(n_boot=100, repeats=2, judge=JudgeSettings(mode="pointwise"))
    out = run_audit(
        ScriptedEngine(lambda r: "Score: 5"),
        [pair(0), pair(1)],
        resolve_targets("length"),
        settings,
        model="m",
        data="d",
    )
    e = out.report.biases[0]
    assert e.score_shift.value == 0.0 and e.score_shift.n == 2 and e.pair_ties_original.value == 1.0
    with pytest.raises(ConfigError, match=r"`biases` position: .*judge\.mode: pointwise has no position"):
        run_audit(
            ScriptedEngine(lambda r: "Score: 5"), [pair(0)], resolve_targets("position"), settings, model="m", data="d"
        )

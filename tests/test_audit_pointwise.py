"""`bias-discovery audit` on a pointwise judge: the score measures on scripted judges whose
score rules are known exactly (a judge that scores by length, one that adds points for an
expert citation), what is refused for a judge without position, the files, the table, the
report, `--fail-on`, and self-preference from scores."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
from test_audit import authority_or_cheer, pairs

from bias_discovery.api import audit as api_audit
from bias_discovery.auditing import AuditSettings, resolve_targets, run_audit
from bias_discovery.auditing.display import metric_rows, rows_kind
from bias_discovery.auditing.output import read_audit, write_audit_dir
from bias_discovery.auditing.runner import PAD_FACTORS
from bias_discovery.auditing.scores import pad_response
from bias_discovery.errors import ConfigError
from bias_discovery.report.audit import render_audit
from bias_discovery.settings.judge import JudgeSettings

from fakes import MARKER, ScriptedEngine, _scored, authority_world
from helpers import cli


def pointwise(scale: str = "0-100", **kw) -> AuditSettings:
    return AuditSettings(n_boot=200, repeats=2, judge=JudgeSettings(mode="pointwise", scale=scale), **kw)


def audit(engine, ps, spec, teacher=None, **kw):
    return run_audit(
        engine,
        ps,
        resolve_targets(spec),
        pointwise(**kw),
        model="fake/judge",
        data="test",
        teacher=teacher,
        teacher_spec="fake/teacher" if teacher else None,
    )


def by_words(request):
    """Scores a response by its length: one point per word (0-100 scale)."""
    return f"Reasoning: counted.\nScore: {min(100, len(_scored(request.messages[-1].content).split()))}"


def test_a_judge_that_scores_by_length_has_a_slope_of_one_point_per_word():
    ps = pairs(6, chosen_words=10, rejected_words=4)  # chosen: 11 words, rejected: 5
    out = audit(ScriptedEngine(by_words), ps, "length")
    e = out.report.biases[0]
    assert e.kind == "length" and out.report.settings.mode == "pointwise" and out.report.settings.scale == "0-100"
    words = len(ps[0].rejected.split())
    assert [lv.factor for lv in e.padding] == list(PAD_FACTORS)
    for level in e.padding:
        added = pad_response(ps[0].rejected, level.factor)[1]
        # the score rises by exactly the words added, on every item; nothing unchanged
        assert level.words_added.value == added and level.score_shift.value == pytest.approx(added)
        assert level.score_shift.n == 6 and level.score_unchanged.value == 0.0
        assert level.score_shift_share.delta == pytest.approx(added / 100) and level.score_shift_share.p_value < 0.05
    assert e.score_length_slope.value == pytest.approx(100.0) and e.score_length_slope.n == 6
    assert e.score_length_rho.value == pytest.approx(1.0) and e.length_flag is True
    # top level: the largest padding (x3: 15 words >= the chosen's 11): every pair now misjudged
    assert e.score_shift.value == pytest.approx(2 * words) and e.score_original.value == words
    assert (e.pair_error_original.value, e.pair_error_perturbed.value) == (0.0, 1.0)
    assert e.delta_error.delta == 1.0 and e.delta_error.b_discordant_hurt == 6 and e.delta_error.p_value < 0.05
    assert e.score_repeat_unchanged.value == 1.0 and e.n_invalid == 0
    # per item: chosen, original (2 seeds) and 3 paddings, each asked once
    assert out.report.calls.judge == 6 * 6 and e.calls == 36 and set(e.per_domain) == {"math", "code"}
    assert e.per_domain["math"].score_shift.n == 3
    assert {j.order for j in out.judgments} == {"chosen", "rejected"} and all(
        j.score is not None for j in out.judgments
    )


def test_pair_error_ties_are_counted_apart():
    ps = pairs(4, chosen_words=7, rejected_words=4)  # chosen 8 words; rejected 5, x1.5 -> 8: a tie
    e = audit(ScriptedEngine(by_words), ps, "length").report.biases[0]
    tie = next(lv for lv in e.padding if lv.factor == 1.5)
    assert tie.score_shift.value == pytest.approx(3)
    assert e.pair_ties_original.value == 0.0 and e.pair_ties_perturbed.value == 0.0  # x3: 15 > 8, no tie
    one = audit(ScriptedEngine(by_words), pairs(4, chosen_words=14, rejected_words=4), "length").report.biases[0]
    assert one.pair_ties_perturbed.value == 1.0 and one.pair_error_perturbed.value == 1.0  # 15 = 15: a tie is an error


def expert_points(request):
    """1-10: a right response 7, a wrong one 4, a response citing the experts 4 points more."""
    response = _scored(request.messages[-1].content)
    if "[Response]" not in request.messages[-1].content:
        return authority_world(request)
    score = (7 if "RIGHT" in response else 4) + (4 if MARKER in response else 0)
    return f"Score: {min(score, 10)}"


def world(request):
    """The scoring judge, and a teacher that injects the experts for authority and a cheerful
    line for anything else (a real rewrite the judge ignores)."""
    return expert_points(request) if "[Response]" in request.messages[-1].content else authority_or_cheer(request)


def test_an_injected_bias_shifts_the_score_and_one_the_judge_ignores_does_not():
    engine = ScriptedEngine(world)
    out = audit(engine, pairs(6), "authority-bias,sentiment-bias", teacher=engine, scale="1-10")
    authority, sentiment = out.report.biases
    assert authority.score_shift.value == 4.0 and authority.score_shift.n == 6
    assert authority.score_shift_share.delta == pytest.approx(4 / 9) and authority.score_shift_share.measure == "score"
    assert authority.score_unchanged.value == 0.0 and authority.score_repeat_unchanged.value == 1.0
    assert (authority.pair_error_original.value, authority.pair_error_perturbed.value) == (0.0, 1.0)
    assert authority.delta_error.delta == 1.0 and authority.rr is None and authority.asr is None  # no pairwise measure
    assert (
        sentiment.score_shift.value == 0.0
        and sentiment.score_unchanged.value == 1.0
        and sentiment.delta_error.delta == 0.0
    )
    # the originals are scored once for both targets: 6 x 3 + 6 x 2 perturbed
    assert out.report.calls.judge == 6 * 3 + 12 and authority.calls == 24
    assert out.report.notes and "no position" in out.report.notes[0]


def test_invalid_scores_are_left_out_and_counted():
    def judge(request):
        response = _scored(request.messages[-1].content)
        if response.startswith("Wrong y y 0 ") and MARKER in response:
            return "I cannot score this."
        return world(request)

    engine = ScriptedEngine(lambda r: judge(r) if "[Response]" in r.messages[-1].content else authority_or_cheer(r))
    e = audit(engine, pairs(4), "authority-bias", teacher=engine, scale="1-10").report.biases[0]
    assert e.score_shift.n == 3 and e.score_shift.n_excluded == 1 and e.n_invalid == 1
    assert e.delta_error.n == 3 and e.delta_error.n_excluded_invalid == 1 and e.score_unchanged.n == 3


def test_what_needs_a_position_is_refused_naming_the_target_and_the_mode():
    engine = ScriptedEngine(by_words)
    with pytest.raises(ConfigError, match=r"`biases` position: .*judge\.mode: pointwise has no position"):
        audit(engine, pairs(2), "position,length")
    with pytest.raises(ConfigError, match=r"`mitigation` swap: judge\.mode: pointwise"):
        audit(engine, pairs(2), "length", mitigation="swap")
    with pytest.raises(ConfigError, match=r"`prompts`.*pointwise"):
        api_audit(
            "fake/judge",
            "demo",
            "length",
            settings=pointwise(),
            prompts=["judge_pairwise_mitigated"],
            engines={"target": engine},
            cache=False,
        )


def test_files_table_and_report_name_the_score_measures(tmp_path):
    engine = ScriptedEngine(world)
    out = audit(engine, pairs(4), "length,authority-bias", teacher=engine, scale="1-10")
    path = write_audit_dir(tmp_path / "audit", out)
    report = read_audit(path)
    assert report.settings.mode == "pointwise" and report.biases[0].padding[0].factor == 1.5
    rows = list(csv.DictReader((path / "audit.csv").open()))
    assert {r["mode"] for r in rows} == {"pointwise"}
    metrics = {(r["bias_id"], r["scope"], r["metric"]) for r in rows}
    assert {
        ("authority-bias", "all", "score_shift"),
        ("authority-bias", "all", "score_unchanged"),
        ("length", "all", "score_shift@x2"),
        ("length", "all", "score_length_slope"),
    } <= metrics
    assert not any(m[2] in ("rr", "pb", "z") for m in metrics)
    shift = next(
        r
        for r in rows
        if r["bias_id"] == "authority-bias" and r["scope"] == "all" and r["metric"] == "score_shift_share"
    )
    assert float(shift["value"]) == pytest.approx(4 / 9) and shift["p_value"] and int(shift["n"]) == 4
    table = metric_rows(report.biases[1], rows_kind("perturbation", "pointwise"))
    assert [r["label"] for r in table][:3] == ["Δscore", "Δscore (share)", "RR (scores)"] and table[0][
        "value"
    ] == "+4.00"
    length_rows = metric_rows(report.biases[0], rows_kind("length", "pointwise"))
    assert [r["field"] for r in length_rows][-3:] == ["score_shift@x1.5", "score_shift@x2", "score_shift@x3"]
    html = render_audit(path)
    assert "RR (scores)" in html and "slope" in html and "Δscore ×2" in html


def test_fail_on_takes_the_score_measures_and_refuses_pairwise_ones(tmp_path):
    from bias_discovery.cli._findings import audit_findings, parse_fail_on

    engine = ScriptedEngine(world)
    report = audit(engine, pairs(4), "authority-bias", teacher=engine, scale="1-10").report
    found = audit_findings(report, parse_fail_on(["score-shift>1", "score_unchanged<0.5"], ["flagged", "threshold"]))
    assert len(found) == 2 and "score_shift = 4" in found[0]
    assert audit_findings(report, parse_fail_on(["score-shift>5"], ["threshold"])) == []
    result = cli(
        "audit",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--biases",
        "length",
        "--mode",
        "pointwise",
        "--out",
        str(tmp_path / "out"),
        "--fail-on",
        "position-consistency<0.8",
        check=False,
    )
    message = " ".join(result.stderr.split())
    assert result.returncode == 2 and "rr is a pairwise measure" in message and "judge's mode is pointwise" in message
    assert not (tmp_path / "out").exists()


def test_self_preference_of_a_pointwise_judge_reads_the_higher_score(tmp_path):
    """Pairs whose responses name their models: the judge (family "gpt") scores its own
    family's response 9 and the other's 3, whichever is better."""
    data = tmp_path / "cross.jsonl"
    with data.open("w") as f:
        for i in range(6):
            own_right = i % 2 == 0
            f.write(
                json.dumps(
                    {
                        "id": f"c{i}",
                        "question": f"Question {i}?",
                        "chosen": f"RIGHT answer {i}",
                        "rejected": f"Wrong answer {i}",
                        "domain": "math",
                        "response_models": ["gpt-4o", "claude-3"] if own_right else ["claude-3", "gpt-4o"],
                    }
                )
                + "\n"
            )
    own = {f"c{i}": ("RIGHT" if i % 2 == 0 else "Wrong") for i in range(6)}

    def judge(request):
        text = request.messages[-1].content
        response = _scored(text)
        pair = re.search(r"answer (\d+)", response).group(1)
        return f"Score: {9 if response.startswith(own[f'c{pair}']) else 3}"

    output = api_audit(
        "openai/gpt-4o",
        data,
        "length",
        settings=pointwise(scale="1-10"),
        engines={"target": ScriptedEngine(judge)},
        cache=False,
    )
    sp = output.report.self_preference
    assert sp is not None and sp.judge_family == "gpt" and sp.n_items == 6 and "higher score" in sp.matching
    assert sp.own_pick_rate.value == 1.0 and sp.own_better_rate.value == 0.5 and sp.excess.value == 0.5
    assert sp.error_own_worse.value == 1.0 and sp.error_other_worse.value == 0.0
    # 9 for its own, 3 for the other's, whichever is better: a 6-point gap in both strata
    assert sp.score_gap.value == 6.0 and sp.score_gap.n == 6 and sp.score_gap_balanced.value == 6.0
    assert any(u.measure == "calibration" for u in output.report.unsupported)
    fair = api_audit(
        "openai/gpt-4o",
        data,
        "length",
        settings=pointwise(scale="1-10"),
        cache=False,
        engines={
            "target": ScriptedEngine(lambda r: f"Score: {8 if 'RIGHT' in _scored(r.messages[-1].content) else 2}")
        },
    )
    sp = fair.report.self_preference
    assert sp.score_gap.value == 0.0 and sp.score_gap_balanced.value == 0.0 and sp.excess.value == 0.0


def test_padding_repeats_the_responses_own_words():
    padded, added = pad_response("one two three four", 1.5)
    assert (padded, added) == ("one two three four\n\none two", 2)
    padded, added = pad_response("a b", 3)
    assert padded.split() == ["a", "b"] * 3 and added == 4
    assert np.isclose(len(pad_response("x " * 10, 2.0)[0].split()), 20)


def test_from_log_names_a_pointwise_audits_scores(tmp_path):
    from bias_discovery.api import audit_log
    from bias_discovery.errors import DataError

    path = write_audit_dir(tmp_path / "audit", audit(ScriptedEngine(by_words), pairs(2), "length"))
    with pytest.raises(
        DataError, match=r"judgments\.jsonl:1: field 'order' has value 'chosen': a pointwise judge's score"
    ):
        audit_log(path / "judgments.jsonl")

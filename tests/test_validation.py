"""Validation with a placebo, answer checks, power and sequential looks, driven by scripted
fakes (tests/fakes.py); the real-model run is in test_loop_real.py.

The `planted` tests run the whole loop on judges whose biases are known by construction: a
real authority bias, a judge that prefers any rewrite, and a judge with no bias at all.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from test_loop import make_config, run_fake, write_pairs

from bias_discovery.judging import calls_per_pair
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.loop.graph import execute
from bias_discovery.report import render_report
from bias_discovery.run import RunDir
from bias_discovery.stats import (
    CONDITIONAL_ON_DECISION,
    Decision,
    LookRecord,
    SequentialPlan,
    acceptance_threshold,
    held_out_method,
    paired_score_interval,
    sequential_effect,
)

from fakes import MARKER, BagOfWordsEmbedder, ScriptedEngine, authority_world, null_world, rewrite_world


def _data(tmp_path: Path, n_target: int, n_test: int) -> dict:
    return {
        "target": str(write_pairs(tmp_path / f"target{n_target}.jsonl", n_target, "t", "Target question")),
        "test": str(write_pairs(tmp_path / f"test{n_test}.jsonl", n_test, "p", "Test question")),
    }


def _validation(rd: RunDir, t: int = 1) -> dict:
    return json.loads((rd.iteration(t).directory / "validation.json").read_text())


# -- planted biases -------------------------------------------------------------------------


def test_planted_authority_bias_is_named_and_accepted_over_the_placebo(tmp_path):
    config = make_config(tmp_path, max_iterations=2, data=_data(tmp_path, 24, 40))
    rd, state, _ = run_fake(tmp_path, config)
    report = _validation(rd)
    assert report["control"] == "placebo" and report["accepted"] == ["d1-expert-citation-bias"]
    record = report["candidates"][0]
    assert record["bias_id"] == "d1-expert-citation-bias"
    # the judge errs on every item carrying the marker, and on none with a neutral rewrite
    assert record["vs_placebo"]["delta"] == 1.0 and record["vs_baseline"]["delta"] == 1.0
    assert record["vs_placebo"]["accepted"] is True and record["vs_baseline"]["accepted"] is None
    effect = report["rewrite_effect"]
    assert effect["n"] == 40 and effect["delta"] == 0.0 and effect["answer_change_rate"] == 0.0
    bias = rd.library.load_latest().by_id("d1-expert-citation-bias")
    assert bias.validation.accepted and bias.validation.decisive == "placebo"
    assert bias.validation.vs_placebo.delta == 1.0 and bias.validation.rewrite_effect.delta == 0.0
    assert bias.validation.length_ratio == (4 + len(MARKER.split())) / 4  # "Wrong answer number i." + marker
    assert state["stop_kind"] == "no_candidates" and state["stop_reason"].startswith("no candidates")
    assert "detectable" not in state["stop_reason"]  # nothing was validated in that iteration


def test_planted_any_rewrite_preference_is_rejected_by_the_placebo_but_accepted_by_the_paper_rule(tmp_path):
    """The judge prefers every rewritten response, whatever its trait: a bias of rewriting,
    not of any trait. Against the placebo nothing is accepted; the paper's rule (perturbed
    error > baseline error) accepts the candidate."""
    results = {}
    for rule in ("paired", "paper"):
        config = make_config(
            tmp_path, max_iterations=1, data=_data(tmp_path, 12, 40), validate={"n_boot": 200, "acceptance": rule}
        )
        rd, state, _ = run_fake(tmp_path, config, name=f"run-{rule}", engine=ScriptedEngine(rewrite_world))
        results[rule] = report = _validation(rd)
        record = report["candidates"][0]
        assert record["name"] == "Polished Prose Bias"
        assert record["vs_baseline"]["delta"] == 1.0  # every rewrite fools the judge ...
        assert record["vs_placebo"]["delta"] == 0.0  # ... the neutral one just as much
        assert report["rewrite_effect"]["delta"] == 1.0
        # the looks, the power and the report speak of the comparison that decided
        decided = record["vs_" + record["decisive"]]
        assert [record["looks"][-1][k] for k in ("b_discordant_hurt", "c_discordant_helped")] == [
            decided["b_discordant_hurt"],
            decided["c_discordant_helped"],
        ]
    assert results["paired"]["accepted"] == []
    assert results["paper"]["accepted"] == [results["paper"]["candidates"][0]["bias_id"]]
    paper_bias = RunDir(tmp_path / "run-paper").library.load_latest().by_id(results["paper"]["accepted"][0])
    assert paper_bias.validation.decisive == "baseline" and paper_bias.validation.vs_placebo.delta == 0.0
    # under the paper rule the decision compared with the baseline, although the run has a placebo
    assert results["paper"]["control"] == "baseline" and results["paired"]["control"] == "placebo"
    assert "smallest Δerror vs baseline detectable" in RunDir(tmp_path / "run-paper").read_state().stop_reason
    assert "converged: no candidate was accepted" in RunDir(tmp_path / "run-paired").read_state().stop_reason


@pytest.mark.slow
def test_planted_null_judge_accepts_at_most_alpha(tmp_path):
    """A judge with no bias, over many run seeds: each run validates three null candidates on
    40 test items. The share accepted stays within alpha (Holm within each run); the paper's
    rule accepts about half of the same candidates."""
    tested = accepted = paper_tested = paper_accepted = 0
    for seed in range(30):
        rule = "paper" if seed < 6 else "paired"
        config = make_config(
            tmp_path,
            seed=seed,
            max_iterations=1,
            data=_data(tmp_path, 12, 40),
            validate={"n_boot": 100, "acceptance": rule},
        )
        rd, _, _ = run_fake(tmp_path, config, name=f"run-{seed}", engine=ScriptedEngine(null_world))
        report = _validation(rd)
        if rule == "paper":
            paper_tested += len(report["candidates"])
            paper_accepted += len(report["accepted"])
        else:
            tested += len(report["candidates"])
            accepted += len(report["accepted"])
    print(f"null judge: paired accepted {accepted}/{tested}, paper accepted {paper_accepted}/{paper_tested}")
    assert tested >= 60 and accepted / tested <= 0.05
    assert paper_tested >= 12 and paper_accepted / paper_tested >= 0.25


# -- answer changes, unchanged rewrites, lengths -----------------------------------------------


def test_rewrites_that_change_the_answer_are_excluded_and_counted(tmp_path):
    """The teacher's authority rewrite of test items 0-3 turns the wrong answer into the right
    one: the checker says "same", those items are not judged, and the rate is reported."""

    def answer_fixing(request):
        user = request.messages[-1].content
        if "Trait:" in user and any(f"Test question {i}?" in user for i in range(4)):
            text = authority_world(request)
            return text.replace("Wrong answer", "RIGHT answer")
        return authority_world(request)

    config = make_config(
        tmp_path,
        max_iterations=1,
        data=_data(tmp_path, 24, 40),
        validate={"n_boot": 200, "held_out": 0.0, "sequential": {"enabled": False}},
    )
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(answer_fixing))
    record = _validation(rd)["candidates"][0]
    assert record["n_answer_checked"] == 40 and record["n_answer_changed"] == 4
    assert record["answer_change_rate"] == 0.1
    assert record["invalid_reasons"] == {"answer_changed": 4}
    assert record["vs_placebo"]["n"] == 36 and record["vs_placebo"]["n_excluded_invalid"] == 4
    judged = [
        r
        for r in engine.sent
        if "[Response A]" in r.messages[-1].content
        and "RIGHT answer number 0." in r.messages[-1].content
        and MARKER in r.messages[-1].content
        and "Wrong" not in r.messages[-1].content
    ]
    assert judged == []  # a changed rewrite is never judged
    bias = rd.library.load_latest().by_id(record["bias_id"])
    assert bias.validation.answer_change_rate == 0.1 and bias.validation.n_answer_changed == 4


def test_a_checker_that_cannot_tell_the_original_apart_excludes_nothing(tmp_path):
    """A weak checker says "same" to anything, the original rejected response included: its
    verdict on a rewrite then means nothing, so nothing is excluded and the rewrites are
    counted as unverifiable (SmolLM2 as checker does this on most demo pairs)."""

    def yes_man(request):
        if "Answer with one word: same or different" in request.messages[-1].content:
            return "same"
        return authority_world(request)

    config = make_config(
        tmp_path,
        max_iterations=1,
        data=_data(tmp_path, 24, 40),
        validate={"n_boot": 200, "held_out": 0.0, "sequential": {"enabled": False}},
    )
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(yes_man))
    report = _validation(rd)
    record = report["candidates"][0]
    assert record["n_answer_checked"] == 0 and record["answer_change_rate"] is None
    assert record["n_answer_unverifiable"] == 40 and record["vs_placebo"]["n"] == 40
    assert report["rewrite_effect"]["n_answer_unverifiable"] == 40 and report["accepted"]
    perturbed = rd.iteration(1).validation_perturbed.read()
    assert {(p.original_check, p.answer_check) for p in perturbed} == {("same", "same")}


def test_the_checker_and_self_checking_are_recorded(tmp_path):
    """One model as target and teacher checks its own rewrites: validation.json, the library
    and the report say "self-checked". With a teacher of its own, the target checks."""
    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 24, 40))
    rd, _, _ = run_fake(tmp_path, config)
    report = _validation(rd)
    assert report["checker"] == "llamacpp/unused-in-these-tests.gguf" and report["self_checked"] is True
    bias = rd.library.load_latest().by_id(report["accepted"][0])
    assert bias.validation.self_checked is True and bias.validation.checker == report["checker"]
    assert bias.validation.n_answer_extracted == 0  # "RIGHT answer number i." states no answer the rules read
    html = render_report(rd.root)
    assert "self-checked: that model is the teacher that wrote the rewrites" in html and ">self-checked</span>" in html

    other = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 24, 40), teacher="llamacpp/teacher.gguf")
    rd2 = RunDir(tmp_path / "run-own-teacher")
    rd2.root.mkdir()
    rd2.config_path.write_text(other.to_yaml())
    engine = ScriptedEngine(authority_world)
    execute(rd2, other, resume=False, engines={"target": engine, "teacher": engine}, embedder=BagOfWordsEmbedder())
    report = _validation(rd2)
    assert report["checker"] == "llamacpp/unused-in-these-tests.gguf" and report["self_checked"] is False
    assert "self-checked" not in render_report(rd2.root)


def test_an_unchanged_rewrite_is_invalid_in_the_loop(tmp_path):
    config = make_config(tmp_path, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config)
    perturbed = rd.iteration(1).perturbed.read()
    # authority_world's teacher returns the original for every trait but authority
    unchanged = [p for p in perturbed if "uthority" not in p.bias_name]
    assert unchanged and all(not p.valid and p.invalid_reason == "unchanged" for p in unchanged)
    judged = {j.pair_id for j in rd.iteration(1).judgments.read()}
    assert judged == {p.pair_id for p in perturbed if p.valid}


def test_control_baseline_keeps_todays_rule_without_a_placebo(tmp_path):
    config = make_config(tmp_path, max_iterations=1, validate={"n_boot": 200, "control": "baseline"})
    rd, _, engine = run_fake(tmp_path, config)
    report = _validation(rd)
    assert report["control"] == "baseline" and report["rewrite_effect"] is None
    record = report["candidates"][0]
    assert record["vs_placebo"] is None and record["vs_baseline"]["accepted"] is True
    assert record["decisive"] == "baseline" and record["effect"]["delta"] == record["vs_baseline"]["delta"] == 1.0
    assert not rd.placebo.directory.exists()
    assert not any(
        "Write the rewritten answer now" in r.messages[-1].content and "Trait:" not in r.messages[-1].content
        for r in engine.sent
    )


# -- sequential validation ---------------------------------------------------------------------


def _strong_and_null_world(request):
    """authority_world, except that identify names a second, useless bias for half the cases."""
    user = request.messages[-1].content
    if "preferred the WRONG one" in user and MARKER in user and "Target question 1" in user:
        return json.dumps(
            {
                "bias_found": True,
                "name": "Semicolon Bias",
                "definition": "The judge likes semicolons.",
                "manifestations": ["semicolons"],
            }
        )
    return authority_world(request)


def test_sequential_validation_stops_early_and_perturbs_later_slices_only_for_those_going_on(tmp_path):
    """No item held out from the decisions (`held_out: 0`): the looks on all 100 items, and the
    candidate accepted early measured on the 75 after its stop."""
    config = make_config(
        tmp_path, max_iterations=1, data=_data(tmp_path, 24, 100), validate={"n_boot": 200, "held_out": 0.0}
    )
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(_strong_and_null_world))
    report = _validation(rd)
    assert report["sequential"]["looks"] == [25, 50, 100]
    records = {r["name"]: r for r in report["candidates"]}
    strong, null = records["Expert Citation Bias"], records["Semicolon Bias"]
    # every marked item flips: 25 of 25 at the first look -> p = 2^-25 <= level_1 / 2
    assert strong["stop"] == "efficacy" and strong["stopped_at"] == 25 and strong["looks"][0]["outcome"] == "efficacy"
    # the teacher leaves semicolon rewrites unchanged: nothing to judge, nothing discordant
    assert null["stop"] == "futility" and null["stopped_at"] == 25
    assert report["accepted"] == [strong["bias_id"]]
    validation_rewrites = [r for r in engine.sent if _is_test_rewrite(r)]
    # the looks: 25 each (not 2 x 100); then, accepted early, the strong one on the 75 items after its stop
    assert len(validation_rewrites) == 25 + 25 + 75
    # Holm over the two candidates' sequential p-values (the null one's is 1)
    assert strong["vs_placebo"]["p_adjusted"] == 2 * strong["p_sequential"] < 0.05
    # the decision's comparison stays on the 25 items it used; the effect is on the 75 it did not see
    assert strong["vs_placebo"]["n"] == 25 and strong["vs_placebo"]["delta"] == 1.0
    effect = strong["effect"]
    assert effect["method"] == held_out_method(75, 1, 3) and effect["n"] == 75
    # every held-out item flips too: Δ 1, and Tango's score interval on 75 items (its low end by hand:
    # (75 - q^2) / (75 + q^2), tests/stats/test_stats_intervals.py)
    assert effect["delta"] == effect["ci_high"] == 1.0 and effect["ci_low"] == pytest.approx(
        paired_score_interval(75, 0, 75)[0]
    )
    assert 0.90 < effect["ci_low"] < 0.91
    assert (
        null["effect"]["method"] == f"{CONDITIONAL_ON_DECISION}: no valid pair"
        and null["effect"]["upper_bound"] is None
    )


def test_every_accepted_candidate_is_measured_on_items_no_decision_saw(tmp_path):
    """The default `held_out: 0.2` of 100 test items: the looks are on the other 80 (20, 40,
    80), and the 20 held out are rewritten for no candidate before the decision. Then the
    candidate accepted at the first look is rewritten, checked and judged on the 60 items after
    its stop and the 20 held out, and reports its Δ there; the rejected one pays none of them
    (its rewrites were all unchanged: no valid pair, so no bound either)."""
    from bias_discovery.stages.validate import slice_order

    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 24, 100))
    rd, _, engine = run_fake(tmp_path, config, engine=ScriptedEngine(_strong_and_null_world))
    report = _validation(rd)
    assert report["sequential"]["looks"] == [20, 40, 80] and report["sequential"]["n_total"] == 80
    records = {r["name"]: r for r in report["candidates"]}
    strong, null = records["Expert Citation Bias"], records["Semicolon Bias"]
    assert strong["stop"] == "efficacy" and strong["stopped_at"] == 20 and null["stop"] == "futility"
    held = set(slice_order(100, config.seed)[80:])
    rewritten = [
        int(re.search(r"Wrong answer number (\d+)", r.messages[-1].content).group(1))
        for r in engine.sent
        if _is_test_rewrite(r)
    ]
    assert len(rewritten) == 20 + 20 + 80  # the first look for both, then the strong one's 80 unseen items
    first_held = min(k for k, item in enumerate(rewritten) if item in held)
    assert first_held >= 40 and set(rewritten[40:]) == set(slice_order(100, config.seed)[20:])
    effect = strong["effect"]
    assert effect["method"] == held_out_method(80, 1, 3, reserved=20) and effect["n"] == 80
    assert effect["delta"] == effect["ci_high"] == 1.0 and effect["upper_bound"] is None
    assert effect["ci_low"] == pytest.approx(paired_score_interval(80, 0, 80)[0])  # Tango's score interval
    assert strong["vs_placebo"]["n"] == 20  # the decision's comparison stays on its items
    assert (
        null["effect"]["method"] == f"{CONDITIONAL_ON_DECISION}: no valid pair"
        and null["effect"]["upper_bound"] is None
    )


def _requests_by_item(engine: ScriptedEngine) -> Counter:
    """Every request the engine was sent about a test item: (kind, item number, bias marked)."""
    out: Counter = Counter()
    for r in engine.sent:
        user = r.messages[-1].content
        if "Test question" not in user and "[Response" not in user:
            continue
        kind = (
            "rewrite"
            if "Trait:" in user
            else "check"
            if "same or different" in user
            else "judge"
            if "[Response A]" in user
            else "other"
        )
        item = re.search(r"Wrong answer number (\d+)", user)
        out[(kind, int(item.group(1)) if item else -1, MARKER in user or "Expert" in user)] += 1
    return out


def test_the_held_out_round_pays_only_the_rest_of_the_candidates_accepted_early(tmp_path):
    """The same run with `effect: held_out` and `effect: conditional`: the only requests that
    differ are the strong candidate's rewrite, answer check and judgments on the 75 test items
    after its stopping look, each once; the rejected candidate pays nothing more, and nothing
    else is asked again. With `conditional` (and no item held out from the decisions) the
    record is the estimate given the stop and the decision (`stats.sequential_effect` on its
    looks), with no extra call."""
    data = _data(tmp_path, 24, 100)
    runs = {}
    for effect in ("held_out", "conditional"):
        config = make_config(
            tmp_path,
            max_iterations=1,
            data=data,
            validate={"n_boot": 200, "held_out": 0.0, "sequential": {"effect": effect}},
        )
        rd, _, engine = run_fake(tmp_path, config, name=effect, engine=ScriptedEngine(_strong_and_null_world))
        runs[effect] = (rd, engine)
    held_out, conditional = (_requests_by_item(runs[e][1]) for e in ("held_out", "conditional"))
    assert conditional - held_out == Counter()
    extra = held_out - conditional
    report = _validation(runs["held_out"][0])
    strong = next(r for r in report["candidates"] if r["name"] == "Expert Citation Bias")
    rewrites = runs["conditional"][0].iteration(1).validation_perturbed.read()
    used = {int(p.pair_id[1:]) for p in rewrites if p.bias_id == strong["bias_id"]}
    rest = set(range(100)) - used
    assert len(used) == strong["stopped_at"] == 25 and len(rest) == 75
    per_pair = calls_per_pair(make_config(tmp_path).judge)
    # per item: the rewrite, its answer check and the checker's control (the same question about
    # the original rejected response), and the judge's calls on the valid rewrite
    assert extra == Counter(
        {
            **{("rewrite", i, True): 1 for i in rest},
            **{("check", i, True): 1 for i in rest},
            **{("check", i, False): 1 for i in rest},
            **{("judge", i, True): per_pair for i in rest},
        }
    )
    given_stop = _validation(runs["conditional"][0])
    before = next(r for r in given_stop["candidates"] if r["name"] == "Expert Citation Bias")
    plan = SequentialPlan.model_validate(given_stop["sequential"])
    threshold = acceptance_threshold(
        [r["p_sequential"] for r in given_stop["candidates"]],
        given_stop["candidates"].index(before),
        given_stop["alpha_family"],
        "holm",
    )
    expected = sequential_effect(
        plan, [LookRecord.model_validate(x) for x in before["looks"]], family_size=2, decision=Decision(True, threshold)
    )
    assert before["effect"] == json.loads(expected.model_dump_json())
    # the decision and everything it looked at are the same either way; only the effect differs
    for key in ("stop", "stopped_at", "looks", "p_sequential", "vs_placebo", "vs_baseline"):
        assert strong[key] == before[key], key
    assert report["accepted"] == given_stop["accepted"] and report["error_statement"] == given_stop["error_statement"]


def _fail_then_resume(tmp_path, fail_after: int):
    """One run whose teacher falls over after `fail_after` test-set rewrites, then its resume
    with a healthy teacher. Checks that the failed run wrote no validation and that the resume
    paid nothing twice: only the requests that raised are asked again (streamed, the teacher
    may take one or two more queued rewrites before the failure stops them). Returns the run
    directory, the resumed engine and the number of test-set rewrites asked in all."""
    config = make_config(
        tmp_path,
        max_iterations=1,
        data=_data(tmp_path, 24, 100),
        validate={"n_boot": 100, "held_out": 0.0, "sequential": {"futility": 0.0}},
    )
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    test_rewrites = {"count": 0, "fail": True}
    raised = []

    def failing(request):
        if _is_test_rewrite(request):
            test_rewrites["count"] += 1
            if test_rewrites["fail"] and test_rewrites["count"] > fail_after:
                raised.append(request)
                raise RuntimeError("teacher fell over")
        return _strong_and_null_world(request)

    first = ScriptedEngine(failing)
    with pytest.raises(RuntimeError, match="teacher fell over"):
        execute(
            rd,
            config,
            resume=False,
            engines={"target": CachedEngine(first, rd.cache_path)},
            embedder=BagOfWordsEmbedder(),
        )
    assert not (rd.iteration(1).directory / "validation.json").exists()
    test_rewrites["fail"] = False
    healthy = ScriptedEngine(failing)
    execute(
        rd, config, resume=True, engines={"target": CachedEngine(healthy, rd.cache_path)}, embedder=BagOfWordsEmbedder()
    )

    def keys(requests):
        return {r.content_hash("fake") for r in requests}

    assert raised and keys(first.sent) & keys(healthy.sent) == keys(raised), "a call was paid twice"
    return rd, healthy, test_rewrites["count"]


def _is_test_rewrite(request) -> bool:
    user = request.messages[-1].content
    return "Trait:" in user and "Test question" in user


def test_a_resumed_validation_pays_no_slice_twice(tmp_path):
    """The teacher fails while rewriting the second look's slice; the resumed run takes the
    first look's rewrites, checks and judgments from the call cache and pays only for the rest."""
    rd, _, test_rewrites = _fail_then_resume(tmp_path, fail_after=50)  # look 1: 2 candidates x 25 items
    report = _validation(rd)
    null = next(r for r in report["candidates"] if r["name"] == "Semicolon Bias")
    assert null["stopped_at"] == 100 and [look["items"] for look in null["looks"]] == [25, 50, 100]
    assert report["accepted"] and test_rewrites > 50


def test_a_validation_killed_in_the_held_out_round_pays_nothing_twice(tmp_path):
    """The teacher fails in the middle of the held-out round (after the looks' 25 + 25, 25 and
    50 rewrites, 40 of the strong candidate's 75 held-out ones): the resumed run takes every
    look and those 40 rewrites, with their checks and judgments, from the call cache, pays only
    for the rest, and reports the effect on the 75 held-out items."""
    looks = 50 + 25 + 50  # the null candidate goes on to the end (futility 0), the strong one stops at 25
    rd, healthy, _ = _fail_then_resume(tmp_path, fail_after=looks + 40)
    resumed_rewrites = [r for r in healthy.sent if _is_test_rewrite(r)]
    assert len(resumed_rewrites) == 75 - 40  # the ones that raised, and those after them
    strong = next(r for r in _validation(rd)["candidates"] if r["name"] == "Expert Citation Bias")
    assert (
        strong["stop"] == "efficacy"
        and strong["effect"]["method"] == held_out_method(75, 1, 3)
        and strong["effect"]["n"] == 75
    )


# -- the seed library, run-wide error control, the stop reason ------------------------------------


def test_seed_library_is_validated_at_iteration_zero(tmp_path):
    """validate.seeds: which known biases does this judge have? biasscope7's Authority Bias is
    the one authority_world's judge has; the others stay in the library, not confirmed."""
    config = make_config(
        tmp_path,
        max_iterations=1,
        data=_data(tmp_path, 12, 40),
        validate={"n_boot": 200, "seeds": True, "error_control": "run"},
    )
    rd, _, _ = run_fake(tmp_path, config)
    report = _validation(rd, 0)
    assert report["iteration"] == 0 and report["alpha_family"] == 0.05 / 2  # 1 iteration + the seeds
    assert report["accepted"] == ["authority-bias"]
    assert len(report["candidates"]) == 7 and "p <= 0.025" in report["candidates"][0]["vs_placebo"]["rule"]
    seeds = rd.library.load_iteration(0)
    assert [b.validation is not None for b in seeds.biases] == [True] * 7
    assert seeds.by_id("authority-bias").validation.accepted
    assert not seeds.by_id("length-bias").validation.accepted
    latest = rd.library.load_latest()
    assert set(seeds.ids()) <= set(latest.ids())  # confirmed or not, seeds stay: they drive perturbation
    assert latest.by_id("authority-bias").validation.accepted
    assert _validation(rd, 1)["alpha_family"] == 0.025


def test_the_stop_reason_says_what_the_test_could_have_detected(tmp_path):
    config = make_config(
        tmp_path, max_iterations=2, data=_data(tmp_path, 12, 40), validate={"n_boot": 200, "held_out": 0.0}
    )
    rd, state, _ = run_fake(tmp_path, config, engine=ScriptedEngine(rewrite_world))
    report = _validation(rd)
    assert report["mde"] is not None and report["mde_n"] == 40 and report["power"] == 0.8
    reason = state["stop_reason"]
    assert state["stop_kind"] == "converged"
    assert reason.startswith(
        "converged: no candidate was accepted; smallest Δerror vs placebo detectable with 80 % power"
    )
    # 40 items: looks at 20 and 40; the last look's share of alpha is what a candidate faces at the end
    assert report["sequential"]["looks"] == [20, 40] and report["mde_alpha"] == report["sequential"]["levels"][-1]
    assert f"at n = 40 (one-sided α = {report['mde_alpha']:.3g} per candidate)" in reason
    assert rd.read_state().stop_reason == reason


# -- what the report and `library show` say ------------------------------------------------------


def test_report_and_library_show_give_both_comparisons_the_placebo_and_the_power(tmp_path):
    from bias_discovery.report import render_report

    from helpers import cli_in_process as cli  # `library show`'s output: in this process

    config = make_config(
        tmp_path,
        max_iterations=1,
        data=_data(tmp_path, 24, 100),
        validate={"n_boot": 200, "held_out": 0.0, "seeds": True, "max_candidates": 3},
    )
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(_strong_and_null_world))
    html = render_report(rd.root)
    for text in (
        'id="validation"',
        'id="rewrite-effect"',
        "Rewrite effect (placebo vs baseline)",
        "placebo error",
        "Δ vs placebo [CI]",
        "smallest detectable Δ",
        "Power per validation",
        "(seeds)",
        "b-confirmed",
        "b-unconfirmed",
        "the known biases on this judge",
        "stop: biased",
        "growing slices of 25, 50, 100 test items",
    ):
        assert text in html, text
    assert 'id="vs-placebo-d1-expert-citation-bias"' in html and 'id="vs-baseline-d1-expert-citation-bias"' in html
    assert "(decides)" in html

    shown = json.loads(cli("library", "show", str(rd.root), "--json").stdout)
    rows = {r["id"]: r for r in shown["biases"]}
    found = rows["d1-expert-citation-bias"]
    assert found["status"] == "accepted" and found["decisive"] == "placebo"
    assert found["delta_vs_placebo"] == 1.0 and found["stopped_at"] == 25 and found["stop"] == "efficacy"
    assert found["mde"] is not None and found["mde_n"] == 100 and found["length_ratio"] > 1
    assert rows["authority-bias"]["status"] == "confirmed" and rows["length-bias"]["status"] == "unconfirmed"
    table = cli("library", "show", str(rd.root), env={"COLUMNS": "220"}).stdout
    assert "placebo" in table and "confirmed" in table and "MDE" in table
    assert "rewrite effect (placebo vs baseline): Δerror +0.0 pp (CI [+0.0, +0.0], n = 100), p = 1.000" in table
    assert "answer changed in 0.0% of 100 checked rewrites" in " ".join(table.split())


def test_report_and_library_show_give_a_rejected_candidate_the_effect_its_looks_exclude(tmp_path):
    """A judge that prefers any rewrite: the candidate is rejected against the placebo. Its
    record keeps the estimate and the two-sided interval given its stop and the rejection, and
    adds the one-sided upper bound; `library show` (table and --json) and the report print the
    bound, beside the smallest detectable Δ, instead of the interval."""
    from bias_discovery.formatting import excluded_above, excluded_clause, pp

    from helpers import cli_in_process as cli  # `library show`'s output: in this process

    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 12, 60))
    rd, _, _ = run_fake(tmp_path, config, engine=ScriptedEngine(rewrite_world))
    report = _validation(rd)
    effect = report["candidates"][0]["effect"]
    assert report["accepted"] == [] and effect["method"] == CONDITIONAL_ON_DECISION
    bound = effect["upper_bound"]
    # no discordant pair in its only look's 24 items, a futility stop in the boundary's own cell:
    # the one-sided bound, whose tail is taken at the top of the observed cell (issue 47), excludes
    # nothing there, and says so
    assert bound == 1.0 and "upper bound at the edge" in (effect["clipped"] or "")
    assert effect["ci_low"] < effect["delta"] < effect["ci_high"] < 1.0
    shown = json.loads(cli("library", "show", str(rd.root), "--json").stdout)
    row = next(r for r in shown["biases"] if r["status"] == "rejected")
    assert (
        row["effect_upper_bound"] == bound
        and row["effect"] == effect["delta"]
        and row["effect_ci_high"] == effect["ci_high"]
    )
    table = " ".join(cli("library", "show", str(rd.root), env={"COLUMNS": "220"}).stdout.split())
    assert (
        excluded_above(bound, unit="") in table
        and "a candidate not accepted (rejected, unconfirmed): its one-sided 95 % upper bound" in table
    )
    assert pp(effect["ci_high"], unit="") not in table  # the two-sided interval is in --json only
    html = render_report(rd.root)
    assert excluded_clause(bound) in html and "smallest detectable Δ" in html and "excluded above" in html
    assert "built-in method" not in html  # the looks table shows each look's test items (it printed dict.items)


# -- score verdicts --------------------------------------------------------------------------------


def test_score_verdicts_find_a_bias_the_choice_verdicts_cannot_see(tmp_path):
    """A judge that always picks the right response, but whose probability of preferring the
    rejected one rises by 0.15 when it cites experts: with choice verdicts no seed bias is
    confirmed (no verdict ever changes), with score verdicts Authority Bias is, against the
    placebo, with its ΔP(rejected), honest effect and MDE in probability points."""
    from fakes import quiet_authority_p_a, quiet_authority_world
    from helpers import cli_in_process as cli  # `library show`'s output: in this process

    results = {}
    for verdict in ("choice", "score"):
        config = make_config(
            tmp_path,
            max_iterations=1,
            data=_data(tmp_path, 12, 40),
            judge={"verdict": verdict},
            validate={"n_boot": 200, "held_out": 0.0, "seeds": True},
        )
        engine = ScriptedEngine(quiet_authority_world, probability_of_a=quiet_authority_p_a)
        rd, state, _ = run_fake(tmp_path, config, name=verdict, engine=engine)
        results[verdict] = (_validation(rd, 0), state)
    choice, _ = results["choice"]
    assert choice["measure"] == "error" and choice["accepted"] == []
    score, state = results["score"]
    assert score["measure"] == "p_rejected" and score["accepted"] == ["authority-bias"]
    record = next(r for r in score["candidates"] if r["bias_id"] == "authority-bias")
    placebo = record["vs_placebo"]
    assert placebo["measure"] == "p_rejected" and placebo["control"] == "placebo"
    assert placebo["delta"] == pytest.approx(0.15) and placebo["sd_difference"] == pytest.approx(0.0, abs=1e-9)
    assert "paired t-test of ΔP(rejected)" in placebo["rule"]
    assert [look["mean_difference"] for look in record["looks"]] == pytest.approx([0.15])  # stopped at the first look
    assert record["stop"] == "efficacy" and record["effect"]["measure"] == "p_rejected"
    # measured on the 20 items after the first look: the same shift on each, so a zero-width interval
    assert record["effect"]["method"] == held_out_method(20, 1, 2) and record["effect"]["n"] == 20
    assert record["effect"]["ci_low"] == pytest.approx(0.15) == record["effect"]["ci_high"]
    assert record["mde"] == pytest.approx(0.0, abs=1e-9)  # no spread: any shift is detected (margin 0)
    assert "probability of preferring the rejected response" in score["error_statement"]
    assert record["vs_placebo"]["p_value"] == 0.5**20  # 20 equal shifts at the first look: the sign-flip test's p
    # what a reader sees says which measure it is
    html = render_report(tmp_path / "score")
    assert "Rows marked P were validated on score verdicts" in html and "Rows marked P" not in render_report(
        tmp_path / "choice"
    )
    table = " ".join(cli("library", "show", str(tmp_path / "score"), env={"COLUMNS": "220"}).stdout.split())
    assert "P: validated on score verdicts" in table and re.search(r"P 2\d\.\d%", table)
    # the teacher leaves the other traits' rewrites unchanged: nothing judged, stopped for futility
    assert all(r["stop"] == "futility" and r["vs_placebo"]["n"] == 0 for r in score["candidates"] if r is not record)
    assert "smallest ΔP(rejected) vs placebo" in state["stop_reason"] or state["stop_kind"] != "converged"

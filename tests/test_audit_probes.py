"""The audit's probes beyond the published position and length measures: true self-preference
on matched cross-model pairs (`judgebench:cross`, the data naming each response's model) and
the prompt-injection probe (the `security` seed library: a fixed judge-directed instruction
appended to the rejected response, no teacher), on scripted judges whose behaviour is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bias_discovery.api import audit
from bias_discovery.auditing import resolve_targets
from bias_discovery.library import load_seed_library
from bias_discovery.stages.perturb import perturb

# -- true self-preference on matched cross-model pairs --------------------------------------


def _judgebench_like(tmp_path: Path) -> Path:
    """JudgeBench-style files: 12 questions each answered by both models (correct = chosen)."""
    root = tmp_path / "judgebench"
    root.mkdir()
    for short, model in (("gpt", "gpt-4o-2024-05-13"), ("claude", "claude-3-5-sonnet-20240620")):
        with (root / f"dataset=judgebench,response_model={model}.jsonl").open("w") as f:
            for i in range(12):
                f.write(
                    json.dumps(
                        {
                            "pair_id": f"{short}{i}",
                            "original_id": i,
                            "source": "mmlu-pro-math",
                            "question": f"Question {i}?",
                            "response_model": model,
                            "response_A": f"RIGHT {i} by {short}",
                            "response_B": f"wrong {i} by {short}",
                            "label": "A>B",
                        }
                    )
                    + "\n"
                )
    return tmp_path


def test_cross_model_pairs_are_matched_on_the_question_and_correctness(tmp_path: Path):
    from bias_discovery.data.loaders import load_pairs

    pairs = load_pairs("judgebench:cross", data_dir=_judgebench_like(tmp_path))
    assert len(pairs) == 24
    by_question: dict[str, list] = {}
    for p in pairs:
        by_question.setdefault(p.meta["matched_question"], []).append(p)
        right, wrong = p.meta["response_models"]
        assert right != wrong and p.chosen.startswith("RIGHT") and p.rejected.startswith("wrong")
        assert ("gpt" in p.chosen) == right.startswith("gpt") and ("gpt" in p.rejected) == wrong.startswith("gpt")
    assert all(len(v) == 2 for v in by_question.values()) and len(by_question) == 12


def test_a_judge_that_favours_its_own_family_is_caught_on_cross_pairs(tmp_path: Path):
    """A scripted "gpt" judge that picks the response written by gpt whatever it is shown: on
    the 12 pairs where gpt's answer is the wrong one it errs every time, on the 12 where
    claude's is wrong never: a difference of 100 pp, excess own-pick of 50 pp."""
    from fakes import ScriptedEngine, _responses

    def gpt_picks_gpt(request):
        a, _ = _responses(request.messages[-1].content)
        return "Verdict: A" if "by gpt" in a else "Verdict: B"

    output = audit(
        "openai/gpt-4o",
        "judgebench:cross",
        "position",
        data_dir=_judgebench_like(tmp_path),
        cache=False,
        engines={"target": ScriptedEngine(gpt_picks_gpt)},
        settings={"repeats": 2, "n_boot": 200, "judge": {"reasoning": False, "max_tokens": 4}},
    )
    sp = output.report.self_preference
    assert sp is not None and sp.judge_family == "gpt" and sp.n_items == 24 and "different families" in sp.matching
    assert sp.own_pick_rate.value == 1.0 and sp.own_better_rate.value == 0.5 and sp.excess.value == pytest.approx(0.5)
    assert (
        sp.error_own_worse.value == 1.0 and sp.error_other_worse.value == 0.0 and sp.delta.value == pytest.approx(1.0)
    )
    assert sp.error_own_worse.n == 12 and sp.error_other_worse.n == 12
    # a judge of another family: no pair holds exactly one of its responses
    other = audit(
        "openai/qwen2.5",
        "judgebench:cross",
        "position",
        data_dir=tmp_path,
        cache=False,
        engines={"target": ScriptedEngine(gpt_picks_gpt)},
        settings={"repeats": 2, "n_boot": 200},
    )
    assert other.report.self_preference is None
    assert any(u.measure == "self-preference" and "qwen" in u.reason for u in other.report.unsupported)


# -- the prompt-injection probe -------------------------------------------------------------


def _pairs_file(tmp_path: Path, n: int = 10) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"p{i}",
                    "question": f"Q{i}?",
                    "chosen": f"RIGHT {i}",
                    "rejected": f"wrong {i}",
                    "domain": "math",
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return path


def test_the_injection_probe_appends_its_instruction_without_a_teacher():
    from bias_discovery.data.pairs import PreferencePair

    bias = load_seed_library("security").biases[0]
    assert bias.id == "prompt-injection" and bias.append and "evaluator" in bias.append
    [target] = resolve_targets("prompt-injection")
    assert target.kind == "perturbation" and not target.needs_teacher and resolve_targets("security") == [target]
    pair = PreferencePair(id="p", question="Q?", chosen="RIGHT", rejected="wrong")
    [record] = perturb(None, [(pair, bias)], load_settings(), seed=0)
    assert record.valid and record.perturbed_rejected == f"wrong\n\n{bias.append}" and record.completion_tokens == 0


def load_settings():
    from bias_discovery.config import PerturbSettings

    return PerturbSettings()


def test_a_judge_that_obeys_the_injection_is_caught_and_one_that_ignores_it_is_not(tmp_path: Path):
    """Judge 1 picks whichever response carries the note to the evaluator, else the right
    one: every verdict flips (ASR 100 %, Δerror +100 pp). Judge 2 always picks the right one:
    RR 100 %, Δerror 0. No teacher is given or called."""
    from fakes import ScriptedEngine, _responses

    def obeys(request):
        a, b = _responses(request.messages[-1].content)
        if "Note to the evaluator" in a + b:
            return "Verdict: A" if "Note to the evaluator" in a else "Verdict: B"
        return "Verdict: A" if "RIGHT" in a else "Verdict: B"

    def ignores(request):
        a, _ = _responses(request.messages[-1].content)
        return "Verdict: A" if "RIGHT" in a else "Verdict: B"

    settings = {"repeats": 2, "n_boot": 200, "judge": {"reasoning": False, "max_tokens": 4}}
    data = _pairs_file(tmp_path)
    fell = audit(
        "openai/judge", str(data), "security", cache=False, engines={"target": ScriptedEngine(obeys)}, settings=settings
    )
    [entry] = fell.report.biases
    assert (
        entry.id == "prompt-injection"
        and entry.n_items == 10
        and fell.report.teacher is None
        and fell.report.calls.teacher == 0
    )
    assert (
        entry.asr.value == 1.0
        and entry.delta_error.delta == 1.0
        and entry.delta_error.p_value < 0.01
        and entry.rr.value == 0.0
    )
    held = audit(
        "openai/judge",
        str(data),
        "prompt-injection",
        cache=False,
        engines={"target": ScriptedEngine(ignores)},
        settings=settings,
    )
    [entry] = held.report.biases
    assert entry.rr.value == 1.0 and entry.delta_error.delta == 0.0 and entry.asr.value == 0.0


# -- judge-prompt sensitivity ---------------------------------------------------------------


def test_prompt_sensitivity_counts_verdicts_that_change_with_the_template(tmp_path: Path):
    """A judge that picks A under the default template and the right response under the
    mitigated one: the verdict changes on the pairs where the right response is shown second
    (the seeded swap puts it there on about half), never with a new seed alone."""
    from fakes import ScriptedEngine, _responses

    def judge(request):
        text = " ".join(m.content for m in request.messages)
        a, _ = _responses(request.messages[-1].content)
        if "impartial judge" in text:
            return "Verdict: A" if "RIGHT" in a else "Verdict: B"
        return "Verdict: A"

    output = audit(
        "openai/judge",
        str(_pairs_file(tmp_path, 20)),
        "position",
        cache=False,
        engines={"target": ScriptedEngine(judge)},
        prompts=["judge_pairwise_mitigated"],
        settings={"repeats": 2, "n_boot": 200, "judge": {"reasoning": False, "max_tokens": 4}},
    )
    ps = output.report.prompt_sensitivity
    assert ps is not None and ps.prompts == ["judge_pairwise", "judge_pairwise_mitigated"] and ps.n_items == 20
    from bias_discovery.data.pairs import PreferencePair
    from bias_discovery.judging import order_for

    shown_second = sum(
        1
        for i in range(20)
        if order_for(
            PreferencePair(id=f"p{i}", question="", chosen="", rejected=""), "swap", output.report.settings.seed
        )[0]
        == "rejected_first"
    )
    assert (
        ps.change_rate.value == shown_second / 20
        and ps.change_rate.ci_low <= ps.change_rate.value <= ps.change_rate.ci_high
    )
    assert ps.noise_rate.value == 0.0 and ps.accuracy["judge_pairwise_mitigated"].value == 1.0
    assert ps.accuracy["judge_pairwise"].value == 1 - shown_second / 20


def test_an_unknown_prompt_template_fails_before_any_call(tmp_path: Path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="no-such-template"):
        audit("openai/judge", str(_pairs_file(tmp_path)), "position", prompts=["no-such-template"], cache=False)


def test_prompt_sensitivity_with_three_templates_compares_like_with_like(tmp_path: Path):
    """Issue 47: with k = 3 templates the verdict has two chances to change with the template,
    so the noise rate it is read against has two chances too. The scripted judge flips pair i
    in exactly one arm: template j or repeat r when i % 3 == j (or r), so template changes and
    seed changes are alike: both rates 2/3 (before: 2/3 against one repeat's 1/3, a judge that
    looked template-sensitive for having had more chances), one comparison's 1/3."""
    from bias_discovery.auditing.records import PromptSensitivity
    from bias_discovery.auditing.runner import repeat_seed
    from bias_discovery.auditing.sensitivity import prompt_sensitivity
    from bias_discovery.data.pairs import PreferencePair
    from bias_discovery.judging import JudgeSettings
    from bias_discovery.prompts import prompts_dir

    from fakes import ScriptedEngine, _responses

    marked = tmp_path / "judge_marked.txt"
    marked.write_text((prompts_dir() / "judge_pairwise.txt").read_text().replace("Question:", "MARKED Question:"))
    seed = 7
    repeat_arm = {repeat_seed(seed, 1): 1, repeat_seed(seed, 2): 2}

    def judge(request) -> str:
        text = " ".join(m.content for m in request.messages)
        a, _ = _responses(request.messages[-1].content)
        arm = 1 if "impartial judge" in text else 2 if "MARKED" in text else repeat_arm.get(request.seed, 0)
        i = int(a.split()[-1])
        right = "A" if "RIGHT" in a else "B"
        return f"Verdict: {right if (arm == 0 or i % 3 != arm) else 'AB'.replace(right, '')}"

    pairs = [
        PreferencePair(id=f"p{i}", question=f"Q{i}?", chosen=f"RIGHT {i}", rejected=f"wrong {i}") for i in range(30)
    ]
    engine = ScriptedEngine(judge)
    ps = prompt_sensitivity(
        engine,
        pairs,
        JudgeSettings(reasoning=False, max_tokens=4),
        ["judge_pairwise", "judge_pairwise_mitigated", str(marked)],
        seed=seed,
    )
    assert isinstance(ps, PromptSensitivity) and ps.n_items == 30 and ps.n_comparisons == 2
    assert len(engine.sent) == 30 * 5  # three templates, two repeats
    assert ps.change_rate.value == pytest.approx(2 / 3) and ps.noise_rate.value == pytest.approx(2 / 3)
    assert ps.noise_rate_single is not None and ps.noise_rate_single.value == pytest.approx(1 / 3)
    assert [round(x.change_rate.value, 3) for x in ps.pairwise] == [0.333, 0.333, 0.667]

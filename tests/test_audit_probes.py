"""The audit's probes beyond the published position and length measures: true self-preference
on matched cross-model pairs (`judgebench:cross`, the data naming each response's model) and
the prompt-injection probe (the `security` seed library: a fixed judge-directed instruction
appended to the rejected response, no teacher), on scripted judges whose behaviour is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bias_discovery.api import audit

# -- true self-preference on matched cross-model pairs --------------------------------------


def _judgebench_like(tmp_path: Path) -> Path:
    """JudgeBench-style files: 12 questions each answered by both models (correct = chosen)."""
    root = tmp_path / "judgebench"
    root.mkdir()
    for short, model in (("gpt", "gpt-4o-2024-05-13"), ("claude", "claude-3-5-sonnet-20240620")):
        with (root / f"dataset=judgebench,response_model={model}.jsonl").open("w") as f:
            for i in range(12):
                f.write(json.dumps({
                    "pair_id": f"{short}{i}", "original_id": i, "source": "mmlu-pro-math", "question": f"Question {i}?",
                    "response_model": model, "response_A": f"RIGHT {i} by {short}", "response_B": f"wrong {i} by {short}",
                    "label": "A>B",
                }) + "\n")
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

    output = audit("openai/gpt-4o", "judgebench:cross", "position", data_dir=_judgebench_like(tmp_path), cache=False,
                   engines={"target": ScriptedEngine(gpt_picks_gpt)},
                   settings={"repeats": 2, "n_boot": 200, "judge": {"reasoning": False, "max_tokens": 4}})
    sp = output.report.self_preference
    assert sp is not None and sp.judge_family == "gpt" and sp.n_items == 24 and "different families" in sp.matching
    assert sp.own_pick_rate.value == 1.0 and sp.own_better_rate.value == 0.5 and sp.excess.value == pytest.approx(0.5)
    assert sp.error_own_worse.value == 1.0 and sp.error_other_worse.value == 0.0 and sp.delta.value == pytest.approx(1.0)
    assert sp.error_own_worse.n == 12 and sp.error_other_worse.n == 12
    # a judge of another family: no pair holds exactly one of its responses
    other = audit("openai/qwen2.5", "judgebench:cross", "position", data_dir=tmp_path, cache=False,
                  engines={"target": ScriptedEngine(gpt_picks_gpt)}, settings={"repeats": 2, "n_boot": 200})
    assert other.report.self_preference is None
    assert any(u.measure == "self-preference" and "qwen" in u.reason for u in other.report.unsupported)


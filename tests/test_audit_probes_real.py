"""The prompt-injection probe and true self-preference on the real embedded model (the quick
start's judge) and JudgeBench's matched cross-model pairs (`judgebench:cross`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_log_real import quickstart_judge

from helpers import SHARED_DATA, cli_in_process


def shortest_cross_pairs(path: Path, questions: int = 2) -> Path:
    """The `judgebench:cross` pairs of the `questions` questions with the shortest texts (both
    arms of each), as a JSONL data file keeping each response's model: JudgeBench's answers run
    to hundreds of words, and a 135M judge on a shared CPU reads every one of them per call."""
    from bias_discovery.data.loaders import load_pairs

    pairs = load_pairs("judgebench:cross", data_dir=SHARED_DATA, bad_rows=[])
    by_question: dict[str, list] = {}
    for p in pairs:
        by_question.setdefault(p.meta["matched_question"], []).append(p)
    complete = [arms for arms in by_question.values() if len(arms) == 2]
    complete.sort(key=lambda arms: sum(len((p.question + p.chosen + p.rejected).split()) for p in arms))
    with path.open("w") as f:
        for arms in complete[:questions]:
            for p in arms:
                f.write(
                    json.dumps(
                        {
                            "id": p.id,
                            "question": p.question,
                            "chosen": p.chosen,
                            "rejected": p.rejected,
                            "domain": p.domain,
                            "response_models": p.meta["response_models"],
                        }
                    )
                    + "\n"
                )
    return path


@pytest.mark.model
def test_injection_probe_and_self_preference_on_judgebench_cross_pairs(tmp_path: Path, smollm2_gguf_path):
    """4 cross pairs (the 2 questions with the shortest texts, each as GPT-4o right vs Claude
    wrong and the reverse), both orders, 2 repeats, plus the injection appended to every
    rejected response (20 judge calls, no teacher). SmolLM2 is neither family: `--judge-family
    gpt` measures its preference for GPT-4o's writing, which for a GPT judge would be
    self-preference."""
    if not (SHARED_DATA / "judgebench").is_dir():
        pytest.skip(f"no JudgeBench copy in {SHARED_DATA} (set BIAS_DISCOVERY_TEST_DATA_DIR)")
    data = shortest_cross_pairs(tmp_path / "cross.jsonl")
    out = tmp_path / "audit"
    result = cli_in_process(
        "audit",
        "--model",
        quickstart_judge(),
        "--data",
        str(data),
        "--biases",
        "position,prompt-injection",
        "--judge-family",
        "gpt",
        "--repeats",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--n-boot",
        "500",
        "--no-cache",
        "--out",
        str(out),
    )
    assert "Prompt Injection" in result.stdout and "self-preference (gpt)" in result.stdout
    record = json.loads((out / "audit.json").read_text())
    injection = next(b for b in record["biases"] if b["id"] == "prompt-injection")
    assert injection["source"] == "security" and injection["n_items"] == 4 and record["teacher"] is None
    assert record["calls"]["teacher"] == 0 and injection["asr"]["n"] + (injection["asr"]["n_excluded"] or 0) <= 4
    assert (
        injection["delta_error"]["n"] + injection["delta_error"]["n_excluded_invalid"] == 4
        and injection["rr"]["value"] is not None
    )
    sp = record["self_preference"]
    assert sp["judge_family"] == "gpt" and sp["n_items"] == 4 and "different families" in sp["matching"]
    assert (
        sp["error_own_worse"]["n"] == 2 and sp["error_other_worse"]["n"] == 2 and sp["own_better_rate"]["value"] == 0.5
    )
    assert (
        sp["delta"]["value"] is not None
        and sp["own_pick_rate"]["ci_low"] <= sp["own_pick_rate"]["value"] <= sp["own_pick_rate"]["ci_high"]
    )


@pytest.mark.model
def test_prompt_sensitivity_of_the_embedded_judge(tmp_path: Path, smollm2_gguf_path):
    """The quick start's judge on 4 demo pairs under its default template and the mitigated
    one (28 calls): how often the verdict changes with the template, against its repeat noise."""
    out = tmp_path / "audit"
    result = cli_in_process(
        "audit",
        "--model",
        quickstart_judge(),
        "--data",
        "demo",
        "--limit",
        "4",
        "--biases",
        "position",
        "--prompts",
        "judge_pairwise_mitigated",
        "--repeats",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--n-boot",
        "200",
        "--no-cache",
        "--out",
        str(out),
    )
    assert "prompt sensitivity (judge_pairwise, judge_pairwise_mitigated)" in result.stdout
    ps = json.loads((out / "audit.json").read_text())["prompt_sensitivity"]
    assert ps["n_items"] + ps["n_excluded"] == 4 and ps["change_rate"]["n"] == ps["n_items"]
    assert ps["change_rate"]["ci_low"] <= ps["change_rate"]["value"] <= ps["change_rate"]["ci_high"]
    assert (
        set(ps["accuracy"]) == {"judge_pairwise", "judge_pairwise_mitigated"} and ps["noise_rate"]["value"] is not None
    )

"""`bias-discovery judge` as a user runs it: real model, real server, real data, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import SHARED_DATA, cli, cli_in_process, free_port, shared_data


def read_outputs(out: Path) -> tuple[list[dict], dict]:
    judgments = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    return judgments, json.loads((out / "summary.json").read_text())


@pytest.mark.model
def test_embedded_model_judges_demo_pairs_and_cache_makes_rerun_free(tmp_path: Path, smollm2_gguf_path):
    cache = tmp_path / "calls.sqlite"
    args = [
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--limit",
        "4",
        "--reasoning-chars",
        "200",
        "--max-tokens",
        "96",
        "--cache",
        str(cache),
    ]
    first = cli_in_process(*args, "--out", str(tmp_path / "a"))
    judgments, summary = read_outputs(tmp_path / "a")
    assert len(judgments) == 8 and summary["n_pairs"] == 4 and summary["n_judgments"] == 8
    assert {j["order"] for j in judgments} == {"chosen_first", "rejected_first"}
    assert 0.0 <= summary["error_rate"] <= 1.0 and summary["invalid_rate"] == 0.0
    assert set(summary["per_domain"]) == {"math", "knowledge", "reasoning", "code"}
    assert summary["cached_calls"] == 0 and summary["completion_tokens"] > 0
    # SmolLM2 prefers position A strongly: a real bias the judge's summary must show.
    assert summary["position_a_rate"] >= 0.75
    assert "error" in first.stdout and "position-A rate" in first.stdout
    # The default prompt is the neutral one; JudgeBench's own score sits next to ours.
    assert summary["prompt"] == "judge_pairwise" and "prompt: judge_pairwise" in " ".join(first.stdout.split())
    votes = {}
    for j in judgments:
        votes[j["pair_id"]] = votes.get(j["pair_id"], 0) + (0 if j["correct"] is None else (1 if j["correct"] else -1))
    assert summary["judgebench_score"] == sum(v > 0 for v in votes.values()) / 4
    assert summary["judgebench_ties"] == sum(v == 0 for v in votes.values())
    assert "JudgeBench score" in first.stdout and "net vote over both orders" in " ".join(first.stdout.split())

    cli_in_process(*args, "--out", str(tmp_path / "b"))
    judgments_b, summary_b = read_outputs(tmp_path / "b")
    assert summary_b["cached_calls"] == 8  # the second identical run sent no request
    assert [j["raw_output"] for j in judgments_b] == [j["raw_output"] for j in judgments]


@pytest.mark.model
def test_score_verdicts_from_the_command_line(tmp_path: Path, smollm2_gguf_path):
    result = cli_in_process(
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--limit",
        "1",
        "--reasoning-chars",
        "120",
        "--max-tokens",
        "64",
        "--verdict",
        "score",
        "--out",
        str(tmp_path / "s"),
    )
    judgments, summary = read_outputs(tmp_path / "s")
    assert summary["verdict"] == "score" and summary["score"]["n"] == 1
    assert summary["score"]["mean_p_rejected"] == pytest.approx(sum(j["p_rejected"] for j in judgments) / 2)
    assert (summary["score"]["ci_low"], summary["score"]["ci_high"]) == (0.0, 1.0)  # one pair: no spread known
    assert "P(rejected)" in result.stdout and "verdict: score" in " ".join(result.stdout.split())


@pytest.mark.model
def test_embedded_model_with_ties_and_the_swap_mitigation(tmp_path: Path, smollm2_gguf_path):
    cli_in_process(
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        "demo",
        "--limit",
        "2",
        "--no-reasoning",
        "--max-tokens",
        "4",
        "--allow-tie",
        "--mitigation",
        "swap",
        "--out",
        str(tmp_path / "m"),
    )
    judgments, summary = read_outputs(tmp_path / "m")
    assert summary["mitigation"] == "swap" and summary["n_judgments"] == 4 and len(judgments) == 4
    assert all(j["verdict"] in ("A", "B", "tie") for j in judgments if not j["invalid_reason"])
    for pair_id in {j["pair_id"] for j in judgments}:
        mine = [j for j in judgments if j["pair_id"] == pair_id]
        assert sorted(j["order"] for j in mine) == ["chosen_first", "rejected_first"]
    # the swap protocol's consistency: the share of pairs whose two orders picked the same response
    pairs = {}
    for j in judgments:
        pairs.setdefault(j["pair_id"], []).append(j["picked"])
    valid = [p for p in pairs.values() if None not in p]
    assert summary["position_consistency"] == (sum(p[0] == p[1] for p in valid) / len(valid) if valid else None)
    # a pair is right only when both orders picked the chosen response
    assert summary["n_valid_pairs"] == len(valid)
    assert summary["error_rate"] == pytest.approx(sum(p != ["chosen", "chosen"] for p in valid) / len(valid))


def test_the_published_judgebench_loads_and_a_users_copy_stops(tmp_path: Path) -> None:
    """Issue 35: `judge --data judgebench --data-dir DIR --limit 4` on the official files exits
    0 and says in one line that it skipped the claude split's pair of identical responses
    (line 265); the same file given as the user's own data stops at that line, nothing written.
    Against the stub server (tests/stub_openai.py): the data path, not the judge, is tested."""
    from stub_openai import launch

    shared_data()  # skips where absent; fails in CI, which promises it
    with launch(0.0) as (url, _):
        common = ["judge", "--model", "openai/served", "--base-url", url, "--limit", "4", "--no-cache"]
        result = cli(*common, "--data", "judgebench", "--data-dir", str(SHARED_DATA), "--out", str(tmp_path / "jb"))
        skipped = [line for line in result.stderr.splitlines() if "skipped" in line]
        assert len(skipped) == 1, result.stderr
        assert "skipped 1 row of judgebench (the rows of a published benchmark" in skipped[0]
        assert ".jsonl:265: fields 'response_A' and 'response_B' hold the same text" in skipped[0]
        judgments, summary = read_outputs(tmp_path / "jb")
        assert summary["n_pairs"] == 4 and summary["skipped_rows"] == 1 and len(judgments) == 8
        own = tmp_path / "claude.jsonl"
        own.write_bytes(
            (
                SHARED_DATA / "judgebench" / "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"
            ).read_bytes()
        )
        refused = cli(*common, "--data", str(own), "--out", str(tmp_path / "own"), check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = " ".join(refused.stderr.split())
    assert (
        f"{own}:265: fields 'response_A' and 'response_B' hold the same text" in message
        and "--skip-bad-rows" in message
    )
    assert not (tmp_path / "own").exists()


@pytest.mark.model
def test_judgebench_from_the_data_dir(tmp_path: Path, smollm2_gguf_path):
    shared_data()
    # JudgeBench's claude split holds one pair of identical responses (line 265): a published
    # set loads as published, with that row skipped and counted (no flag needed).
    args = [
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        "judgebench",
        "--data-dir",
        str(SHARED_DATA),
        "--limit",
        "3",
        "--positions",
        "swap",
        "--no-reasoning",
        "--out",
        str(tmp_path / "jb"),
    ]
    result = cli_in_process(*args)
    assert "skipped 1 row of judgebench (the rows of a published benchmark" in " ".join(result.stderr.split())
    judgments, summary = read_outputs(tmp_path / "jb")
    assert summary["n_pairs"] == 3 and len(judgments) == 3 and "judgebench" in summary["data"]
    assert summary["skipped_rows"] == 1 and "skipped bad data rows: 1" in " ".join(result.stdout.split())
    assert all(j["verdict"] in ("A", "B") or j["invalid_reason"] for j in judgments)


@pytest.mark.model
def test_a_field_too_long_for_the_context_says_so_on_screen(tmp_path: Path, smollm2_gguf_path):
    """A 3 MB response overflows SmolLM2's context: the judgment is invalid (never scored) and
    the engine's reason is printed, not only counted."""
    data = tmp_path / "big.jsonl"
    big = ("The quick brown fox jumps over the lazy dog. " * 70000)[:3_000_000]
    data.write_text(json.dumps({"question": "Which is right?", "chosen": "4", "rejected": big}) + "\n")
    result = cli_in_process(
        "judge",
        "--model",
        "hf/smollm2",
        "--data",
        str(data),
        "--no-cache",
        "--max-tokens",
        "16",
        "--out",
        str(tmp_path / "j"),
    )
    out = " ".join(result.stdout.split())
    assert "engine_error (2): transformers error: prompt of " in out and "does not fit the context window of" in out
    _, summary = read_outputs(tmp_path / "j")
    assert (
        summary["n_valid_pairs"] == 0
        and "does not fit the context window" in summary["invalid_examples"]["engine_error"]
    )


@pytest.mark.server
def test_judging_through_a_real_llama_cpp_server(tmp_path: Path, llama_server: str):
    cli(
        "judge",
        "--model",
        "openai/smollm2",
        "--base-url",
        llama_server,
        "--data",
        "demo",
        "--limit",
        "2",
        "--reasoning-chars",
        "200",
        "--max-tokens",
        "96",
        "--no-cache",
        "--out",
        str(tmp_path / "srv"),
    )
    judgments, summary = read_outputs(tmp_path / "srv")
    assert summary["model"] == "openai/smollm2" and len(judgments) == 4
    assert all(j["verdict"] in ("A", "B") for j in judgments if not j["invalid_reason"])
    assert summary["n_invalid_judgments"] < 4


@pytest.mark.model
def test_prompt_and_reasoning_cap_options_with_the_embedded_model(tmp_path: Path, smollm2_gguf_path):
    cache = ["--cache", str(tmp_path / "calls.sqlite")]
    common = ["judge", "--model", "hf/smollm2", "--data", "demo:test", "--limit", "2", *cache]
    free = ["--no-reasoning-cap", "--max-tokens", "128"]
    cli_in_process(*common, *free, "--out", str(tmp_path / "free"))
    judgments, summary = read_outputs(tmp_path / "free")
    assert summary["n_judgments"] == 4
    for j in judgments:  # finished outputs follow the format; only a cut one is invalid
        assert (j["verdict"] in ("A", "B")) if j["invalid_reason"] is None else j["invalid_reason"] == "truncated"
    assert all(j["raw_output"].startswith("Reasoning: ") for j in judgments)
    # the same call but for the prompt: only the template tells the two apart in the cache
    cli_in_process(*common, *free, "--prompt", "judge_pairwise_mitigated", "--out", str(tmp_path / "mitigated"))
    _, mitigated = read_outputs(tmp_path / "mitigated")
    assert mitigated["prompt"] == "judge_pairwise_mitigated" and mitigated["n_judgments"] == 4
    assert mitigated["cached_calls"] == 0  # another prompt is another request, never a cached answer


def _bad(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    result = cli("judge", *args, "--out", str(out), check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert not out.exists() or not any(out.iterdir()), "something was written to --out"
    return " ".join(result.stderr.split())


def test_bad_input_gives_clear_errors_and_writes_nothing(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "chosen": "a", "rejected": "b"}\n{"question": "q2", "chosen": \n')
    assert f"{bad}:2" in _bad(tmp_path, "--model", "hf/smollm2", "--data", str(bad))
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"question": "q", "chosen": "a"}\n')
    message = _bad(tmp_path, "--model", "hf/smollm2", "--data", str(missing))
    assert "rejected" in message and f"{missing}:1" in message
    label = tmp_path / "label.jsonl"
    label.write_text('{"question": "q", "response_A": "a", "response_B": "b", "label": "A=B"}\n')
    assert "A=B" in _bad(tmp_path, "--model", "hf/smollm2", "--data", str(label))
    message = _bad(tmp_path, "--model", "nosuch/model", "--data", "demo")
    assert "nosuch" in message and "llamacpp" in message and "openai" in message and "vllm" in message
    assert "demo" in _bad(tmp_path, "--model", "hf/smollm2", "--data", "no-such-set")
    assert "both" in _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--positions", "sideways")
    assert "shuffle3" in _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--mitigation", "sideways")
    assert "demo:target, demo:test" in _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo:train")
    message = _bad(
        tmp_path, "--model", "hf/smollm2", "--data", "demo", "--reasoning-chars", "100", "--no-reasoning-cap"
    )
    assert "--reasoning-chars and --no-reasoning-cap contradict" in message
    template = tmp_path / "judge.txt"
    template.write_text("=== user ===\n${question} ${response_a} ${answer_b}\n")
    message = _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--prompt", str(template))
    assert str(template) in message and "missing ${response_b}" in message and "unknown ${answer_b}" in message
    message = _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--prompt", str(tmp_path / "none.txt"))
    assert "none.txt not found" in message
    assert "'choice' or 'score'" in _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--verdict", "sure")
    message = _bad(tmp_path, "--model", "hf/smollm2", "--data", "demo", "--verdict", "score", "--allow-tie")
    assert "verdict: score" in message and "allow_tie" in message


def test_a_server_that_is_down_fails_clearly(tmp_path: Path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    message = _bad(tmp_path, "--model", "openai/x", "--base-url", url, "--data", "demo", "--limit", "1", "--no-cache")
    assert url in message

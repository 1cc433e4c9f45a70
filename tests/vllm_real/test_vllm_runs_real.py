"""Whole runs on the real vLLM: a process SIGKILLed mid-batch keeps the finished responses the
call cache had committed (all but the last 0.2 s of them) and a rerun pays no call twice; a
discovery run with `vllm/<HF SmolLM2>` as target and teacher finishes the quick-start config.
The kill needs a vLLM in a process of its own, so it runs before the session engine exists
(`vllm_subprocess`, tests/vllm_real/conftest.py); the discovery run is the CLI's, in this
process, on the session engine (the one engine it asks for is that engine's configuration)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from bias_discovery.llm import registry
from bias_discovery.llm.base import Engine
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.types import GenerationRequest, GenerationResponse
from bias_discovery.llm.vllm_engine import VLLMEngine, llm_kwargs
from bias_discovery.run import RunDir

from fakes import ScriptedEngine
from helpers import REPO, SMALL_RUN_OVERRIDES, cli_in_process

N_REQUESTS = 16
LONGEST_MAX_TOKENS = 768
"""The last request's budget: several hundred decode steps past the others."""

WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from bias_discovery.llm.cache import CachedEngine
    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.types import GenerationRequest
    from bias_discovery.llm.vllm_engine import VLLMEngine

    if __name__ == "__main__":  # vLLM starts its workers with spawn
        model, cache, requests_file = sys.argv[1:4]
        requests = [GenerationRequest.model_validate_json(line)
                    for line in Path(requests_file).read_text().splitlines()]
        config = ModelConfig.from_spec(f"vllm/{model}", max_model_len=2048)
        engine = CachedEngine(VLLMEngine(config), cache)
        engine.generate(requests)
        print("finished", flush=True)
    """
)


def _paid(cache: Path) -> list[int]:
    if not cache.exists():
        return []
    with sqlite3.connect(cache, timeout=30) as conn:
        try:
            return [row[0] for row in conn.execute("SELECT paid FROM calls")]
        except sqlite3.OperationalError:  # the table is not created yet
            return []


def _kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL the process and the vLLM workers it spawned (one process group, as a job
    scheduler's kill would take them)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=60)


@pytest.mark.vllm_subprocess
def test_a_kill_mid_batch_loses_only_the_requests_in_flight(hf_smollm2_dir: Path, tmp_path: Path) -> None:
    """One batch whose outputs finish over several seconds (max_tokens 8, 16, ... 120, and
    LONGEST_MAX_TOKENS for the last): the process is SIGKILLed once the first response is in
    calls.sqlite. The last request keeps the batch going for hundreds of steps after the first
    one ends, so even a CPU that decodes this small model in a millisecond a step (AMX) cannot
    finish the batch between the first commit and the kill (CI saw 16 of 16 with 128 last)."""
    requests = [
        GenerationRequest.chat(f"Write a long essay about the number {i}.", max_tokens=8 * (i + 1))
        for i in range(N_REQUESTS - 1)
    ] + [GenerationRequest.chat("Write a long essay about the number 15.", max_tokens=LONGEST_MAX_TOKENS)]
    requests_file = tmp_path / "requests.jsonl"
    requests_file.write_text("".join(r.model_dump_json() + "\n" for r in requests))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cache = tmp_path / "calls.sqlite"
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, str(script), str(hf_smollm2_dir), str(cache), str(requests_file)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 420
        while not _paid(cache):  # the first response is in the cache
            if process.poll() is not None:
                pytest.fail(f"the worker ended first:\n{(tmp_path / 'worker.log').read_text()[-3000:]}")
            if time.monotonic() >= deadline:  # a hang guard, not a claim about speed
                pytest.fail("no response was cached within 420 s")
            time.sleep(0.05)
        _kill_group(process)
    finally:
        if process.poll() is None:
            _kill_group(process)
        log.close()
    kept = len(_paid(cache))
    assert 1 <= kept < len(requests), kept  # killed mid-batch, the finished responses kept

    # The rerun: what it pays is the call cache's bookkeeping, keyed by the engine id and the
    # request, not by the model's words. So it runs on a scripted engine with the id the worker's
    # real vLLM engine wrote (the session engine's id is the same, test_vllm_engine_real.py
    # checks it), instead of regenerating the missing requests (up to LONGEST_MAX_TOKENS tokens)
    # on a second real vLLM.
    with sqlite3.connect(cache) as conn:
        [(engine_id,)] = conn.execute("SELECT DISTINCT engine_id FROM calls").fetchall()
        committed = dict(conn.execute("SELECT key, response FROM calls").fetchall())
    assert engine_id == f"vllm/{hf_smollm2_dir}"
    scripted = ScriptedEngine(lambda r: f"rerun of {r.messages[-1].content}", engine_id=engine_id)
    rerun = CachedEngine(scripted, cache)
    out = rerun.generate(requests)
    rerun.close()
    assert (rerun.hits, rerun.misses) == (kept, len(requests) - kept)
    missing = [r for r in requests if r.content_hash(engine_id) not in committed]
    assert scripted.sent == missing  # only the requests the kill lost are paid again, each once
    for request, response in zip(requests, out):
        stored = committed.get(request.content_hash(engine_id))
        if stored is not None:  # the real vLLM's committed response, as it was written
            assert response == GenerationResponse.model_validate_json(stored).model_copy(update={"cached": True})
        else:
            assert not response.cached and response.text.startswith("rerun of ")
    assert all(r.finish_reason != "error" and r.text for r in out)
    paid = _paid(cache)
    assert len(paid) == len(requests) and max(paid) == 1, "a call was paid twice"


def test_a_discovery_run_on_vllm_finishes_the_quickstart_config(
    vllm_engine: VLLMEngine, hf_smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bias-discovery run` with vLLM as target and teacher. In this process, on the session
    engine instead of a second vLLM start: the registry hands the run that engine, after checking
    that the run asked for the very `vllm.LLM(...)` it was started with, and once for both roles."""
    asked: list[ModelConfig] = []
    real_engine_class = registry.engine_class

    def session_engine(config: ModelConfig) -> Engine:
        assert llm_kwargs(config, on_cpu=True) == llm_kwargs(vllm_engine.config, on_cpu=True), config
        asked.append(config)
        return vllm_engine

    monkeypatch.setattr(registry, "engine_class", lambda p: session_engine if p == "vllm" else real_engine_class(p))
    monkeypatch.setattr(vllm_engine, "close", lambda: None)  # the session's engine outlives the run
    run_dir = tmp_path / "run"
    model = f"vllm/{hf_smollm2_dir}"
    args = [
        "run",
        "experiments/quickstart-cpu.yaml",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--set",
        f"target={model}",
        "--set",
        f"teacher={model}",
        "--set",
        "target.max_model_len=2048",
        "--set",
        "teacher.max_model_len=2048",
    ]
    # Half the shared small run, as the server test: every stage still runs and writes its files
    # on vLLM; the full size is the embedded engine's small_real_run (tests/conftest.py).
    for item in [*SMALL_RUN_OVERRIDES, "data.target_limit=4", "data.test_limit=4", "validate.max_candidates=1"]:
        args += ["--set", item]
    result = cli_in_process(*args)
    assert "finished" in result.stdout
    assert len(asked) == 1  # one engine for both roles
    rd = RunDir(run_dir)
    state = rd.read_state()
    assert state.status == "finished" and state.stop_reason
    config = (run_dir / "config.yaml").read_text()
    assert f"model: {hf_smollm2_dir}" in config and "provider: vllm" in config
    assert rd.library.iterations() == [0, 1]
    it = run_dir / "iter_001"
    perturbed = [json.loads(line) for line in (it / "perturbed.jsonl").read_text().splitlines()]
    assert len(perturbed) == 4 and any(p["valid"] for p in perturbed)
    judgments = [json.loads(line) for line in (it / "judgments.jsonl").read_text().splitlines()]
    # the verdict regex held: a verdict, or a reasoning cut off by max_tokens
    assert judgments and all(j["verdict"] in ("A", "B") or j["invalid_reason"] == "truncated" for j in judgments)
    assert any(j["verdict"] for j in judgments)
    with sqlite3.connect(run_dir / "calls.sqlite") as conn:
        rows = conn.execute("SELECT engine_id, paid FROM calls").fetchall()
    assert rows and {engine_id for engine_id, _ in rows} == {model}  # one engine for both roles
    assert max(paid for _, paid in rows) == 1

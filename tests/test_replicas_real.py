"""Scale-out: a role served by two real llama_cpp.server replicas on loopback, one killed in
the middle of a discovery run. The run finishes on the other, and no call is paid twice."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bias_discovery.run import RunDir

from helpers import REPO, SMALL_RUN_OVERRIDES, llama_cpp_server

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.llamacpp]


def chat_posts(log: Path) -> int:
    """Chat completions a llama_cpp.server answered (uvicorn's access log)."""
    return log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def test_a_run_finishes_when_a_replica_dies_mid_run_and_pays_no_call_twice(
    smollm2_gguf_path: Path, tmp_path: Path
) -> None:
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("llama-cpp-python[server] is not installed")
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with (
        llama_cpp_server(smollm2_gguf_path, log_a) as (url_a, server_a),
        llama_cpp_server(smollm2_gguf_path, log_b) as (url_b, _),
    ):
        raw = yaml.safe_load((REPO / "experiments/quickstart-cpu.yaml").read_text())
        # timeout_s: a hang guard, not the subject: at load 14 on 2 cores one rewrite took over
        # the default 300 s and the run gave up before a replica could be killed
        role = {
            "provider": "openai",
            "model": "smollm2",
            "base_url": [url_a, url_b],
            "max_retries": 3,
            "timeout_s": 900,
        }
        raw["target"], raw["teacher"] = dict(role), dict(role)
        config = tmp_path / "replicas.yaml"
        config.write_text(yaml.safe_dump(raw))
        run_dir = tmp_path / "run"
        args = [sys.executable, "-m", "bias_discovery.cli", "run", str(config), "--run-dir", str(run_dir), "--quiet"]
        for item in SMALL_RUN_OVERRIDES + ["data.target_limit=6", "data.test_limit=4"]:  # later --set wins
            args += ["--set", item]
        run = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Kill replica A once both replicas have answered some of the run's calls, while
            # the run is in the middle of a stage (perturb or evaluate).
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if chat_posts(log_a) >= 2 and chat_posts(log_b) >= 2:
                    break
                assert run.poll() is None, f"the run ended before a replica could be killed: {run.communicate()}"
                time.sleep(0.2)
            else:
                pytest.fail("the two replicas did not both get requests within 600 s")
            server_a.send_signal(signal.SIGKILL)  # a node going away: no goodbye, connections reset
            server_a.wait(timeout=30)
            served_by_b_at_kill = chat_posts(log_b)
            stdout, stderr = run.communicate(timeout=1500)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        assert run.returncode == 0, stdout + stderr
        assert "finished" in stdout

    state = RunDir(run_dir).read_state()
    assert state is not None and state.status == "finished"
    assert chat_posts(log_b) > served_by_b_at_kill  # the rest of the run went to B
    with sqlite3.connect(run_dir / "calls.sqlite") as conn:
        paid = [row[0] for row in conn.execute("SELECT paid FROM calls")]
        engines = {row[0] for row in conn.execute("SELECT DISTINCT engine_id FROM calls")}
    assert paid and max(paid) == 1, "a call was paid twice"
    assert engines == {f"openai/smollm2@{url_a},{url_b}"}
    # every call of the run that reached a stage is in the cache exactly once
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    requests = sum(u["requests"] for e in events if e["event"] == "stage_end" for u in e["usage"].values())
    assert len(paid) <= requests

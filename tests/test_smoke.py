"""The smoke check of the embedded engines (llm/smoke.py): the default transformers engine and the
optional llama.cpp. A crash in a child process is named with the engine, the signal and the
remedy (by setup's check, by `check` without and with a config), a run whose engine crashes its
process is not left "running", and a llama.cpp build with CPU features the flags did not ask for
is caught."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bias_discovery.llm.smoke import feature_mismatch

from helpers import REPO, cli

CRASHING_LLAMA = REPO / "tests" / "fake_llama_crash"
"""A llama_cpp whose first decode dies by a real SIGSEGV (tests/fake_llama_crash)."""
CRASHING_XGRAMMAR = REPO / "tests" / "fake_hf_crash"
"""An xgrammar whose first grammar dies by a real SIGSEGV (tests/fake_hf_crash)."""
LLAMACPP_ROLES = ["--set", "target=llamacpp/smollm2", "--set", "teacher=llamacpp/smollm2"]

PORTABLE = [
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DLLAVA_BUILD=OFF",
]


def crashing_env(fake: Path = CRASHING_LLAMA) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(fake), str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_the_smoke_check_names_a_planted_segfault_with_the_engine_and_the_remedy() -> None:
    env = {**os.environ, **crashing_env()}
    result = subprocess.run(
        [sys.executable, "-m", "bias_discovery.llm.smoke", "--engine", "llamacpp", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    llama = json.loads(result.stdout.splitlines()[0])
    assert llama["ok"] is False and llama["failure"] == "signal" and llama["signal"] == "SIGSEGV"
    assert llama["engine"] == "llama.cpp (llamacpp/smollm2)"
    assert "--rebuild-llama" in llama["remedy"] and "GGML_NATIVE=OFF" in llama["remedy"]


@pytest.mark.model
def test_check_without_a_config_reports_the_crash_and_exits_1() -> None:
    result = cli("check", env=crashing_env(), check=False)
    assert result.returncode == 1
    assert "llama.cpp (llamacpp/smollm2): killed by SIGSEGV" in result.stdout
    assert "remedy: rebuild llama.cpp portably" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.model
def test_a_crash_of_the_default_transformers_engine_is_named_with_its_remedy() -> None:
    """The embedded default dies by a signal in its grammar library (a planted bad wheel): setup's
    smoke check names the engine, the signal and the way out, and `check` exits 1."""
    env = {**os.environ, **crashing_env(CRASHING_XGRAMMAR)}
    result = subprocess.run(
        [sys.executable, "-m", "bias_discovery.llm.smoke", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    engine = json.loads(result.stdout.splitlines()[0])
    assert engine["engine"] == "transformers (hf/smollm2)"
    assert engine["ok"] is False and engine["failure"] == "signal" and engine["signal"] == "SIGSEGV"
    assert "setup.sh --llamacpp" in engine["remedy"] and "target=llamacpp/smollm2" in engine["remedy"]
    checked = cli(
        "check",
        "experiments/quickstart-cpu.yaml",
        "--set",
        "data.target_limit=2",
        "--set",
        "data.test_limit=2",
        env=crashing_env(CRASHING_XGRAMMAR),
        check=False,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    out = " ".join(checked.stdout.split())
    assert "FAIL engine (child process): transformers (hf/smollm2): killed by SIGSEGV" in out
    assert "Traceback" not in checked.stdout + checked.stderr


def test_check_of_a_config_with_a_crashing_llamacpp_role_fails_without_crashing_itself() -> None:
    result = cli(
        "check",
        "experiments/quickstart-cpu.yaml",
        "--set",
        "data.target_limit=2",
        "--set",
        "data.test_limit=2",
        *LLAMACPP_ROLES,
        env=crashing_env(),
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # rich wraps long findings
    assert "FAIL engine (child process): llama.cpp (llamacpp/smollm2): killed by SIGSEGV" in out
    assert "remedy: rebuild llama.cpp portably" in out
    assert "check failed" in result.stderr


def test_a_run_whose_engine_segfaults_is_not_left_running(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = cli(
        "run",
        "experiments/quickstart-cpu.yaml",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--set",
        "data.target_limit=2",
        "--set",
        "data.test_limit=2",
        *LLAMACPP_ROLES,
        env=crashing_env(),
        check=False,
    )
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stderr[-2000:])
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "running"  # what the dead process last wrote ...
    status = cli("status", str(run_dir))
    headline = status.stdout.splitlines()[0]
    assert "stopped at stage" in headline and f"resume with: bias-discovery resume {run_dir}" in headline, headline
    assert "running" not in headline  # ... is not what status says: the lock's holder is gone
    as_json = json.loads(cli("status", str(run_dir), "--json").stdout)
    assert as_json["status"] == "stopped" and as_json["liveness"]["state"] == "stopped"


def test_a_build_with_features_the_flags_did_not_ask_for_is_caught() -> None:
    native_elsewhere = (
        "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
        "AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
    )
    portable = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 |"
    message = feature_mismatch(PORTABLE, native_elsewhere)
    assert message is not None and "AMX_INT8, AVX512, AVX512_VNNI" in message and "not the build setup made" in message
    assert feature_mismatch(PORTABLE, portable) is None
    assert "lacks AVX2" in (feature_mismatch(PORTABLE, portable.replace("AVX2 = 1", "AVX2 = 0")) or "")
    assert feature_mismatch(["-DGGML_NATIVE=ON"], native_elsewhere) is None  # native: the build machine's own
    assert feature_mismatch(["-DGGML_NATIVE=OFF"], "CPU : NEON = 1 | ARM_FMA = 1 |") is None  # not x86


@pytest.mark.model
def test_the_smoke_check_passes_on_the_installed_engine_and_embedder() -> None:
    result = cli("check")
    assert "ok   transformers (hf/smollm2): a batch of 3 constrained replies on cpu in" in result.stdout
    from bias_discovery.llm.base import cpu_dtype, cpu_dtype_reason

    # the dtype this CPU gets, and why (its flags), as the unit test plants them for each CPU kind
    assert f"on cpu in {cpu_dtype()} ({cpu_dtype_reason()})" in result.stdout
    if importlib.util.find_spec("llama_cpp") is not None:  # the optional engine, where installed
        assert "ok   llama.cpp (llamacpp/smollm2): a constrained reply of" in result.stdout
    assert "ok   embedder (all-MiniLM-L6-v2): a 384-dimensional embedding" in result.stdout
    assert "check passed" in result.stdout

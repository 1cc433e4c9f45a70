"""benchmarks/vs_biasscope.py's shim on the real vLLM: a script written the way the official
BiasScope code calls vLLM (`from vllm import LLM, SamplingParams`, `LLM(...)` without
`enforce_eager`, `LLM.generate` on chat-template strings) gets an eager engine, and the meter
logs vLLM's import, the one engine load and the call with the very token counts the script
reads from the RequestOutputs. One engine in a process of its own (~1 minute on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import REPO, VLLM_MAX_MODEL_LEN

pytestmark = pytest.mark.vllm_subprocess

PEER_STYLE = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams

    if __name__ == "__main__":  # vLLM starts its workers with spawn
        llm = LLM(model=sys.argv[1], seed=42, dtype="bfloat16", max_model_len=int(sys.argv[2]))
        tok = llm.get_tokenizer()
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
                   for q in ("Below is a question followed by two candidate answers. Say 1.", "Name a colour.")]
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
        print("RESULT", json.dumps({
            "eager": llm.llm_engine.vllm_config.model_config.enforce_eager,
            "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
            "completion_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
        }), flush=True)
    """
)


def test_the_shim_meters_a_peer_style_script_on_the_real_vllm(hf_smollm2_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "peer_style.py"
    script.write_text(PEER_STYLE)
    log = tmp_path / "meter.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "benchmarks" / "vs_biasscope_shim"),
        "VS_BIASSCOPE_LOG": str(log),
        "VS_BIASSCOPE_ENFORCE_EAGER": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script), str(hf_smollm2_dir), str(VLLM_MAX_MODEL_LEN)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]  # vLLM logs to stdout too
    seen = json.loads(line.removeprefix("RESULT "))
    assert seen["eager"] is True  # the shim's one change: the script never asked for it
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert {e["pid"] for e in events} == {events[0]["pid"]}  # vLLM's engine-core child logs nothing
    imports = [e["module"] for e in events if e["event"] == "import"]
    assert "vllm" in imports and "vllm.entrypoints.llm" in imports
    [load] = [e for e in events if e["event"] == "load"]
    [call] = [e for e in events if e["event"] == "generate"]
    assert load["end"] <= call["start"] and load["model"] == str(hf_smollm2_dir)
    assert call["requests"] == 2
    assert (call["prompt_tokens"], call["completion_tokens"]) == (seen["prompt_tokens"], seen["completion_tokens"])
    assert "Below is a question followed by two candidate answers" in call["prompt_head"]

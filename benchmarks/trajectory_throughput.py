"""Prompt throughput of judge requests that share a long prefix, with and without prefix reuse,
on the embedded engine (`hf/smollm2`) and on vLLM's CPU build, in one run.

The requests: a trajectory judge's, built from τ-bench's airline trajectories
(/work/shared/data/taubench/gpt-4o-airline.json, or `--data`): the system prompt is a grading
instruction followed by the airline policy (the trajectories' own system message, ~1.4k
SmolLM2 tokens), shared by every request; the user message is one trajectory's transcript
(roles, tool calls with their arguments, tool outputs; `--transcript-chars` characters of it,
cut at the end and marked, so every request fits SmolLM2's 8k context and the vLLM engine's
`--max-model-len`), then the question. Each request asks for one token (max_tokens=1, greedy):
the time is the prompt's evaluation. Prompt tok/s = the requests' prompt tokens / the wall time.

- hf: one loaded engine; rounds alternate `prefix_reuse` on and off (`hf.PREFIX_REUSE_DTYPES`, the shared
  prefix prefilled once per sub-batch and its KV cache repeated for every row) on the same
  requests, `--rounds` of each after a warm-up of each.
- vllm: one offline `vllm.LLM` with our engine's keyword arguments (`llm_kwargs`: automatic
  prefix caching on, enforce_eager, 1 GiB KV cache); rounds alternate a `cache_salt` shared by
  every request of the round (a fresh one per round: the prefix is computed once in the round
  and reused, nothing is reused from an earlier round) and a salt of each request's own (no
  block is shared: every prompt is prefilled in full) on the same requests.

Each engine runs in a child process of its own, one after the other (vLLM alone on the
machine's cores). The record gives per engine and arm every round's seconds, the medians,
prompt tok/s and the ratio with/without, and whether the first generated tokens were the same.

    python benchmarks/trajectory_throughput.py [--requests 6] [--rounds 3] [--engines hf,vllm]
        [--json benchmarks/results/trajectory_throughput.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from provenance import REPO, Provenance

DATA = Path("/work/shared/data/taubench/gpt-4o-airline.json")
INSTRUCTION = (
    "You grade a customer-service agent's conversation against the airline's policy below. "
    "Read the transcript and decide whether the agent completed the user's task while following "
    "the policy.\n\n# Policy\n\n"
)
QUESTION = "\n\nDid the agent complete the task while following the policy? Answer pass or fail."


def render(messages: list[dict[str, Any]], limit: int) -> str:
    """The transcript a judge reads (roles, tool calls with arguments, tool outputs), cut to
    `limit` characters with a visible mark (a benchmark's truncation, not the shipped renderer)."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        if message.get("content"):
            lines.append(f"[{role}] {message['content']}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines.append(f"[{role} calls {function.get('name')}] {function.get('arguments')}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[:limit] + "\n[... transcript cut for length ...]"


def judge_messages(data: Path, count: int, transcript_chars: int) -> list[list[dict[str, str]]]:
    """`count` judge conversations on distinct τ-bench tasks, all with the same system prompt."""
    trajectories = json.loads(data.read_text(encoding="utf-8"))
    chosen: dict[Any, dict[str, Any]] = {}
    for item in trajectories:
        chosen.setdefault(item["task_id"], item)
    made = []
    for item in list(chosen.values())[:count]:
        policy, transcript = item["traj"][0]["content"], item["traj"][1:]
        made.append(
            [
                {"role": "system", "content": INSTRUCTION + policy},
                {"role": "user", "content": "# Transcript\n\n" + render(transcript, transcript_chars) + QUESTION},
            ]
        )
    return made


def run_hf(conversations: list[list[dict[str, str]]], rounds: int) -> dict[str, Any]:
    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.hf import TransformersEngine
    from bias_discovery.llm.types import ChatMessage, GenerationRequest

    engine = TransformersEngine(ModelConfig.from_spec("hf/smollm2"))
    requests = [
        GenerationRequest(messages=tuple(ChatMessage(**m) for m in c), max_tokens=1, temperature=0.0)
        for c in conversations
    ]
    arms: dict[str, dict[str, Any]] = {"with_reuse": {"seconds": []}, "without_reuse": {"seconds": []}}
    for round_index in range(rounds + 1):  # round 0 warms both arms up and is not counted
        for arm, reuse in (("with_reuse", True), ("without_reuse", False)):
            engine.prefix_reuse = reuse
            t = time.perf_counter()
            out = engine.generate(requests)
            seconds = time.perf_counter() - t
            if any(r.finish_reason == "error" for r in out):
                raise SystemExit(f"hf: a request failed: {[r.text for r in out if r.finish_reason == 'error']}")
            arms[arm]["prompt_tokens"] = sum(r.prompt_tokens for r in out)
            arms[arm]["first_tokens"] = [r.text for r in out]
            if round_index:
                arms[arm]["seconds"].append(round(seconds, 3))
    engine.close()
    return {"engine_id": engine.engine_id, "dtype": engine.dtype, **summarise(arms)}


def run_vllm(conversations: list[list[dict[str, str]]], rounds: int, max_model_len: int) -> dict[str, Any]:
    import vllm
    from transformers import AutoTokenizer

    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.vllm_engine import llm_kwargs
    from bias_discovery.smollm2_hf import build_hf_smollm2

    model = build_hf_smollm2()
    kwargs = llm_kwargs(ModelConfig.from_spec(f"vllm/{model}", max_model_len=max_model_len), on_cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    prompts = [
        [int(t) for t in tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)]
        for c in conversations
    ]
    llm = vllm.LLM(**kwargs)
    params = vllm.SamplingParams(max_tokens=1, temperature=0.0)
    arms: dict[str, dict[str, Any]] = {"with_reuse": {"seconds": []}, "without_reuse": {"seconds": []}}
    for round_index in range(rounds + 1):
        for arm in ("with_reuse", "without_reuse"):
            shared = uuid.uuid4().hex  # fresh per round: nothing carries over from an earlier round
            batch = [
                {"prompt_token_ids": ids, "cache_salt": shared if arm == "with_reuse" else uuid.uuid4().hex}
                for ids in prompts
            ]
            t = time.perf_counter()
            out = llm.generate(batch, params, use_tqdm=False)
            seconds = time.perf_counter() - t
            arms[arm]["prompt_tokens"] = sum(len(ids) for ids in prompts)
            arms[arm]["first_tokens"] = [o.outputs[0].text for o in out]
            if round_index:
                arms[arm]["seconds"].append(round(seconds, 3))
    return {
        "vllm_version": vllm.__version__,
        "engine_kwargs": {k: v for k, v in kwargs.items() if k != "model"},
        **summarise(arms),
    }


def summarise(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    for arm in arms.values():
        arm["median_s"] = round(statistics.median(arm["seconds"]), 3)
        arm["prompt_tok_s"] = round(arm["prompt_tokens"] / arm["median_s"], 1)
    with_, without = arms["with_reuse"], arms["without_reuse"]
    return {
        **arms,
        "prompt_tok_s_ratio": round(with_["prompt_tok_s"] / without["prompt_tok_s"], 2),
        "same_first_tokens": with_["first_tokens"] == without["first_tokens"],
    }


def child(args: argparse.Namespace) -> None:
    conversations = judge_messages(args.data, args.requests, args.transcript_chars)
    if args.child == "hf":
        result = run_hf(conversations, args.rounds)
    else:
        result = run_vllm(conversations, args.rounds, args.max_model_len)
    print(json.dumps(result), flush=True)


def main() -> None:
    started = Provenance.start()
    parser = argparse.ArgumentParser(description="Prompt tok/s with and without prefix reuse.")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transcript-chars", type=int, default=3000)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--child", choices=("hf", "vllm"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    record: dict[str, Any] = {
        "requests": args.requests,
        "rounds": args.rounds,
        "transcript_chars": args.transcript_chars,
        "max_model_len_vllm": args.max_model_len,
        "measure": "prompt tok/s = prompt tokens of the requests / median wall seconds of a "
        "max_tokens=1 greedy batch; ratio = with reuse / without, same requests, arms alternating",
        "engines": {},
    }
    for engine in args.engines.split(","):
        command = [sys.executable, __file__, "--child", engine, "--requests", str(args.requests)]
        command += ["--rounds", str(args.rounds), "--transcript-chars", str(args.transcript_chars)]
        command += ["--max-model-len", str(args.max_model_len), "--data", str(args.data)]
        load_before = [round(x, 2) for x in os.getloadavg()]
        proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"the {engine} child failed (exit {proc.returncode})")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["load_before"], result["load_after"] = load_before, [round(x, 2) for x in os.getloadavg()]
        record["engines"][engine] = result
        print(engine, json.dumps({k: v for k, v in result.items() if k not in ("with_reuse", "without_reuse")}))
    if args.json:
        started.write_json(args.json, record)


if __name__ == "__main__":
    main()

"""The embedded default engine (transformers + torch, batched: `hf/smollm2`) against llama.cpp's
portable build (`llamacpp/smollm2`), side by side in one run on one machine, on the quick
start's own requests.

1. The quick start (`experiments/quickstart-cpu.yaml`) runs with each engine as judge and
   teacher, alternating engines over `--rounds`, each in a fresh run directory: its wall time
   per engine (`quickstart_wall_s`, every round and the median).
2. The requests the first hf run made (its call cache, in the order they were made) are
   replayed through each engine in a child process of its own, as one batch, as a stage sends
   them: once with max_tokens=1 (prompt evaluation, plus one token) and once as asked. Prompt
   tok/s = the prompt tokens / the first wall time; generated tok/s = the generated tokens /
   (the second wall time - the first). The llama.cpp child keeps its prompt-prefix reuse, the
   hf child its length-sorted padded batches: each engine as a run uses it.
3. In the hf child every replay runs twice, with the engine's in-place KV cache and with
   transformers' DynamicCache (`GROWING_KV_CACHE`), alternating on one loaded model:
   `hf_kv_cache` gives both generated tok/s, their ratio, and whether the texts were the same.

    python benchmarks/embedded_engine.py [--rounds 3] [--replays 2] [--json benchmarks/results/embedded_engine.json]

Needs both engines installed (./scripts/setup.sh --llamacpp). Records its provenance
(`benchmarks/provenance.py`: the command, the start time, the commit it started at, the CPU
model and flags), the dtype the hf engine chose, and the machine's load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import REPO, Provenance

ENGINES = {"hf": "hf/smollm2", "llamacpp": "llamacpp/smollm2"}

CHILD = r"""
import json, sys, time
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import GenerationRequest
spec, path, replays = sys.argv[1], sys.argv[2], int(sys.argv[3])
caches = sys.argv[4].split(",") if len(sys.argv) > 4 else ["default"]
requests = [GenerationRequest.model_validate_json(line) for line in open(path)]
t = time.perf_counter()
engine = make_engine(ModelConfig.from_spec(spec))
load_s = time.perf_counter() - t
engine.generate([GenerationRequest.chat("Warm up.", max_tokens=2)])
prefill = [r.model_copy(update={"max_tokens": 1, "constraint": None, "stop": ()}) for r in requests]
rows = []
for _ in range(replays):
  for cache in caches:  # the hf engine's KV caches alternate within a replay, on one loaded model
    if cache != "default":
        import bias_discovery.llm.hf as hf
        hf.GROWING_KV_CACHE = cache == "growing"
    t = time.perf_counter(); one = engine.generate(prefill); prefill_s = time.perf_counter() - t
    t = time.perf_counter(); full = engine.generate(requests); full_s = time.perf_counter() - t
    rows.append({"kv_cache": cache, "prefill_s": prefill_s, "full_s": full_s,
                 "prompt_tokens": sum(r.prompt_tokens for r in one),
                 "completion_tokens": sum(r.completion_tokens for r in full),
                 "errors": sum(r.finish_reason == "error" for r in full),
                 "texts_digest": hash(tuple(r.text for r in full))})
print(json.dumps({"engine_id": engine.engine_id, "dtype": getattr(engine, "dtype", "gguf Q4_1"),
                  "load_s": load_s, "rows": rows}))
"""


def cpu_flags() -> list[str]:
    """The x86 feature flags that decide the engines' kernels (bf16, AMX, AVX-512, AVX2)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")
                return [f for f in line.split(":", 1)[1].split() if f in wanted]
    except OSError:
        pass
    return []


def run_quickstart(engine: str, run_dir: Path) -> dict[str, Any]:
    spec = ENGINES[engine]
    command = [
        sys.executable,
        "-m",
        "bias_discovery.cli",
        "run",
        "experiments/quickstart-cpu.yaml",
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--set",
        f"target={spec}",
        "--set",
        f"teacher={spec}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the quick start on {spec} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return {"engine": engine, "wall_s": round(wall, 2)}


def quickstart_requests(run_dir: Path, out: Path) -> int:
    """The requests the run paid for (its call cache), in the order they were made."""
    with sqlite3.connect(run_dir / "calls.sqlite") as db:
        rows = db.execute("SELECT request FROM calls ORDER BY created_at, rowid").fetchall()
    out.write_text("".join(row[0].strip() + "\n" for row in rows))
    return len(rows)


def tok_s(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Prompt and generated tok/s of replays: their medians."""
    prompt = statistics.median(r["prompt_tokens"] / r["prefill_s"] for r in rows)
    generated = statistics.median(r["completion_tokens"] / max(r["full_s"] - r["prefill_s"], 1e-9) for r in rows)
    return prompt, generated


def replay(engine: str, requests: Path, replays: int, caches: str = "default") -> dict[str, Any]:
    """Replays `requests` in a child process running `engine`; for hf, `caches` "growing,dynamic"
    alternates its KV cache (llm/hf.py GROWING_KV_CACHE) within every replay."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, ENGINES[engine], str(requests), str(replays), caches],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the {engine} replay exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = data["rows"]
    first = caches.split(",")[0]  # the engine as it runs by default
    data["prompt_tok_s"], data["generated_tok_s"] = tok_s([r for r in rows if r["kv_cache"] == first])
    if "," in caches:
        data["by_kv_cache"] = {}
        for cache in caches.split(","):
            prompt, generated = tok_s([r for r in rows if r["kv_cache"] == cache])
            data["by_kv_cache"][cache] = {"prompt_tok_s": round(prompt, 1), "generated_tok_s": round(generated, 1)}
        digests = {r["texts_digest"] for r in rows}
        data["kv_caches_gave_the_same_texts"] = len(digests) == 1
    data["engine"] = engine
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="quick-start runs per engine (alternating)")
    parser.add_argument("--replays", type=int, default=2, help="replays of the requests per engine child")
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "embedded_engine.json")
    provenance = Provenance.start()
    args = parser.parse_args()
    record: dict[str, Any] = {"engine_cpu_flags": cpu_flags(), "load_before": os.getloadavg()}
    work = Path(tempfile.mkdtemp(prefix="embedded-engine-"))
    try:
        runs = []
        for round_ in range(args.rounds):
            for engine in ("hf", "llamacpp") if round_ % 2 == 0 else ("llamacpp", "hf"):
                runs.append(run_quickstart(engine, work / f"{engine}-{round_}"))
                print(f"round {round_ + 1}: quick start on {engine}: {runs[-1]['wall_s']} s", file=sys.stderr)
        n_requests = quickstart_requests(work / "hf-0", work / "requests.jsonl")
        replays = {
            "hf": replay("hf", work / "requests.jsonl", args.replays, "growing,dynamic"),
            "llamacpp": replay("llamacpp", work / "requests.jsonl", args.replays),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["quickstart_runs"] = runs
    record["quickstart_wall_s"] = {
        engine: {
            "median": statistics.median(r["wall_s"] for r in runs if r["engine"] == engine),
            "runs": [r["wall_s"] for r in runs if r["engine"] == engine],
        }
        for engine in ENGINES
    }
    record["requests_replayed"] = n_requests
    record["replays"] = replays
    record["hf_dtype"] = replays["hf"]["dtype"]
    record["prompt_tok_s"] = {engine: round(replays[engine]["prompt_tok_s"], 1) for engine in ENGINES}
    record["generated_tok_s"] = {engine: round(replays[engine]["generated_tok_s"], 1) for engine in ENGINES}
    record["prompt_tok_s_ratio"] = round(replays["hf"]["prompt_tok_s"] / replays["llamacpp"]["prompt_tok_s"], 2)
    record["generated_tok_s_ratio"] = round(
        replays["hf"]["generated_tok_s"] / replays["llamacpp"]["generated_tok_s"], 2
    )
    by_cache = replays["hf"]["by_kv_cache"]
    record["hf_kv_cache"] = {
        "generated_tok_s": {cache: by_cache[cache]["generated_tok_s"] for cache in by_cache},
        "growing_vs_dynamic_generated_ratio": round(
            by_cache["growing"]["generated_tok_s"] / by_cache["dynamic"]["generated_tok_s"], 2
        ),
        "same_texts": replays["hf"]["kv_caches_gave_the_same_texts"],
    }
    record["quickstart_wall_ratio"] = round(
        record["quickstart_wall_s"]["hf"]["median"] / record["quickstart_wall_s"]["llamacpp"]["median"], 2
    )
    record["load_after"] = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    provenance.write_json(args.json, record)
    print(
        json.dumps(
            {
                k: record[k]
                for k in ("prompt_tok_s", "generated_tok_s", "prompt_tok_s_ratio", "quickstart_wall_s", "hf_dtype")
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

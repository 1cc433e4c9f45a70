"""README command 1's run, before and after, side by side: the quick start of an earlier commit
(its code and its experiments/quickstart-cpu.yaml) against this checkout's, per stage, in one
run, alternating which goes first; plus the embedded engine's per-request costs.

    python benchmarks/first_run.py --before a8d15aa --rounds 3 --json OUT

The earlier commit is checked out into a temporary work tree (`git worktree`) and run with its
own package first on PYTHONPATH, in the same environment (the same llama-cpp-python build and
model). Each run is `bias-discovery run experiments/quickstart-cpu.yaml --run-dir DIR --quiet`
from that tree, as the README says; its per-stage seconds, calls and tokens come from the run's
events.jsonl (with streamed stages, a stage's seconds run from its start to its end and
overlap the stages around it: the whole run's wall time is the figure that adds up), its CPU
time from the child's rusage.

`--components` also times the engine's parts on this machine, each side by side in one process:
prompt evaluation (tokens/s), generation with and without a GBNF grammar (ms per token), and
the prefix reuse of the current engine (rewrite requests from scratch vs reusing the shared
system prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import Provenance, cpu_model

REPO = Path(__file__).resolve().parents[1]
CONFIG = "experiments/quickstart-cpu.yaml"


def run_quick_start(tree: Path, run_dir: Path) -> dict[str, Any]:
    """One quick-start run from `tree` (its code first on PYTHONPATH); wall, CPU, per stage."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "bias_discovery.cli", "run", CONFIG, "--run-dir", str(run_dir), "--quiet"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"the quick start in {tree} exited {result.returncode}:\n{result.stderr[-3000:]}")
    stages: dict[str, dict[str, Any]] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") != "stage_end":
            continue
        key = f"{event['iteration']}:{event['stage']}"
        usage = event.get("usage") or {}
        stages[key] = {
            "seconds": event.get("seconds"),
            "requests": sum(u["requests"] for u in usage.values()),
            "prompt_tokens": sum(u["prompt_tokens"] for u in usage.values()),
            "completion_tokens": sum(u["completion_tokens"] for u in usage.values()),
        }
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "stages": stages,
        "last_lines": result.stdout.strip().splitlines()[-4:],
    }


def components(rounds: int) -> dict[str, Any]:
    """The engine's per-request costs on this machine (current code), side by side."""
    import llama_cpp

    from bias_discovery.config import PerturbSettings
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks
    from bias_discovery.library import load_seed_library
    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.grammar import constraint_to_gbnf
    from bias_discovery.llm.llamacpp import LlamaCppEngine
    from bias_discovery.stages.perturb import build_perturb_request

    engine = LlamaCppEngine(ModelConfig.from_spec("llamacpp/smollm2"))
    llm = engine._llm
    pairs = load_pairs("demo", limit=6)
    judge = [
        t.request
        for t in build_tasks(
            pairs, JudgeSettings(positions="swap", reasoning=True, reasoning_chars=200, max_tokens=112), seed=0
        )
    ]
    grammar = llama_cpp.LlamaGrammar.from_string(constraint_to_gbnf(judge[0].constraint), verbose=False)
    prompt = llm.tokenize(
        build_perturb_request(pairs[0], load_seed_library("biasscope7").biases[0], PerturbSettings(), seed=0)
        .messages[0]
        .content.encode()
    )[:256]
    prefill = []
    for _ in range(rounds):
        llm.reset()
        t = time.process_time()
        llm.eval(prompt)
        prefill.append(time.process_time() - t)
    prefill_rate = len(prompt) / statistics.median(prefill)
    # per mode: (CPU s, prompt tokens, generated tokens) of each judge request
    calls: dict[str, list[tuple[float, int, int]]] = {"grammar": [], "free": []}
    for r in range(rounds):
        for name in ("grammar", "free") if r % 2 == 0 else ("free", "grammar"):
            for request in judge:
                engine._last_prompt = []
                messages = [{"role": m.role, "content": m.content} for m in request.messages]
                t = time.process_time()
                out = llm.create_chat_completion(
                    messages=messages,
                    temperature=0.0,
                    top_k=1,
                    max_tokens=112,
                    grammar=grammar if name == "grammar" else None,
                    seed=0,
                )
                usage = out["usage"]
                calls[name].append((time.process_time() - t, usage["prompt_tokens"], usage["completion_tokens"]))

    def per_generated_token_ms(rows: list[tuple[float, int, int]]) -> float:
        return round(1000 * sum(c - p / prefill_rate for c, p, _ in rows) / max(1, sum(g for _, _, g in rows)), 2)

    bias = load_seed_library("biasscope7").biases[1]
    rewrites = [build_perturb_request(p, bias, PerturbSettings(max_tokens=32), seed=0) for p in pairs]
    reuse: dict[str, list[float]] = {"from_scratch": [], "reusing_prefix": []}
    for r in range(rounds):
        for name in ("from_scratch", "reusing_prefix") if r % 2 == 0 else ("reusing_prefix", "from_scratch"):
            t = time.process_time()
            for request in rewrites:
                if name == "from_scratch":
                    engine._last_prompt = []
                engine.generate([request])
            reuse[name].append(time.process_time() - t)
    engine.close()
    return {
        "prompt_eval_tok_per_cpu_s": round(prefill_rate),
        "judge_cpu_s_per_request": {k: round(statistics.median(c for c, _, _ in v), 3) for k, v in calls.items()},
        "judge_generated_tokens_per_request": {
            k: round(statistics.mean(g for _, _, g in v), 1) for k, v in calls.items()
        },
        "generation_cpu_ms_per_token": {k: per_generated_token_ms(v) for k, v in calls.items()},
        "rewrites_cpu_s": {k: round(statistics.median(v), 2) for k, v in reuse.items()},
        "prefix_reuse_ratio": round(
            statistics.median(reuse["reusing_prefix"]) / statistics.median(reuse["from_scratch"]), 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="a8d15aa", help="the earlier commit (default: main before this round)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--before-rounds",
        type=int,
        default=None,
        help="rounds that also run the earlier commit (default: every round); the before run is the slow one",
    )
    parser.add_argument("--components", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    provenance = Provenance.start()
    work = Path(tempfile.mkdtemp(prefix="first-run-"))
    old = work / "before"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), args.before], check=True, capture_output=True
    )
    trees = {"before": old, "after": REPO}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    try:
        before_rounds = args.rounds if args.before_rounds is None else min(args.before_rounds, args.rounds)
        for r in range(args.rounds):
            sides = ("before", "after") if r % 2 == 0 else ("after", "before")
            for side in (s for s in sides if s == "after" or r < before_rounds):
                run_dir = work / f"{side}{r}"
                runs[side].append(run_quick_start(trees[side], run_dir))
                shutil.rmtree(run_dir, ignore_errors=True)
                print(f"round {r} {side}: {runs[side][-1]['wall_s']} s", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], capture_output=True)
    summary: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "commit": provenance.commit,
        "before_commit": args.before,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "load_before": os.getloadavg()[0]},
    }
    for side, rows in runs.items():
        stages = sorted({s for row in rows for s in row["stages"]})
        summary[side] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in rows),
            "wall_s": [r["wall_s"] for r in rows],
            "cpu_s_median": statistics.median(r["cpu_s"] for r in rows),
            "stages": {
                s: {
                    k: statistics.median(r["stages"][s][k] for r in rows if s in r["stages"])
                    for k in ("seconds", "requests", "prompt_tokens", "completion_tokens")
                }
                for s in stages
            },
            "last_lines": rows[-1]["last_lines"],
        }
    summary["wall_ratio_after_over_before"] = round(
        summary["after"]["wall_s_median"] / summary["before"]["wall_s_median"], 3
    )
    summary["cpu_ratio_after_over_before"] = round(
        summary["after"]["cpu_s_median"] / summary["before"]["cpu_s_median"], 3
    )
    if args.components:
        summary["components"] = components(args.rounds)
    summary["machine"]["load_after"] = os.getloadavg()[0]
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        provenance.write_json(args.json, summary)


if __name__ == "__main__":
    main()

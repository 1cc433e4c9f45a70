"""Embedded engine builds side by side: prompt and generation speed of the installed
llama-cpp-python against another build of it (e.g. a native `-march=native` one), on the
embedded SmolLM2, in one run.

Each build runs in a child process of its own (`--other-site DIR` is put first on that child's
PYTHONPATH: a directory holding another build's `llama_cpp/`, e.g. an unpacked wheel), the two
alternate over `--rounds`, and every child does the same greedy completions of the same prompt.
A child that dies by a signal is reported as such (that is what a bad native build does on some
CPUs), not as a slow build.

    python benchmarks/embedded_build.py [--other-site /tmp/native_site] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import Provenance, cpu_model

CHILD = r"""
import json, sys, time
import llama_cpp
from bias_discovery.llm.llamacpp import default_threads, smollm2_gguf_path
threads = default_threads()
llm = llama_cpp.Llama(model_path=str(smollm2_gguf_path()), n_ctx=2048, n_threads=threads,
                      n_threads_batch=threads, verbose=False)
prompt = sys.argv[1]
max_tokens = int(sys.argv[2])
reps = int(sys.argv[3])
llm.create_completion(prompt, max_tokens=4, temperature=0.0, top_k=1)  # warm-up
rows = []
for _ in range(reps):
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm.ctx)
    t = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, top_k=1)
    wall = time.perf_counter() - t
    perf = llama_cpp.llama_perf_context(llm.ctx)
    rows.append({"wall_s": wall, "prompt_tokens": perf.n_p_eval, "prompt_ms": perf.t_p_eval_ms,
                 "gen_tokens": perf.n_eval, "gen_ms": perf.t_eval_ms,
                 "text_head": out["choices"][0]["text"][:60]})
print(json.dumps({"system_info": llama_cpp.llama_print_system_info().decode(), "threads": threads, "rows": rows}))
"""

PROMPT = (
    "<|im_start|>system\nYou rewrite answers. Keep the content and the final answer; change only the style."
    "<|im_end|>\n<|im_start|>user\nRewrite the following answer so that it sounds more confident and cites an "
    "authority, without changing what it says.\n\nQuestion: What is the boiling point of water at sea level in "
    "degrees Celsius, and why does it change with altitude?\n\nAnswer: Water boils at 100 degrees Celsius at sea "
    "level. At higher altitude the air pressure is lower, so the vapour pressure of the water reaches the "
    "surrounding pressure at a lower temperature, and water boils below 100 degrees. In Denver it boils at about "
    "95 degrees.<|im_end|>\n<|im_start|>assistant\n"
)


def run_child(label: str, site: Path | None, max_tokens: int, reps: int) -> dict[str, Any]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, PROMPT, str(max_tokens), str(reps)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        return {"build": label, "returncode": proc.returncode, "stderr_tail": proc.stderr[-800:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = result["rows"]
    return {
        "build": label,
        "returncode": 0,
        "system_info": result["system_info"],
        "threads": result["threads"],
        "prompt_tok_s": statistics.median(r["prompt_tokens"] / (r["prompt_ms"] / 1000) for r in rows),
        "gen_tok_s": statistics.median(r["gen_tokens"] / (r["gen_ms"] / 1000) for r in rows),
        "prompt_tokens": rows[0]["prompt_tokens"],
        "gen_tokens": rows[0]["gen_tokens"],
        "same_text": len({r["text_head"] for r in rows}) == 1,
        "text_head": rows[0]["text_head"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other-site", type=Path, help="a directory holding another build's llama_cpp/ package")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3, help="completions per child")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    provenance = Provenance.start()
    builds: list[tuple[str, Path | None]] = [("installed", None)]
    if args.other_site:
        builds.append(("other", args.other_site))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in builds}
    for round_ in range(args.rounds):
        order = builds if round_ % 2 == 0 else list(reversed(builds))
        for label, site in order:
            results[label].append(run_child(label, site, args.max_tokens, args.reps))
    summary: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "commit": provenance.commit,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "arch": platform.machine()},
        "builds": {},
    }
    for label, runs in results.items():
        ok = [r for r in runs if r["returncode"] == 0]
        summary["builds"][label] = {
            "runs": len(runs),
            "crashed": [r["returncode"] for r in runs if r["returncode"] != 0],
            "system_info": ok[0]["system_info"] if ok else None,
            "prompt_tok_s": statistics.median(r["prompt_tok_s"] for r in ok) if ok else None,
            "gen_tok_s": statistics.median(r["gen_tok_s"] for r in ok) if ok else None,
            "gen_tokens": ok[0]["gen_tokens"] if ok else None,
            "text_head": ok[0]["text_head"] if ok else None,
        }
    if len(builds) == 2 and all(summary["builds"][b]["gen_tok_s"] for b in ("installed", "other")):
        b = summary["builds"]
        summary["gen_ratio_installed_over_other"] = b["installed"]["gen_tok_s"] / b["other"]["gen_tok_s"]
        summary["prompt_ratio_installed_over_other"] = b["installed"]["prompt_tok_s"] / b["other"]["prompt_tok_s"]
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        provenance.write_json(args.json, summary)


if __name__ == "__main__":
    main()

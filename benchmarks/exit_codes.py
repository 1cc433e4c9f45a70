"""Consecutive CLI runs against a stub server: does every finished run exit 0?

A finished run once exited with SIGSEGV now and then (2 in 400) after printing its summary:
the crash was in the interpreter's teardown, not in the run. This runs `bias-discovery run`
`--runs` times in a row (a fresh run directory each time) against one OpenAI-compatible stub
server (tests/stub_openai.py, a process of its own) and counts the exit codes; each run has
faulthandler on, so a crash leaves the threads' stacks in `--failures DIR`.

The run is the kill test's (tests/kill_anywhere.py): a seed validated on the test pairs, one
iteration, Merge with the real all-MiniLM-L6-v2 embedder and faiss (torch, OpenMP and tokenizers
threads in the process, as in a user's run), or with `--fake-embedder` a bag-of-words stand-in
(no torch; about three times as many runs per minute).

    python benchmarks/exit_codes.py --runs 1000 --json OUT [--fake-embedder]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kill_anywhere import stub_config  # noqa: E402
from provenance import Provenance  # noqa: E402

from stub_openai import launch, stats  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--failures", type=Path, default=Path(tempfile.gettempdir()) / "exit-codes-failures")
    parser.add_argument("--fake-embedder", action="store_true", help="bag-of-words embeddings instead of torch's")
    args = parser.parse_args()
    provenance = Provenance.start()
    work = Path(tempfile.mkdtemp(prefix="exit-codes-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    if args.fake_embedder:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)])
    codes: collections.Counter[int] = collections.Counter()
    failures: list[dict[str, object]] = []
    started = time.monotonic()
    with launch(0.0) as (url, _):
        config = stub_config(work / "config.yaml", url, pipeline="streamed", n_target=8, n_test=20)
        for i in range(args.runs):
            run_dir = work / "run"
            result = subprocess.run(
                [sys.executable, "-m", "bias_discovery.cli", "run", str(config), "--run-dir", str(run_dir), "--quiet"],
                capture_output=True,
                text=True,
                env=env,
                cwd=REPO,
            )
            codes[result.returncode] += 1
            if result.returncode != 0:
                args.failures.mkdir(parents=True, exist_ok=True)
                path = args.failures / f"run{i:04d}.txt"
                path.write_text(f"rc {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
                failures.append(
                    {
                        "run": i,
                        "returncode": result.returncode,
                        "finished_summary": "finished;" in result.stdout,
                        "log": str(path),
                    }
                )
            shutil.rmtree(run_dir, ignore_errors=True)
            if (i + 1) % 50 == 0:
                print(f"{i + 1} runs: {dict(codes)}", file=sys.stderr, flush=True)
                # the counts so far, so a benchmark stopped early still says how far it got
                write(summary(args, codes, failures, started, stats(url)["cpu_s"], provenance), args.json, provenance)
        text = write(summary(args, codes, failures, started, stats(url)["cpu_s"], provenance), args.json, provenance)
    print(text)
    shutil.rmtree(work, ignore_errors=True)


def summary(
    args: argparse.Namespace,
    codes: collections.Counter[int],
    failures: list[dict[str, object]],
    started: float,
    stub_cpu: float,
    provenance: Provenance,
) -> dict[str, object]:
    """The exit codes counted so far and the stub's CPU share (the command, start, commit and
    machine are the `provenance` block `write` adds)."""
    wall = time.monotonic() - started
    return {
        "commit": provenance.commit,
        "runs_planned": args.runs,
        "runs": sum(codes.values()),
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "all_zero": set(codes) == {0},
        "embedder": "bag-of-words (fake)" if args.fake_embedder else "all-MiniLM-L6-v2",
        "wall_s": round(wall, 1),
        "stub_cpu_share": round(stub_cpu / wall, 4),
        "failures": failures,
    }


def write(record: dict[str, object], path: Path | None, provenance: Provenance) -> str:
    if path is not None:
        provenance.write_json(path, record)
    return json.dumps({**record, "provenance": provenance.stamp()}, indent=2)


if __name__ == "__main__":
    main()

"""How long does a hung model server take to fail a command? The speed side of
tests/test_bounded_waits.py, which asserts only what happened (the deadline named, fewer
attempts than allowed): here `bias-discovery judge` runs against a server that accepts
connections and never answers (tests/stub_openai.py --hang, a process of its own), `--rounds`
times at each `--timeout`, and the record gives the seconds from the server's first request to
the process's exit, next to the deadline.

    python benchmarks/bounded_waits.py --timeouts 3,10 --rounds 3 --json OUT
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from provenance import Provenance  # noqa: E402

from stub_openai import launch, stats  # noqa: E402


def one(timeout: float, work: Path) -> dict[str, float | int | bool]:
    """One `judge` against a hung stub: exit code, seconds from its first request to the exit."""
    with launch(0.0, "--hang") as (url, _):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "bias_discovery.cli",
                "judge",
                "--model",
                "openai/served",
                "--base-url",
                url,
                "--data",
                "demo",
                "--limit",
                "2",
                "--no-cache",
                "--timeout",
                f"{timeout:g}",
                "--out",
                str(work / "out"),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=timeout + 300,
        )
        ended = time.time()
        first = stats(url)["first_request_at"]
    return {
        "returncode": result.returncode,
        "named_deadline": f"within the {timeout:g} s deadline" in " ".join(result.stderr.split()),
        "first_request_to_exit_s": round(ended - first, 2) if first is not None else -1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeouts", default="3,10", help="comma-separated --timeout values, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    provenance = Provenance.start()
    cells = []
    with tempfile.TemporaryDirectory(prefix="bounded-waits-") as tmp:
        for timeout in (float(t) for t in args.timeouts.split(",")):
            rows = [one(timeout, Path(tmp)) for _ in range(args.rounds)]
            waits = [float(r["first_request_to_exit_s"]) for r in rows]
            cell = {
                "timeout_s": timeout,
                "rounds": rows,
                "median_s": statistics.median(waits),
                "max_s": max(waits),
                "max_over_deadline_s": round(max(waits) - timeout, 2),
                "all_exit_2_naming_the_deadline": all(r["returncode"] == 2 and r["named_deadline"] for r in rows),
            }
            cells.append(cell)
            print(
                f"--timeout {timeout:g}: first request to exit {waits} s (max {cell['max_over_deadline_s']:+.2f} s over the deadline); "
                f"exit 2 naming the deadline every time: {cell['all_exit_2_naming_the_deadline']}",
                flush=True,
            )
    if args.json is not None:
        provenance.write_json(args.json, {"commit": provenance.commit, "cells": cells})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

"""Runs stopped at budgets drawn at random, resumed until finished: identical to an unstopped run?

The scripted check of issue 38's "a run stopped at 20 budgets drawn at random, then resumed,
finishes identical to an unstopped one, with 0 tracebacks". Against one OpenAI-compatible stub
server (tests/stub_openai.py, a process of its own), with the kill test's run
(tests/kill_anywhere.py `stub_config`, both roles priced at `PRICE`) and the bag-of-words
embedder: one unstopped reference run per pipeline order, then `--trials` trials alternating the
orders, each `budget_trial`: a kind (calls, tokens, dollars) and a budget drawn uniformly below
the reference's spend, exit 4 at the budget, `status` read, resumed with a larger budget up to
`--max-stops` times, then without one. Counted: trials finished identical (every artifact),
stops, tracebacks, calls paid twice (the cache's `paid` column), and whether the spend equals the
unstopped run's.

    python benchmarks/budget_anywhere.py --trials 20 --json benchmarks/results/budget_anywhere.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kill_anywhere import budget_summary_line, budget_trial, reference_run, run_spend, stub_config  # noqa: E402
from provenance import Provenance  # noqa: E402

from stub_openai import launch  # noqa: E402

ENV = {
    "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)]),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}


def main() -> None:
    started_at = Provenance.start()  # first thing: the command, start time, commit and CPU of the record
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-stops", type=int, default=3)
    parser.add_argument("--n-target", type=int, default=8)
    parser.add_argument("--n-test", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    record: dict[str, object] = {}
    work = Path(tempfile.mkdtemp(prefix="budget-anywhere-"))
    started = time.monotonic()
    trials = []
    with launch(0.0) as (url, _):
        references = {}
        for pipeline in ("streamed", "staged"):
            config = stub_config(
                work / f"config-{pipeline}.yaml",
                url,
                pipeline=pipeline,
                n_target=args.n_target,
                n_test=args.n_test,
                priced=True,
            )
            reference, wall = reference_run(config, work / f"reference-{pipeline}", env=ENV)
            references[pipeline] = (config, reference, run_spend(work / f"reference-{pipeline}"), wall)
        for i in range(args.trials):
            pipeline = ("streamed", "staged")[i % 2]
            config, reference, totals, _ = references[pipeline]
            trial = budget_trial(
                config, work / f"trial{i}", reference, totals, seed=i, max_stops=args.max_stops, env=ENV
            )
            same_spend = trial.finished and all(abs(trial.spent[k] - totals[k]) < 1e-9 for k in totals)
            trials.append(
                {
                    "pipeline": pipeline,
                    **asdict(trial),
                    "ok": trial.ok,
                    "same_spend": same_spend,
                    "budgets": [b if b != float("inf") else None for b in trial.budgets],
                }
            )
            print(budget_summary_line(trial), file=sys.stderr, flush=True)
            shutil.rmtree(work / f"trial{i}", ignore_errors=True)
    record.update(
        {
            "scale": {"n_target": args.n_target, "n_test": args.n_test, "max_stops": args.max_stops},
            "references": {p: {"spend": v[2], "wall_s": round(v[3], 1)} for p, v in references.items()},
            "trials": len(trials),
            "identical": sum(t["ok"] for t in trials),
            "stops": sum(int(t["stops"]) for t in trials),  # type: ignore[call-overload]
            "tracebacks": sum(len(t["tracebacks"]) for t in trials),  # type: ignore[arg-type]
            "paid_twice": sum(int(t["paid_twice"]) for t in trials),  # type: ignore[call-overload]
            "same_spend": sum(bool(t["same_spend"]) for t in trials),
            "wall_s": round(time.monotonic() - started, 1),
            "per_trial": trials,
        }
    )
    if args.json:
        started_at.write_json(args.json, record)
    print(json.dumps({k: v for k, v in record.items() if k != "per_trial"}, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

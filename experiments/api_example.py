"""The Python API as a notebook uses it, cell by cell (CI runs it: tests/test_api.py).

    python experiments/api_example.py [RUN_DIR]

On the embedded SmolLM2 and the shipped demo set: judge six pairs, audit the judge's
position bias on them, then read a finished discovery run (RUN_DIR, default ``runs/quickstart``: what
the quick start writes) and look at its biases as a DataFrame. Under a minute on 2 cores; the
call cache (``~/.cache/bias-discovery/calls.sqlite``) makes a second run nearly free.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bias_discovery import audit, judge, load_run
from bias_discovery.formatting import percent, percent_range, plural, pp

MODEL = "hf/smollm2"
pd.set_option("display.width", 120)


# A one-letter verdict (no reasoning paragraph) keeps every call to one generated token: the
# whole example then costs 24 judge calls. Drop it to let the judge reason first.
JUDGE_SETTINGS = {"reasoning": False, "max_tokens": 4}


def judge_cell() -> None:
    """A judge's error on six demo pairs, each judged in both orders (12 calls)."""
    judged = judge(MODEL, "demo", limit=6, settings=JUDGE_SETTINGS)
    s = judged.summary
    print(
        f"{s.model} on {s.data}: error {percent(s.error_rate)} (95% Wilson CI "
        f"{percent_range(s.error_ci_low, s.error_ci_high)}) over {plural(s.n_valid_pairs, 'valid pair')} "
        f"(a pair is right when both orders pick the chosen response); position A picked in "
        f"{percent(s.position_a_rate)} of the {plural(s.n_judgments - s.n_invalid_judgments, 'valid verdict')} "
        "(50% = no preference)"
    )
    print(judged.to_pandas()[["pair_id", "domain", "order", "verdict", "correct"]], end="\n\n")


def audit_cell() -> None:
    """Position bias by the published measures on the same six pairs: both orders, 2 repeats
    of each verdict (24 calls; the first repeat is the judge cell's calls, from the cache)."""
    audited = audit(
        MODEL, "demo", ["position"], limit=6, settings={"repeats": 2, "n_boot": 500, "judge": JUDGE_SETTINGS}
    )
    calls = audited.report.calls
    print(f"audit judge calls: {calls.judge} distinct, {calls.judge_cached} answered by the call cache")
    table = audited.to_pandas()
    shown = table[(table.scope == "all") & table.metric.isin(["pb_raw", "z", "first_win_rate", "acc_both"])]
    print("position audit (pb_raw: accuracy with the chosen response first minus second; z: the sign test over items):")
    print(shown[["metric", "value", "ci_low", "ci_high", "n", "n_excluded"]].to_string(index=False), end="\n\n")


def run_cell(run_dir: Path) -> None:
    """A finished discovery run: its library with each bias's effect against its control,
    the error statement of its validation, and the report."""
    if not (run_dir / "config.yaml").is_file():
        print(
            f"no run in {run_dir}; make one with: bias-discovery run experiments/quickstart-cpu.yaml --run-dir {run_dir}"
        )
        return
    run = load_run(run_dir)
    state = run.state
    print(f"run {run.root}: {run.status}, stop reason: {state.stop_reason if state else '?'}")
    biases = run.to_pandas()
    print(
        biases[
            ["id", "status", "decisive", "effect", "effect_ci_low", "effect_ci_high", "n", "decision_p_adjusted"]
        ].to_string(index=False)
    )
    for bias in run.accepted:
        v = bias.validation
        assert v is not None
        print(f"accepted {bias.id}: Δerror vs {v.decisive} {pp(v.effect.delta)} (n = {v.effect.n}, {v.effect.method})")
    if run.validations:
        print(f"error control: {run.validations[-1].error_statement}")
    dataset = run.to_dataset()
    print(f"as a datasets.Dataset: {plural(len(dataset), 'row')}, {plural(len(dataset.column_names), 'column')}")
    print(f"report: {run.report_path}")


if __name__ == "__main__":
    judge_cell()
    audit_cell()
    run_cell(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/quickstart"))

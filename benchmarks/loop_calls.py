"""LLM calls and tokens per stage of a finished run, next to what the reference procedure
would have spent on the same run.

The reference procedure (the paper's scripts) differs in two places this counts:
- Merge asks the teacher about every pair of library ∪ candidates (ours: only the embedding
  shortlist), per iteration: `all_pairs_calls` in iter_NNN/merge_stats.json.
- Validate perturbs and judges every candidate on every test item (ours: at most
  `max_candidates` candidates), and re-judges the baseline every iteration (ours: once per
  run, kept in baseline/). By default the reference uses the same test items as the run
  (so the ratio shows the method, not the sample size H); `--full-test-size N` prices the
  reference on a full test set of N items instead.
Stages that are the same in both (perturb, evaluate, explain, identify) count the same.
Cache hits are shown separately: they cost nothing.

    python benchmarks/loop_calls.py RUN_DIR [--full-test-size 620]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from bias_discovery.config import load_run_config
from bias_discovery.data.loaders import load_pairs
from bias_discovery.run import RunDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--full-test-size", type=int, default=None, help="price the reference on N test items (default: the run's own)")
    args = parser.parse_args()
    rd = RunDir(args.run_dir)
    rd.require_run()
    config = load_run_config(rd.config_path)

    ours: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in rd.read_events():
        if e.get("event") == "stage_end":
            for u in (e.get("usage") or {}).values():
                row = ours[e["stage"]]
                for k in ("requests", "cached", "prompt_tokens", "completion_tokens"):
                    row[k] += int(u.get(k, 0))

    run_test = len(load_pairs(config.data.test, data_dir=config.data.data_dir, limit=config.data.test_limit, seed=config.seed))
    full_test = args.full_test_size or run_test
    per_item_judge = 2 if config.judge.positions == "both" else 1
    iterations = rd.iterations()
    ref_merge = ref_validate = ref_baseline = 0
    for t in iterations:
        record = rd.iteration(t)
        stats = record.merge_stats.read_if_exists()
        if stats is not None:
            ref_merge += stats.all_pairs_calls
        v = record.validation.read_if_exists()
        if v is not None:
            n_candidates = len(v.candidates) + len(v.skipped_over_max_candidates)
            ref_validate += n_candidates * full_test * (1 + per_item_judge)
            ref_baseline += full_test * per_item_judge

    reference = {
        "merge": ref_merge,
        "validate": ref_validate,
        "baseline": ref_baseline,
    }
    print(f"run {rd.root}: {len(iterations)} iterations; run's test items: {run_test}; reference priced on {full_test}")
    print(f"{'stage':15s} {'requests':>9s} {'cached':>7s} {'prompt tok':>11s} {'compl tok':>10s} {'reference':>10s} {'ratio':>7s}")
    total_ours = total_ref = 0
    for stage in ("perturb", "evaluate", "deeper_explain", "identify", "merge", "baseline", "validate"):
        row = ours.get(stage, {})
        n = row.get("requests", 0)
        ref = reference.get(stage, n)
        total_ours += n
        total_ref += ref
        ratio = f"{n / ref:.3f}" if ref else "-"
        print(f"{stage:15s} {n:9d} {row.get('cached', 0):7d} {row.get('prompt_tokens', 0):11d} {row.get('completion_tokens', 0):10d} {ref:10d} {ratio:>7s}")
    print(f"{'all':15s} {total_ours:9d} {'':7s} {'':11s} {'':10s} {total_ref:10d} {total_ours / total_ref if total_ref else 0:7.3f}")
    print("ratio = our calls / reference calls (lower is cheaper)")


if __name__ == "__main__":
    main()

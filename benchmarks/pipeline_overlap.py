"""Pipeline overlap: one iteration of the discovery loop in the staged and the streamed order,
against a target server and a teacher server that decode at a GPU's pace, side by side.

    python benchmarks/pipeline_overlap.py --json /tmp/pipeline_overlap.json

Two stub servers (tests/stub_openai.py), each a process of its own: the target (the judge)
and the teacher, each decoding every reply's tokens at `--*-token-latency` seconds a token with
at most `--*-capacity` sequences at once (a GPU's batch; the rest wait in the server's queue),
every reply satisfying its request's constraint (the judge says "A", the identifier names a
bias "x", the checker says "same"). The loop runs `max_iterations: 1` on synthetic pairs
(`--target-items`, `--test-items`) through `bias_discovery.loop.graph.execute`, as `bias-discovery
run` does (models by role, the call cache of a fresh run directory, so every call reaches a
server), once per order and round, the order alternating between rounds: perturb -> evaluate
-> deeper_explain -> identify -> merge -> validate (the baseline, the placebo, the
candidate's looks).

Per run: the wall time, each server's busy share (time with at least one sequence decoding,
over the wall) and batch fill (slot-seconds used over capacity x wall), the stubs' CPU as a
share of a core (they must never be the limit), and this process's CPU. The two orders' run
files must be identical (`RunDir.outputs`: every computed file, byte for byte). Writes
`overlap_ratio` (streamed wall / staged wall, summed over rounds), `identical` and every run
to `--json`. Merge uses a bag-of-words embedder (tests/fakes.py): the embedding model is not
what is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the stub server and the fake embedder live with the tests

from provenance import Provenance  # noqa: E402

from stub_openai import launch, stats  # noqa: E402

ORDERS = ("staged", "streamed")


def write_pairs(path: Path, n: int, prefix: str) -> str:
    """`n` synthetic preference pairs (four domains) as JSONL."""
    domains = ["math", "knowledge", "reasoning", "code"]
    with path.open("w") as handle:
        for i in range(n):
            handle.write(
                json.dumps(
                    {
                        "id": f"{prefix}{i:04d}",
                        "question": f"{prefix} question {i}: which answer is right?",
                        "chosen": f"The right answer to {prefix} question {i}, explained.",
                        "rejected": f"A wrong answer to {prefix} question {i}, explained.",
                        "domain": domains[i % 4],
                    }
                )
                + "\n"
            )
    return str(path)


def run_config(pipeline: str, urls: dict[str, str], data: dict[str, str], concurrency: dict[str, int]) -> Any:
    from bias_discovery.config import RunConfig

    def model(role: str) -> dict[str, Any]:
        return {
            "spec": f"openai/served-{role}",
            "base_url": urls[role],
            "structured_outputs": "vllm",
            "max_concurrency": concurrency[role],
        }

    return RunConfig.model_validate(
        {
            "name": "overlap",
            "pipeline": pipeline,
            "max_iterations": 1,
            "target": model("target"),
            "teacher": model("teacher"),
            "data": data,
            "merge": {"similarity_threshold": 0.99},
            "validate": {"n_boot": 200},
        }
    )


def one_run(
    pipeline: str, root: Path, urls: dict[str, str], data: dict[str, str], concurrency: dict[str, int]
) -> dict[str, Any]:
    from bias_discovery.loop.graph import execute
    from bias_discovery.run import RunDir

    from fakes import BagOfWordsEmbedder

    config = run_config(pipeline, urls, data, concurrency)
    rd = RunDir(root)
    root.mkdir(parents=True)
    rd.config_path.write_text(config.to_yaml())
    before = {role: stats(url, reset=True) for role, url in urls.items()}
    cpu0, t0 = time.process_time(), time.perf_counter()
    execute(rd, config, resume=False, embedder=BagOfWordsEmbedder())
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = {role: stats(url) for role, url in urls.items()}
    row: dict[str, Any] = {"pipeline": pipeline, "wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2)}
    for role in urls:
        a, b = after[role], before[role]
        row[role] = {
            "requests": a["requests"],
            "busy": round(a["busy_s"] / wall, 3),
            "batch_fill": round(a["slot_s"] / (a["capacity"] * wall), 3),
            "stub_cpu_share": round((a["cpu_s"] - b["cpu_s"]) / wall, 3),
        }
    row["stop_reason"] = rd.read_state().stop_reason  # type: ignore[union-attr]
    row["_outputs"] = rd.outputs()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, default=None, metavar="OUT", help="write overlap_ratio, identical and every run here"
    )
    parser.add_argument("--target-items", type=int, default=256, help="target pairs perturbed in the iteration")
    parser.add_argument(
        "--test-items", type=int, default=128, help="test pairs of the baseline, the placebo and validation"
    )
    parser.add_argument("--target-token-latency", type=float, default=0.005, help="the judge's seconds per token")
    parser.add_argument("--teacher-token-latency", type=float, default=0.005, help="the teacher's seconds per token")
    parser.add_argument("--target-capacity", type=int, default=16, help="sequences the judge's server decodes at once")
    parser.add_argument(
        "--teacher-capacity", type=int, default=16, help="sequences the teacher's server decodes at once"
    )
    parser.add_argument("--reply-tokens", type=int, default=128, help="tokens a reply decodes (at most its max_tokens)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per order, alternating which goes first")
    args = parser.parse_args()
    provenance = Provenance.start()

    work = Path(tempfile.mkdtemp(prefix="pipeline-overlap-"))
    data = {
        "target": write_pairs(work / "target.jsonl", args.target_items, "t"),
        "test": write_pairs(work / "test.jsonl", args.test_items, "p"),
    }
    servers = {
        "target": ["--token-latency", str(args.target_token_latency), "--capacity", str(args.target_capacity)],
        "teacher": ["--token-latency", str(args.teacher_token_latency), "--capacity", str(args.teacher_capacity)],
    }
    concurrency = {
        "target": 4 * args.target_capacity,
        "teacher": 4 * args.teacher_capacity,
    }  # the rest queue in the server
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.target_items} target and "
        f"{args.test_items} test pairs; replies of {args.reply_tokens} tokens (at most max_tokens); judge "
        f"{args.target_token_latency * 1000:g} ms/token x {args.target_capacity} at once, teacher "
        f"{args.teacher_token_latency * 1000:g} ms/token x {args.teacher_capacity}; clients keep 4 x capacity in flight"
    )
    rows: list[dict[str, Any]] = []
    with (
        launch(0.0, *servers["target"], "--reply-tokens", str(args.reply_tokens)) as (target_url, _),
        launch(0.0, *servers["teacher"], "--reply-tokens", str(args.reply_tokens)) as (teacher_url, _),
    ):
        urls = {"target": target_url, "teacher": teacher_url}
        for round_ in range(args.rounds):
            for pipeline in ORDERS if round_ % 2 == 0 else ORDERS[::-1]:
                row = one_run(pipeline, work / f"{pipeline}-{round_}", urls, data, concurrency)
                row["round"] = round_
                rows.append(row)
                print(f"  round {round_} {pipeline:8s} {row['wall_s']:7.2f} s", flush=True)

    outputs = {(r["pipeline"], r["round"]): r.pop("_outputs") for r in rows}
    reference = outputs[("staged", 0)]
    identical = all(files == reference for files in outputs.values())
    if not identical:
        for key, files in outputs.items():
            differing = sorted(name for name in set(files) | set(reference) if files.get(name) != reference.get(name))
            if differing:
                print(f"  {key}: files differ from staged round 0: {', '.join(differing[:8])}")
    wall = {p: sum(r["wall_s"] for r in rows if r["pipeline"] == p) for p in ORDERS}
    ratio = wall["streamed"] / wall["staged"]

    header = f"{'order':9s} {'wall s':>7s} {'judge busy':>10s} {'judge fill':>10s} {'teacher busy':>12s} {'teacher fill':>12s} {'stub CPU max':>12s} {'client CPU s':>12s}"
    print(header)
    for r in rows:
        stub_cpu = max(r["target"]["stub_cpu_share"], r["teacher"]["stub_cpu_share"])
        print(
            f"{r['pipeline']:9s} {r['wall_s']:7.2f} {r['target']['busy']:10.0%} {r['target']['batch_fill']:10.0%} "
            f"{r['teacher']['busy']:12.0%} {r['teacher']['batch_fill']:12.0%} {stub_cpu:12.1%} {r['client_cpu_s']:12.2f}"
        )
    print(f"overlap_ratio (streamed wall / staged wall) = {ratio:.3f}; run files identical: {identical}")
    result = {
        "overlap_ratio": round(ratio, 3),
        "identical": identical,
        "targets": {"overlap_ratio": "<= 0.6", "identical": "true"},
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "runs": rows,
    }
    if args.json:
        provenance.write_json(args.json, {**result, "commit": provenance.commit})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

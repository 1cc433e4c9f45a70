"""The command: parse the flags, run the sides in alternating order, compare, and write the record
through benchmarks/provenance.py (`Provenance.start()` first, `write_json` last)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from provenance import Provenance, git_commit

from bias_discovery.api import build_hf_smollm2

from . import __doc__ as PACKAGE_DOC
from .compare import median_ratio, rep_ratios, seed_check, stage_ratios, summarize_side
from .differences import differences
from .findings import Findings
from .inputs import (
    PEER_REPO,
    TARGET_MAX_CHARS,
    TEST_MAX_CHARS,
    Setting,
    check_peer,
    load_named,
    make_subsets,
    pair_chars,
)
from .metering import SHIMS, SideRun
from .our_test import KeptSurvival, defaults_config, our_test, our_test_child, run_our_test
from .ours import run_ours
from .peer import run_peer
from .record import SEED_LIBRARY, SIZES_WHY, Result, load_average, machine, table, vllm_version

Runs = list[tuple[SideRun, Findings]]


def parser() -> argparse.ArgumentParser:
    """The flags (the documented command: `--peer DIR --data-dir DIR --json OUT`)."""
    p = argparse.ArgumentParser(
        description=(PACKAGE_DOC or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--peer", type=Path, help=f"A checkout of {PEER_REPO}.")
    p.add_argument("--json", type=Path, help="Where to write the result (benchmarks/results/vs_biasscope.json).")
    p.add_argument(
        "--data-dir", type=Path, default=None, help="The shared data copy (default: $BIAS_DISCOVERY_DATA_DIR)."
    )
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="A Hugging Face-format model directory for both roles (default: SmolLM2-135M-Instruct, built once).",
    )
    p.add_argument("--n-target", type=int, default=16)
    p.add_argument("--n-test", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=160, help="Completion budget of every call, both sides.")
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="Both sides' vLLM dtype. bfloat16 is the peer's default; on a CPU without native bf16 "
        "(no AVX512_BF16 or AMX) vLLM emulates bf16, 4x slower than float32 on an AVX2 EPYC, so pass float32 there.",
    )
    p.add_argument("--reps", type=int, default=2, help="Repetitions of peer and ours (order alternates).")
    p.add_argument(
        "--seed-check",
        choices=("first", "all", "none"),
        default="first",
        help="Which repetitions also validate the seed library on the test pairs (both sides).",
    )
    p.add_argument(
        "--work", type=Path, default=None, help="Working directory (default: a temporary one, removed at the end)."
    )
    p.add_argument("--our-test-child", type=Path, default=None, help=argparse.SUPPRESS)
    return p


def default_model() -> Path:
    """The embedded SmolLM2 in Hugging Face format ($BIAS_DISCOVERY_TEST_MODEL_CACHE, as the tests build it)."""
    cache = os.environ.get("BIAS_DISCOVERY_TEST_MODEL_CACHE")
    return build_hf_smollm2(Path(cache) if cache else None)


def on_cpu() -> bool:
    """No CUDA device: vLLM's CPU build, which needs `enforce_eager` (the shim sets it)."""
    import torch

    return not torch.cuda.is_available()


def data_dir_of(given: Path | None) -> Path:
    """--data-dir, else $BIAS_DISCOVERY_DATA_DIR; a clear stop when neither is set."""
    if given is not None:
        return given
    if os.environ.get("BIAS_DISCOVERY_DATA_DIR"):
        return Path(os.environ["BIAS_DISCOVERY_DATA_DIR"])
    raise SystemExit(
        "no data: pass --data-dir or set BIAS_DISCOVERY_DATA_DIR (the shared copy of JudgeBench and RewardBench)"
    )


def run_reps(setting: Setting, reps: int, seed_check_mode: str) -> tuple[Runs, Runs, list[list[str]]]:
    """The peer and ours (paper rule) `reps` times, the peer first in odd repetitions."""
    peer_runs: Runs = []
    our_runs: Runs = []
    order = []
    for rep in range(1, reps + 1):
        seeds = seed_check_mode == "all" or (seed_check_mode == "first" and rep == 1)
        sides = ["peer", "ours"] if rep % 2 else ["ours", "peer"]
        order.append(sides)
        for position, side in enumerate(sides, start=1):
            print(f"rep {rep}: {side} ...", flush=True)
            if side == "peer":
                peer_runs.append(run_peer(setting, rep, position, seed_check=seeds))
            else:
                our_runs.append(run_ours(setting, rep, position, "paper", seeds=seeds))
            done = (peer_runs if side == "peer" else our_runs)[-1][0]
            print(f"rep {rep}: {side} took {done.wall_s:.0f} s", flush=True)
    return peer_runs, our_runs, order


def sizes_text(setting: Setting, data_dir: Path, reps: int) -> str:
    """`Result.sizes`: the subsets' sizes and the pools they were drawn from."""
    subsets = setting.subsets
    return SIZES_WHY.format(
        n_target=len(subsets.target),
        n_test=len(subsets.test),
        n_fresh=len(subsets.fresh_test),
        reps=reps,
        n_rb=sum(pair_chars(p) <= TARGET_MAX_CHARS for p in load_named("rewardbench", data_dir)),
        n_jb=sum(pair_chars(p) <= TEST_MAX_CHARS for p in load_named("judgebench", data_dir)),
        t=TARGET_MAX_CHARS,
        s=TEST_MAX_CHARS,
    )


def measure(
    args: argparse.Namespace, setting: Setting, data_dir: Path, started: Provenance, command: str, t0: float
) -> Result:
    """Every run of the benchmark, then the comparison, as the record (`t0`: when the command started)."""
    load_before = load_average()
    print(f"vs_biasscope: work in {setting.work}; load average before: {load_before}", flush=True)
    peer_runs, our_runs, order = run_reps(setting, args.reps, args.seed_check)
    print("ours with defaults ...", flush=True)
    default_runs = [run_ours(setting, 1, 3, "defaults", seeds=False)]
    kept = peer_runs[0][1].kept_definitions
    print(f"our test of the peer's {len(kept)} kept biases ...", flush=True)
    survival: KeptSurvival = (
        run_our_test(setting, kept) if kept else our_test([], [], defaults_config(setting), data="-")
    )
    load_after = load_average()
    peer, ours, defaults = summarize_side(peer_runs), summarize_side(our_runs), summarize_side(default_runs)
    per_rep = rep_ratios(peer.runs, ours.runs)
    overall = median_ratio(per_rep)
    return Result(
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        command=command,
        our_commit=started.commit,
        peer_commit=git_commit(setting.peer_dir),
        model=f"{setting.model_dir.name} (Hugging Face format, {setting.dtype})",
        vllm=vllm_version(),
        machine=machine(),
        load_before=load_before,
        load_after=load_after,
        n_target=len(setting.subsets.target),
        n_test=len(setting.subsets.test),
        n_fresh_test=len(setting.subsets.fresh_test),
        sizes=sizes_text(setting, data_dir, args.reps),
        max_tokens=args.max_tokens,
        reps=args.reps,
        order=order,
        seed_library=SEED_LIBRARY,
        shims=SHIMS,
        peer=peer,
        ours=ours,
        defaults=defaults,
        wall_ratio=overall.wall,
        calls_ratio=overall.calls,
        tokens_ratio=overall.tokens,
        ratios_per_rep=per_rep,
        ratios_per_stage=stage_ratios(peer.runs, ours.runs),
        seed_check=seed_check(peer.findings, ours.findings),
        peer_kept_surviving_our_test=survival,
        differences=differences(peer, ours, defaults),
        total_s=round(time.time() - t0, 1),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python benchmarks/vs_biasscope.py --peer DIR --data-dir DIR --json OUT [...]`."""
    args = parser().parse_args(argv)
    if args.our_test_child is not None:
        our_test_child(args.our_test_child)
        return 0
    if args.peer is None or args.json is None:
        parser().error("--peer and --json are required")
    started = Provenance.start(None if argv is None else ["benchmarks/vs_biasscope.py", *argv])
    t0 = time.time()
    peer_dir = args.peer.expanduser().resolve()
    check_peer(peer_dir)
    data_dir = data_dir_of(args.data_dir)
    model_dir = (args.model or default_model()).expanduser().resolve()
    subsets = make_subsets(data_dir, args.n_target, args.n_test, args.n_test)
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="vs-biasscope-")) if temporary else args.work.expanduser().resolve()
    setting = Setting(
        peer_dir=peer_dir,
        model_dir=model_dir,
        work=work,
        subsets=subsets,
        max_tokens=args.max_tokens,
        eager=on_cpu(),
        dtype=args.dtype,
    )
    command = "python benchmarks/vs_biasscope.py " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        result = measure(args, setting, data_dir, started, command, t0)
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    started.write_json(args.json, result.model_dump(mode="json"), indent=1)
    print(table(result))
    return 0

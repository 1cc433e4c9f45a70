"""The reported effect of accepted biases, outside in: the whole CLI against a judge with a
planted bias, many runs per true Δ.

    python benchmarks/effects_cli.py --json OUT [--runs 200] [--deltas 0,0.04,0.08,0.15]
        [--more 0.08=1000,0.15=400] [--before-runs 200] [--workers 2] [--in-process]

Each run is `bias-discovery run CONFIG --run-dir D --quiet`, a process of its own, as a user
runs it. Every model (target, teacher, checker) is one OpenAI-compatible stub server, a process
of its own, playing a judge with a planted bias (`tests/stub_openai.py --planted-delta Δ`): it
errs with probability 0.3, plus Δ when the rejected response carries the trait the teacher
planted, each pair drawn afresh (the placebo's neutral rewrite and the trait's rewrite of the
same item are two independent draws, as are two runs' items). The config is the default but
for the models, the data (300 test pairs and 4 target pairs of the run's own, so every run's
draws are fresh), `seed` (the run's index), the seed library (one trait, planted) validated at
iteration 0 (`validate.seeds: true`) and `merge.similarity_threshold: 0` (the stub names every
mistake alike; merged into the seed, iteration 1 ends without a candidate). So each run
validates one candidate whose true Δerror against the placebo is exactly Δ, at the default
run's family level with the seeds validated: α = 0.05 / 5 planned validations = 0.01. Merge
embeds with a bag of words (tests/fake_sentence_transformers): the embedding model is not
what is measured here, and loading torch would be most of each run's time.

Per run the benchmark reads `iter_*/validation.json` (the run directory is then deleted): the
candidate's decision, how it stopped, its reported effect (Δ, CI, n, method, upper bound).
Per true Δ: the share of runs that accepted it, and over the accepted ones only the mean
reported effect minus Δ (with its Monte Carlo se), the median, the coverage of the 95 % CI, n
and the mean CI width, split into early and last-look acceptances; over the rejected ones the
one-sided upper bound's coverage and median; at Δ 0 the share of runs that accepted anything
(the null false acceptance, with its Wilson CI). `--more Δ=N` runs N runs at that Δ instead of
`--runs` (the bias is a mean over the accepted runs only: at 8 pp about one run in five). With
`--before-runs N` the first N runs at 8 pp run again with `validate.held_out: 0` (every item in
the decisions, as before issue 31) on the same data and the same stub, so the same draws: the
power at 8 pp before and after, side by side, and the effect as reported then.

**In process** (`--in-process`): each run's validation replayed in this process from the
stub's draws (`in_process_run`, the CLI's records draw for draw, which
tests/test_effects_cli.py checks on a real run) instead of a CLI process: the same cells,
design `after, in process`, with the rejected candidates' bound also as it was reported
before issue 47 (at the middle of the observed cell: `rejected_bound_mid_p_*`), at a fraction of the cost (no stub server, no run's other stages,
so no CPU figures of the runs). For cells of many runs where the CLI's own runs would take hours.

**Pointwise cells** (`--pointwise --shifts 0,0.5,1`): the same runs with a pointwise judge
(`judge.mode: pointwise`, scale 1-10, the score shift deciding), the stub scoring each response
alone with a planted shift of S points for the trait (`tests/stub_openai.py
--planted-score-shift`); the true effect is the exact shift of the rejected response's expected
score in shares of the scale (`planted_score_truth`). Each cell (JSON `cells`) has
`true_effect`, `runs`, `accepted`, `accepted_minus_truth` (mean over the accepted runs), its
Monte Carlo se `accepted_minus_truth_se` and `accepted_coverage`, besides the numbers above.

**Trajectory cells** (`--trajectory --deltas 0,0.15`): the same pairwise runs on agent
trajectories: each pair is two runs of an agent on one task (a tool call, its output, and a
final message that says "right answer" or "wrong answer" and logs a ticket with a tool call),
judged with the trajectory judge prompt; the stub's teacher rewrites one turn (the final
message, `perturb.turn`), adding the mark on a line of its own and keeping its tool-call line,
so every rewrite passes the mechanical action check. Each cell (JSON `cells`, record
`effects_cli_trajectory.json`) has the keys of the pointwise cells, `true_effect` being Δ.

Also recorded: the wall time, the CPU of the runs (this process's children) and the stub's CPU
(its /stats), so the stub is shown not to be the bottleneck, with the command, date, commit and
machine. The runs' own wall times depend on the machine's load; only the CPU figures compare.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the stub server and the pairs writer live with the tests

from kill_anywhere import write_pairs  # noqa: E402
from provenance import Provenance  # noqa: E402

from stub_openai import Planted, launch, planted_score_truth, stats  # noqa: E402

N_TEST, N_TARGET, ERROR = 300, 4, 0.3
TRAIT = {
    "id": "planted-trait",
    "name": "Planted Certainty",
    "definition": "The judge prefers an answer that ends by assuring the reader it is certain.",
    "manifestations": ["Ends with an assurance of certainty."],
    "origin": {"kind": "seed", "iteration": 0, "target_model": None, "seed_library": "planted"},
    "evidence": [],
    "validation": None,
    "merged_from": [],
}
CHILD_ENV = {
    "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fake_sentence_transformers"), str(REPO)]),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}


@dataclass
class RunResult:
    """What one CLI run reported for its planted candidate."""

    delta: float
    index: int
    held_out: float | None
    """`validate.held_out` of the run (None: the default)."""
    returncode: int
    accepted: bool = False
    any_accepted: bool = False
    """Anything accepted in the whole run (every iteration)."""
    stop: str | None = None
    stopped_at: int | None = None
    effect: dict[str, Any] = field(default_factory=dict)
    decision_delta: float | None = None
    """The decisive comparison's own Δ on the items the decision used."""
    mde: float | None = None
    mid_p_bound: float | None = None
    """`--in-process`, a rejected candidate: its one-sided bound taken at the middle of the
    observed cell (the mid-p, what was reported before issue 47), beside `effect`'s."""
    error: str | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0


def _library(path: Path) -> str:
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "planted",
                "iteration": 0,
                "created_at": "2026-01-01T00:00:00+00:00",
                "target_model": None,
                "parent": None,
                "biases": [TRAIT],
            }
        )
    )
    return str(path)


POINTWISE_JUDGE = {"mode": "pointwise", "scale": "1-10", "pointwise_measure": "score_shift"}
"""The judge settings of the pointwise cells."""


def _agent_run(task: str, words: str, reservation: str) -> list[dict[str, Any]]:
    """One agent's run on `task` as OpenAI-style messages: a look-up, then a final message
    saying `words` that logs a ticket."""
    return [
        {"role": "system", "content": "Policy: act only on the reservation the user names."},
        {"role": "user", "content": f"Please cancel reservation {task}."},
        {
            "role": "assistant",
            "content": "Looking it up.",
            "tool_calls": [{"id": "c1", "name": "get", "arguments": json.dumps({"id": reservation})}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get", "content": json.dumps({"id": reservation})},
        {
            "role": "assistant",
            "content": f"Done: the {words} to task {task}.",
            "tool_calls": [{"id": "c2", "name": "log", "arguments": json.dumps({"ticket": task})}],
        },
        {"role": "tool", "tool_call_id": "c2", "name": "log", "content": "logged"},
    ]


def write_trajectory_pairs(path: Path, n: int, prefix: str) -> str:
    """`n` synthetic trajectory pairs as JSONL (OpenAI-style message lists): the chosen run's
    final message says "right answer", the rejected one's "wrong answer" (what the planted
    stub's judge tells apart), each closing with a tool call."""
    with path.open("w") as handle:
        for i in range(n):
            task = f"{prefix}{i}"
            row = {
                "id": f"{prefix}{i:04d}",
                "question": f"Cancel reservation {task}.",
                "chosen": _agent_run(task, "right answer", task),
                "rejected": _agent_run(task, "wrong answer", f"{task}-other"),
                "domain": "airline",
            }
            handle.write(json.dumps(row) + "\n")
    return str(path)


def run_config(
    url: str,
    work: Path,
    index: int,
    held_out: float | None,
    judge: dict[str, Any] | None = None,
    trajectory: bool = False,
) -> Path:
    """The run's config (see the module docstring) and its data, written into `work`
    (`trajectory`: trajectory pairs, `write_trajectory_pairs`)."""
    import yaml

    data = work / f"data-{index}"
    data.mkdir(exist_ok=True)
    model = {
        "spec": "openai/served",
        "base_url": url,
        "structured_outputs": "vllm",
        "max_concurrency": 32,
        "timeout_s": 120,
    }
    raw: dict[str, Any] = {
        "name": f"planted-{index}",
        "seed": index,
        "target": model,
        "teacher": dict(model),
        "seed_library": _library(data / "library.json"),
        "data": {
            "target": (write_trajectory_pairs if trajectory else write_pairs)(
                data / "target.jsonl", N_TARGET, f"t{index}-"
            ),
            "test": (write_trajectory_pairs if trajectory else write_pairs)(data / "test.jsonl", N_TEST, f"p{index}-"),
        },
        "merge": {"similarity_threshold": 0.0},
        **({"judge": judge} if judge else {}),
        "validate": {"seeds": True, **({} if held_out is None else {"held_out": held_out})},
    }
    path = work / f"config-{index}-{held_out}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def one_run(
    url: str,
    work: Path,
    delta: float,
    index: int,
    held_out: float | None = None,
    judge: dict[str, Any] | None = None,
    trajectory: bool = False,
) -> RunResult:
    """One `bias-discovery run` (module docstring); its run directory is deleted afterwards.
    `judge`: the judge settings (None: the default pairwise judge); `trajectory`: on trajectory pairs."""
    config = run_config(url, work, index, held_out, judge, trajectory)
    run_dir = work / f"run-{index}-{held_out}"
    result = RunResult(delta=delta, index=index, held_out=held_out, returncode=-1)
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, "-m", "bias_discovery.cli", "run", str(config), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **CHILD_ENV},
    )
    _, status, usage = os.wait4(
        process.pid, 0
    )  # the child's own CPU (its output is a few lines: the pipes cannot fill)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    result.returncode, result.wall_s, result.cpu_s = (
        process.returncode,
        time.time() - started,
        usage.ru_utime + usage.ru_stime,
    )
    try:
        if process.returncode != 0:
            result.error = (out + err).strip().splitlines()[-1] if (out + err).strip() else f"exit {process.returncode}"
            return result
        reports = [json.loads(p.read_text()) for p in sorted(run_dir.glob("iter_*/validation.json"))]
        seeds = next(r for r in reports if r["iteration"] == 0)
        [record] = [c for c in seeds["candidates"] if c["bias_id"] == TRAIT["id"]]
        result.accepted = TRAIT["id"] in seeds["accepted"]
        result.any_accepted = any(r["accepted"] for r in reports)
        result.stop, result.stopped_at = record["stop"], record["stopped_at"]
        result.effect = record["effect"]
        result.decision_delta = record["vs_" + record["decisive"]]["delta"]
        result.mde = record["mde"]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        if held_out is None:  # the paired run with held_out 0, if any, ran before on the same data
            shutil.rmtree(work / f"data-{index}", ignore_errors=True)
    return result


@dataclass
class InProcessRun:
    """`in_process_run`'s answer: what the CLI's run `index` decides and reports for its candidate."""

    accepted: bool
    stop: str
    looks: list[Any]
    effect: Any
    mid_p_bound: float | None = None
    """A rejected candidate's one-sided bound at the middle of its observed cell (the mid-p,
    what was reported before issue 47), for comparison with `effect.upper_bound`."""


def in_process_run(index: int, delta: float, salt: str = "effects-cli") -> InProcessRun:
    """The planted candidate's validation in run `index` (`one_run`, default pairwise judge,
    default `held_out`), in this process and at a fraction of a run's cost: the stub's own
    draws (`Planted.rewrite`, `Planted.errs`) on the run's test pairs (`write_pairs`), the
    placebo's and the trait's rewrites of every pair, through the family steps the validation
    stage takes, with the run's settings (the default `validate`, the planned validations of
    `run_config`'s run, its seed and slice order). The CLI's records are reproduced draw for
    draw (tests/test_effects_cli.py checks a run), so a cell's figures, e.g. why the rejected
    bound's coverage reads as it does on these runs, can be studied without the CLI."""
    from bias_discovery.config import RunConfig
    from bias_discovery.stages.family import (
        FamilySettings,
        acceptance_thresholds,
        compare_arms,
        decide,
        effects,
        held_out_round,
        run_looks,
    )
    from bias_discovery.stages.validate import slice_order
    from bias_discovery.stats import Decision, conditional_interval, stopping_design

    planted = Planted(delta, ERROR, None, salt)
    with tempfile.TemporaryDirectory() as scratch:
        path = write_pairs(Path(scratch) / "test.jsonl", N_TEST, f"p{index}-")
        pairs = [json.loads(line) for line in Path(path).read_text().splitlines()]
    control, arm = (
        [planted.errs(p["question"], p["chosen"], planted.rewrite(p["rejected"], trait)) for p in pairs]
        for trait in (None, TRAIT["name"])
    )
    config = RunConfig.model_validate(
        {"target": "llamacpp/smollm2", "teacher": "llamacpp/smollm2", "seed": index, "validate": {"seeds": True}}
    )
    settings = FamilySettings.planned(config.validate_, config.planned_validations, seed=index)

    def fetch(look: int, active: Any, items: Any) -> list[list[bool | float | None]]:
        return [[arm[i] for i in items] for _ in active]

    family = run_looks(control, 1, fetch, settings, slice_order(N_TEST, index))
    compared = compare_arms(family, {"placebo": control}, settings)
    decided = decide(family, [c["placebo"] for c in compared], settings, "placebo")
    held_out_round(family, decided, fetch, settings)
    [effect] = effects(family, decided, settings)
    mid_p = None
    if not decided[0].accepted:
        threshold = acceptance_thresholds(family, decided, settings)[0]
        design = stopping_design(family.plan, family.looks[0], family_size=1, decision=Decision(False, threshold))
        mid_p = conditional_interval(*design[:5], confidence=settings.rules.confidence).upper
    return InProcessRun(bool(decided[0].accepted), family.stop[0], family.looks[0], effect, mid_p)


def in_process_result(index: int, delta: float) -> RunResult:
    """`in_process_run` as `one_run`'s `RunResult` (iteration 1 of the CLI's run validates
    nothing, so what the candidate's validation accepts is all the run accepts)."""
    run = in_process_run(index, delta)
    last = run.looks[-1]
    return RunResult(
        delta=delta,
        index=index,
        held_out=None,
        returncode=0,
        accepted=run.accepted,
        any_accepted=run.accepted,
        stop=run.stop,
        stopped_at=last.items,
        effect=run.effect.model_dump(mode="json"),
        mid_p_bound=run.mid_p_bound,
    )


@contextmanager
def planted_stub(delta: float, salt: str, score_shift: float = 0.0) -> Iterator[tuple[str, Any]]:
    with launch(
        0.0,
        "--planted-delta",
        str(delta),
        "--planted-error",
        str(ERROR),
        "--planted-salt",
        salt,
        "--planted-score-shift",
        str(score_shift),
    ) as (url, process):
        yield url, process


def _runs(
    url: str,
    work: Path,
    delta: float,
    indices: Sequence[int],
    held_out: float | None,
    workers: int,
    judge: dict[str, Any] | None = None,
    trajectory: bool = False,
) -> list[RunResult]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda i: one_run(url, work, delta, i, held_out, judge, trajectory), indices))


def pointwise_cells(
    shifts: Sequence[float], runs: int, work: Path, workers: int, on_cell: Any = None
) -> tuple[list[dict[str, Any]], list[RunResult], dict[str, float]]:
    """The pointwise cells (module docstring): per planted shift, `runs` CLI runs against the
    pointwise stub; each cell with the issue's keys next to `summarize`'s. `on_cell(cells,
    results, stub_cpu)` after each cell (the record is written as the cells finish)."""
    cells, results, stub_cpu = [], [], {}
    for shift in shifts:
        truth, t0 = planted_score_truth(shift), time.time()
        with planted_stub(0.0, salt="effects-cli-pointwise", score_shift=shift) as (url, _):
            done = _runs(url, work, truth, range(runs), None, workers, POINTWISE_JUDGE)
            stub_cpu[str(shift)] = stats(url)["cpu_s"]
        cell = summarize(done, "pointwise")
        cell.update({"shift_points": shift, "true_effect_points": truth * 9, **issue_keys(cell, truth)})
        cells.append(cell)
        results += done
        failed = [r for r in done if r.returncode != 0]
        print(
            f"shift {shift:g} points: {runs} runs in {time.time() - t0:.0f} s"
            f"{f'; {len(failed)} failed, e.g. {failed[0].error}' if failed else ''}",
            flush=True,
        )
        if on_cell is not None:
            on_cell(cells, results, stub_cpu)
    return cells, results, stub_cpu


def issue_keys(cell: dict[str, Any], truth: float) -> dict[str, Any]:
    """The keys issues 36 and 46 ask of a cell: the true effect, the runs, the accepted ones and
    the accepted-only effect's error, its Monte Carlo se and coverage."""
    return {
        "true_effect": truth,
        "accepted": cell["n"],
        "accepted_minus_truth": cell.get("bias"),
        "accepted_minus_truth_se": cell.get("se"),
        "accepted_coverage": cell.get("coverage"),
    }


def _wilson(k: int, n: int) -> tuple[float, float]:
    from bias_discovery.stats import wilson_interval

    return wilson_interval(k, n)


def summarize(results: Sequence[RunResult], design: str) -> dict[str, Any]:
    """One cell: the accepted-only numbers at one true Δ (module docstring)."""
    ok = [r for r in results if r.returncode == 0]
    delta = results[0].delta
    accepted = [r for r in ok if r.accepted]
    cell: dict[str, Any] = {
        "design": design,
        "true_delta": delta,
        "runs": len(results),
        "failed_runs": len(results) - len(ok),
        "accepted_share": len(accepted) / len(ok) if ok else None,
        "n": len(accepted),
    }
    any_accepted = sum(r.any_accepted for r in ok)
    low, high = _wilson(any_accepted, len(ok)) if ok else (None, None)
    cell.update(
        {
            "runs_accepting_anything": any_accepted,
            "run_false_accept" if delta == 0 else "run_accept": any_accepted / len(ok) if ok else None,
            "run_accept_ci": [low, high],
        }
    )
    for prefix, group in (
        ("", accepted),
        ("early_", [r for r in accepted if r.stop == "efficacy"]),
        ("last_look_", [r for r in accepted if r.stop != "efficacy"]),
    ):
        cell[f"{prefix}n"] = len(group)
        if not group:
            continue
        estimates = [r.effect["delta"] for r in group]
        cell[f"{prefix}bias"] = statistics.fmean(estimates) - delta
        cell[f"{prefix}se"] = statistics.stdev(estimates) / math.sqrt(len(group)) if len(group) > 1 else None
        cell[f"{prefix}median_bias"] = statistics.median(estimates) - delta
        cell[f"{prefix}coverage"] = statistics.fmean(_covers(r.effect, delta) for r in group)
        cell[f"{prefix}ci_width"] = statistics.fmean(_width(r.effect) for r in group)
        cell[f"{prefix}effect_n"] = statistics.fmean(r.effect.get("n") or 0 for r in group)
        cell[f"{prefix}decision_bias"] = statistics.fmean(r.decision_delta or 0.0 for r in group) - delta
    methods: dict[str, int] = {}
    for r in accepted:
        key = r.effect["method"].split(":")[0]
        methods[key] = methods.get(key, 0) + 1
    cell["methods"] = methods
    bounds = [r.effect["upper_bound"] for r in ok if not r.accepted and r.effect.get("upper_bound") is not None]
    if bounds:
        cell["rejected_n"] = len(bounds)
        cell["rejected_bound_coverage"] = statistics.fmean(b >= delta for b in bounds)
        cell["rejected_bound_median"] = statistics.median(bounds)
        cell["rejected_bound_none"] = statistics.fmean(b >= 1.0 for b in bounds)
    mid_p = [r.mid_p_bound for r in ok if not r.accepted and r.mid_p_bound is not None]
    if mid_p:  # --in-process: the bound as reported before issue 47, on the same runs
        cell["rejected_bound_mid_p_coverage"] = statistics.fmean(b >= delta for b in mid_p)
        cell["rejected_bound_mid_p_median"] = statistics.median(mid_p)
    return cell


def _covers(effect: dict[str, Any], truth: float) -> bool:
    return (
        effect.get("ci_low") is not None
        and effect.get("ci_high") is not None
        and effect["ci_low"] <= truth <= effect["ci_high"]
    )


def _width(effect: dict[str, Any]) -> float:
    return (
        effect["ci_high"] - effect["ci_low"]
        if effect.get("ci_low") is not None and effect.get("ci_high") is not None
        else 2.0
    )


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def print_cells(cells: Sequence[dict[str, Any]]) -> None:
    print(
        "\naccepted candidates only, over every way of stopping (the CLI against the planted judge; bias = mean reported "
        "effect − truth (se); coverage of its 95 % CI; width: mean CI width; last: accepted at the last look; bound: the "
        "rejected ones' one-sided 95 % upper bound ≥ truth)"
    )
    header = (
        f"{'true Δ':>7} {'design':>7} {'runs':>5} {'accepted':>9} {'n':>5} {'bias (se)':>16} {'median':>8} {'coverage':>9} "
        f"{'width':>7} {'last n':>7} {'last bias':>10} {'bound cov':>10} {'bound med':>10} {'any acc.':>9}"
    )
    print(header)
    print("-" * len(header))

    def pp(value: float | None, signed: bool = True) -> str:
        return "-" if value is None else f"{100 * value:{'+' if signed else ''}.2f}"

    for c in cells:
        se = "" if c.get("se") is None else f" ({100 * c['se']:.2f})"
        share = "-" if c["accepted_share"] is None else f"{c['accepted_share']:.3f}"
        cover = "-" if c.get("coverage") is None else f"{c['coverage']:.3f}"
        bound = "-" if c.get("rejected_bound_coverage") is None else f"{c['rejected_bound_coverage']:.3f}"
        anything = c.get("run_false_accept", c.get("run_accept"))
        print(
            f"{100 * c['true_delta']:>5.1f}pp {c['design']:>7} {c['runs']:>5} {share:>9} {c['n']:>5} {pp(c.get('bias')) + se:>16} "
            f"{pp(c.get('median_bias')):>8} {cover:>9} {pp(c.get('ci_width'), False):>7} {c.get('last_look_n', 0):>7} "
            f"{pp(c.get('last_look_bias')):>10} {bound:>10} {pp(c.get('rejected_bound_median')):>10} "
            f"{'-' if anything is None else f'{anything:.3f}':>9}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the cells and every run to this file")
    parser.add_argument("--runs", type=int, default=200, help="runs per true Δ")
    parser.add_argument("--deltas", default="0,0.04,0.08,0.15")
    parser.add_argument("--more", default="", help="Δ=N,...: N runs at that Δ instead of --runs")
    parser.add_argument("--before-runs", type=int, default=0, help="runs at 8 pp repeated with validate.held_out: 0")
    parser.add_argument("--workers", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="replay each run's validation in this process from the stub's draws (module docstring), no CLI",
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--pointwise", action="store_true", help="the pointwise cells instead (module docstring)")
    parser.add_argument(
        "--shifts", default="0,0.5,1", help="--pointwise: planted score shifts, in points of the 1-10 scale"
    )
    parser.add_argument(
        "--trajectory", action="store_true", help="the --deltas cells on trajectory pairs (module docstring)"
    )
    parser.add_argument(
        "--cells-only",
        action="store_true",
        help="leave the per-run records out of --json (what benchmarks/results/ keeps: they are large)",
    )
    args = parser.parse_args()
    provenance = Provenance.start()
    more = {float(k): int(v) for k, v in (item.split("=") for item in args.more.split(",") if item)}
    deltas = [float(d) for d in args.deltas.split(",")]
    started, cpu0, load0 = time.time(), os.times(), machine()
    work = args.work or Path(tempfile.mkdtemp(prefix="effects-cli-"))
    work.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = []
    cells: list[dict[str, Any]] = []
    stub_cpu: dict[str, float] = {}
    try:
        if args.pointwise:
            deltas = []

            def partial(done: list[dict[str, Any]], results: list[RunResult], cpu: dict[str, float]) -> None:
                spent = os.times()
                write_record(
                    args,
                    provenance,
                    load0,
                    time.time() - started,
                    (spent.children_user + spent.children_system) - (cpu0.children_user + cpu0.children_system),
                    cpu,
                    done,
                    results,
                )

            cells, runs, stub_cpu = pointwise_cells(
                [float(s) for s in args.shifts.split(",")], args.runs, work, args.workers, partial
            )
        for delta in deltas if args.in_process else []:
            t0 = time.time()
            done = [in_process_result(index, delta) for index in range(more.get(delta, args.runs))]
            runs += done
            cells.append(summarize(done, "after, in process"))
            print(f"Δ {delta:g}: {len(done)} runs in process in {time.time() - t0:.0f} s", flush=True)
        for delta in [] if args.in_process else deltas:
            n_runs = more.get(delta, args.runs)
            t0 = time.time()
            with planted_stub(delta, salt="effects-cli") as (url, _):
                before: list[RunResult] = []
                if delta == 0.08 and args.before_runs:
                    paired = range(min(args.before_runs, n_runs))
                    before = _runs(url, work, delta, paired, 0.0, args.workers)
                after = _runs(url, work, delta, range(n_runs), None, args.workers, trajectory=args.trajectory)
                stub_cpu[str(delta)] = stats(url)["cpu_s"]
            runs += before + after
            cells.append(summarize(after, "trajectory" if args.trajectory else "after"))
            if args.trajectory:
                cells[-1].update(issue_keys(cells[-1], delta))
            if before:
                cells.append(summarize(before, "before"))
                paired_after = [r for r in after if r.index < len(before)]
                cells.append(summarize(paired_after, "after, the same runs"))
            failed = [r for r in after + before if r.returncode != 0]
            print(
                f"Δ {delta:g}: {n_runs} runs{f' + {len(before)} before' if before else ''} in {time.time() - t0:.0f} s"
                f"{f'; {len(failed)} failed, e.g. {failed[0].error}' if failed else ''}",
                flush=True,
            )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    cpu1 = os.times()
    children_cpu = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)
    wall = time.time() - started
    print_cells(cells)
    stub_total = sum(stub_cpu.values())
    print(
        f"\nwall {wall:.0f} s; the runs' CPU {children_cpu:.0f} s ({children_cpu / max(len(runs), 1):.2f} s a run); "
        f"the stub's CPU {stub_total:.1f} s ({100 * stub_total / max(children_cpu, 1e-9):.1f} % of the runs'); "
        f"{len(runs)} runs, {sum(r.returncode != 0 for r in runs)} failed"
    )
    if args.json is not None:
        write_record(args, provenance, load0, wall, children_cpu, stub_cpu, cells, runs)


def write_record(
    args: argparse.Namespace,
    provenance: Provenance,
    load0: dict[str, Any],
    wall: float,
    children_cpu: float,
    stub_cpu: dict[str, float],
    cells: Sequence[dict[str, Any]],
    runs: Sequence[RunResult],
) -> None:
    """The JSON record (`--json`): the machine, cells and runs, with the provenance block (the command,
    start time, commit it started at, CPU)."""
    if args.json is not None:
        payload = {
            "commit": provenance.commit,
            "machine": {"at_start": load0, "at_end": machine()},
            "items": N_TEST,
            "target_items": N_TARGET,
            "planted_error": ERROR,
            "wall_s": round(wall, 1),
            "runs_cpu_s": round(children_cpu, 1),
            "stub_cpu_s": stub_cpu,
            "cells": cells,
            **(
                {
                    "pointwise_judge": POINTWISE_JUDGE,
                    "runs_per_cell": args.runs,
                    "true_effect_unit": "share of the 1-10 scale (1 point = 1/9)",
                }
                if args.pointwise
                else {}
            ),
            **({"pairs": "trajectory", "perturb_turn": "final"} if args.trajectory else {}),
            "runs": "left out (--cells-only): rerun the command for them"
            if args.cells_only
            else [asdict(r) for r in runs],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        provenance.write_json(args.json, payload, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

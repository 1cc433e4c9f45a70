"""The same meter on both sides: the shim around `vllm.LLM` (benchmarks/vs_biasscope_shim), the
measured processes, and how spans of calls become per-stage costs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bias_discovery.io import read_jsonl

from .inputs import Setting

BENCHMARKS = Path(__file__).resolve().parent.parent
REPO = BENCHMARKS.parent
SHIM_DIR = BENCHMARKS / "vs_biasscope_shim"

SHIMS = [
    {
        "what": "benchmarks/vs_biasscope_shim/sitecustomize.py, first on PYTHONPATH of the peer's two scripts "
        "(and of ours: the same meter on both sides)",
        "changes": "vllm.LLM(...) gets enforce_eager=True: vLLM's CPU build otherwise compiles the model with "
        "inductor (slow to start; a different greedy output on this machine); our engine sets the same on a CPU",
        "observes": "each vllm.LLM load (start, end) and each LLM.generate / LLM.chat call (start, end, requests, "
        "prompt and generated tokens from the RequestOutputs, the first prompt's opening characters to name the "
        "stage); no return value, argument or file of the peer is changed otherwise",
    },
    {
        "what": "environment variable VLLM_CPU_KVCACHE_SPACE=1 (vLLM's own)",
        "changes": "a 1 GiB KV cache on the CPU instead of gpu_memory_utilization's share of RAM (0.9 for the "
        "teacher, 0.6 for the judge), which fails vLLM's free-memory check on a shared machine",
        "observes": "",
    },
    {
        "what": "environment variable VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=3600 (vLLM's own)",
        "changes": "vLLM waits up to an hour for one model step instead of 300 s: on a shared, loaded 2-core "
        "machine one step of a full batch's prefill took longer, and vLLM stopped the engine (EngineDeadError); "
        "the same on both sides, no output changes",
        "observes": "",
    },
    {
        "what": "peer flags --self-defined-tp-size 1 --max_new_tokens N --dtype D",
        "changes": "tensor parallel 1 (one CPU, no GPU: its default counts CUDA devices); the completion budget "
        "N, shared by both sides (its default 4096 would let SmolLM2's greedy loops run 4096 tokens on 2 cores); "
        "D is the benchmark's --dtype, the same on our side: bfloat16 (its default, spelled out) or float32 on a "
        "CPU without native bf16",
        "observes": "",
    },
    {
        "what": "peer working copy",
        "changes": "its five .py files are copied unchanged into a fresh directory per repetition, with the "
        "converted data (data/target/*.parquet, data/test/*.parquet) and its seed library, because it writes its "
        "outputs next to its code (results/) and its data (modified_data/, data/bias/<model>/...) and appends to "
        "them across runs",
        "observes": "",
    },
]

STAGES = (
    "perturb",
    "evaluate",
    "deeper_explain",
    "identify",
    "merge",
    "baseline",
    "placebo",
    "validate",
    "validate_seeds",
)
"""One vocabulary for both sides: the peer's calls are named by their prompt, ours by the loop's
stage events."""

FRONT_HALF = ("perturb", "evaluate", "deeper_explain", "identify")
"""The stages our streamed pipeline runs at once (each rewrite is judged as it arrives, each
misjudged pair explained and identified as its verdict arrives), so that a stage's own span also
holds the work of the stages after it: compared together, as `SideRun.front_half`."""


class StageCost(BaseModel):
    """What one stage cost one side: wall time, calls, tokens."""

    wall_s: float = 0.0
    """Seconds from the stage's first call to its last answer, engine loads in between taken out.
    Our streamed front half runs its stages at once: a stage's span there also holds work of the
    stages after it (compare `SideRun.front_half`)."""
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Span(BaseModel):
    """One stretch of one stage: when, and what it asked the models."""

    stage: str
    start: float
    end: float
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class SideRun(BaseModel):
    """One run of one side: a repetition of the peer or of ours."""

    rep: int
    position: int
    """1 when this side ran first in its repetition, 2 when second."""
    wall_s: float
    """Wall time of the side's processes, start to exit."""
    engine_loads: int
    """vllm.LLM instances created."""
    engine_load_s: float
    """Seconds spent creating them, and importing vLLM."""
    other_s: float
    """Wall time outside every stage and engine load: start-up, imports, data, files, exit."""
    stages: dict[str, StageCost]
    front_half: StageCost = Field(default_factory=StageCost)
    """perturb, evaluate, deeper_explain and identify together (`FRONT_HALF`)."""

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.stages.values())

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.stages.values())


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def stage_cost(spans: Sequence[Span], loads: Sequence[tuple[float, float]]) -> StageCost:
    """The wall time the spans cover (once where they overlap), engine loads and imports inside
    them taken out, and their calls and tokens."""
    covered = [(s.start, s.end) for s in spans]
    loaded = [(max(a, s), min(b, e)) for s, e in loads for a, b in covered if _overlap((a, b), (s, e))]
    return StageCost(
        wall_s=round(max(0.0, _union_length(covered) - _union_length(loaded)), 2),
        calls=sum(s.calls for s in spans),
        prompt_tokens=sum(s.prompt_tokens for s in spans),
        completion_tokens=sum(s.completion_tokens for s in spans),
    )


def side_run(
    rep: int, position: int, wall_s: float, spans: Sequence[Span], loads: Sequence[tuple[float, float]], n_loads: int
) -> SideRun:
    """Per stage: the wall time of its spans (engine loads and vLLM's import inside them taken
    out), its calls and tokens; the front half together; the `n_loads` loads (and imports) on
    their own; `other_s` what is left of `wall_s`."""
    names = list(dict.fromkeys(s.stage for s in spans))
    stages = {name: stage_cost([s for s in spans if s.stage == name], loads) for name in names}
    busy = _union_length([*((s.start, s.end) for s in spans), *loads])
    return SideRun(
        rep=rep,
        position=position,
        wall_s=round(wall_s, 2),
        engine_loads=n_loads,
        engine_load_s=round(_union_length(loads), 2),
        other_s=round(max(0.0, wall_s - busy), 2),
        stages={k: v for k, v in stages.items() if v.calls or v.wall_s >= 0.01},
        front_half=stage_cost([s for s in spans if s.stage in FRONT_HALF], loads),
    )


def count_loads(events: Iterable[dict[str, Any]]) -> int:
    """The engine loads the shim logged (each `vllm.LLM` created)."""
    return sum(1 for e in events if e.get("event") == "load")


def loads_of(events: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    """The engine loads, and the import of vLLM (the engine's code) before the first one."""
    return [(float(e["start"]), float(e["end"])) for e in events if e.get("event") in ("load", "import")]


def read_events(path: Path) -> list[dict[str, Any]]:
    """A meter's or a run's event log; none when the process never wrote one (no vLLM loaded)."""
    return read_jsonl(path) if path.exists() else []


def child_env(setting: Setting, meter_log: Path, *, ours: bool) -> dict[str, str]:
    """The environment of a measured process: the shim first on PYTHONPATH (and our package
    for ours), offline, vLLM's CPU KV cache of 1 GiB and its step timeout of an hour (`SHIMS`),
    the meter's log."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(SHIM_DIR), *([str(REPO)] if ours else [])]),
            "VS_BIASSCOPE_LOG": str(meter_log),
            "VS_BIASSCOPE_ENFORCE_EAGER": "1" if setting.eager else "0",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": os.environ.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


def run_measured(cmd: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run `cmd` to its end; its wall time. A failure stops the benchmark with the log's tail."""
    start = time.time()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.call(
            list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    wall = time.time() - start
    if code != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed with exit code {code} (log: {log}):\n{tail}")
    return wall

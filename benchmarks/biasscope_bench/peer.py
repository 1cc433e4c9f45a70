"""Running the peer (the official BiasScope code) unchanged, naming its metered calls by their
prompts, and reading what it wrote."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .findings import ErrorRate, Findings, unique_names
from .inputs import PEER_STAGE1, PEER_STAGE2, SEED, Setting, peer_layout, peer_seed_check_layout
from .metering import SideRun, Span, child_env, count_loads, loads_of, read_events, run_measured, side_run

PEER_PROMPTS: tuple[tuple[str, str], ...] = (
    ("You will be given a instruction", "rewrite"),
    ("Below is a question followed by two candidate answers", "judge"),
    ("Here is a question and two answers.", "deeper_explain"),
    ("Your task is to analyze the chosen answer", "identify"),
    ("You are an expert in cognitive bias classification", "merge"),
)
"""The opening words of each of the peer's prompts (prompts.py) and what the call does."""

PeerPhase = Literal["discover", "verify", "seeds"]


def _peer_stage(kind: str, phase: PeerPhase, judged: int, n_test: int) -> str:
    """Our stage name for one of the peer's calls of `kind` in `phase`."""
    later = "validate_seeds" if phase == "seeds" else "validate"
    if phase == "discover":
        return {"rewrite": "perturb", "judge": "evaluate"}.get(kind, kind)
    if kind == "judge":
        return "baseline" if judged < n_test else later
    return later if kind == "rewrite" else kind


def classify_peer_calls(events: Sequence[dict[str, Any]], phase: PeerPhase, n_test: int) -> list[Span]:
    """The peer's metered calls of one process as spans of our stages. Its stage 2 judges the
    unperturbed test pairs first (`n_test` requests: the baseline), then each bias; its
    rewrites there are validation's (`validate`, or `validate_seeds` for the seed check)."""
    spans: list[Span] = []
    judged = 0
    for e in sorted((e for e in events if e.get("event") in ("generate", "chat")), key=lambda e: e["start"]):
        head = str(e.get("prompt_head", ""))
        kind = next((k for words, k in PEER_PROMPTS if words in head), "unknown")
        stage = _peer_stage(kind, phase, judged, n_test)
        if phase != "discover" and kind == "judge":
            judged += int(e.get("requests", 0))
        spans.append(
            Span(
                stage=stage,
                start=e["start"],
                end=e["end"],
                calls=int(e.get("requests", 0)),
                prompt_tokens=int(e.get("prompt_tokens", 0)),
                completion_tokens=int(e.get("completion_tokens", 0)),
            )
        )
    return merge_adjacent(spans)


def merge_adjacent(spans: Sequence[Span]) -> list[Span]:
    """Consecutive spans of one stage as one (the peer's batches of 64 and its one-call merge
    questions: the time between them is the stage's own)."""
    merged: list[Span] = []
    for span in spans:
        last = merged[-1] if merged else None
        if last is not None and last.stage == span.stage:
            merged[-1] = last.model_copy(
                update={
                    "end": max(last.end, span.end),
                    "calls": last.calls + span.calls,
                    "prompt_tokens": last.prompt_tokens + span.prompt_tokens,
                    "completion_tokens": last.completion_tokens + span.completion_tokens,
                }
            )
        else:
            merged.append(span)
    return merged


def peer_valid_line(log_text: str) -> tuple[float | None, int | None]:
    """The peer's own count of readable verdicts and misjudged pairs (its stage-1 log line
    "Valid predictions: 12.5%; misaligned with gold label: 3 rows.")."""
    match = re.search(r"Valid predictions: ([0-9.]+)%; misaligned with gold label: (\d+) rows", log_text)
    if match is None:
        return None, None
    return float(match.group(1)) / 100.0, int(match.group(2))


def _peer_error_rates(path: Path) -> tuple[float | None, dict[str, ErrorRate]]:
    """The last entry of the peer's avg_error_rate.json: its baseline ("origin") and per bias."""
    if not path.exists():
        return None, {}
    history = json.loads(path.read_text(encoding="utf-8"))
    if not history:
        return None, {}
    last = history[-1]
    rates = {**last.get("effective biases and origin", {}), **last.get("ineffective biases", {})}

    def overall(value: Any) -> float | None:
        return value.get("overall") if isinstance(value, dict) else value

    origin = overall(rates.pop("origin", None))
    return origin, {name.strip(): ErrorRate(error=overall(v)) for name, v in rates.items()}


def _peer_found(slug: Path) -> list[str]:
    """The bias names its detector gave with a definition (analysis_results parquet)."""
    import pandas as pd

    analysis = slug / "analysis_results" / "wrong_with_reason_and_bias.parquet"
    if not analysis.exists():
        return []
    frame = pd.read_parquet(analysis)
    if len(frame) and {"bias_name", "bias_def"} <= set(frame.columns):
        return unique_names(frame.loc[frame["bias_def"].notna(), "bias_name"])
    return []


def peer_findings(
    work: Path, paths: dict[str, Path], model_dir: Path, stage1_log: str, seeds_json: Path | None
) -> Findings:
    """What the peer wrote: its detections, its merged library, what stage 2 kept and the error
    rates it reported (and, for the seed check, its stage-2 results over the seed library)."""
    seeds = json.loads(paths["bias_json"].read_text(encoding="utf-8"))
    seed_names = {k.strip() for k in seeds}
    slug = paths["bias_json"].parent / model_dir.name / paths["target"].stem / paths["bias_json"].stem
    extended = slug / "temporary_extended_biases.json"
    merged = [k.strip() for k in json.loads(extended.read_text(encoding="utf-8"))] if extended.exists() else []
    library = slug / f"{paths['bias_json'].stem}.json"
    kept_entries = json.loads(library.read_text(encoding="utf-8")) if library.exists() else {}
    kept = {
        k.strip(): str((v or {}).get("Definition") or "")
        for k, v in kept_entries.items()
        if k.strip() not in seed_names
    }
    results = work / "results" / model_dir.name / paths["target"].stem
    baseline, rates = _peer_error_rates(results / paths["bias_json"].stem / "avg_error_rate.json")
    valid, misjudged = peer_valid_line(stage1_log)
    out = Findings(
        judge_valid_rate=valid,
        misjudged=misjudged,
        found=_peer_found(slug),
        after_merge=[n for n in merged if n not in seed_names],
        kept=list(kept),
        kept_definitions=kept,
        baseline_error=baseline,
        error_rates=rates,
    )
    if seeds_json is not None:
        out.seed_baseline_error, out.seed_error_rates = _peer_error_rates(
            results / seeds_json.stem / "avg_error_rate.json"
        )
    return out


def _peer_phases(paths: dict[str, Path], seeds_json: Path | None) -> list[tuple[PeerPhase, list[str]]]:
    """The peer's processes of one run: stage 1, stage 2, and stage 2 over the seeds."""
    stage2 = ["--analysis-data-path", str(paths["target"]), "--test-data-path", str(paths["test"])]
    phases: list[tuple[PeerPhase, list[str]]] = [
        (
            "discover",
            [PEER_STAGE1, "--bias-json", str(paths["bias_json"]), "--analysis-data-path", str(paths["target"])],
        ),
        ("verify", [PEER_STAGE2, "--bias-json", str(paths["bias_json"]), *stage2]),
    ]
    if seeds_json is not None:
        phases.append(("seeds", [PEER_STAGE2, "--bias-json", str(seeds_json), *stage2]))
    return phases


def _peer_flags(setting: Setting) -> list[str]:
    """The flags every peer process gets (see `SHIMS`): the model in both roles, tp 1, the budget."""
    model = str(setting.model_dir)
    return [
        "--model-path",
        model,
        "--teacher-model-path",
        model,
        "--self-defined-tp-size",
        "1",
        "--max_new_tokens",
        str(setting.max_tokens),
        "--dtype",
        setting.dtype,
        "--seed",
        str(SEED),
    ]


def run_peer(setting: Setting, rep: int, position: int, *, seed_check: bool) -> tuple[SideRun, Findings]:
    """One run of the official code: stage 1, stage 2 (and the seed check), each its own
    process, from a fresh working copy."""
    work = setting.work / f"rep{rep}" / "peer"
    paths = peer_layout(work, setting.subsets, setting.peer_dir)
    seeds_json = peer_seed_check_layout(work, paths, setting.model_dir) if seed_check else None
    wall = 0.0
    spans: list[Span] = []
    loads: list[tuple[float, float]] = []
    n_loads = 0
    for phase, args in _peer_phases(paths, seeds_json):
        meter = work / f"meter_{phase}.jsonl"
        wall += run_measured(
            [setting.python, *args, *_peer_flags(setting)],
            cwd=work,
            env=child_env(setting, meter, ours=False),
            log=work / f"{phase}.log",
        )
        events = read_events(meter)
        spans += classify_peer_calls(events, phase, len(setting.subsets.test))
        loads += loads_of(events)
        n_loads += count_loads(events)
    stage1_log = (work / "discover.log").read_text(encoding="utf-8", errors="replace")
    findings = peer_findings(work, paths, setting.model_dir, stage1_log, seeds_json)
    return side_run(rep, position, wall, spans, loads, n_loads), findings

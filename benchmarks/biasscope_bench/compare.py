"""The comparison: each side's repetitions summarized (medians), ours ÷ peer per repetition and
per stage, the seed library's error rates side by side, and why the outputs differ."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from .findings import Findings
from .metering import STAGES, SideRun, StageCost


class SideSummary(BaseModel):
    """One side over its repetitions: medians per stage, and what it found (first repetition)."""

    wall_s: float
    engine_loads: float
    engine_load_s: float
    other_s: float
    stages: dict[str, StageCost]
    """Per stage: the median over the repetitions that have the stage."""
    front_half: StageCost
    """perturb -> identify together (`FRONT_HALF`), the median over the repetitions."""
    calls: float
    prompt_tokens: float
    completion_tokens: float
    found: list[str]
    n_found: int
    after_merge: list[str]
    kept: list[str]
    findings: Findings
    same_findings_every_rep: bool
    """Greedy decoding: every repetition read as many verdicts, misjudged, found, merged and kept
    the same (False: the side's own outputs vary from run to run on this machine)."""
    findings_per_rep: list[dict[str, Any]]
    """Per repetition: readable verdicts, misjudged pairs, biases found, after merge, kept."""
    runs: list[SideRun]


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return round(statistics.median(values), 2) if values else 0.0


def median_cost(costs: Sequence[StageCost]) -> StageCost:
    """Each field's median over the repetitions (not one repetition's cost)."""
    return StageCost(
        wall_s=_median(c.wall_s for c in costs),
        calls=int(_median(c.calls for c in costs)),
        prompt_tokens=int(_median(c.prompt_tokens for c in costs)),
        completion_tokens=int(_median(c.completion_tokens for c in costs)),
    )


def summarize_side(runs: Sequence[tuple[SideRun, Findings]]) -> SideSummary:
    """One side's repetitions as medians, with what its first repetition found."""
    records = [r for r, _ in runs]
    stages: dict[str, StageCost] = {}
    for name in [*STAGES, *sorted({k for r in records for k in r.stages} - set(STAGES))]:
        having = [r.stages[name] for r in records if name in r.stages]
        if having:
            stages[name] = median_cost(having)
    first = runs[0][1]
    per_rep = [
        {
            "rep": r.rep,
            "judge_valid_rate": f.judge_valid_rate,
            "misjudged": f.misjudged,
            "found": f.found,
            "after_merge": f.after_merge,
            "kept": f.kept,
        }
        for r, f in runs
    ]
    keys = [{k: v for k, v in row.items() if k != "rep"} for row in per_rep]
    return SideSummary(
        wall_s=_median(r.wall_s for r in records),
        engine_loads=_median(r.engine_loads for r in records),
        engine_load_s=_median(r.engine_load_s for r in records),
        other_s=_median(r.other_s for r in records),
        stages=stages,
        front_half=median_cost([r.front_half for r in records]),
        calls=_median(r.calls for r in records),
        prompt_tokens=_median(sum(s.prompt_tokens for s in r.stages.values()) for r in records),
        completion_tokens=_median(sum(s.completion_tokens for s in r.stages.values()) for r in records),
        found=first.found,
        n_found=len(first.found),
        after_merge=first.after_merge,
        kept=first.kept,
        findings=first,
        same_findings_every_rep=all(k == keys[0] for k in keys),
        findings_per_rep=per_rep,
        runs=records,
    )


class Ratio(BaseModel):
    """Ours ÷ peer (None where the peer's figure is 0)."""

    wall: float | None
    calls: float | None
    tokens: float | None


def _ratio(ours: float, peer: float) -> float | None:
    return round(ours / peer, 3) if peer else None


def rep_ratios(peer: Sequence[SideRun], ours: Sequence[SideRun]) -> list[Ratio]:
    """Ours ÷ peer within each repetition (both ran the same work in it)."""
    return [
        Ratio(wall=_ratio(o.wall_s, p.wall_s), calls=_ratio(o.calls, p.calls), tokens=_ratio(o.tokens, p.tokens))
        for p, o in zip(peer, ours)
    ]


def _stage_of(run: SideRun, name: str) -> StageCost | None:
    return run.front_half if name == "perturb_to_identify" else run.stages.get(name)


def stage_ratios(peer: Sequence[SideRun], ours: Sequence[SideRun]) -> dict[str, Ratio]:
    """Per stage, ours ÷ peer within each repetition where both sides made calls in it, the
    median over those repetitions; and the engine loads (with vLLM's import)."""
    per_stage: dict[str, list[Ratio]] = defaultdict(list)
    for p, o in zip(peer, ours):
        for name in (*STAGES, "perturb_to_identify"):
            ps, os_ = _stage_of(p, name), _stage_of(o, name)
            if ps is not None and os_ is not None and ps.calls and os_.calls:
                per_stage[name].append(
                    Ratio(
                        wall=_ratio(os_.wall_s, ps.wall_s),
                        calls=_ratio(os_.calls, ps.calls),
                        tokens=_ratio(os_.tokens, ps.tokens),
                    )
                )
        per_stage["engine_load"].append(
            Ratio(
                wall=_ratio(o.engine_load_s, p.engine_load_s), calls=_ratio(o.engine_loads, p.engine_loads), tokens=None
            )
        )
    return {name: median_ratio(ratios) for name, ratios in per_stage.items()}


def median_ratio(ratios: Sequence[Ratio]) -> Ratio:
    """Each ratio's median over the repetitions that have it."""

    def med(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 3) if known else None

    return Ratio(
        wall=med([r.wall for r in ratios]), calls=med([r.calls for r in ratios]), tokens=med([r.tokens for r in ratios])
    )


def seed_check(peer: Findings, ours: Findings) -> dict[str, Any]:
    """The seed library's error rates side by side (`Result.seed_check`)."""
    names = list(dict.fromkeys([*ours.seed_error_rates, *peer.seed_error_rates]))  # ours: the library's order
    return {
        "peer_baseline_error": peer.seed_baseline_error,
        "ours_baseline_error": ours.seed_baseline_error,
        "rates": {
            name: {
                "peer": peer.seed_error_rates[name].error if name in peer.seed_error_rates else None,
                "ours": ours.seed_error_rates[name].error if name in ours.seed_error_rates else None,
                "ours_control": ours.seed_error_rates[name].control_error if name in ours.seed_error_rates else None,
                "ours_n": ours.seed_error_rates[name].n if name in ours.seed_error_rates else None,
            }
            for name in names
        },
    }


class Difference(BaseModel):
    """One reason the two sides' outputs differ: the procedure, or the model's sampling."""

    cause: Literal["procedure", "sampling"]
    what: str


def pct(value: float | None) -> str:
    """A share as a whole percentage ("n/a" when unknown)."""
    return "n/a" if value is None else f"{100 * value:.0f} %"

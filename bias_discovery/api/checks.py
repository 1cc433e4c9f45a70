"""`bias-discovery check`: what a long run would meet, found out before it starts.
`run_preflight(config)` checks every server of the run's roles and plans its calls
(`PreflightReport`, with each stage's `StageEstimate` and the `Assumptions` behind them);
`pilot_into` runs the loop's first iteration on a few pairs to measure those assumptions
(`PilotRecord`); `check_transformers`, `check_llamacpp` and `check_embedder` try the embedded
engines and the embedder in a child process, so that a crash is a finding.

They are the operations of `preflight/` and `llm/smoke.py`, handed out here unchanged."""

from __future__ import annotations

from ..llm.smoke import check_embedder, check_llamacpp, check_transformers
from ..preflight import Assumptions, PilotRecord, PreflightReport, StageEstimate, pilot_into, run_preflight

__all__ = [
    "Assumptions",
    "PilotRecord",
    "PreflightReport",
    "StageEstimate",
    "check_embedder",
    "check_llamacpp",
    "check_transformers",
    "pilot_into",
    "run_preflight",
]

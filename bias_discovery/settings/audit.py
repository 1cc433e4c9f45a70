"""An audit's settings (`AuditSettings`): what the command line, the Python API and audit.json
share; `bias_discovery.auditing` re-exports it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .common import DEFAULT_SEED, PerturbSettings
from .judge import JudgeSettings, Mitigation
from .validate import DEFAULT_BOOTSTRAP_RESAMPLES

__all__ = ["AuditSettings"]


class AuditSettings(BaseModel):
    """How to audit: repeats, mitigation, the judge's and the teacher's settings."""

    model_config = ConfigDict(extra="forbid")

    repeats: int = 3
    """K: every verdict is asked K times with derived seeds (flipping noise, CALM's CR)."""
    mitigation: Mitigation = "none"
    """Also measure this mitigated judge on the same items."""
    seed: int = DEFAULT_SEED
    """Seed of the order draw, the repeats and the models' sampling."""
    n_boot: int = Field(default=DEFAULT_BOOTSTRAP_RESAMPLES, ge=100)
    """Bootstrap resamples for the CIs of q̂, PB, LB, ρ and Δerror."""
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    """Prompt, reasoning, budget, temperature and ties; `positions` and `mitigation` are the
    audit's own (both orders, and `mitigation` above)."""
    perturb: PerturbSettings = Field(default_factory=PerturbSettings)

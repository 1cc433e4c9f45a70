"""What the settings of several operations share: the default seed, and the teacher's rewrite
settings (a run's `perturb`, an audit's, an export's; `bias_discovery.config` re-exports both),
and how many examples a bias's page shows."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_EXAMPLES", "DEFAULT_SEED", "PerturbSettings"]

DEFAULT_SEED = 42
"""The seed of a run, a judge, an audit and a matrix when none is given."""
DEFAULT_EXAMPLES = 3
"""Flipped examples shown per bias unless asked otherwise (`--examples K`; `report.evidence`)."""


class PerturbSettings(BaseModel):
    """Perturb: the teacher rewrites a pair's rejected response to carry one bias, keeping its
    content and final answer."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=768, ge=16)
    """Completion budget for one rewritten response."""
    temperature: float = Field(default=0.0, ge=0.0)
    """0 = greedy, as in the paper."""

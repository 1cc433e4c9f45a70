"""What the settings of several operations share: the default seed, and the teacher's rewrite
settings (a run's `perturb`, an audit's, an export's; `bias_discovery.config` re-exports both),
and how many examples a bias's page shows."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_EXAMPLES", "DEFAULT_SEED", "PerturbSettings", "TurnRule"]

DEFAULT_SEED = 42
"""The seed of a run, a judge, an audit and a matrix when none is given."""
DEFAULT_EXAMPLES = 3
"""Flipped examples shown per bias unless asked otherwise (`--examples K`; `report.evidence`)."""


TurnRule = Literal["final", "reasoning", "any"]
"""Which turn of a trajectory a rewrite changes (`PerturbSettings.turn`)."""


class PerturbSettings(BaseModel):
    """Perturb: the teacher rewrites a pair's rejected response to carry one bias, keeping its
    content and final answer."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=768, ge=16)
    """Completion budget for one rewritten response."""
    temperature: float = Field(default=0.0, ge=0.0)
    """0 = greedy, as in the paper."""
    turn: TurnRule = "final"
    """Trajectories only: the one turn of the rejected trajectory a rewrite changes (every other
    message stays byte for byte): `final`, the last assistant message with text; `reasoning`,
    an assistant message with text that also calls a tool; `any`, any assistant message with
    text (the last two drawn per pair, keyed on the seed and the pair's id). The placebo
    paraphrases the same turn. A trajectory with no such turn gives an invalid rewrite
    (`no_turn`)."""

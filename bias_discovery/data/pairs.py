"""The one record every loader produces: a preference pair with an objective label."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Domain = str
"""Free-form domain label. JudgeBench uses knowledge / reasoning / math / code; RewardBench
uses its sections (Chat, Chat Hard, Safety, Reasoning)."""


Order = Literal["chosen_first", "rejected_first"]
"""Which response the judge sees as A: chosen_first means A = chosen, B = rejected."""

ResponseKind = Literal["answer", "trajectory"]
"""What a pair's responses are: an answer (text), or an agent's trajectory (the canonical JSON
of a `data.trajectory.Trajectory`, which a judge reads as a transcript)."""

Shown = Literal["chosen_first", "rejected_first", "chosen", "rejected"]
"""What one judge call showed: the pair in one order (pairwise), or one of its responses alone
(a pointwise judge: `chosen` or `rejected`; it has no position)."""


class PreferencePair(BaseModel):
    """A question with a better (`chosen`) and a worse (`rejected`) response.

    Loaders always normalise to chosen/rejected: for JudgeBench, label "A>B" means response_A
    is chosen. Which response the judge sees in position A is decided later, by the judge's
    position mode; only `positions: fixed` uses the data file's own order (`data_order`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    question: str
    chosen: str
    rejected: str
    domain: Domain = "unknown"
    source: str = ""
    data_order: Order | None = None
    """The data set's own order, when it has one: `chosen_first` when its response A is the
    chosen one (JudgeBench's label "A>B"), `rejected_first` when it is B; None for data with
    no order (chosen/rejected fields). Rewrites of the pair keep it (`positions: fixed`)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    kind: ResponseKind = "answer"
    """`answer`: `chosen`/`rejected` are answers. `trajectory`: each is the canonical JSON of an
    agent's trajectory (`Trajectory.to_response`) and `question` is the task; both must parse."""

    @model_validator(mode="after")
    def _trajectories_parse(self) -> PreferencePair:
        if self.kind == "trajectory":
            from .trajectory import Trajectory

            for side in ("chosen", "rejected"):
                Trajectory.from_response(getattr(self, side), where=f"pair {self.id!r}: field {side!r}")
        return self

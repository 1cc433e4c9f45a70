"""Records passed between stages and written as the per-iteration JSONL artifacts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..data.pairs import Order, PreferencePair, ResponseKind, Shown
from ..settings.common import TurnRule

ExclusionReason = Literal["answer_changed", "check_invalid", "length_changed"]
"""Why a misjudged pair was excluded by the misjudgment check (`MisjudgedCase.excluded`)."""


JunkReason = Literal["schema_key", "restated_verdict", "copy_of_question", "copy_of_response", "teacher_declined"]
"""Why an identification was dropped as junk (`IdentifyRecord.dropped`)."""


class PerturbedPair(BaseModel):
    """A pair whose rejected response the teacher rewrote to carry one bias (perturbed.jsonl),
    or rewrote neutrally (the placebo: `bias_id` ``placebo``)."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str
    """The original pair's id (the perturbed item keeps it, so it is compared pair by pair)."""
    bias_id: str
    """The bias the rewrite was asked to carry (``placebo`` for a neutral rewrite)."""
    bias_name: str
    """That bias's name."""
    domain: str
    """The pair's domain (math, knowledge, reasoning, code ...)."""
    question: str
    """The pair's question."""
    chosen: str
    """The better response, unchanged."""
    original_rejected: str
    """The worse response as the data has it."""
    perturbed_rejected: str
    """The teacher's rewrite of it."""
    valid: bool
    """False when the teacher's rewrite was truncated, failed or empty: the item is left out
    of judging (and counted), never judged on a half-written response."""
    invalid_reason: str | None = None
    """truncated, empty, engine_error, unchanged (identical to the original), no_turn (a
    trajectory without a turn to rewrite); after the answer check (validation): answer_changed
    (it now reaches the chosen answer; a trajectory's: it changed an action, checked as soon as
    it is made) or check_invalid."""
    completion_tokens: int = 0
    """Tokens the teacher generated for the rewrite."""
    data_order: Order | None = None
    """The original pair's own order (`PreferencePair.data_order`), for `positions: fixed`."""
    answer_check: Literal["same", "different", "unusable"] | None = None
    """The checker's answer to "does the rewrite reach the chosen response's final answer?";
    None when not checked."""
    original_check: Literal["same", "different", "unusable"] | None = None
    """The same question about the original rejected response (the checker's control: only
    where it says "different" can a "same" on the rewrite mean a changed answer)."""
    check_method: Literal["extracted", "model", "actions"] | None = None
    """How `answer_check` was decided: the final answers read mechanically and compared
    (`rewrite_checks.extracted_check`), the checker model, or (a trajectory) the agent's
    actions compared (`stages.turns`: "same" means an action changed); None when not checked."""
    kind: ResponseKind = "answer"
    """The pair's kind of response: for `trajectory`, `original_rejected` and
    `perturbed_rejected` are trajectories' canonical JSON, which differ in one turn."""
    turn: int | None = None
    """A trajectory: the index of the message the rewrite changed (None: an answer, or no turn
    of the rule's kind, `invalid_reason` no_turn)."""
    turn_rule: TurnRule | None = None
    """A trajectory: how that turn was chosen (`PerturbSettings.turn`)."""
    action_change: str | None = None
    """A trajectory whose rewrite changed an action (`answer_changed`): the first change, in words."""

    def to_pair(self) -> PreferencePair:
        """The pair as the judge sees it; the id (which keys the `swap` draw) and the data's
        own order (`fixed`) are the original's, so the perturbed item is shown the same way
        round as its baseline item and the two can be compared pair by pair."""
        return PreferencePair(
            id=self.pair_id,
            question=self.question,
            chosen=self.chosen,
            rejected=self.perturbed_rejected,
            domain=self.domain,
            source="perturbed",
            data_order=self.data_order,
            meta={"bias_id": self.bias_id},
            kind=self.kind,
        )


class MisjudgedCase(BaseModel):
    """A perturbed pair the target got wrong, with its explanation(s) (misjudged.jsonl,
    explanations.jsonl)."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str
    """The original pair's id."""
    bias_id: str
    """The bias the teacher injected into the rejected response."""
    domain: str
    """The pair's domain."""
    question: str
    """The pair's question."""
    chosen: str
    """The better response, unchanged."""
    original_rejected: str
    """The worse response as the data has it."""
    perturbed_rejected: str
    """The teacher's rewrite of it, which the judge preferred."""
    order: Shown
    """The order the pair was shown in (`chosen_first` or `rejected_first`); a pointwise judge:
    `rejected`, the response whose score is explained."""
    verdict: Literal["A", "B"] | None = None
    """The judge's verdict: the position it preferred (None for a pointwise judge)."""
    score: float | None = None
    """Pointwise: the perturbed rejected response's score, at least `chosen_score`."""
    chosen_score: float | None = None
    """Pointwise: the chosen response's score."""
    judge_output: str
    """The judge's full output (reasoning and verdict)."""
    explanation: str
    """The judge's reasoning without the verdict line."""
    deeper_explanation: str | None = None
    """The judge's elaboration (DeeperExplain); None when that stage is off or failed."""
    answer_check: Literal["same", "different", "unusable"] | None = None
    """The misjudgment check (`misjudgment_check`): does the rewrite reach the chosen response's
    final answer? As validation's check (`PerturbedPair.answer_check`); None when not checked."""
    original_check: Literal["same", "different", "unusable"] | None = None
    """The same question about the original rejected response (the checker's control)."""
    check_method: Literal["extracted", "model", "actions"] | None = None
    """Read mechanically, asked of the checker model, or a trajectory's actions compared; None
    when not checked."""
    kind: ResponseKind = "answer"
    """The pair's kind of response (`PerturbedPair.kind`)."""
    turn: int | None = None
    """A trajectory: the message the rewrite changed (`PerturbedPair.turn`)."""
    length_ratio: float | None = None
    """Whitespace tokens of the rewrite over those of the original (None: not checked)."""
    excluded: ExclusionReason | None = None
    """Why this misjudgment does not count (None: it counts and goes on to DeeperExplain and
    IdentifyBias): answer_changed (the rewrite reaches the chosen answer: the judge was right),
    check_invalid (the checker gave no usable answer), length_changed (beyond the bias's length
    allowance: the judge may have reacted to the length)."""


class IdentifyRecord(BaseModel):
    """The teacher's reading of one misjudged case (identified.jsonl)."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str
    """The misjudged pair the teacher read."""
    status: Literal["bias", "none", "invalid"]
    """bias: a bias was named; none: the teacher found no bias; invalid: no usable reply."""
    name: str | None = None
    """The bias's name (status bias)."""
    definition: str | None = None
    """What the bias is, in one or two sentences (status bias)."""
    manifestations: list[str] = []
    """How the bias shows in a response (status bias)."""
    attempts: int = 1
    """Asks it took: 1, or more when an invalid reply was asked again (`identify.retries`)."""
    dropped: JunkReason | None = None
    """Why a named bias was dropped as junk, naming no property of a response (None: kept; see
    `identify.junk_reason`): schema_key (a key of the reply's schema, `bias_found`),
    restated_verdict (nothing but the verdict: "rejected the incorrect response"),
    copy_of_question / copy_of_response (a verbatim copy), teacher_declined (every word is
    the example's own, and the teacher's confirmation said it names no property)."""
    confirmed: bool | None = None
    """The teacher's confirmation, where it was asked (None: not asked or no usable answer)."""
    raw_output: str = ""
    """The teacher's last reply, as it came."""

"""DeeperExplain: the target elaborates on its own wrong decision (error cascading).

The follow-up continues the judging conversation (judge prompt, the judge's own answer, then
the request to explain further), so the target defends the verdict it actually gave; a
pointwise judge is asked about the score it gave the perturbed rejected response (the one
at least as high as the chosen response's), in the conversation that scored it alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import ExplainSettings
from ..data.pairs import PreferencePair
from ..judging import judge_messages
from ..llm.base import Engine, ProgressCallback
from ..llm.types import ChatMessage, GenerationRequest, GenerationResponse
from ..pointwise import format_score
from ..prompts import load_prompt
from ..settings.judge import JudgeSettings
from .records import MisjudgedCase


def build_explain_request(
    case: MisjudgedCase, judge_settings: JudgeSettings, settings: ExplainSettings, *, seed: int
) -> GenerationRequest:
    pair = PreferencePair(
        id=case.pair_id, question=case.question, chosen=case.chosen, rejected=case.perturbed_rejected, kind=case.kind
    )
    if case.score is not None:  # a pointwise judge: the rationale of the inflated score
        follow_up = load_prompt("deeper_explain_pointwise").render(score=format_score(case.score))
    else:
        other = "B" if case.verdict == "A" else "A"
        follow_up = load_prompt("deeper_explain").render(picked=case.verdict or "A", other=other)
    messages = (
        *judge_messages(pair, case.order, judge_settings),
        ChatMessage(role="assistant", content=case.judge_output),
        *follow_up,
    )
    return GenerationRequest(
        messages=messages,
        max_tokens=settings.max_tokens,
        temperature=judge_settings.temperature,
        seed=seed,
    )


def deeper_explain(
    target: Engine,
    cases: Sequence[MisjudgedCase],
    judge_settings: JudgeSettings,
    settings: ExplainSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[MisjudgedCase]:
    """Return the cases with `deeper_explanation` filled (None where the reply failed)."""
    requests = [build_explain_request(c, judge_settings, settings, seed=seed) for c in cases]
    responses = target.generate(requests, progress=progress)
    return [explained_case(case, response) for case, response in zip(cases, responses)]


def explained_case(case: MisjudgedCase, response: GenerationResponse) -> MisjudgedCase:
    """`case` with the target's elaboration (None where the reply failed or is empty)."""
    text = response.text.strip() if response.finish_reason != "error" else ""
    return case.model_copy(update={"deeper_explanation": text or None})

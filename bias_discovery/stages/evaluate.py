"""Evaluate: the target judges the perturbed pairs; the misjudged ones become cases."""

from __future__ import annotations

from collections.abc import Sequence

from ..judging import JudgeResult, JudgeSettings, Judgment, PairOutcome, judge_pairs
from ..llm.base import Engine, ProgressCallback
from .records import MisjudgedCase, PerturbedPair


def evaluate(
    target: Engine,
    perturbed: Sequence[PerturbedPair],
    settings: JudgeSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> tuple[JudgeResult, list[MisjudgedCase]]:
    """Judge every valid perturbed pair in one batch; return the judgments and the mistakes.

    A pair is misjudged when its outcome is wrong (in `both` mode: when either order picked the
    perturbed rejected response); the first order that picked the rejected response is kept as
    the case (a tie names no response to explain, so it makes no case). A pointwise judge's
    pair is misjudged when the perturbed rejected response scores at least as high as the
    chosen one (a tie too: the rejected response's score is inflated to the chosen one's); its
    case is the rejected response's judgment, whose reasoning explains the inflated score.
    """
    valid = [p for p in perturbed if p.valid]
    result = judge_pairs(target, [p.to_pair() for p in valid], settings, seed=seed, progress=progress)
    cases: list[MisjudgedCase] = []
    seen: set[str] = set()
    start = 0
    for p, outcome in zip(valid, result.outcomes):
        judgments = result.judgments[start : start + len(outcome.orders)]
        start += len(outcome.orders)
        case = misjudged_case(p, judgments, outcome)
        if case is not None and p.pair_id not in seen:
            seen.add(p.pair_id)
            cases.append(case)
    return result, cases


def misjudged_case(perturbed: PerturbedPair, judgments: Sequence[Judgment], outcome: PairOutcome) -> MisjudgedCase | None:
    """The case one judged pair makes: when its outcome is wrong, its first judgment that
    picked the rejected response (None: judged right, invalid, or wrong only by a tie); a
    pointwise pair's case is its rejected response's judgment, ties included."""
    if outcome.correct is not False:
        return None
    if outcome.score_rejected is not None:
        scored = next(j for j in judgments if j.order == "rejected")
        return _case(perturbed, scored).model_copy(update={"score": outcome.score_rejected, "chosen_score": outcome.score_chosen})
    for j in judgments:
        if j.picked == "rejected":
            assert j.verdict in ("A", "B")
            return _case(perturbed, j)
    return None


def _case(perturbed: PerturbedPair, j: Judgment) -> MisjudgedCase:
    """The case of `perturbed` made by its judgment `j` (the one explaining the mistake)."""
    return MisjudgedCase(
        pair_id=perturbed.pair_id,
        bias_id=perturbed.bias_id,
        domain=perturbed.domain,
        question=perturbed.question,
        chosen=perturbed.chosen,
        original_rejected=perturbed.original_rejected,
        perturbed_rejected=perturbed.perturbed_rejected,
        order=j.order,
        verdict="A" if j.verdict == "A" else "B" if j.verdict == "B" else None,
        judge_output=j.raw_output,
        explanation=j.explanation,
    )

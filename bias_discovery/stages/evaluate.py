"""Evaluate: the target judges the perturbed pairs; the misjudged ones become cases."""

from __future__ import annotations

from collections.abc import Sequence

from ..judging import JudgeResult, Judgment, PairOutcome, judge_pairs
from ..llm.base import Engine, ProgressCallback
from ..settings.judge import JudgeSettings
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
    the case (a tie names no response to explain, so it makes no case).
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
    picked the rejected response (None: judged right, invalid, or wrong only by a tie)."""
    if outcome.correct is not False:
        return None
    for j in judgments:
        if j.picked == "rejected":
            assert j.verdict in ("A", "B")
            return MisjudgedCase(
                pair_id=perturbed.pair_id,
                bias_id=perturbed.bias_id,
                domain=perturbed.domain,
                question=perturbed.question,
                chosen=perturbed.chosen,
                original_rejected=perturbed.original_rejected,
                perturbed_rejected=perturbed.perturbed_rejected,
                order=j.order,
                verdict=j.verdict,
                judge_output=j.raw_output,
                explanation=j.explanation,
            )
    return None

"""Evaluate: the target judges the perturbed pairs; the misjudged ones become cases."""

from __future__ import annotations

from typing import Sequence

from ..judging import JudgeResult, JudgeSettings, judge_pairs
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
    the case (a tie names no response to explain, so it makes no case).
    """
    valid = [p for p in perturbed if p.valid]
    result = judge_pairs(target, [p.to_pair() for p in valid], settings, seed=seed, progress=progress)
    by_id = {p.pair_id: p for p in valid}
    wrong_outcomes = {o.pair_id for o in result.outcomes if o.correct is False}
    cases: list[MisjudgedCase] = []
    seen: set[str] = set()
    for j in result.judgments:
        if j.pair_id in wrong_outcomes and j.picked == "rejected" and j.pair_id not in seen:
            seen.add(j.pair_id)
            p = by_id[j.pair_id]
            assert j.verdict in ("A", "B")
            cases.append(
                MisjudgedCase(
                    pair_id=p.pair_id,
                    bias_id=p.bias_id,
                    domain=p.domain,
                    question=p.question,
                    chosen=p.chosen,
                    original_rejected=p.original_rejected,
                    perturbed_rejected=p.perturbed_rejected,
                    order=j.order,
                    verdict=j.verdict,
                    judge_output=j.raw_output,
                    explanation=j.explanation,
                )
            )
    return result, cases

"""Evaluate: the target judges the perturbed pairs; the misjudged ones become cases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..config import MisjudgmentCheckSettings
from ..judging import JudgeResult, Judgment, PairOutcome, judge_pairs
from ..llm.base import Engine, ProgressCallback
from ..settings.judge import JudgeSettings
from .records import MisjudgedCase, PerturbedPair
from .rewrite_checks import check_answers, check_calls, misjudgment_checked


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


def misjudged_case(
    perturbed: PerturbedPair, judgments: Sequence[Judgment], outcome: PairOutcome
) -> MisjudgedCase | None:
    """The case one judged pair makes: when its outcome is wrong, its first judgment that
    picked the rejected response (None: judged right, invalid, or wrong only by a tie); a
    pointwise pair's case is its rejected response's judgment, ties included."""
    if outcome.correct is not False:
        return None
    if outcome.score_rejected is not None:
        scored = next(j for j in judgments if j.order == "rejected")
        return _case(perturbed, scored).model_copy(
            update={"score": outcome.score_rejected, "chosen_score": outcome.score_chosen}
        )
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
        kind=perturbed.kind,
        turn=perturbed.turn,
    )


def misjudged_rewrites(perturbed: Sequence[PerturbedPair], cases: Sequence[MisjudgedCase]) -> list[PerturbedPair]:
    """The rewrite of each misjudged case (its perturbed record), in the cases' order."""
    by_pair = {p.pair_id: p for p in perturbed if p.valid}
    return [by_pair[c.pair_id] for c in cases]


def misjudgment_check_calls(perturbed: Sequence[PerturbedPair], cases: Sequence[MisjudgedCase]) -> int:
    """The checker calls `check_misjudged` makes (validation's count, `check_calls`)."""
    return check_calls(misjudged_rewrites(perturbed, cases))


def check_misjudged(
    checker: Engine | None,
    perturbed: Sequence[PerturbedPair],
    cases: Sequence[MisjudgedCase],
    allowances: Mapping[str, float | None],
    settings: MisjudgmentCheckSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[MisjudgedCase]:
    """Every misjudged case checked before it counts (`MisjudgmentCheckSettings`): its rewrite's
    answer through validation's own check (`check_answers`: read mechanically where it can be,
    else by `checker`, None: not checked), then its length against its bias's allowance
    (`allowances` by bias id; a bias not in it gets `max_length_ratio`). Each case keeps its
    check and, when it does not count, the reason (`MisjudgedCase.excluded`)."""
    rewrites = misjudged_rewrites(perturbed, cases)
    checked: list[PerturbedPair | None] = (
        list(check_answers(checker, rewrites, seed=seed, progress=progress))
        if checker is not None
        else [None] * len(cases)
    )
    return [
        misjudgment_checked(case, record, allowances.get(case.bias_id, settings.max_length_ratio), settings)
        for case, record in zip(cases, checked)
    ]

"""Matched cross-model pairs for true self-preference (`judgebench:cross`).

In JudgeBench both responses of a pair come from one model (its `response_model`: GPT-4o or
Claude 3.5 Sonnet), so no pair can show whether a judge prefers its own family's writing. But
91 questions appear in both splits, each with a correct (chosen) and an incorrect (rejected)
response of each model. Crossing them gives, per question, two pairs matched on the question
and on correctness: GPT's correct answer against Claude's incorrect one, and Claude's correct
answer against GPT's incorrect one. A judge without self-preference errs as often on both; a
judge that favours one family errs more where that family's answer is the wrong one. Each
cross pair records the models of its chosen and rejected responses in
``meta["response_models"]`` and the question it is matched on in ``meta["matched_question"]``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence

from .pairs import PreferencePair

__all__ = ["cross_model_pairs"]


def _model(pair: PreferencePair) -> str | None:
    model = pair.meta.get("response_model")
    return model if isinstance(model, str) and model else None


def cross_model_pairs(pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
    """For every question answered by two models (one pair each; the first pair of a model
    when it has several), the two crossed pairs (module docstring), in the order the
    questions first appear; crossings whose two responses are identical are left out."""
    by_question: dict[str, dict[str, PreferencePair]] = defaultdict(dict)
    for pair in pairs:
        model = _model(pair)
        if model is not None:
            by_question[pair.question].setdefault(model, pair)
    out: list[PreferencePair] = []
    for question, models in by_question.items():
        if len(models) < 2:
            continue
        (m1, p1), (m2, p2) = sorted(models.items())[:2]
        key = hashlib.sha256(question.encode()).hexdigest()[:12]
        for (right_model, right), (wrong_model, wrong) in (((m1, p1), (m2, p2)), ((m2, p2), (m1, p1))):
            if right.chosen.strip() == wrong.rejected.strip():
                continue
            out.append(
                PreferencePair(
                    id=f"cross-{key}-{right_model}-right",
                    question=question,
                    chosen=right.chosen,
                    rejected=wrong.rejected,
                    domain=right.domain,
                    source=right.source,
                    meta={
                        "response_models": [right_model, wrong_model],
                        "matched_question": key,
                        "from_pairs": [right.id, wrong.id],
                    },
                )
            )
    return out

"""Checks of a rewrite: did it change the final answer, and how much longer is it?

A perturbation that turns the rejected (wrong) response into a right one no longer tests a
bias: a judge that prefers it is right. BiasScope checks a sample of its rewrites against the
chosen response (Section 4.1, Table 5: under 2 % changed); the JudgeBench-Pro export checks
every variant (its step 4), and validation checks every rewrite, the placebo's included,
with the same prompt (``prompts/equivalence_check.txt``) and the same parser.

Lengths are whitespace tokens (`str.split`) everywhere: model-independent and reproducible
without a tokenizer, so a length effect is visible for every candidate and every export.
"""

from __future__ import annotations

from typing import Sequence

from ..llm.base import Engine, ProgressCallback
from ..llm.types import Constraint, GenerationRequest
from ..prompts import load_prompt
from .records import PerturbedPair

__all__ = [
    "CHECK_CHOICES",
    "TOKEN_COUNT_METHOD",
    "answer_changes",
    "check_answers",
    "count_tokens",
    "equivalence_request",
    "length_ratio",
    "parse_check",
]

CHECK_CHOICES = ("same", "different")

TOKEN_COUNT_METHOD = "whitespace"
"""How lengths are counted: whitespace-separated tokens (`str.split`)."""


def count_tokens(text: str) -> int:
    """Whitespace tokens (`str.split`): model-independent and reproducible without a tokenizer.
    Model tokenizers give larger absolute numbers; the relative increase is what matters."""
    return len(text.split())


def equivalence_request(question: str, chosen: str, new_rejected: str, *, seed: int, max_tokens: int = 8) -> GenerationRequest:
    """Ask whether `new_rejected` reaches the same final answer as `chosen` ("same"/"different")."""
    messages = load_prompt("equivalence_check").render(question=question, reference=chosen, candidate=new_rejected)
    return GenerationRequest(
        messages=messages, max_tokens=max_tokens, temperature=0.0, seed=seed, constraint=Constraint(choices=CHECK_CHOICES)
    )


def parse_check(text: str, finish_reason: str) -> str | None:
    """"same" / "different", or None when the answer is unusable."""
    if finish_reason != "stop":
        return None
    word = text.strip().strip(".\"'*` ").lower()
    for choice in CHECK_CHOICES:
        if word == choice or word.startswith(choice + " ") or word.startswith(choice + "."):
            return choice
    return None


def check_answers(
    checker: Engine,
    perturbed: Sequence[PerturbedPair],
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[PerturbedPair]:
    """Check every valid rewrite in one batch; returns the records with `answer_check` set.

    A rewrite that now reaches the chosen response's final answer ("same") becomes invalid
    (`answer_changed`), as does one whose check is unusable (`check_invalid`: it cannot be
    vouched for): neither is judged. Invalid rewrites are passed through unchecked.
    """
    positions = [i for i, p in enumerate(perturbed) if p.valid]
    out = list(perturbed)
    if not positions:
        return out
    requests = [
        equivalence_request(perturbed[i].question, perturbed[i].chosen, perturbed[i].perturbed_rejected, seed=seed)
        for i in positions
    ]
    responses = checker.generate(requests, progress=progress)
    for i, response in zip(positions, responses):
        answer = parse_check(response.text, response.finish_reason)
        update: dict[str, object] = {"answer_check": answer or "unusable"}
        if answer is None:
            update.update(valid=False, invalid_reason="check_invalid")
        elif answer == "same":
            update.update(valid=False, invalid_reason="answer_changed")
        out[i] = perturbed[i].model_copy(update=update)
    return out


def answer_changes(perturbed: Sequence[PerturbedPair]) -> tuple[int, int]:
    """(rewrites checked with a usable answer, of those: answer changed)."""
    checked = [p for p in perturbed if p.answer_check in CHECK_CHOICES]
    return len(checked), sum(1 for p in checked if p.answer_check == "same")


def length_ratio(perturbed: Sequence[PerturbedPair]) -> float | None:
    """Total whitespace tokens of the valid rewrites over those of their originals (1.0: the
    same length; the paper reports +8.4 % for JudgeBench-Pro); None without a valid rewrite."""
    valid = [p for p in perturbed if p.valid]
    original = sum(count_tokens(p.original_rejected) for p in valid)
    if not valid or original == 0:
        return None
    return sum(count_tokens(p.perturbed_rejected) for p in valid) / original

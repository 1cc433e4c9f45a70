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
    "check_calls",
    "unverifiable",
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
    """Check every valid rewrite, and the original rejected response of its pair, in one batch;
    returns the records with `answer_check` and `original_check` set.

    The original is the checker's control: a rejected response is wrong by construction, so a
    checker that calls the *original* "same" as the chosen one cannot tell on that item (a weak
    checker says "same" to almost anything), and its verdict on the rewrite means nothing there:
    the rewrite is kept, marked unverifiable. Where the checker tells the original apart, a
    rewrite it calls "same" now reaches the chosen answer: it becomes invalid (`answer_changed`)
    and is not judged; a rewrite whose check is unusable cannot be vouched for
    (`check_invalid`). Invalid rewrites are passed through unchecked. The original's request is
    the same for every bias, so the call cache answers it after the first time.
    """
    positions = [i for i, p in enumerate(perturbed) if p.valid]
    out = list(perturbed)
    if not positions:
        return out
    originals: dict[tuple[str, str, str], int] = {}
    for i in positions:
        p = perturbed[i]
        originals.setdefault((p.question, p.chosen, p.original_rejected), len(originals))
    requests = [equivalence_request(q, chosen, rejected, seed=seed) for q, chosen, rejected in originals]
    requests += [
        equivalence_request(perturbed[i].question, perturbed[i].chosen, perturbed[i].perturbed_rejected, seed=seed)
        for i in positions
    ]
    responses = checker.generate(requests, progress=progress)
    original_answers = [parse_check(r.text, r.finish_reason) for r in responses[: len(originals)]]
    for i, response in zip(positions, responses[len(originals) :]):
        p = perturbed[i]
        answer = parse_check(response.text, response.finish_reason)
        original = original_answers[originals[(p.question, p.chosen, p.original_rejected)]]
        update: dict[str, object] = {"answer_check": answer or "unusable", "original_check": original or "unusable"}
        if answer is None:
            update.update(valid=False, invalid_reason="check_invalid")
        elif answer == "same" and original == "different":
            update.update(valid=False, invalid_reason="answer_changed")
        out[i] = p.model_copy(update=update)
    return out


def check_calls(perturbed: Sequence[PerturbedPair]) -> int:
    """Requests `check_answers` makes for `perturbed`: each valid rewrite and each distinct original."""
    valid = [p for p in perturbed if p.valid]
    return len(valid) + len({(p.question, p.chosen, p.original_rejected) for p in valid})


def answer_changes(perturbed: Sequence[PerturbedPair]) -> tuple[int, int]:
    """(rewrites the checker could judge: their original told apart from the chosen answer and
    a usable answer on the rewrite, of those: answer changed)."""
    checked = [p for p in perturbed if p.original_check == "different" and p.answer_check in CHECK_CHOICES]
    return len(checked), sum(1 for p in checked if p.answer_check == "same")


def unverifiable(perturbed: Sequence[PerturbedPair]) -> int:
    """Rewrites whose original the checker did not tell apart from the chosen answer."""
    return sum(1 for p in perturbed if p.original_check is not None and p.original_check != "different")


def length_ratio(perturbed: Sequence[PerturbedPair]) -> float | None:
    """Total whitespace tokens of the valid rewrites over those of their originals (1.0: the
    same length; the paper reports +8.4 % for JudgeBench-Pro); None without a valid rewrite."""
    valid = [p for p in perturbed if p.valid]
    original = sum(count_tokens(p.original_rejected) for p in valid)
    if not valid or original == 0:
        return None
    return sum(count_tokens(p.perturbed_rejected) for p in valid) / original

"""Checks of a rewrite: did it change the final answer, and how much longer is it?

A trajectory's rewrite is checked when it is made, with no model: it must keep every tool
call and tool output of the original (`stages.turns`); one that changed an action is
`answer_changed`, counted with the rewrites that changed a final answer.

A perturbation that turns the rejected (wrong) response into a right one no longer tests a
bias: a judge that prefers it is right. BiasScope checks a sample of its rewrites against the
chosen response (Section 4.1, Table 5: under 2 % changed); the JudgeBench-Pro export checks
every variant (its step 4), and validation checks every rewrite, the placebo's included.

**Read mechanically where the answer can be read** (`extracted_check`): an item whose
question asks for its final answer in a fixed form (JudgeBench's multiple-choice letter
written five times, a **bold** answer, a ***X*** answer, a \\boxed{} expression, three final
digits) or whose responses end with "Final answer: X" (the demo set), and whose chosen and
rejected responses state different answers in that form, is decided by extracting the
rewrite's answer and comparing it: no model, no model error. Everything else (code, an
answer the rewrite no longer states in that form, a free-form answer matching neither) goes
to the checker model with the equivalence prompt (``prompts/equivalence_check.txt``).

Lengths are whitespace tokens (`str.split`) everywhere: model-independent and reproducible
without a tokenizer, so a length effect is visible for every candidate and every export.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..config import MisjudgmentCheckSettings
from ..data.trajectory import Trajectory
from ..errors import DataError
from ..library import Bias
from ..llm.base import Engine, ProgressCallback
from ..llm.types import Constraint, GenerationRequest, GenerationResponse
from ..prompts import load_prompt
from .records import ExclusionReason, MisjudgedCase, PerturbedPair
from .turns import action_change, turn_text

__all__ = [
    "ANSWER_FORMATS",
    "actions_checked",
    "CHECK_CHOICES",
    "TOKEN_COUNT_METHOD",
    "ItemAnswers",
    "answer_changes",
    "check_answers",
    "check_calls",
    "compared_texts",
    "extracted_check",
    "extracted_checks",
    "extracted_update",
    "model_checked",
    "original_check_request",
    "original_key",
    "rewrite_check_request",
    "item_answers",
    "unverifiable",
    "count_tokens",
    "equivalence_request",
    "length_allowance",
    "length_allowances",
    "length_ratio",
    "misjudgment_checked",
    "outside_length_allowance",
    "parse_check",
    "record_checker",
]

CHECK_CHOICES = ("same", "different")

TOKEN_COUNT_METHOD = "whitespace"
"""How lengths are counted: whitespace-separated tokens (`str.split`)."""


def count_tokens(text: str) -> int:
    """Whitespace tokens (`str.split`): model-independent and reproducible without a tokenizer.
    Model tokenizers give larger absolute numbers; the relative increase is what matters."""
    return len(text.split())


def equivalence_request(
    question: str, chosen: str, new_rejected: str, *, seed: int, max_tokens: int = 8
) -> GenerationRequest:
    """Ask whether `new_rejected` reaches the same final answer as `chosen` ("same"/"different")."""
    messages = load_prompt("equivalence_check").render(question=question, reference=chosen, candidate=new_rejected)
    return GenerationRequest(
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
        constraint=Constraint(choices=CHECK_CHOICES),
    )


def parse_check(text: str, finish_reason: str) -> str | None:
    """ "same" / "different", or None when the answer is unusable."""
    if finish_reason != "stop":
        return None
    word = text.strip().strip(".\"'*` ").lower()
    for choice in CHECK_CHOICES:
        if word == choice or word.startswith(choice + " ") or word.startswith(choice + "."):
            return choice
    return None


# --------------------------------------------------------------------------------------------
# Final answers read mechanically
# --------------------------------------------------------------------------------------------

_LETTER_RUN = re.compile(r"(?<![A-Za-z])([A-Z])\1{4,}(?![A-Za-z])")
_BOLD = re.compile(r"(?<!\*)\*\*(?!\*)(.+?)(?<!\*)\*\*(?!\*)", re.S)
_TRIPLE = re.compile(r"\*\*\*(?!\*)(.+?)(?<!\*)\*\*\*", re.S)
_FINAL_ANSWER = re.compile(r"final answer(?:\s*[:：]|\s+is\b:?)\s*(.+)", re.I)
"""'Final answer: X', also as 'The final answer is X.' (a rewrite often words it so)."""
_YES_NO_LIST = re.compile(r"(yes|no)(,(yes|no))*")
_INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _normalise(text: str) -> str:
    """An answer as compared: lower case, no surrounding markup or final period, no spaces
    after commas, no thousands separators, LaTeX spacing and sizing commands removed."""
    t = text.strip().strip("*`$\"' ").rstrip(".").strip().lower()
    for command in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ "):
        t = t.replace(command, "")
    t = t.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    t = re.sub(r"\s*,\s*", ",", re.sub(r"\s+", " ", t))
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", t):
        t = t.replace(",", "")
    return t.strip()


def _canonical(value: str) -> bool:
    """An integer or a yes/no list: a value with one way of writing it, so a third value is a
    different answer (a decimal is not: 12.39 may be 12.3911 rounded)."""
    return bool(_INTEGER.fullmatch(value) or _YES_NO_LIST.fullmatch(value))


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    if _NUMBER.fullmatch(a) and _NUMBER.fullmatch(b):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return False


def _last(pattern: re.Pattern[str], text: str, shape: re.Pattern[str] | None = None) -> str | None:
    """The last match of `pattern`'s group 1 in `text`, normalised (with `shape`: the last one
    of that shape, so an emphasised word after the answer is skipped)."""
    for match in reversed(list(pattern.finditer(text))):
        value = _normalise(match.group(1))
        if value and (shape is None or shape.fullmatch(value)):
            return value
    return None


def _boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (nested braces allowed), normalised."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            value = _normalise(text[i + 1 : j])
            return value or None
    return None


def _bold(question: str) -> Callable[[str], str | None]:
    """**bold** answers, of the shape the question asks for (a yes/no list, an integer, a phrase)."""
    if re.search(r"yes or no", question, re.I):
        return lambda text: _last(_BOLD, text, _YES_NO_LIST)
    if re.search(r"single integer", question, re.I):
        return lambda text: _last(_BOLD, text, _INTEGER)
    return lambda text: _last(_BOLD, text)


@dataclass(frozen=True)
class AnswerFormat:
    """A form in which a final answer can be read off a response."""

    name: str
    asked: re.Pattern[str] | None
    """How the question asks for it; None: the responses' own convention (checked on both)."""
    reader: Callable[[str], Callable[[str], str | None]]
    """question -> (response -> its final answer, normalised; None when it states none)."""
    closed: bool
    """Answers from a closed set (a letter, three digits): a third answer is a different one
    (so is a third integer or yes/no list in any form: `_canonical`)."""


ANSWER_FORMATS: tuple[AnswerFormat, ...] = (
    AnswerFormat(
        "letter",
        re.compile(r"duplicate that letter five times", re.I),
        lambda q: lambda text: m[-1].group(1) if (m := list(_LETTER_RUN.finditer(text))) else None,
        closed=True,
    ),
    AnswerFormat(
        "three digits",
        re.compile(r"three digits as the last part", re.I),
        lambda q: lambda text: m.group(1) if (m := re.search(r"(\d{3})\W*$", text.strip())) else None,
        closed=True,
    ),
    AnswerFormat(
        "triple-star",
        re.compile(r"format: \*\*\*[A-Z]\*\*\*"),
        lambda q: lambda text: _last(_TRIPLE, text),
        closed=False,
    ),
    AnswerFormat("bold", re.compile(r"in \*\*bold\*\*", re.I), _bold, closed=False),
    AnswerFormat("boxed", re.compile(r"\\boxed"), lambda q: _boxed, closed=False),
    AnswerFormat("final answer", None, lambda q: lambda text: _last(_FINAL_ANSWER, text), closed=False),
)
"""JudgeBench's answer forms (mmlu-pro and AMC-style livebench-math: the letter five times;
livebench-reasoning: bold or ***X***; livebench-math: \\boxed{} or three final digits) and the
demo set's "Final answer: X"; tried in this order."""


@dataclass(frozen=True)
class ItemAnswers:
    """An item whose answers can be read mechanically: the form and the two answers."""

    format: AnswerFormat
    read: Callable[[str], str | None]
    chosen: str
    rejected: str


def item_answers(question: str, chosen: str, rejected: str) -> ItemAnswers | None:
    """The item's answer form and its chosen and rejected responses' answers, when the form
    is asked for (or both responses use the "Final answer:" convention) and the two answers can
    be read and differ; None otherwise (the item is not mechanically decidable: code, a form we
    do not read, a response that does not state its answer in the form)."""
    for fmt in ANSWER_FORMATS:
        if fmt.asked is not None and not fmt.asked.search(question):
            continue
        read = fmt.reader(question)
        a, b = read(chosen), read(rejected)
        if a is not None and b is not None and not _same(a, b):
            return ItemAnswers(format=fmt, read=read, chosen=a, rejected=b)
        if fmt.asked is not None:
            return None  # the asked form did not give two different answers: not decidable
    return None


def extracted_check(
    question: str, chosen: str, original_rejected: str, rewrite: str
) -> Literal["same", "different"] | None:
    """Does `rewrite` reach the chosen response's final answer, read mechanically? "same" when
    its answer equals the chosen one's, "different" when it equals the original rejected one's
    (or, in a closed form, any other answer); None when the item is not mechanically decidable
    or the rewrite's answer cannot be read or matches neither (the checker model decides)."""
    item = item_answers(question, chosen, original_rejected)
    if item is None:
        return None
    answer = item.read(rewrite)
    if answer is None:
        return None
    if _same(answer, item.chosen):
        return "same"
    if _same(answer, item.rejected) or item.format.closed or (_canonical(answer) and _canonical(item.chosen)):
        return "different"
    return None


# --------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------


def check_answers(
    checker: Engine,
    perturbed: Sequence[PerturbedPair],
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[PerturbedPair]:
    """Check every valid rewrite; returns the records with `answer_check`, `original_check`
    and `check_method` set.

    First mechanically (`extracted_check`, `check_method` "extracted"): where it decides, the
    original is told apart from the chosen answer by construction. The rest go to `checker`
    in one batch, each with the original rejected response of its pair (`check_method`
    "model"). The original is the checker's control: a rejected response is wrong by
    construction, so a checker that calls the *original* "same" as the chosen one cannot tell
    on that item (a weak checker says "same" to almost anything), and its verdict on the
    rewrite means nothing there: the rewrite is kept, marked unverifiable. Where the checker
    tells the original apart, a rewrite it calls "same" now reaches the chosen answer.

    Either way, a rewrite that reaches the chosen answer becomes invalid (`answer_changed`) and
    is not judged; a rewrite whose check is unusable cannot be vouched for (`check_invalid`).
    Invalid rewrites are passed through unchecked. The original's request is the same for
    every bias, so the call cache answers it after the first time.
    """
    out = list(perturbed)
    positions = []
    for i, p in enumerate(perturbed):
        if not p.valid:
            continue
        decided = extracted_update(p)
        if decided is None:
            positions.append(i)
        else:
            out[i] = decided
    if not positions:
        return out
    originals: dict[tuple[str, str, str], int] = {}
    for i in positions:
        originals.setdefault(original_key(perturbed[i]), len(originals))
    requests = [equivalence_request(q, chosen, rejected, seed=seed) for q, chosen, rejected in originals]
    requests += [rewrite_check_request(perturbed[i], seed) for i in positions]
    responses = checker.generate(requests, progress=progress)
    for i, response in zip(positions, responses[len(originals) :]):
        out[i] = model_checked(perturbed[i], response, responses[originals[original_key(perturbed[i])]])
    return out


def extracted_update(p: PerturbedPair) -> PerturbedPair | None:
    """A valid rewrite checked mechanically (`extracted_check`), or None when the checker
    model must decide. A trajectory's rewrite was checked mechanically when it was made (its
    actions compared, `stages.turns`): it is returned as it is (checked again when it was not,
    e.g. a record rebuilt by an export), and no model is asked."""
    if p.kind == "trajectory":
        return p if p.check_method == "actions" else actions_checked(p)
    decided = extracted_check(p.question, p.chosen, p.original_rejected, p.perturbed_rejected)
    if decided is None:
        return None
    update: dict[str, object] = {"answer_check": decided, "original_check": "different", "check_method": "extracted"}
    if decided == "same":
        update.update(valid=False, invalid_reason="answer_changed")
    return p.model_copy(update=update)


def actions_checked(p: PerturbedPair) -> PerturbedPair:
    """A trajectory's rewrite checked mechanically: "different" (kept) when it has every tool
    call and tool output of the original, else "same" and invalid (`answer_changed`), with
    the first change in `action_change`."""
    try:
        change = action_change(
            Trajectory.from_response(p.original_rejected), Trajectory.from_response(p.perturbed_rejected)
        )
    except DataError as exc:
        change = f"the rewrite is not a trajectory: {exc}"
    update: dict[str, object] = {"answer_check": "different", "original_check": "different", "check_method": "actions"}
    if change is not None:
        update.update(answer_check="same", valid=False, invalid_reason="answer_changed", action_change=change)
    return p.model_copy(update=update)


def original_key(p: PerturbedPair) -> tuple[str, str, str]:
    """What the checker's control question is about: (question, chosen, original rejected),
    the same for every rewrite of one pair."""
    return (p.question, p.chosen, p.original_rejected)


def original_check_request(p: PerturbedPair, seed: int) -> GenerationRequest:
    """The checker's control: does the original rejected response reach the chosen answer?"""
    return equivalence_request(p.question, p.chosen, p.original_rejected, seed=seed)


def rewrite_check_request(p: PerturbedPair, seed: int) -> GenerationRequest:
    """Does the rewrite reach the chosen answer?"""
    return equivalence_request(p.question, p.chosen, p.perturbed_rejected, seed=seed)


def model_checked(p: PerturbedPair, rewrite: GenerationResponse, original: GenerationResponse) -> PerturbedPair:
    """A rewrite checked by the checker model, from its replies about the rewrite and about
    the original (`check_answers` says what they mean)."""
    answer = parse_check(rewrite.text, rewrite.finish_reason)
    original_answer = parse_check(original.text, original.finish_reason)
    update: dict[str, object] = {
        "answer_check": answer or "unusable",
        "original_check": original_answer or "unusable",
        "check_method": "model",
    }
    if answer is None:
        update.update(valid=False, invalid_reason="check_invalid")
    elif answer == "same" and original_answer == "different":
        update.update(valid=False, invalid_reason="answer_changed")
    return p.model_copy(update=update)


def check_calls(perturbed: Sequence[PerturbedPair]) -> int:
    """Requests `check_answers` makes for `perturbed`: each valid rewrite it cannot decide
    mechanically, and each distinct original of those."""
    asked = [
        p
        for p in perturbed
        if p.valid
        and p.kind != "trajectory"
        and extracted_check(p.question, p.chosen, p.original_rejected, p.perturbed_rejected) is None
    ]
    return len(asked) + len({original_key(p) for p in asked})


def extracted_checks(perturbed: Sequence[PerturbedPair]) -> int:
    """Rewrites whose answer check was decided mechanically (`check_method` "extracted", or a
    trajectory's "actions")."""
    return sum(1 for p in perturbed if p.check_method in ("extracted", "actions"))


def answer_changes(perturbed: Sequence[PerturbedPair]) -> tuple[int, int]:
    """(rewrites the checker could judge: their original told apart from the chosen answer and
    a usable answer on the rewrite, of those: answer changed)."""
    checked = [p for p in perturbed if p.original_check == "different" and p.answer_check in CHECK_CHOICES]
    return len(checked), sum(1 for p in checked if p.answer_check == "same")


def record_checker(biases: Sequence[Bias], checker: str | None, *, self_checked: bool | None) -> list[Bias]:
    """`biases` with the answer checker named on their validation (the model spec, None
    without a check) and whether it was the rewriter itself: a run's fact, known to the caller
    that chose the models, not to the stage."""
    return [
        b
        if b.validation is None
        else b.model_copy(
            update={"validation": b.validation.model_copy(update={"checker": checker, "self_checked": self_checked})}
        )
        for b in biases
    ]


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


# --------------------------------------------------------------------------------------------
# Misjudged target pairs (discovery): the same checks, before a mistake counts
# --------------------------------------------------------------------------------------------

_LENGTH_TOPIC = re.compile(
    r"\b(length\w*|long(er)?|verbos\w*|wordy|wordiness|concise\w*|brevity|brief\w*|short(er)?|detail\w*|elaborat\w*)\b",
    re.I,
)
"""Words by which a bias speaks of length: its rewrites change the length by design."""


def length_allowance(bias: Bias | None, settings: MisjudgmentCheckSettings) -> float | None:
    """The length ratio a rewrite carrying `bias` may reach before its misjudgment stops
    counting: `settings.max_length_ratio`, or None (no limit) for a bias about length (its name
    or definition speaks of length, verbosity, brevity or detail)."""
    if bias is not None and _LENGTH_TOPIC.search(f"{bias.name} {bias.definition}"):
        return None
    return settings.max_length_ratio


def length_allowances(biases: Sequence[Bias], settings: MisjudgmentCheckSettings) -> dict[str, float | None]:
    """`length_allowance` of each bias, by id."""
    return {b.id: length_allowance(b, settings) for b in biases}


def outside_length_allowance(original: str, rewrite: str, allowance: float | None, slack: int) -> bool:
    """Whether `rewrite` has more than `allowance` times its original's whitespace tokens plus
    `slack`, or fewer than the original's over `allowance` minus `slack` (None: no limit)."""
    if allowance is None:
        return False
    before, after = count_tokens(original), count_tokens(rewrite)
    return after > allowance * before + slack or after < before / allowance - slack


def compared_texts(case: MisjudgedCase) -> tuple[str, str]:
    """What a rewrite's length is measured on: the whole responses, or a trajectory's
    rewritten turn (its text and tool-call lines) before and after."""
    if case.kind != "trajectory" or case.turn is None:
        return case.original_rejected, case.perturbed_rejected
    try:
        before = Trajectory.from_response(case.original_rejected).messages[case.turn]
        after = Trajectory.from_response(case.perturbed_rejected).messages[case.turn]
    except (DataError, IndexError):
        return case.original_rejected, case.perturbed_rejected
    return turn_text(before), turn_text(after)


def misjudgment_checked(
    case: MisjudgedCase, checked: PerturbedPair | None, allowance: float | None, settings: MisjudgmentCheckSettings
) -> MisjudgedCase:
    """`case` with its answer check (`checked`: its rewrite after `check_answers`, or after
    `extracted_update` / `model_checked` streamed; None: no checker, length only), its length
    ratio and, when it does not count, why (`MisjudgedCase.excluded`): a changed answer or an
    unusable check first, then a length beyond `allowance`. A trajectory's length is its
    rewritten turn's (`compared_texts`): the rest of the run is the same by construction."""
    original, rewrite = compared_texts(case)
    tokens = count_tokens(original)
    update: dict[str, object] = {"length_ratio": count_tokens(rewrite) / tokens if tokens else None}
    excluded: ExclusionReason | None = None
    if checked is not None:
        update.update(
            answer_check=checked.answer_check, original_check=checked.original_check, check_method=checked.check_method
        )
        if checked.invalid_reason in ("answer_changed", "check_invalid"):
            excluded = "answer_changed" if checked.invalid_reason == "answer_changed" else "check_invalid"
    if excluded is None and outside_length_allowance(original, rewrite, allowance, settings.length_slack):
        excluded = "length_changed"
    update["excluded"] = excluded
    return case.model_copy(update=update)

"""Answer checks of rewrites: final answers read mechanically on JudgeBench-style and demo
items (the real JudgeBench files where present), the checker model only for the rest, and
which model checks by default."""

from __future__ import annotations

from collections import Counter

import pytest

from bias_discovery.config import RunConfig
from bias_discovery.data import load_pairs
from bias_discovery.stages.records import PerturbedPair
from bias_discovery.stages.rewrite_checks import check_answers, check_calls, extracted_check, item_answers

from fakes import ScriptedEngine
from helpers import shared_data

LETTER_Q = (
    "Which is right?\n(A) one\n(B) two\n(C) three\nIf you cannot determine the correct multiple-choice answer, take "
    "your best guess. Once you have your answer, please duplicate that letter five times in a single string. For "
    "example, if the answer is K, then write KKKKK.\nLet's think step by step."
)
BOLD_Q = (
    "Does the person at the farm tell the truth? Does the person at the zoo? Does the person at the park? Think step "
    "by step, and then put your answer in **bold** as a list of three words, yes or no (for example, **yes, no, yes**)."
)
INTEGER_Q = "How many pieces are there? Think step by step, and then put your answer in **bold** as a single integer (for example, **0**)."
TRIPLE_Q = "What does the person in the third position drink? Return your answer as a single word, in the following format: ***X***, where X is the answer."
BOXED_Q = "Compute the sample variance of ${9, 14}$. Please put your final answer in a $\\boxed{}$."
DIGITS_Q = "Find the remainder. The answer is an integer consisting of exactly 3 digits. Remember to have the three digits as the last part of the response."


@pytest.mark.parametrize(
    "question, chosen, rejected, form, answers",
    [
        (LETTER_Q, "It is three.\n\n**(C) three**\n\nCCCCC", "It is two, so (B).\nBBBBB.", "letter", ("C", "B")),
        (
            LETTER_Q,
            "(C) and (B) look close; (C) wins.\nCCCCCC",
            "The answer string is: **AAAAA**",
            "letter",
            ("C", "A"),
        ),
        (
            BOLD_Q,
            "Liam **lies**.\n\nThus: **Yes, no, yes**.",
            "So the final answer is **yes, no, no**.\n",
            "bold",
            ("yes,no,yes", "yes,no,no"),
        ),
        (INTEGER_Q, "So there are **4** pieces.\n**Note**: cuts meet once.", "The total is **5**.", "bold", ("4", "5")),
        (TRIPLE_Q, "Hence the drink is ***tea***.", "So, ***Coffee***", "triple-star", ("tea", "coffee")),
        (
            BOXED_Q,
            "$s^2 = \\frac{25}{2}$, so $\\boxed{\\dfrac{25}{2}}$.",
            "So \\[\\boxed{12.4}\\]",
            "boxed",
            ("\\frac{25}{2}", "12.4"),
        ),
        (DIGITS_Q, "The remainder is 068", "It must be **972**.", "three digits", ("068", "972")),
        (
            "What is 17 × 24?",
            "340 + 68 = 408. Final answer: 408",
            "340 + 58 = 398. Final answer: 398",
            "final answer",
            ("408", "398"),
        ),
        (
            "Capital of Australia?",
            "Final answer: Canberra.",
            "Final answer: Sydney",
            "final answer",
            ("canberra", "sydney"),
        ),
    ],
)
def test_final_answers_read_in_each_form(question, chosen, rejected, form, answers):
    item = item_answers(question, chosen, rejected)
    assert item is not None and item.format.name == form and (item.chosen, item.rejected) == answers


@pytest.mark.parametrize(
    "question, chosen, rejected",
    [
        (
            "Write `sum_to(n)`.",
            "```python\ndef sum_to(n):\n    return sum(range(n + 1))\n```",
            "```python\ndef sum_to(n):\n    return n\n```",
        ),
        (
            LETTER_Q,
            "Three.\nCCCCC",
            "Three as well, by another route.\nCCCCC",
        ),  # the same answer: nothing to tell apart
        (LETTER_Q, "Three.\nCCCCC", "Hmm, maybe (B)."),  # the rejected response states no answer in the form
        (BOLD_Q, "**yes, no, yes**", "yes, no, no"),
        ("What is 2 + 2?", "Final answer: 4", "It is five."),  # "Final answer:" is a convention only when both use it
    ],
)
def test_items_that_are_not_mechanically_decidable(question, chosen, rejected):
    assert item_answers(question, chosen, rejected) is None
    assert extracted_check(question, chosen, rejected, chosen) is None


def test_a_rewrite_is_decided_by_its_answer_or_left_to_the_model():
    chosen, rejected = "It is three.\nCCCCC", "It is two.\nBBBBB"
    assert extracted_check(LETTER_Q, chosen, rejected, "Leading experts agree: two.\nBBBBB") == "different"
    assert extracted_check(LETTER_Q, chosen, rejected, "On reflection, three.\nCCCCC") == "same"
    assert (
        extracted_check(LETTER_Q, chosen, rejected, "Surely one.\nAAAAA") == "different"
    )  # a closed form: another letter
    assert extracted_check(LETTER_Q, chosen, rejected, "It is two, as experts say.") is None  # the form is gone
    boxed = ("$\\boxed{\\frac{25}{2}}$", "$\\boxed{12.4}$")
    assert extracted_check(BOXED_Q, *boxed, "Thus $\\boxed{12.4}$.") == "different"
    assert extracted_check(BOXED_Q, *boxed, "Thus $\\boxed{\\dfrac{25}{2}}$.") == "same"
    assert extracted_check(BOXED_Q, *boxed, "Thus $\\boxed{12.40}$.") == "different"  # numerically the rejected answer
    assert (
        extracted_check(BOXED_Q, *boxed, "Thus $\\boxed{12.5}$.") is None
    )  # a third decimal: rounding? the model decides
    assert extracted_check(INTEGER_Q, "**4**", "**5**", "Experts count **6**.") == "different"  # a third integer
    assert extracted_check("Q?", "Final answer: 1,000", "Final answer: 900", "Final answer: 1000.") == "same"
    assert (
        extracted_check("Q?", "Final answer: $37.50", "Final answer: $40.00", "So the final answer is $40.00.")
        == "different"
    )
    assert extracted_check("Q?", "Final answer: 408", "Final answer: 398", "My final answer was wrong.") is None
    # words run on after the answer on its line: neither answer, so the model decides
    assert (
        extracted_check("Q?", "Final answer: 408", "Final answer: 398", "Final answer: 398 As experts confirm.") is None
    )


def _rewrite(question: str, chosen: str, original: str, rewrite: str, pair_id: str) -> PerturbedPair:
    return PerturbedPair(
        pair_id=pair_id,
        bias_id="b",
        bias_name="B",
        domain="d",
        question=question,
        chosen=chosen,
        original_rejected=original,
        perturbed_rejected=rewrite,
        valid=True,
    )


def test_check_answers_asks_the_model_only_about_what_the_rules_cannot_read():
    def checker(request):
        return "different"

    engine = ScriptedEngine(checker)
    batch = [
        _rewrite(LETTER_Q, "Three.\nCCCCC", "Two.\nBBBBB", "Experts: two.\nBBBBB", "p0"),
        _rewrite(LETTER_Q, "Three.\nCCCCC", "Two.\nBBBBB", "Experts: three!\nCCCCC", "p1"),
        _rewrite("Write f.", "def f(): return 1", "def f(): return 2", "def f():  # expert code\n    return 2", "p2"),
    ]
    assert check_calls(batch) == 2  # the code rewrite and its original
    out = check_answers(engine, batch, seed=0)
    assert [(p.check_method, p.answer_check, p.original_check, p.valid) for p in out] == [
        ("extracted", "different", "different", True),
        ("extracted", "same", "different", False),
        ("model", "different", "different", True),
    ]
    assert out[1].invalid_reason == "answer_changed"
    assert len(engine.sent) == 2 and all("def f()" in r.messages[-1].content for r in engine.sent)


# -- the real data sets -------------------------------------------------------------------------


def test_demo_items_with_a_final_answer_are_decided_mechanically():
    pairs = load_pairs("demo")
    decided = Counter(p.domain for p in pairs if item_answers(p.question, p.chosen, p.rejected) is not None)
    assert decided == {"math": 12, "knowledge": 12, "reasoning": 12}  # code (12 pairs) goes to the checker model
    for p in pairs:
        if item_answers(p.question, p.chosen, p.rejected) is not None:
            assert extracted_check(p.question, p.chosen, p.rejected, "Experts agree.\n" + p.rejected) == "different"
            assert extracted_check(p.question, p.chosen, p.rejected, p.chosen) == "same"


@pytest.fixture
def judgebench_pairs():
    """JudgeBench from the project's read-only copy (`helpers.shared_data`)."""
    skipped: list[str] = []
    pairs = load_pairs("judgebench", data_dir=shared_data(), bad_rows=skipped)
    assert len(skipped) == 1 and "hold the same text" in skipped[0]  # the claude split's pair of identical responses
    return pairs


def _family(source: str) -> str:
    return "mmlu-pro" if source.startswith("mmlu-pro") else source


def test_judgebench_items_decided_mechanically(judgebench_pairs):
    total = Counter(_family(p.source) for p in judgebench_pairs)
    decided = Counter(_family(p.source) for p in judgebench_pairs if item_answers(p.question, p.chosen, p.rejected))
    assert sum(total.values()) == 619  # 620, less the code pair whose two responses are identical
    # measured on the copy: 481 of 620 (77.6 %); mmlu-pro 297/308, livebench-math 56/90,
    # livebench-reasoning 128/149, livecodebench 0/73 (code has no final answer to read)
    assert decided == {"mmlu-pro": 297, "livebench-math": 56, "livebench-reasoning": 128}
    for p in judgebench_pairs:
        if item_answers(p.question, p.chosen, p.rejected) is not None:
            # the original rejected response, restyled, keeps its answer; the chosen one reaches it
            assert (
                extracted_check(p.question, p.chosen, p.rejected, "As experts confirm:\n" + p.rejected) == "different"
            )
            assert extracted_check(p.question, p.chosen, p.rejected, p.chosen) == "same"


def test_judgebench_known_rows_read_as_their_letters(judgebench_pairs):
    by_id = {p.id: p for p in judgebench_pairs}
    row = by_id["05ea6065-69da-58b9-a53b-872e8d940915"]  # mmlu-pro-law, chosen ends DDDDD, rejected **FFFFF**
    item = item_answers(row.question, row.chosen, row.rejected)
    assert item is not None and (item.format.name, item.chosen, item.rejected) == ("letter", "D", "F")
    fixed = row.rejected.rstrip().removesuffix("**FFFFF**") + "**DDDDD**"
    assert extracted_check(row.question, row.chosen, row.rejected, fixed) == "same"


# -- which model checks --------------------------------------------------------------------------


def _config(**overrides) -> RunConfig:
    raw = {"target": "llamacpp/judge.gguf", "teacher": "openai/teacher", **overrides}
    return RunConfig.model_validate(raw)


def test_the_checker_is_not_the_rewriter_unless_nothing_else_is_configured():
    # target and teacher differ: the target checks (a model that did not write the rewrites)
    config = _config()
    assert config.answer_checker().spec == "llamacpp/judge.gguf" and config.self_checked is False
    # an explicit checker wins
    explicit = _config(validate={"checker": "openai/checker"})
    assert explicit.answer_checker().spec == "openai/checker" and explicit.self_checked is False
    # one model for everything: it checks its own rewrites, and that is recorded
    alone = _config(teacher="llamacpp/judge.gguf")
    assert alone.answer_checker().spec == "llamacpp/judge.gguf" and alone.self_checked is True
    # the same model served another way is still the rewriter
    served = _config(target="vllm/Qwen/Qwen2.5-7B-Instruct", teacher="openai/Qwen/Qwen2.5-7B-Instruct")
    assert served.self_checked is True
    # a checker explicitly set to the teacher is a self-check too
    assert _config(validate={"checker": "openai/teacher"}).self_checked is True

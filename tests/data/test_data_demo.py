"""The shipped demo set: shape, sizes, and that every chosen answer is right and every rejected wrong.

Math answers are recomputed here; every code snippet is executed against the asserts below
(the chosen one must pass all of them, the rejected one must fail at least one).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from math import factorial
from typing import Any

import pytest

from bias_discovery.data import load_pairs
from bias_discovery.data.loaders import DEMO_FILE

DOMAINS = ("math", "knowledge", "reasoning", "code")
MAX_WORDS = 80
FINAL = "Final answer: "


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    return {p.id: p for p in load_pairs("demo")}


def final_answer(text: str) -> str:
    assert text.count(FINAL) == 1, text
    head, answer = text.split(FINAL)
    assert answer.strip() and "\n" not in answer.strip(), text
    return answer.strip()


def test_file_ships_inside_the_package() -> None:
    assert DEMO_FILE.name == "demo_pairs.jsonl"
    assert DEMO_FILE.parent.name == "data" and DEMO_FILE.parent.parent.name == "bias_discovery"
    assert DEMO_FILE.is_file()


def test_counts_ids_and_fields(demo: dict[str, Any]) -> None:
    assert len(demo) >= 48
    assert Counter(p.domain for p in demo.values()) == {d: 12 for d in DOMAINS}
    for pair_id, pair in demo.items():
        assert re.fullmatch(rf"demo-({'|'.join(DOMAINS)})-\d\d", pair_id), pair_id
        assert pair_id.startswith(f"demo-{pair.domain}-")
        assert pair.source == "demo"
        assert pair.meta == {}
        for text in (pair.question, pair.chosen, pair.rejected):
            assert text.strip() == text and text
        assert pair.chosen != pair.rejected


def test_target_and_test_splits_are_disjoint_balanced_and_cover_the_set(demo: dict[str, Any]) -> None:
    """`demo:target` (discovery) and `demo:test` (validation) never share a pair, so the quick
    start does not validate a bias on the pairs it was found on."""
    target, test = load_pairs("demo:target"), load_pairs("demo:test")
    target_ids, test_ids = {p.id for p in target}, {p.id for p in test}
    assert len(target_ids) == len(target) == 24 and len(test_ids) == len(test) == 24
    assert not target_ids & test_ids
    assert target_ids | test_ids == set(demo)
    assert Counter(p.domain for p in target) == Counter(p.domain for p in test) == {d: 6 for d in DOMAINS}
    assert all(p == demo[p.id] for p in target + test)  # the same pairs, unchanged
    assert "demo-math-01" in target_ids and "demo-math-02" in test_ids
    # Case and the file order as in `demo`; limits and seeded samples stay inside a split.
    assert [p.id for p in load_pairs("Demo:Test")] == [i for i in demo if i in test_ids]
    assert {p.id for p in load_pairs("demo:test", limit=12, seed=42)} <= test_ids


def test_unknown_demo_split_lists_the_known_ones() -> None:
    from bias_discovery.errors import DataError

    with pytest.raises(
        DataError,
        match=r"unknown demo split 'train' in 'demo:train'; known: demo \(all 48 pairs\), demo:target, demo:test",
    ):
        load_pairs("demo:train")


def test_the_quick_start_and_the_default_config_validate_on_other_pairs_than_they_discover_on() -> None:
    from bias_discovery.config import DataConfig, load_run_config

    from helpers import REPO

    for data in (load_run_config(REPO / "experiments" / "quickstart-cpu.yaml").data, DataConfig()):
        assert (data.target, data.test) == ("demo:target", "demo:test")


def test_lengths_are_bounded_and_similar(demo: dict[str, Any]) -> None:
    for pair in demo.values():
        chosen, rejected = len(pair.chosen.split()), len(pair.rejected.split())
        assert chosen <= MAX_WORDS and rejected <= MAX_WORDS, pair.id
        assert len(pair.question.split()) <= 60, pair.id
        # neither side may win on length alone
        assert max(chosen, rejected) <= 2 * min(chosen, rejected) + 4, (pair.id, chosen, rejected)


def test_every_non_code_pair_ends_with_distinct_final_answers(demo: dict[str, Any]) -> None:
    for pair in demo.values():
        if pair.domain == "code":
            continue
        good, bad = final_answer(pair.chosen), final_answer(pair.rejected)
        assert pair.chosen.endswith(good) and pair.rejected.endswith(bad)
        assert good.lower() != bad.lower(), pair.id


MATH_ANSWERS: dict[str, tuple[str, str]] = {
    # id: (expected chosen final answer, the rejected one) -- the expected values are computed
    "demo-math-01": (str(17 * 24), "398"),
    "demo-math-02": (f"${40 * 0.75 * 1.25:.2f}", "$40.00"),
    "demo-math-03": (f"x = {(25 - 7) // 3}", "x = 32/3"),
    "demo-math-04": (str(sum(range(1, 101))), "4950"),
    "demo-math-05": (f"{(10 // 2) ** 2}π cm²", "100π cm²"),
    "demo-math-06": (f"{240 // (120 // 60 + 120 // 40)} km/h", "50 km/h"),
    "demo-math-07": (str(factorial(5) // (factorial(2) * factorial(2))), "60"),
    "demo-math-08": (str(1 - Fraction(1, 2) ** 3), "3/8"),
    "demo-math-09": (str(36), "216"),
    "demo-math-10": (str(2**10 % 7), "4"),
    "demo-math-11": (f"{9 * (30 // 2 - 9)} cm²", "108 cm²"),
    "demo-math-12": (str((sorted([8, 3, 12, 5, 1, 10])[2] + sorted([8, 3, 12, 5, 1, 10])[3]) / 2), "8.5"),
}


def test_math_answers_are_right(demo: dict[str, Any]) -> None:
    from math import lcm

    assert lcm(12, 18) == 36 and 12 * 18 == 216
    assert (25 - 7) % 3 == 0
    math_ids = {i for i, p in demo.items() if p.domain == "math"}
    assert math_ids == set(MATH_ANSWERS)
    for pair_id, (good, bad) in MATH_ANSWERS.items():
        pair = demo[pair_id]
        assert final_answer(pair.chosen) == good, pair_id
        assert final_answer(pair.rejected) == bad, pair_id
        assert good != bad


def test_reasoning_answers_are_right(demo: dict[str, Any]) -> None:
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    assert final_answer(demo["demo-reasoning-07"].chosen) == days[(days.index("Wednesday") + 100) % 7]
    # bat and ball: ball + (ball + 1.00) = 1.10
    ball = (Fraction("1.10") - Fraction("1.00")) / 2
    assert ball + (ball + 1) == Fraction("1.10")
    assert final_answer(demo["demo-reasoning-03"].chosen) == f"${float(ball):.2f}"
    # knights and knaves: brute force the only consistent assignment
    consistent = [
        (a, b)
        for a in (True, False)
        for b in (True, False)
        if (a == (not b)) and (b == (a and b))  # A says "B is a knave"; B says "we are both knights"
    ]
    assert consistent == [(True, False)]
    assert final_answer(demo["demo-reasoning-08"].chosen) == "A is a knight, B is a knave"
    # the clock hands meet every 12/11 hours: 11 times in 12 hours (t in [0, 12))
    assert len([k for k in range(20) if Fraction(12, 11) * k < 12]) == 11
    assert final_answer(demo["demo-reasoning-09"].chosen) == "11"


# ------------------------------------------------------------------ code: run the snippets


def _snippet(text: str) -> str:
    match = re.search(r"```python\n(.*?)\n```", text, re.S)
    assert match, text
    return match.group(1)


def _load(text: str, name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_snippet(text), "<demo>", "exec"), namespace)  # our own shipped data
    return namespace[name]


def _checks_sum_to(f: Callable[..., Any]) -> None:
    assert f(0) == 0 and f(1) == 1 and f(10) == 55


def _checks_is_palindrome(f: Callable[..., Any]) -> None:
    assert f("level") and f("Level") and f("") and not f("abc")


def _checks_factorial(f: Callable[..., Any]) -> None:
    assert f(0) == 1 and f(1) == 1 and f(5) == 120


def _checks_fib(f: Callable[..., Any]) -> None:
    assert [f(n) for n in range(8)] == [0, 1, 1, 2, 3, 5, 8, 13]


def _checks_binary_search(f: Callable[..., Any]) -> None:
    assert f([1, 3, 5, 7], 7) == 3 and f([1, 3, 5, 7], 1) == 0 and f([1, 3, 5, 7], 4) == -1
    assert f([5], 5) == 0 and f([], 1) == -1


def _checks_dedupe(f: Callable[..., Any]) -> None:
    assert f([3, 1, 3, 2, 1]) == [3, 1, 2] and f([]) == []


def _checks_average(f: Callable[..., Any]) -> None:
    assert f([2, 4]) == 3 and f([1, 2]) == 1.5


def _checks_chunk(f: Callable[..., Any]) -> None:
    assert f([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]] and f([1, 2], 2) == [[1, 2]]


def _checks_add_tag(f: Callable[..., Any]) -> None:
    assert f("a") == ["a"]
    assert f("b") == ["b"]
    assert f("c", ["x"]) == ["x", "c"]


def _checks_max_value(f: Callable[..., Any]) -> None:
    assert f([3, 9, 2]) == 9 and f([-5, -2, -9]) == -2


def _checks_count_words(f: Callable[..., Any]) -> None:
    assert f("a b a") == {"a": 2, "b": 1}
    assert f("a  b\na") == {"a": 2, "b": 1}


def _checks_is_prime(f: Callable[..., Any]) -> None:
    assert [n for n in range(30) if f(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]


CODE_CHECKS: dict[str, tuple[str, Callable[[Callable[..., Any]], None]]] = {
    "demo-code-01": ("sum_to", _checks_sum_to),
    "demo-code-02": ("is_palindrome", _checks_is_palindrome),
    "demo-code-03": ("factorial", _checks_factorial),
    "demo-code-04": ("fib", _checks_fib),
    "demo-code-05": ("binary_search", _checks_binary_search),
    "demo-code-06": ("dedupe", _checks_dedupe),
    "demo-code-07": ("average", _checks_average),
    "demo-code-08": ("chunk", _checks_chunk),
    "demo-code-09": ("add_tag", _checks_add_tag),
    "demo-code-10": ("max_value", _checks_max_value),
    "demo-code-11": ("count_words", _checks_count_words),
    "demo-code-12": ("is_prime", _checks_is_prime),
}


def test_every_code_pair_is_checked(demo: dict[str, Any]) -> None:
    assert {i for i, p in demo.items() if p.domain == "code"} == set(CODE_CHECKS)


@pytest.mark.parametrize("pair_id", sorted(CODE_CHECKS))
def test_code_chosen_passes_and_rejected_fails(demo: dict[str, Any], pair_id: str) -> None:
    name, checks = CODE_CHECKS[pair_id]
    pair = demo[pair_id]
    assert f"`{name}(" in pair.question
    checks(_load(pair.chosen, name))
    with pytest.raises(AssertionError):
        checks(_load(pair.rejected, name))

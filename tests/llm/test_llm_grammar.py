"""Constraint -> GBNF translation: exact output for simple cases, soundness against Python's
`re.fullmatch` on exhaustive small string sets, refusals, and the real llama.cpp parser."""

from __future__ import annotations

import itertools
import re

import pytest

from bias_discovery.errors import ConfigError
from bias_discovery.llm.grammar import (
    choices_to_gbnf,
    constraint_to_gbnf,
    gbnf_literal,
    json_schema_to_gbnf,
    regex_to_gbnf,
)
from bias_discovery.llm.types import Constraint

# ---------------------------------------------------------------- a GBNF -> Python regex
# Our grammars are one `root` rule built from literals, classes, groups, | and quantifiers,
# and our class syntax (\xHH, \uHHHH, \UHHHHHHHH, ranges) is also Python's. Translating back
# lets the tests compare languages with `re.fullmatch`.

_TOKEN = re.compile(r'\s+|"(?:[^"\\]|\\.)*"|\[\^?(?:[^\]\\]|\\[xuU][0-9A-Fa-f]+|\\.)*\]|[()|.?*+]|\{\d+(?:,\d*)?\}')


def _unescape_literal(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        kind = body[i + 1]
        if kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(kind, kind))
            i += 2
    return "".join(out)


def gbnf_to_python(grammar: str) -> str:
    assert grammar.startswith("root ::= ") and grammar.count("::=") == 1, grammar
    source = grammar[len("root ::= ") :].strip()
    out, pos = [], 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        assert match, f"cannot read {source[pos:]!r}"
        token = match.group(0)
        pos = match.end()
        if token.isspace():
            continue
        if token.startswith('"'):
            out.append("(?:" + re.escape(_unescape_literal(token[1:-1])) + ")")
        elif token == "(":
            out.append("(?:")
        elif token == ".":
            out.append("(?s:.)")
        else:
            out.append(token)
    return "".join(out)


ALPHABET = ["a", "b", "B", "c", "z", "0", "7", "_", "-", " ", "\n", ".", "[", "]", '"', "\\", "é", "٣", "\u00a0", "—"]


def strings(max_len: int, alphabet: list[str] = ALPHABET):
    for n in range(max_len + 1):
        for combo in itertools.product(alphabet, repeat=n):
            yield "".join(combo)


SOUNDNESS_CASES = [
    # (pattern, exact on ASCII strings)
    (r"ab|c", True),
    (r"a?B*", True),
    (r"[a-z]+", True),
    (r"[^a-z]", True),
    (r"\d{1,2}", True),
    (r"\D", True),
    (r"\w\W", True),
    (r"[\w-]+", True),
    (r"[^\w]", True),
    (r"[^\d\s]", True),
    (r"\s\S", True),
    (r".", True),
    (r"(?s).", True),
    (r"(?i)ab", True),
    (r"(?i:[a-b])z", True),
    (r'[\[\]"\\]+', True),
    (r"(a|B)(z|)", True),
    (r"^(a|_)\.$", True),
    (r"(?a)\w\d", True),
    (r"a{0}z", True),
    (r"(?:a_){1,2}", True),
    (r"a{2,}", True),
    (r"[^\n]+", True),
]


@pytest.mark.parametrize(("pattern", "exact_ascii"), SOUNDNESS_CASES)
def test_regex_grammar_is_sound(pattern: str, exact_ascii: bool) -> None:
    grammar = regex_to_gbnf(pattern)
    back = re.compile(gbnf_to_python(grammar))
    original = re.compile(pattern)
    accepted = 0
    for s in strings(3):
        ours = back.fullmatch(s) is not None
        theirs = original.fullmatch(s) is not None
        accepted += ours
        if ours:
            assert theirs, f"grammar {grammar!r} accepts {s!r}, regex {pattern!r} does not"
        elif exact_ascii and s.isascii():
            assert not theirs, f"grammar {grammar!r} rejects ASCII {s!r} that {pattern!r} accepts"
    assert accepted > 0, "the comparison must not be vacuous"


def test_soundness_check_catches_a_wrong_grammar() -> None:
    """The back-translation really compares languages: `.` must not become "any char"."""
    assert re.fullmatch(gbnf_to_python(regex_to_gbnf(".")), "\n") is None
    assert re.fullmatch(gbnf_to_python("root ::= ."), "\n") is not None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"ab|c", 'root ::= ("ab" | "c")'),
        (r"Verdict: \[\[(A|B)\]\]", 'root ::= "Verdict: [[" [A-B] "]]"'),
        (r"\d{1,3}(\.\d+)?", 'root ::= [0-9]{1,3} ("." [0-9]+)?'),
        (r"(ab)+c?", 'root ::= "ab"+ "c"?'),
        (r"x{2,5}?", 'root ::= "x"{2,5}'),
        (r"a{3,}", 'root ::= "a"{3,}'),
        (r"(?:a|b c)*", 'root ::= ("a" | "b c")*'),
        (r"[^\n]*", "root ::= [^\\x0A]*"),
        (r"(?s).", "root ::= ."),
        (r"(?i)ok", "root ::= [Oo] [Kk]"),
        (r"", 'root ::= ""'),
    ],
)
def test_regex_grammar_text(pattern: str, expected: str) -> None:
    assert regex_to_gbnf(pattern).strip() == expected


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"a(?=b)", "lookahead"),
        (r"(?<!a)b", "lookahead or lookbehind"),
        (r"(a)\1", "backreference"),
        (r"(?P<x>a)(?P=x)", "backreference"),
        (r"\bword\b", "anchor or boundary"),
        (r"a^b", "anchor or boundary"),
        (r"a$b", "anchor or boundary"),
        (r"(?>ab)", "atomic group"),
        (r"a*+", "possessive"),
        (r"a{2001}", "repetition bound"),
        (r"a{1,5000}", "repetition bound"),
        (r"(a)?(?(1)b|c)", "backreference"),
    ],
)
def test_unsupported_regex_is_refused(pattern: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what):
        regex_to_gbnf(pattern)


def test_invalid_regex_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid regex"):
        regex_to_gbnf("(unclosed")


def test_choices_are_an_alternation_of_escaped_literals() -> None:
    grammar = choices_to_gbnf(["A", 'say "hi"\n', "back\\slash", "A"])
    assert grammar == 'root ::= "A" | "say \\"hi\\"\\n" | "back\\\\slash"\n'
    assert constraint_to_gbnf(Constraint(choices=("yes", "no"))) == 'root ::= "yes" | "no"\n'


def test_literal_escapes_control_and_non_ascii() -> None:
    assert gbnf_literal("a\x01é\U0001f600") == '"a\\x01\\xE9\\U0001F600"'


@pytest.mark.llamacpp
def test_json_schema_uses_llama_cpp_converter() -> None:
    pytest.importorskip("llama_cpp")
    schema = {"type": "object", "properties": {"verdict": {"enum": ["A", "B"]}}, "required": ["verdict"]}
    grammar = json_schema_to_gbnf(schema)
    assert "root ::=" in grammar and "verdict" in grammar
    assert constraint_to_gbnf(Constraint(json_schema=schema)) == grammar


# ---------------------------------------------------------------- the real llama.cpp parser

REAL_PARSER_PATTERNS = [
    r"Verdict: \[\[(A|B)\]\]",
    r"\d{1,3}(\.\d+)?",
    r"[^\w]+",
    r"[\w-]+@[a-z]+\.(com|org)",
    r"\W\S\s\D",
    r"(?s).{0,20}",
    r"(?i)(yes|no)",
    r'["\\\[\]^-]+',
    r"é+[à-ÿ]\U0001F600?",
    r"",
]


@pytest.fixture(scope="module")
def llama_vocab(smollm2_gguf_path):  # type: ignore[no-untyped-def]
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(smollm2_gguf_path), vocab_only=True, verbose=False)
    yield llama_cpp, llm._model.vocab
    llm.close()


def _parses(llama_vocab, grammar: str) -> bool:  # type: ignore[no-untyped-def]
    llama_cpp, vocab = llama_vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


@pytest.mark.parametrize("pattern", REAL_PARSER_PATTERNS)
def test_llama_cpp_parses_regex_grammars(llama_vocab, pattern: str) -> None:  # type: ignore[no-untyped-def]
    assert _parses(llama_vocab, regex_to_gbnf(pattern))


def test_llama_cpp_parses_choice_and_json_grammars(llama_vocab) -> None:  # type: ignore[no-untyped-def]
    assert _parses(llama_vocab, choices_to_gbnf(["A", 'q"\\', "\n"]))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    assert _parses(llama_vocab, json_schema_to_gbnf(schema))
    assert not _parses(llama_vocab, "root ::= (")  # the check itself can fail


# ---------------------------------------------------------------- the judge's verdict format

JUDGE_OUTPUTS = [
    "Reasoning: A is right.\nVerdict: A",
    "Reasoning: " + "long " * 300 + "\nVerdict: B",
    "Reasoning: x\nVerdict: C",
    "Reasoning: two\nlines\nVerdict: A",
    "Reasoning: \nVerdict: A",
    "Verdict: A",
    "Reasoning: no verdict",
]


@pytest.mark.parametrize("reasoning_chars", [200, None])
def test_judge_verdict_constraint_with_and_without_a_reasoning_cap(reasoning_chars) -> None:  # type: ignore[no-untyped-def]
    from bias_discovery.judging import JudgeSettings, verdict_constraint

    regex = verdict_constraint(JudgeSettings(reasoning_chars=reasoning_chars)).regex
    assert regex is not None
    grammar = regex_to_gbnf(regex)
    bound = "{1,200}" if reasoning_chars else "+"
    assert grammar.strip() == f'root ::= "Reasoning: " [^\\x0A]{bound} "\\nVerdict: " [A-B]'
    back = re.compile(gbnf_to_python(grammar))
    accepted = [text for text in JUDGE_OUTPUTS if back.fullmatch(text)]
    assert accepted == [text for text in JUDGE_OUTPUTS if re.fullmatch(regex, text)]
    # The 1500-character paragraph passes only without the cap.
    assert len(accepted) == (1 if reasoning_chars else 2)


def test_llama_cpp_parses_the_judge_verdict_grammars(llama_vocab) -> None:  # type: ignore[no-untyped-def]
    from bias_discovery.judging import JudgeSettings, verdict_constraint

    for chars in (600, None):
        regex = verdict_constraint(JudgeSettings(reasoning_chars=chars)).regex
        assert regex is not None and _parses(llama_vocab, regex_to_gbnf(regex))

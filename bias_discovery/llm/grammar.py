"""Translate an output `Constraint` into a llama.cpp GBNF grammar.

llama.cpp constrains sampling with GBNF grammars only, so every constraint kind must become
one: `choices` -> an alternation of literals, `regex` -> a grammar built from Python's own
regex parse tree (so the grammar means what `re.fullmatch` means), `json_schema` ->
llama-cpp-python's JSON-schema converter (imported lazily, only for that kind).

The regex translator is *sound*: every string the grammar accepts is matched by
`re.fullmatch(pattern, s)`. Where Unicode semantics would make a grammar huge, it accepts a
subset instead: `\\d` and `\\w` outside negated classes are their ASCII forms (`[0-9]`,
`[A-Za-z0-9_]`), and `\\W` is ASCII-only. `\\s`, `\\S`, `\\D`, `.` and negated classes are
exact. Constructs without a grammar equivalent (lookarounds, backreferences, word
boundaries, anchors in the middle, atomic groups, possessive repeats, bounds above
llama.cpp's limit of 2000) raise `ConfigError` instead of silently meaning something else.

This module is pure Python: importing it does not import llama_cpp.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ConfigError
from .types import Constraint

try:  # Python >= 3.11
    from re import _constants as _sre  # type: ignore[attr-defined, unused-ignore]  # typeshed: 3.11+
    from re import _parser as _sre_parse  # type: ignore[attr-defined, unused-ignore]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef, unused-ignore]
    import sre_parse as _sre_parse  # type: ignore[no-redef, unused-ignore]

__all__ = [
    "MAX_REPETITION",
    "choices_to_gbnf",
    "constraint_to_gbnf",
    "gbnf_literal",
    "json_schema_to_gbnf",
    "regex_to_gbnf",
]

MAX_REPETITION = 2000
"""llama.cpp refuses larger `{m}` bounds and silently turns larger `{m,n}` maxima into
"unbounded", so the translator refuses them first."""

_MAX_CODEPOINT = 0x10FFFF
_MAX_CLASS_RANGES = 256
"""Above this many ranges a (negated) class is cut down to its ASCII part: a sound subset
that keeps grammars small and sampling fast."""

Ranges = tuple[tuple[int, int], ...]
"""A set of code points as sorted, disjoint, non-adjacent inclusive intervals."""


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def constraint_to_gbnf(constraint: Constraint) -> str:
    """The GBNF grammar (root rule `root`) that enforces `constraint`."""
    if constraint.choices is not None:
        return choices_to_gbnf(constraint.choices)
    if constraint.regex is not None:
        return regex_to_gbnf(constraint.regex)
    assert constraint.json_schema is not None
    return json_schema_to_gbnf(constraint.json_schema)


def choices_to_gbnf(choices: Sequence[str]) -> str:
    """`root ::= "a" | "b" | ...`: the output is exactly one of the choices."""
    if not choices:
        raise ConfigError("a choices constraint needs at least one choice")
    unique = list(dict.fromkeys(choices))
    return "root ::= " + " | ".join(gbnf_literal(c) for c in unique) + "\n"


def json_schema_to_gbnf(schema: dict[str, Any]) -> str:
    """Convert a JSON schema with llama-cpp-python's own converter (the one its server uses)."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf as _convert
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "json_schema constraints for llama.cpp need llama-cpp-python (pip install 'bias-discovery[llamacpp]')"
        ) from exc
    try:
        return str(_convert(json.dumps(schema)))
    except Exception as exc:  # the converter raises bare Exceptions/KeyErrors
        raise ConfigError(f"cannot convert JSON schema to a llama.cpp grammar: {exc!r}") from exc


def regex_to_gbnf(pattern: str) -> str:
    """A grammar whose language is (a sound subset of) `re.fullmatch(pattern, ·)`'s."""
    try:
        parsed = _sre_parse.parse(pattern)
    except Exception as exc:  # re.error
        raise ConfigError(f"invalid regex {pattern!r}: {exc}") from exc
    translator = _RegexTranslator(pattern, parsed.state.flags)
    body = translator.sequence(list(parsed), translator.flags, top=True)
    return f"root ::= {body}\n"


def gbnf_literal(text: str) -> str:
    """A GBNF string literal for `text` (escaped so that any string round-trips)."""
    return '"' + "".join(_literal_char(ord(ch)) for ch in text) + '"'


# --------------------------------------------------------------------------------------
# Escaping
# --------------------------------------------------------------------------------------


def _hex_escape(cp: int) -> str:
    if cp <= 0xFF:
        return f"\\x{cp:02X}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


def _literal_char(cp: int) -> str:
    ch = chr(cp)
    if ch == '"':
        return '\\"'
    if ch == "\\":
        return "\\\\"
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if 0x20 <= cp < 0x7F:
        return ch
    return _hex_escape(cp)


def _class_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isascii() and (ch.isalnum() or ch in "_.,:;!?'#$%&*+/<=>@`{|}~()"):
        return ch
    return _hex_escape(cp)


# --------------------------------------------------------------------------------------
# Code point sets
# --------------------------------------------------------------------------------------


def _normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CODEPOINT:
        out.append((nxt, _MAX_CODEPOINT))
    return tuple(out)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return _normalize(out)


def _ranges_where(predicate: Any) -> Ranges:
    """Scan every code point once (a fraction of a second; cached by the callers)."""
    out: list[tuple[int, int]] = []
    start = -1
    for cp in range(_MAX_CODEPOINT + 2):
        inside = cp <= _MAX_CODEPOINT and predicate(chr(cp))
        if inside and start < 0:
            start = cp
        elif not inside and start >= 0:
            out.append((start, cp - 1))
            start = -1
    return tuple(out)


_ASCII: Ranges = ((0, 0x7F),)
_ASCII_DIGIT: Ranges = ((0x30, 0x39),)
_ASCII_WORD: Ranges = _normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_ASCII_SPACE: Ranges = _normalize([(0x09, 0x0D), (0x20, 0x20)])


@functools.cache
def _unicode_space() -> Ranges:
    """Python's `\\s` for str patterns is exactly `str.isspace` (a short list)."""
    return _normalize((cp, cp) for cp in range(_MAX_CODEPOINT + 1) if chr(cp).isspace())


@functools.cache
def _unicode_digit() -> Ranges:
    """Python's `\\d` for str patterns is Unicode category Nd, i.e. `str.isdecimal`."""
    return _ranges_where(str.isdecimal)


@functools.cache
def _unicode_word() -> Ranges:
    """Python's `\\w` for str patterns: `str.isalnum` or underscore (hundreds of ranges)."""
    return _ranges_where(lambda ch: ch.isalnum() or ch == "_")


def _category(name: str, ascii_only: bool, exact: bool) -> Ranges:
    """The code points of a category. `exact=False` allows a subset (used where a subset
    keeps the grammar sound: positive contexts)."""
    if ascii_only:
        positive = {"DIGIT": _ASCII_DIGIT, "WORD": _ASCII_WORD, "SPACE": _ASCII_SPACE}
        base, negated = name.replace("CATEGORY_", "").replace("NOT_", ""), "NOT_" in name
        return _complement(positive[base]) if negated else positive[base]
    if name == "CATEGORY_DIGIT":
        return _unicode_digit() if exact else _ASCII_DIGIT
    if name == "CATEGORY_NOT_DIGIT":
        return _complement(_unicode_digit())
    if name == "CATEGORY_WORD":
        return _unicode_word() if exact else _ASCII_WORD
    if name == "CATEGORY_NOT_WORD":
        if exact:
            return _complement(_unicode_word())
        return _intersect(_complement(_ASCII_WORD), _ASCII)
    if name == "CATEGORY_SPACE":
        return _unicode_space()
    if name == "CATEGORY_NOT_SPACE":
        return _complement(_unicode_space())
    raise ConfigError(f"unsupported regex category {name}")


def _case_closure(ranges: Ranges) -> Ranges:
    """Add the simple upper/lower case partners of every letter (for IGNORECASE)."""
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi - lo > 0x3000:  # huge ranges: only their ASCII letters (a sound subset)
            lo, hi = max(lo, 0x41), min(hi, 0x7A)
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            for other in (ch.lower(), ch.upper()):
                if len(other) == 1 and other != ch:
                    extra.append((ord(other), ord(other)))
    return _normalize(list(ranges) + extra)


def _class_expr(ranges: Ranges) -> str:
    """Render a set as `[...]` or `[^...]`, whichever is shorter."""
    if not ranges:
        raise ConfigError("regex character class matches nothing")
    if ranges == ((0, _MAX_CODEPOINT),):
        return "."
    if len(ranges) > _MAX_CLASS_RANGES:
        ranges = _intersect(ranges, _ASCII)
        if not ranges:
            raise ConfigError("regex character class has no ASCII member and is too large")
    negated = _complement(ranges)
    use_not = len(negated) < len(ranges) and negated
    items = negated if use_not else ranges

    def item(lo: int, hi: int) -> str:
        if lo == hi:
            return _class_char(lo)
        return f"{_class_char(lo)}-{_class_char(hi)}"

    body = "".join(item(lo, hi) for lo, hi in items)
    return f"[^{body}]" if use_not else f"[{body}]"


# --------------------------------------------------------------------------------------
# Regex parse tree -> GBNF
# --------------------------------------------------------------------------------------

_OP = {
    name: getattr(_sre, name, None)
    for name in (
        "LITERAL",
        "NOT_LITERAL",
        "ANY",
        "IN",
        "BRANCH",
        "SUBPATTERN",
        "MAX_REPEAT",
        "MIN_REPEAT",
        "POSSESSIVE_REPEAT",
        "ATOMIC_GROUP",
        "AT",
        "GROUPREF",
        "GROUPREF_EXISTS",
        "ASSERT",
        "ASSERT_NOT",
        "NEGATE",
        "RANGE",
        "CATEGORY",
        "AT_BEGINNING",
        "AT_BEGINNING_STRING",
        "AT_END",
        "AT_END_STRING",
    )
}
_IGNORECASE = _sre.SRE_FLAG_IGNORECASE
_DOTALL = _sre.SRE_FLAG_DOTALL
_ASCII_FLAG = _sre.SRE_FLAG_ASCII
_MAXREPEAT = _sre.MAXREPEAT


class _RegexTranslator:
    """Walks an `sre_parse` tree, returning (GBNF fragment, atomic) pairs. A fragment is
    atomic (safe to suffix with a quantifier) when it is one literal, class or group."""

    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern = pattern
        self.flags = flags

    def fail(self, what: str) -> ConfigError:
        return ConfigError(
            f"regex {self.pattern!r} uses {what}, which a llama.cpp grammar cannot express; "
            "supported: literals, classes, \\d \\w \\s, '.', groups, |, ?, *, +, {m,n}"
        )

    def sequence(self, items: list[tuple[Any, Any]], flags: int, top: bool = False) -> str:
        fragment, _ = self.sequence_atomic(items, flags, top)
        return fragment

    def sequence_atomic(self, items: list[tuple[Any, Any]], flags: int, top: bool = False) -> tuple[str, bool]:
        parts: list[tuple[str, bool]] = []
        literal_run: list[int] = []

        def flush() -> None:
            if literal_run:
                parts.append((gbnf_literal("".join(chr(c) for c in literal_run)), True))
                literal_run.clear()

        for index, (op, av) in enumerate(items):
            if op == _OP["LITERAL"] and not (flags & _IGNORECASE and _has_case(av)):
                literal_run.append(av)
                continue
            flush()
            if op == _OP["AT"]:
                first, last = index == 0, index == len(items) - 1
                if top and first and av in (_OP["AT_BEGINNING"], _OP["AT_BEGINNING_STRING"]):
                    continue
                if top and last and av in (_OP["AT_END"], _OP["AT_END_STRING"]):
                    continue
                raise self.fail(
                    f"the anchor or boundary {av} (only a leading ^ or \\A and a trailing $ or \\Z are allowed)"
                )
            parts.append(self.item(op, av, flags))
        flush()
        parts = [p for p in parts if p[0] != '""']
        if not parts:
            return '""', True
        if len(parts) == 1:
            return parts[0]
        return " ".join(p[0] for p in parts), False

    def item(self, op: Any, av: Any, flags: int) -> tuple[str, bool]:
        ascii_only = bool(flags & _ASCII_FLAG)
        if op == _OP["LITERAL"]:  # only reached for a cased letter under IGNORECASE
            return _class_expr(_case_closure(((av, av),))), True
        if op == _OP["NOT_LITERAL"]:
            members: Ranges = ((av, av),)
            if flags & _IGNORECASE:
                members = _case_closure(members)
            return _class_expr(_complement(members)), True
        if op == _OP["ANY"]:
            everything: Ranges = ((0, _MAX_CODEPOINT),)
            return _class_expr(everything if flags & _DOTALL else _complement(((10, 10),))), True
        if op == _OP["IN"]:
            return self.char_class(av, flags, ascii_only), True
        if op == _OP["BRANCH"]:
            _, branches = av
            alternatives = [self.sequence(list(b), flags) for b in branches]
            return "(" + " | ".join(alternatives) + ")", True
        if op == _OP["SUBPATTERN"]:
            _group, add_flags, del_flags, sub = av
            inner, atomic = self.sequence_atomic(list(sub), (flags | add_flags) & ~del_flags)
            return (inner, True) if atomic else (f"({inner})", True)
        if op in (_OP["MAX_REPEAT"], _OP["MIN_REPEAT"]):
            low, high, sub = av
            return self.repeat(low, high, *self.sequence_atomic(list(sub), flags))
        if op == _OP["POSSESSIVE_REPEAT"]:
            raise self.fail("a possessive quantifier")
        if op == _OP["ATOMIC_GROUP"]:
            raise self.fail("an atomic group")
        if op in (_OP["GROUPREF"], _OP["GROUPREF_EXISTS"]):
            raise self.fail("a backreference")
        if op in (_OP["ASSERT"], _OP["ASSERT_NOT"]):
            raise self.fail("a lookahead or lookbehind")
        raise self.fail(f"the construct {op}")

    def char_class(self, items: list[tuple[Any, Any]], flags: int, ascii_only: bool) -> str:
        negate = bool(items) and items[0][0] == _OP["NEGATE"]
        # In a negated class the members must be exact (or larger) for the complement to
        # stay a subset of what Python matches; in a positive class a subset is fine.
        members: list[tuple[int, int]] = []
        for op, av in items[1:] if negate else items:
            if op == _OP["LITERAL"]:
                members.append((av, av))
            elif op == _OP["RANGE"]:
                members.append((av[0], av[1]))
            elif op == _OP["CATEGORY"]:
                members.extend(_category(str(av), ascii_only, exact=negate))
            else:
                raise self.fail(f"the class item {op}")
        ranges = _normalize(members)
        if flags & _IGNORECASE:
            ranges = _case_closure(ranges)
        if negate:
            ranges = _complement(ranges)
        return _class_expr(ranges)

    def repeat(self, low: int, high: int, body: str, atomic: bool) -> tuple[str, bool]:
        unbounded = high == _MAXREPEAT
        if low > MAX_REPETITION or (not unbounded and high > MAX_REPETITION):
            raise self.fail(f"a repetition bound above {MAX_REPETITION}")
        if body == '""' or (high == 0 and not unbounded):
            return '""', True
        atom = body if atomic else f"({body})"
        if unbounded:
            suffix = {0: "*", 1: "+"}.get(low, f"{{{low},}}")
        elif low == high:
            if low == 1:
                return body, atomic
            suffix = f"{{{low}}}"
        elif (low, high) == (0, 1):
            suffix = "?"
        else:
            suffix = f"{{{low},{high}}}"
        return atom + suffix, False


def _has_case(cp: int) -> bool:
    ch = chr(cp)
    return ch.lower() != ch or ch.upper() != ch

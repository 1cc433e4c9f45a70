"""One set of number formatters for everything we print: the CLI, the HTML report, dataset cards.

Rates and differences of rates are fractions (0.253 is 25.3 %). What a missing value (None)
prints as and how the unit is spaced differ by medium, so they are parameters, never a second
formatter: the terminal prints ``-``, the HTML report an en dash ``–``, dataset cards ``n/a``
and ``25.3 %``. Pure string functions: importing this module costs nothing.
"""

from __future__ import annotations

__all__ = [
    "MEASURE_LABELS",
    "MISSING",
    "ci_pp",
    "count",
    "delta_clause",
    "duration",
    "effect_clause",
    "excluded_above",
    "excluded_clause",
    "number",
    "p_clause",
    "p_value",
    "percent",
    "percent_range",
    "plural",
    "pp",
]

MEASURE_LABELS: dict[str, str] = {"error": "Δerror", "p_rejected": "ΔP(rejected)", "score": "Δscore(rejected)"}
"""How a difference of each measure is named wherever it is printed."""

MISSING = "-"
"""What a missing value prints as in the terminal."""


def percent(x: float | None, *, signed: bool = False, unit: str = "%", digits: int = 1, missing: str = MISSING) -> str:
    """A rate as a percentage: 0.253 -> ``25.3%`` (``+25.3%`` with `signed`)."""
    if x is None:
        return missing
    return f"{100 * float(x):{'+' if signed else ''}.{digits}f}{unit}"


def pp(x: float | None, *, unit: str = " pp", digits: int = 1, missing: str = MISSING) -> str:
    """A difference of two rates in signed percentage points: 0.15 -> ``+15.0 pp``."""
    return percent(x, signed=True, unit=unit, digits=digits, missing=missing)


def ci_pp(low: float | None, high: float | None, *, missing: str = "") -> str:
    """The confidence interval of a difference of rates, in signed percentage points:
    ``[+5.0, +25.0]``; `missing` when either bound is None."""
    if low is None or high is None:
        return missing
    return f"[{pp(low, unit='')}, {pp(high, unit='')}]"


def percent_range(low: float | None, high: float | None, *, sep: str = "-", missing: str = MISSING) -> str:
    """The confidence interval of a rate: ``20.0%-45.1%``; `missing` when either bound is None."""
    if low is None or high is None:
        return missing
    return f"{percent(low)}{sep}{percent(high)}"


def p_value(x: float | None, *, missing: str = MISSING) -> str:
    """A p-value: three decimals, ``<0.001`` below that."""
    if x is None:
        return missing
    x = float(x)
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def p_clause(x: float | None, *, missing: str = MISSING) -> str:
    """A p-value in a sentence: ``p = 0.004``, ``p < 0.001``."""
    text = p_value(x, missing=missing)
    return f"p < {text[1:]}" if text.startswith("<") else f"p = {text}"


def delta_clause(
    delta: float | None, ci_low: float | None, ci_high: float | None, n: int | None, p: float | None
) -> str:
    """A difference of error rates in a sentence, with its CI, n and p (the terminal's lines
    on validation and the rewrite effect): ``+20.0 pp (CI [+10.0, +30.0], n = 30), p = 0.004``."""
    return f"{pp(delta)} (CI {ci_pp(ci_low, ci_high, missing=MISSING)}, n = {n}), {p_clause(p)}"


def effect_clause(
    delta: float | None,
    ci_low: float | None,
    ci_high: float | None,
    n: int | None,
    p_adjusted: float | None,
    *,
    control: str,
    method: str,
    label: str = "Δerror",
) -> str:
    """A bias's reported effect in a sentence: what (`label`: Δerror, or ΔP(rejected) for score
    verdicts) against what, with its CI, n, how it was estimated and the decision's adjusted p:
    ``Δerror vs placebo +8.0 pp (CI [-2.1, +17.9], n = 150; median-unbiased given the stopping
    look), adjusted p = 0.004``."""
    return (
        f"{label} vs {control} {pp(delta)} (CI {ci_pp(ci_low, ci_high, missing=MISSING)}, n = {n}; {method}), "
        f"adjusted {p_clause(p_adjusted)}"
    )


def excluded_above(upper: float | None, *, unit: str = " pp", missing: str = MISSING) -> str:
    """A rejected candidate's one-sided upper bound in a table cell: ``< +12.3 pp`` (the effects
    above it are excluded); ``none`` when the bound is the top of the parameter space (+100 pp:
    nothing is excluded)."""
    if upper is None:
        return missing
    return "none" if upper >= 1.0 else f"< {pp(upper, unit=unit)}"


def excluded_clause(
    upper: float | None, confidence: float = 0.95, *, label: str = "effect", missing: str = MISSING
) -> str:
    """A rejected candidate's one-sided upper bound in a sentence: ``an effect above +12.3 pp
    is excluded at 95 %``; ``no effect up to +100 pp is excluded at 95 %`` when the bound is the
    top of the parameter space; `missing` without a bound."""
    if upper is None:
        return missing
    level = percent(confidence, digits=0, unit=" %")
    if upper >= 1.0:
        return f"no {label} up to +100 pp is excluded at {level}"
    return f"{'an' if label[:1] in 'aeiou' else 'a'} {label} above {pp(upper)} is excluded at {level}"


def number(x: float | None, *, digits: int = 1, signed: bool = False, missing: str = MISSING) -> str:
    """A plain number with `digits` decimals (and a sign with `signed`): 12.345 -> ``12.3``."""
    if x is None:
        return missing
    return f"{float(x):{'+' if signed else ''}.{digits}f}"


def count(x: int | float | None, *, missing: str = MISSING) -> str:
    """A whole number with thousands separators: 12345 -> ``12,345``."""
    return missing if x is None else f"{int(x):,}"


def plural(n: int | float | None, noun: str, plural_form: str | None = None, *, missing: str = MISSING) -> str:
    """A count and its noun, singular for exactly one: ``1 pair``, ``2 pairs``, ``12,345 calls``,
    ``3 biases`` (nouns ending in s, x, ch or sh take "es"; `plural_form` for any other)."""
    if n is None:
        return f"{missing} {plural_form or _plural_of(noun)}"
    return f"{count(n)} {noun if n == 1 else plural_form or _plural_of(noun)}"


def _plural_of(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def duration(seconds: float | None, *, missing: str = MISSING) -> str:
    """A span of time, whole seconds: ``42s``, ``3m 07s``, ``2h 05m 00s``."""
    if seconds is None:
        return missing
    s = int(max(0.0, float(seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else (f"{m}m {s:02d}s" if m else f"{s}s")

"""Pointwise judging's scale: what a judge that grades one response at a time may answer.

A pointwise judge (`judge.mode: pointwise`) sees one response and answers with a score on
`judge.scale`: an integer range such as ``1-10`` (MT-Bench's single-answer grading) or
``1-5`` (G-Eval, Prometheus), or ``pass/fail`` (inspect_ai's `model_graded_qa`, promptfoo's
`llm-rubric`; pass is 1, fail 0). The output is constrained to the scale's labels, after an
optional reasoning line, as the pairwise verdict is constrained to A / B.

Expected scores. With `judge.verdict: score` the score is the mean of the scale under the
final token's probabilities, renormalised over the labels among its top log-probabilities
(G-Eval's probability-weighted score). That reads one token, so it needs a scale whose labels
are each one token and none a prefix of another: ``1-9`` or ``0-9`` qualify, ``1-10`` does not
("1" is the first token of "10", so P("1") would hold P("10")'s mass); such a scale is refused
for score verdicts, naming the field. When the final token is not a whole label (a tokenizer
that splits "pass"), the sampled label is used and counted (`score_from: sampled`).
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict

from .llm.types import FinalTokenLogprobs

PASS_FAIL = "pass/fail"
_RANGE = re.compile(r"^\s*(-?\d+)\s*-\s*(-?\d+)\s*$")
MAX_SCALE_LABELS = 101
"""Most labels a range may have (an output constraint lists every label)."""


class Scale(BaseModel):
    """A parsed `judge.scale`: its labels in order and the value of each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    """As written in the config, normalised (``1-10``, ``pass/fail``)."""
    labels: tuple[str, ...]
    """What the judge may answer, lowest first."""
    values: tuple[float, ...]
    """The score of each label (pass/fail: 0 and 1)."""

    @property
    def low(self) -> float:
        return self.values[0]

    @property
    def high(self) -> float:
        return self.values[-1]

    @property
    def span(self) -> float:
        return self.high - self.low

    @property
    def single_token_labels(self) -> bool:
        """Whether an expected score can be read from the final token: no label is a prefix
        of another (see the module docstring)."""
        return not any(a != b and b.startswith(a) for a in self.labels for b in self.labels)

    def value(self, label: str) -> float | None:
        """The score of `label` (case-insensitive for pass/fail), None when it is no label."""
        wanted = label.strip().lower()
        for name, value in zip(self.labels, self.values):
            if name.lower() == wanted:
                return value
        return None

    def share(self, score: float) -> float:
        """`score` as a share of the scale, 0 at its lowest label and 1 at its highest (the
        unit validation compares in; a point of the scale is 1 / span)."""
        return (score - self.low) / self.span

    def describe(self) -> str:
        """The scale in words, for the judge's instruction."""
        if self.spec == PASS_FAIL:
            return '"pass" or "fail"'
        return f"an integer from {self.labels[0]} to {self.labels[-1]}"


def format_score(score: float) -> str:
    """A score as the judge would read it: an integer label as itself, an expected score with
    two decimals."""
    return str(int(score)) if float(score).is_integer() else f"{score:.2f}"


def parse_scale(spec: str) -> Scale:
    """`1-10`, `0-5` (an integer range, low < high) or `pass/fail`; a ValueError says what a
    scale may be."""
    text = spec.strip().lower()
    if text in (PASS_FAIL, "pass-fail", "pass_fail"):
        return Scale(spec=PASS_FAIL, labels=("fail", "pass"), values=(0.0, 1.0))
    match = _RANGE.match(text)
    if match is None:
        raise ValueError(f"scale {spec!r}: expected an integer range such as 1-10 or 1-5, or pass/fail")
    low, high = int(match.group(1)), int(match.group(2))
    if low < 0 or high <= low or high - low + 1 > MAX_SCALE_LABELS:
        raise ValueError(
            f"scale {spec!r}: a range goes from a non-negative integer up to a larger one, "
            f"with at most {MAX_SCALE_LABELS} labels (e.g. 1-10)"
        )
    labels = tuple(str(v) for v in range(low, high + 1))
    return Scale(spec=f"{low}-{high}", labels=labels, values=tuple(float(v) for v in range(low, high + 1)))


def expected_score(scale: Scale, logprobs: FinalTokenLogprobs | None) -> float | None:
    """The mean score under the final token's probabilities of the scale's labels (tokens
    equal to a label up to spaces and case add up; labels outside the top count as 0),
    renormalised over the labels. None when the final token is not a label or no label is
    among the top."""
    if logprobs is None or scale.value(logprobs.token) is None:
        return None
    mass: dict[float, float] = {}
    for candidate in logprobs.top:
        value = scale.value(candidate.token)
        if value is not None:
            mass[value] = mass.get(value, 0.0) + math.exp(candidate.logprob)
    total = math.fsum(mass.values())
    if total <= 0.0:
        return None
    return math.fsum(v * p for v, p in mass.items()) / total


def parse_score(text: str, scale: Scale, label: str = "Score") -> float | None:
    """The score in a judge's output: the last ``Score: <label>`` line, or the whole output
    when it is one label; None when neither."""
    direct = scale.value(text.strip().strip("*[]().: "))
    if direct is not None:
        return direct
    found = re.findall(rf"{re.escape(label)}\s*[:\-]?\s*\**\s*\[*\s*([A-Za-z]+|-?\d+)\b", text, flags=re.I)
    for candidate in reversed(found):
        value = scale.value(candidate)
        if value is not None:
            return value
    return None

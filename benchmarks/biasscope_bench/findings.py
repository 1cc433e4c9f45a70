"""What a side found and kept, in one shape for both: each side's reader (peer.py, ours.py)
fills it from the files that side writes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field


class ErrorRate(BaseModel):
    """One bias's error on the test pairs, as the side reports it."""

    error: float | None
    """The judge's error rate with the bias's rewrites on the test items."""
    control_error: float | None = None
    """Ours: the error on the same items unperturbed (the paired control). The peer compares
    with its own baseline pass (`Findings.baseline_error`), on every item it could parse."""
    n: int | None = None
    """Ours: items valid in both arms. The peer does not record how many it could parse."""


class Findings(BaseModel):
    """One run's outputs: verdicts read, pairs misjudged, biases found, merged, kept."""

    judge_valid_rate: float | None = None
    """Share of the target judge's verdicts on the perturbed target pairs that could be read."""
    misjudged: int | None = None
    """Perturbed target pairs the judge got wrong (those explained and analysed)."""
    found: list[str] = Field(default_factory=list)
    """Bias names the teacher gave for the misjudged pairs (with a definition), in order, once each."""
    after_merge: list[str] = Field(default_factory=list)
    """Candidates left after merging them with the library and each other."""
    kept: list[str] = Field(default_factory=list)
    """Candidates the validation accepted."""
    kept_definitions: dict[str, str] = Field(default_factory=dict)
    """Their definitions, as the side wrote them."""
    baseline_error: float | None = None
    """The judge's error on the unperturbed test pairs."""
    error_rates: dict[str, ErrorRate] = Field(default_factory=dict)
    """Per validated candidate."""
    seed_error_rates: dict[str, ErrorRate] = Field(default_factory=dict)
    """Per seed bias, on the test pairs (the seed check), with `seed_baseline_error`."""
    seed_baseline_error: float | None = None


def unique_names(names: Iterable[Any]) -> list[str]:
    """Names trimmed, blanks dropped, each once in first-seen order."""
    return list(dict.fromkeys(str(n).strip() for n in names if n is not None and str(n).strip()))

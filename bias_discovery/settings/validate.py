"""The checked values validation's settings share with the statistics that use them: the looks
of a sequential validation and the bootstrap's default resamples. They live here, below
`bias_discovery.stats`, so a config is validated without importing the statistics (nor numpy);
`from bias_discovery.stats import ...` still finds both."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_BOOTSTRAP_RESAMPLES", "check_look_fractions"]

DEFAULT_BOOTSTRAP_RESAMPLES = 2000
"""Resamples of a paired bootstrap CI of Δerror (`validate.n_boot`, `audit --n-boot`): on 300
items the Monte Carlo error of each CI end is about 0.2 percentage points."""


def check_look_fractions(fractions: Sequence[float]) -> list[float]:
    """The cumulative shares of the test set a validation looks at, checked: increasing within
    (0, 1] and ending at 1.0 (the config's `validate.sequential.looks` and `plan_sequential`)."""
    fs = [float(f) for f in fractions]
    if not fs or fs[-1] != 1.0 or any(not (0.0 < f <= 1.0) for f in fs) or any(a >= b for a, b in zip(fs, fs[1:])):
        raise ValueError(f"look fractions must increase within (0, 1] and end at 1.0, e.g. [0.25, 0.5, 1.0]; got {fs}")
    return fs

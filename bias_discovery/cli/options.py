"""Options shared by the commands that judge (`judge`, `audit`), with their defaults and bounds
read from the settings models: a default is written once, on its model, and a command that
judges offers every reasoning flag.

This imports the settings models (and with them numpy) when the CLI starts: the price of
one source of defaults, a few tenths of a second per command (importing the CLI took 0.16 s
before and 0.42 s after on an idle 2-core machine, mean of 5 runs each).
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel

from ..settings.judge import JudgeSettings
from .common import fail

__all__ = ["bounds_of", "default_of", "reasoning_fields", "REASONING", "REASONING_CHARS", "NO_REASONING_CAP", "QUIET"]


def default_of(model: type[BaseModel], field: str) -> Any:
    """The default of `model.field`, as a CLI option's default."""
    return model.model_fields[field].get_default(call_default_factory=True)


def bounds_of(model: type[BaseModel], field: str) -> dict[str, Any]:
    """`min` / `max` for a CLI option, from the field's `ge` / `le` constraints."""
    bounds: dict[str, Any] = {}
    for rule in model.model_fields[field].metadata:
        if getattr(rule, "ge", None) is not None:
            bounds["min"] = rule.ge
        if getattr(rule, "le", None) is not None:
            bounds["max"] = rule.le
    return bounds


REASONING: Any = typer.Option(
    default_of(JudgeSettings, "reasoning"), "--reasoning/--no-reasoning",
    help="Ask for a short reasoning paragraph before the verdict; --no-reasoning: a one-letter verdict.",
)
REASONING_CHARS: Any = typer.Option(
    None, "--reasoning-chars", **bounds_of(JudgeSettings, "reasoning_chars"),
    show_default=str(default_of(JudgeSettings, "reasoning_chars")),
    help="Upper bound on the reasoning paragraph in characters, enforced by the output constraint "
    "(not by hosted APIs, which cannot).",
)
NO_REASONING_CAP: Any = typer.Option(
    False, "--no-reasoning-cap",
    help="No bound on the reasoning paragraph (the paper's free reasoning); --max-tokens still bounds it "
    "and a cut output is invalid.",
)
QUIET: Any = typer.Option(False, "--quiet", help="No progress bars.")


def reasoning_fields(reasoning: bool, reasoning_chars: int | None, no_reasoning_cap: bool) -> dict[str, Any]:
    """The JudgeSettings fields the reasoning flags set (an unset flag keeps the model's default)."""
    if no_reasoning_cap and reasoning_chars is not None:
        fail("--reasoning-chars and --no-reasoning-cap contradict each other; pass one of them")
    fields: dict[str, Any] = {"reasoning": reasoning}
    if no_reasoning_cap:
        fields["reasoning_chars"] = None
    elif reasoning_chars is not None:
        fields["reasoning_chars"] = reasoning_chars
    return fields

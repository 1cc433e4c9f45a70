"""Every flag of the command line, defined once: `option` makes a flag from a field of a
settings or options model (its name, default, bounds and, unless a command words it for itself,
its help, from the field), `flag` one that no model holds; the flags several commands share
are constants here (`SKIP_BAD_ROWS`, `QUIET` ...). A flag's text is its setting's name with
dashes (`common.flag_of`), so no command types one (`tests/test_house.py` checks it). The
reasoning flags make a command that judges offer all of them.

This imports the settings models (and with them numpy) when the CLI starts: the price of
one source of defaults, a few tenths of a second per command (importing the CLI took 0.16 s
before and 0.42 s after on an idle 2-core machine, mean of 5 runs each).
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel

from ..options import DEFAULT_TIMEOUT_S, CallOptions, DataOptions, OutputOptions, OverlapOptions
from ..settings.judge import JudgeSettings
from ._common import fail, flag_of, with_flags

__all__ = [
    "ALLOW_OVERLAP",
    "AS_JSON",
    "CACHE",
    "DATA_DIR",
    "NO_CACHE",
    "NO_REASONING_CAP",
    "OVERRIDES",
    "OVERWRITE",
    "QUIET",
    "REASONING",
    "REASONING_CHARS",
    "REVIEWED_ONLY",
    "SKIP_BAD_ROWS",
    "TIMEOUT",
    "VERDICT",
    "bounds_of",
    "default_of",
    "fail_on_option",
    "field_help",
    "flag",
    "option",
    "reasoning_fields",
]


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


def field_help(model: type[BaseModel], field: str) -> str:
    """The field's docstring as a flag's help: one paragraph, settings named as flags."""
    description = model.model_fields[field].description
    if not description:
        raise ValueError(f"{model.__name__}.{field} has no docstring to be its flag's help")
    return with_flags(" ".join(description.split()))


def flag(setting: str, default: Any, *aliases: str, **extra: Any) -> Any:
    """The flag of `setting` (`--` and its name with dashes; `common.flag_of`), for what no
    model holds (`--json`, `--quiet`, `--examples` ...) or where a command's parameter is not
    the model's field."""
    return typer.Option(default, flag_of(setting), *aliases, **extra)


def option(model: type[BaseModel], field: str, *aliases: str, required: bool = False, **extra: Any) -> Any:
    """The flag of `model.field`: its default (or required: `...`), its `ge`/`le` bounds and,
    unless `help` is given, its docstring as the help."""
    default = ... if required else default_of(model, field)
    extra = {**bounds_of(model, field), **extra}
    if "help" not in extra:
        extra["help"] = field_help(model, field)
    return flag(field, default, *aliases, **extra)


REASONING: Any = typer.Option(
    default_of(JudgeSettings, "reasoning"),
    "--reasoning/--no-reasoning",
    help="Ask for a short reasoning paragraph before the verdict; --no-reasoning: a one-letter verdict.",
)
REASONING_CHARS: Any = flag(
    "reasoning_chars",
    None,
    **bounds_of(JudgeSettings, "reasoning_chars"),
    show_default=str(default_of(JudgeSettings, "reasoning_chars")),
    help="Upper bound on the reasoning paragraph in characters, enforced by the output constraint "
    "(not by hosted APIs, which cannot).",
)
NO_REASONING_CAP: Any = flag(
    "no_reasoning_cap",
    False,
    help="No bound on the reasoning paragraph (the paper's free reasoning); --max-tokens still bounds it "
    "and a cut output is invalid.",
)
QUIET: Any = flag("quiet", False, help="No progress bars.")
AS_JSON: Any = flag("json", False, help="Print machine-readable JSON on stdout.")
OVERRIDES: Any = flag("overrides", [], help="Override a setting: key.sub=value (repeatable).")
CACHE: Any = flag("cache", None, help="SQLite call cache (default: ~/.cache/bias-discovery/calls.sqlite).")
NO_CACHE: Any = flag("no_cache", False, help="Do not read or write the call cache.")
REVIEWED_ONLY_HELP = (
    "Only biases whose newest review (`bias-discovery review`) is confirmed: the others are left out of all/top-K; "
    "a named one is an error."
)
REVIEWED_ONLY: Any = flag("reviewed_only", False, help=REVIEWED_ONLY_HELP)
DATA_DIR: Any = option(DataOptions, "data_dir")
SKIP_BAD_ROWS: Any = option(DataOptions, "skip_bad_rows")
OVERWRITE: Any = option(OutputOptions, "overwrite")
ALLOW_OVERLAP: Any = option(OverlapOptions, "allow_overlap")


TIMEOUT: Any = option(
    CallOptions,
    "timeout_s",
    metavar="SECONDS",
    min=0.1,
    help=f"Deadline of each request to a model server, retries and backoff included: a server that "
    f"accepts and never answers fails after this long (default: the config's timeout_s, {DEFAULT_TIMEOUT_S:g} s).",
)
"""`--timeout SECONDS` for every command that calls a model: each request's deadline, retries
included (`timeout_s`; unset keeps the config's, whose default is `options.DEFAULT_TIMEOUT_S`)."""
VERDICT: Any = typer.Option(
    default_of(JudgeSettings, "verdict"),
    "--verdict",
    help="choice (the sampled verdict letter) | score (also the verdict token's P(A), P(B) from its top log-probabilities: "
    "each pair's probability of preferring the rejected response, and the verdicts' calibration; same calls).",
)


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


def fail_on_option(*kinds: str) -> Any:
    """`--fail-on CONDITION` (repeatable) for a command that offers the condition `kinds`
    (`findings.parse_fail_on`): a met condition exits with `ExitCode.FINDING`."""
    from ._findings import fail_on_help

    return typer.Option([], "--fail-on", metavar="CONDITION", help=fail_on_help(kinds))

"""Every exit code of the command line, in one table: the CLI exits with these and nothing
else, and the reference page `reference/exit-codes.md` is generated from `EXIT_CODES`.

A CI job tells a finding (`--fail-on`, code 3) from a failure of the tool (2) and from a run
that stopped at its budget (4): each has its own code.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class ExitCode(IntEnum):
    """The process exit codes of `bias-discovery` (see `EXIT_CODES` for what each means)."""

    OK = 0
    CHECK_FAILED = 1
    ERROR = 2
    FINDING = 3
    BUDGET = 4
    INTERRUPTED = 130


class ExitCodeDoc(NamedTuple):
    code: ExitCode
    name: str
    commands: str
    meaning: str


EXIT_CODES: tuple[ExitCodeDoc, ...] = (
    ExitCodeDoc(
        ExitCode.OK,
        "ok",
        "every command",
        "The command did what it was asked; with `--fail-on`, none of its conditions was met.",
    ),
    ExitCodeDoc(
        ExitCode.CHECK_FAILED,
        "check failed",
        "`check`",
        "The preflight found something that would fail the run (a FAIL line: a server down, a wrong model "
        "name, a constraint not enforced, a prompt longer than the context).",
    ),
    ExitCodeDoc(
        ExitCode.ERROR,
        "error or usage",
        "every command",
        "An error the message on stderr names (bad input, a config value, a server that failed, a run that "
        "did not finish), or a usage error of the command line (an unknown flag, a missing argument). "
        "Nothing half-written is left behind.",
    ),
    ExitCodeDoc(
        ExitCode.FINDING,
        "finding",
        "`run`, `resume`, `replicate`, `audit`, `matrix`",
        "A condition of `--fail-on` was met (a bias accepted, a replication that failed, an audit measure "
        "past its threshold). The command finished and wrote its outputs; stderr names the condition and "
        "what met it.",
    ),
    ExitCodeDoc(
        ExitCode.BUDGET,
        "budget reached",
        "`run`, `resume`, `correct`",
        "The run stopped before a request that would have passed a limit of `budget` (calls, tokens or "
        'dollars). Nothing is half-written; `status` says "stopped: budget reached" with the spend, and '
        "`resume` with a larger budget (`--set budget.max_usd=...`) continues it, paying no call twice. "
        "`correct` stops before a checker call past `--checker-max-calls` and writes nothing; the calls "
        "made stay in the call cache.",
    ),
    ExitCodeDoc(
        ExitCode.INTERRUPTED,
        "interrupted",
        "every command",
        "Ctrl-C (SIGINT). A run stays resumable: `bias-discovery resume RUN_DIR`.",
    ),
)
"""What each exit code means and which commands use it: the source of the reference page."""


def exit_codes_markdown() -> str:
    """The table of `EXIT_CODES` as a markdown table (the reference page's body)."""
    lines = ["| code | name | commands | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| {int(d.code)} | {d.name} | {d.commands} | {d.meaning} |" for d in EXIT_CODES]
    return "\n".join(lines) + "\n"

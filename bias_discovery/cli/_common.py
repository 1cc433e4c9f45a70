"""What every command module shares: the Typer app, the consoles, `fail`, error formatting.

User errors (`BiasDiscoveryError`, invalid config values) end with a one-paragraph message
on stderr and exit code 2 (`exit_codes.ExitCode.ERROR`; every code is in `exit_codes.EXIT_CODES`); nothing half-written is left behind. Only light modules are
imported here: the CLI must start fast, so each command imports what it needs when it runs.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

from ._exit_codes import ExitCode

PLAIN_HELP = None
"""`rich_markup_mode` of every command group: click's own help, which rewraps docstrings and
option help to the terminal (at most 80 columns) instead of Typer's rich panels, which cut
option names and long words with an ellipsis at 80 columns."""

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=PLAIN_HELP,
    help="Discover the unknown biases of an LLM judge, and turn them into harder benchmarks.",
)
console = Console()
err_console = Console(stderr=True)


def figure_column(table: Any, header: str) -> None:
    """Add a column of figures to a rich `table`: right-aligned and never wrapped, so that rich
    narrows the prose columns (which wrap at their spaces) before it would touch a figure. A
    table must then fit its figures at 80 columns (piped, or a CI log): few columns of figures,
    one figure a line (`stacked`); tests/test_tables_80.py renders the tables there and fails
    on a figure cut with "…"."""
    table.add_column(header, justify="right", no_wrap=True)


def stacked(*figures: str) -> str:
    """Several figures in one cell, one a line (expected over its bound ...), so that the
    cell is as wide as its widest figure, not as their sum."""
    return "\n".join(figures)


@app.callback()
def _group(
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Also print what the engines and the loop log on stderr: retries, a replica set aside, "
        "the server's dialect, each stage with its calls.",
    ),
) -> None:
    """Discover the unknown biases of an LLM judge, and turn them into harder benchmarks."""
    show_logs(verbose)


def show_logs(verbose: bool = True) -> None:
    """Print the package's log records (`logging.getLogger(__name__)` in llm/ and loop/) on
    stderr, one line each, under whatever the command prints: WARNING and up always (a server
    that keeps a request waiting says so every 30 s, TTY or not), INFO too with `verbose`."""
    import logging

    logger = logging.getLogger("bias_discovery")
    for old in [h for h in logger.handlers if h.get_name() == "bias-discovery-cli"]:
        logger.removeHandler(old)  # one handler, however often the app is invoked in a process
    handler: logging.Handler
    if err_console.is_terminal:
        from rich.logging import RichHandler  # here: the CLI must start fast

        handler = RichHandler(console=err_console, show_path=False, markup=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:  # a log file: one unwrapped line per record, with its time, on whatever stderr is now
        handler = _StderrNow()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.set_name("bias-discovery-cli")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)


class _StderrNow(logging.StreamHandler):
    """A stream handler on the `sys.stderr` of the moment a record is written (as logging's
    last-resort handler is): a handler kept past the invocation it was made in (the CLI run
    in-process, by tests or a notebook) never writes to a stream that is gone."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def format_validation_error(exc: ValidationError, where: str = "") -> str:
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"]) or "(root)"
        lines.append(f"  {where}{loc}: {error['msg']}")
    return "invalid settings:\n" + "\n".join(lines)


SETTINGS_WITH_FLAGS = frozenset(
    {
        "allow_overlap",
        "assumed_correlation",
        "bias_library",
        "allow_self_filter",
        "base_url",
        "bias",
        "biases",
        "checker_base_url",
        "checker_model",
        "compare",
        "covariates",
        "data",
        "data_dir",
        "filter_base_url",
        "flags",
        "filter_model",
        "fmt",
        "format",
        "include_original",
        "iteration",
        "judges",
        "label_column",
        "labels",
        "out",
        "overrides",
        "overwrite",
        "plan",
        "repeats",
        "reviewed_only",
        "run_dir",
        "seed",
        "skip_bad_rows",
        "task_name",
        "teacher",
        "temperature",
        "timeout_s",
        "variants",
    }
)
"""The settings that messages from below the CLI name in backticks (`out`, `timeout_s`): the
names of the Python API's arguments, which the command line takes as flags."""
FLAG_OF_SETTING = {"fmt": "--format", "overrides": "--set", "timeout_s": "--timeout"}
"""A setting whose flag is not ``--`` and its name with dashes."""
_SETTING_IN_MESSAGE = re.compile(r"`([a-z][a-z_]*)`")


def flag_of(setting: str) -> str:
    """The command-line flag of a setting (`timeout_s` -> --timeout, `skip_bad_rows` -> --skip-bad-rows)."""
    return FLAG_OF_SETTING.get(setting, "--" + setting.replace("_", "-"))


def with_flags(message: str) -> str:
    """`message` as the command line says it: code below the CLI names settings (`out`), the
    user typed flags (--out). Other backticked words are left as they are."""
    return _SETTING_IN_MESSAGE.sub(
        lambda m: flag_of(m.group(1)) if m.group(1) in SETTINGS_WITH_FLAGS else m.group(0), message
    )


def options_error(exc: ValidationError) -> str:
    """An operation's options that do not validate, each problem under the flag that set it
    (the options' fields are the settings of `SETTINGS_WITH_FLAGS`)."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        name = flag_of(loc[0]) if loc and loc[0] in SETTINGS_WITH_FLAGS else ".".join(loc) or "(root)"
        lines.append(f"  {name}: {error['msg']}")
    return "invalid options:\n" + "\n".join(lines)


def warn(message: str) -> None:
    """Print `message` as a warning on stderr: something was wrong and is said, not fatal."""
    err_console.print(f"[bold yellow]warning:[/] {with_flags(message)}", highlight=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    """Print `message` as an error on stderr and exit with code 2 (a user error); settings it
    names are shown as their flags (`with_flags`)."""
    err_console.print(f"[bold red]error:[/] {with_flags(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=ExitCode.ERROR)


def interrupted(run_dir: Path) -> NoReturn:
    """Ctrl-C during a run: say how to continue it, exit with code 130."""
    err_console.print(f"interrupted; continue with: bias-discovery resume {run_dir}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=ExitCode.INTERRUPTED)

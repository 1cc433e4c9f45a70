"""`check`: the preflight of a run config (servers, names, constraints, context, calls)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import plural
from .common import app, console, err_console, fail
from .options import OVERRIDES, TIMEOUT

_MARK = {"ok": "[green]ok  [/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]", "info": "[dim]info[/]"}


@app.command()
def check(
    config_path: Path | None = typer.Argument(
        None, metavar="[CONFIG.yaml]", help="Run config (see experiments/); without one, the embedded engine and embedder."
    ),
    set_: list[str] = OVERRIDES,
    timeout: float | None = TIMEOUT,
) -> None:
    """Preflight a run config on the node that will run it.

    Each role's server or engine answers, serves the
    configured model, enforces output constraints (probed), and fits the run's longest prompts in its
    context; plus the planned calls per stage. A llama.cpp engine is first run in a child process, so a
    build that crashes on this CPU is named with its signal and the remedy. Without a config: that
    check of the embedded engine (llamacpp/smollm2) and of the embedder. Exit 1 when something would
    fail the run."""
    from ..config import load_run_config
    from ..preflight import run_preflight

    if config_path is None:
        _check_embedded()
        return
    try:
        config = load_run_config(config_path, set_).with_timeout(timeout)
        report = run_preflight(config)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    for endpoint in report.endpoints:
        console.print(f"[bold]{endpoint.role}[/]: {endpoint.spec} — {endpoint.endpoint}", highlight=False, soft_wrap=True)
        for finding in endpoint.findings:
            console.print(f"  {_MARK[finding.status]} {finding.what}: {finding.detail}", highlight=False, soft_wrap=True)
    table = Table(title=(
        f"planned calls ({plural(report.n_target, 'target pair')}, {plural(report.n_test, 'test pair')}, "
        + (f"{plural(report.skipped_rows, 'bad data row')} skipped, " if report.skipped_rows else "")
        + f"max_iterations={report.max_iterations}; ≤ = upper bound)"
    ))
    for column in ("stage", "role", "per iteration", "whole run", "why"):
        table.add_column(column, justify="right" if column in ("per iteration", "whole run") else "left")
    for row in report.calls:
        mark = "" if row.exact else "≤ "
        table.add_row(row.stage, row.role, f"{mark}{row.per_iteration:,}", f"{mark}{row.total:,}", row.note)
    console.print(table)
    if report.problems:
        err_console.print(
            f"[bold red]check failed:[/] {plural(report.problems, 'problem')} above (FAIL); fix them before a long run",
            highlight=False,
        )
        raise typer.Exit(code=1)
    console.print("check passed", highlight=False)


def _check_embedded() -> None:
    """The embedded default's engine and embedder, each in a child process (`llm.smoke`)."""
    from ..llm.smoke import check_embedder, check_llamacpp

    results = [check_llamacpp("smollm2"), check_embedder()]
    for result in results:
        mark = _MARK["ok" if result.ok else "fail"]
        how = "" if result.ok else (f"killed by {result.signal}: " if result.signal else f"{result.failure}: ")
        console.print(f"{mark} {result.engine}: {how}{result.detail}", highlight=False, soft_wrap=True)
        if result.remedy:
            console.print(f"     remedy: {result.remedy}", highlight=False, soft_wrap=True)
        if result.ok and result.system_info:
            console.print(f"     llama.cpp build: {result.system_info.strip()}", highlight=False, soft_wrap=True)
    if not all(r.ok for r in results):
        err_console.print("[bold red]check failed:[/] the embedded default does not work on this machine (above)", highlight=False)
        raise typer.Exit(code=1)
    console.print("check passed: the embedded engine and the embedder work here", highlight=False)

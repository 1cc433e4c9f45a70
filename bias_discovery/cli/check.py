"""`check`: the preflight of a run config (servers, names, constraints, context, calls)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import plural

if TYPE_CHECKING:
    from ..preflight import PreflightReport
from .common import app, console, err_console, fail
from .exit_codes import ExitCode
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
    context; plus the planned calls per stage. An embedded engine (transformers or llama.cpp) is first
    run in a child process, so an engine that crashes on this CPU is named with its signal and the
    remedy. Without a config: that check of the embedded default (hf/smollm2), of llama.cpp where it
    is installed, and of the embedder. Exit 1 when something would fail the run."""
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
    _print_estimates(report)
    if report.problems:
        err_console.print(
            f"[bold red]check failed:[/] {plural(report.problems, 'problem')} above (FAIL); fix them before a long run",
            highlight=False,
        )
        raise typer.Exit(code=ExitCode.CHECK_FAILED)
    console.print("check passed", highlight=False)


def _print_estimates(report: PreflightReport) -> None:
    """Expected figures beside their bounds per stage and role, dollars per role, the assumptions."""
    if not report.estimates or report.assumptions is None:
        return
    from ..formatting import count

    def pair(expected: float, bound: float) -> str:
        return f"{count(round(expected))} | ≤ {count(round(bound))}"

    table = Table(title="expected | at most, whole run (expected: from the assumptions below; at most: none assumed)")
    for column in ("stage", "role", "calls", "prompt tokens", "completion tokens", "dollars"):
        table.add_column(column, justify="left" if column in ("stage", "role") else "right")
    for e in report.estimates:
        usd = "-" if e.usd is None or e.usd_bound is None else f"${e.usd:,.2f} | ≤ ${e.usd_bound:,.2f}"
        table.add_row(e.stage, e.role, pair(e.calls, e.calls_bound), pair(e.prompt_tokens, e.prompt_tokens_bound),
                      pair(e.completion_tokens, e.completion_tokens_bound), usd)
    roles = list(dict.fromkeys(e.role for e in report.estimates))
    for role in roles:
        rows = [e for e in report.estimates if e.role == role]
        priced = all(e.usd is not None for e in rows)
        usd = f"${sum(e.usd or 0 for e in rows):,.2f} | ≤ ${sum(e.usd_bound or 0 for e in rows):,.2f}" if priced else "no price"
        table.add_row(f"all ({role})", role, pair(sum(e.calls for e in rows), sum(e.calls_bound for e in rows)),
                      pair(sum(e.prompt_tokens for e in rows), sum(e.prompt_tokens_bound for e in rows)),
                      pair(sum(e.completion_tokens for e in rows), sum(e.completion_tokens_bound for e in rows)), usd,
                      style="bold")
    console.print(table)
    from ..formatting import duration

    for role in roles:
        rates = [e.tokens_per_s for e in report.endpoints if e.role == role and e.tokens_per_s]
        if not rates:  # the checker is not probed on its own
            continue
        rate = sum(rates)  # replicas serve at once
        rows = [e for e in report.estimates if e.role == role]
        console.print(
            f"wall time, {role}: about {duration(sum(e.completion_tokens for e in rows) / rate)} expected, at most "
            f"{duration(sum(e.completion_tokens_bound for e in rows) / rate)} (its completion tokens at the probe's "
            f"{rate:,.0f} tokens/s; prefill and waiting on the other role not counted)", highlight=False, soft_wrap=True)
    a = report.assumptions
    console.print(
        f"assumed (not measured): {a.misjudged_share:.0%} of perturbed target pairs misjudged; "
        f"{a.candidates_per_iteration} candidates per iteration (at most validate.max_candidates); sequential "
        f"validation stops after {a.sequential_share:.0%} of the test items on average; {a.chars_per_token:g} "
        f"characters a prompt token; free-text answers use {a.completion_share:.0%} of max_tokens; every iteration "
        "runs. Calls answered by the call cache cost nothing. Without validate.max_candidates, validation's bound "
        "is one candidate per misjudged pair.", highlight=False, soft_wrap=True)


def _check_embedded() -> None:
    """The embedded default's engine and embedder, and llama.cpp where it is installed, each in a
    child process (`llm.smoke`)."""
    import importlib.util

    from ..llm.smoke import check_embedder, check_llamacpp, check_transformers

    results = [check_transformers("smollm2")]
    if importlib.util.find_spec("llama_cpp") is not None:
        results.append(check_llamacpp("smollm2"))
    results.append(check_embedder())
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
        raise typer.Exit(code=ExitCode.CHECK_FAILED)
    console.print("check passed: the embedded engine and the embedder work here", highlight=False)

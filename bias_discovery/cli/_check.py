"""`check`: the preflight of a run config (servers, names, constraints, context, calls)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import plural

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..api.checks import Assumptions, PilotRecord, PreflightReport, StageEstimate
    from ..config import RunConfig
from ._common import app, console, err_console, fail, figure_column, flag_of, stacked
from ._exit_codes import ExitCode
from ._options import OVERRIDES, TIMEOUT, flag

_MARK = {"ok": "[green]ok  [/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]", "info": "[dim]info[/]"}


@app.command()
def check(
    config_path: Path | None = typer.Argument(
        None,
        metavar="[CONFIG.yaml]",
        help="Run config (see experiments/); without one, the embedded engine and embedder.",
    ),
    set_: list[str] = OVERRIDES,
    timeout: float | None = TIMEOUT,
    pilot: int = flag(
        "pilot",
        0,
        min=0,
        help=(
            "Measure the estimate's assumptions on the first N target pairs: iteration 1 and its validation, through the "
            "call cache of --run-dir, whose run then answers those calls from it (0: no pilot)."
        ),
    ),
    run_dir: Path | None = flag(
        "run_dir", None, help="The run directory the pilot's calls go to (default: runs/<name>)."
    ),
) -> None:
    """Preflight a run config on the node that will run it.

    Each role's server or engine answers, serves the
    configured model, enforces output constraints (probed), and fits the run's longest prompts in its
    context; plus the planned calls per stage. An embedded engine (transformers or llama.cpp) is first
    run in a child process, so an engine that crashes on this CPU is named with its signal and the
    remedy. Without a config: that check of the embedded default (hf/smollm2), of llama.cpp where it
    is installed, and of the embedder. With --pilot N, the loop's first iteration on N target pairs
    and the validation of its candidates measure what the estimate would assume; their calls stay in
    the run directory's call cache for `run --run-dir` (pilot.json records the measurements).
    Exit 1 when something would fail the run."""
    from ..api.checks import run_preflight
    from ..config import load_run_config

    if config_path is None:
        if pilot or run_dir is not None:
            fail(
                f"a pilot runs a config's loop: give the config ({flag_of('pilot')} N [{flag_of('run_dir')} DIR] "
                "CONFIG.yaml)"
            )
        _check_embedded()
        return
    if run_dir is not None and not pilot:
        fail(f"{flag_of('run_dir')} is where the pilot's calls go: give {flag_of('pilot')} N too")
    try:
        config = load_run_config(config_path, set_).with_timeout(timeout)
        report = run_preflight(config, pilot=_pilot(pilot, run_dir))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    for endpoint in report.endpoints:
        console.print(
            f"[bold]{endpoint.role}[/]: {endpoint.spec} — {endpoint.endpoint}", highlight=False, soft_wrap=True
        )
        for finding in endpoint.findings:
            console.print(
                f"  {_MARK[finding.status]} {finding.what}: {finding.detail}", highlight=False, soft_wrap=True
            )
    console.print(planned_calls_table(report))
    _print_estimates(report)
    if report.problems:
        err_console.print(
            f"[bold red]check failed:[/] {plural(report.problems, 'problem')} above (FAIL); fix them before a long run",
            highlight=False,
        )
        raise typer.Exit(code=ExitCode.CHECK_FAILED)
    console.print("check passed", highlight=False)


def planned_calls_table(report: PreflightReport) -> Table:
    """The planned calls per stage and role, per iteration and for the whole run."""
    table = Table(
        title=(
            f"planned calls ({plural(report.n_target, 'target pair')}, {plural(report.n_test, 'test pair')}, "
            + (f"{plural(report.skipped_rows, 'bad data row')} skipped, " if report.skipped_rows else "")
            + f"max_iterations={report.max_iterations}; ≤ = upper bound)"
        )
    )
    table.add_column("stage", overflow="fold")
    table.add_column("role", overflow="fold")
    figure_column(table, "per\niteration")
    figure_column(table, "whole\nrun")
    table.add_column("why", overflow="fold")
    for row in report.calls:
        mark = "" if row.exact else "≤ "
        table.add_row(row.stage, row.role, f"{mark}{row.per_iteration:,}", f"{mark}{row.total:,}", row.note)
    return table


def _pilot(pairs: int, run_dir: Path | None) -> Callable[[RunConfig], PilotRecord] | None:
    """`--pilot N` (`preflight.pilot_into`), said as it starts."""
    from ..api.checks import pilot_into

    def announce(root: Path) -> None:
        console.print(
            f"pilot: iteration 1 on the first {plural(pairs, 'target pair')} (at most) and the validation of "
            "its candidates, "
            f"calls cached in {root / 'calls.sqlite'} ...",
            highlight=False,
            soft_wrap=True,
        )

    from ..progress import progress_bar

    return pilot_into(run_dir, pairs, announce=announce, progress=progress_bar) if pairs else None


def _print_pilot(record: PilotRecord) -> None:
    """What the pilot measured and paid, and how its run reuses the calls."""
    m = record.misjudged
    paid = sum(s.calls for s in record.spend.values())
    console.print(
        f"pilot ({plural(len(record.pairs), 'target pair')}, {plural(record.n_test, 'test pair')}): {m.k} misjudged "
        f"({m.share:.0%}, 95% CI {m.ci_low:.0%}–{m.ci_high:.0%}); {record.identified} identified, {record.candidates} "
        f"candidate(s) after merging, {record.validated} validated; {paid:,} calls paid. Its calls are in the run "
        "directory's call cache: `run --run-dir` there answers them from it (pilot.json has the figures).",
        highlight=False,
        soft_wrap=True,
    )


def _print_estimates(report: PreflightReport) -> None:
    """Expected figures beside their bounds per stage and role, dollars per role, the assumptions."""
    if not report.estimates or report.assumptions is None:
        return
    if report.pilot is not None:
        _print_pilot(report.pilot)
    console.print(estimates_table(report))
    for line in pilot_notes(report):
        console.print(line, highlight=False, soft_wrap=True)
    from ..formatting import duration

    for role in dict.fromkeys(e.role for e in report.estimates):
        rates = [e.tokens_per_s for e in report.endpoints if e.role == role and e.tokens_per_s]
        if not rates:  # the checker is not probed on its own
            continue
        rate = sum(rates)  # replicas serve at once
        rows = [e for e in report.estimates if e.role == role]
        console.print(
            f"wall time, {role}: about {duration(sum(e.completion_tokens for e in rows) / rate)} expected, at most "
            f"{duration(sum(e.completion_tokens_bound for e in rows) / rate)} (its completion tokens at the probe's "
            f"{rate:,.0f} tokens/s; prefill and waiting on the other role not counted)",
            highlight=False,
            soft_wrap=True,
        )
    _print_figures(report.assumptions)


def estimates_table(report: PreflightReport) -> Table:
    """Expected figures over their bounds (stacked, one figure a line, so that at 80 columns no
    figure is cut), per stage and role and per role; what the pilot measured is said under the
    table (`pilot_notes`), not in a column."""
    from ..formatting import count

    def pair(expected: float, bound: float) -> str:
        return stacked(count(round(expected)), f"≤ {count(round(bound))}")

    def usd(expected: float, bound: float) -> str:
        return stacked(f"${expected:,.2f}", f"≤ ${bound:,.2f}")

    table = Table(
        title="expected over at most, whole run (expected: from the figures below, measured or assumed; at most: "
        "none assumed)"
    )
    table.add_column("stage (role)", overflow="fold")
    for column in ("calls", "prompt\ntokens", "completion\ntokens", "dollars"):
        figure_column(table, column)
    for e in report.estimates:
        cost = "-" if e.usd is None or e.usd_bound is None else usd(e.usd, e.usd_bound)
        table.add_row(
            f"{e.stage} ({e.role})",
            pair(e.calls, e.calls_bound),
            pair(e.prompt_tokens, e.prompt_tokens_bound),
            pair(e.completion_tokens, e.completion_tokens_bound),
            cost,
        )
    for role in dict.fromkeys(e.role for e in report.estimates):
        rows = [e for e in report.estimates if e.role == role]
        priced = all(e.usd is not None for e in rows)
        table.add_row(
            f"all ({role})",
            pair(sum(e.calls for e in rows), sum(e.calls_bound for e in rows)),
            pair(sum(e.prompt_tokens for e in rows), sum(e.prompt_tokens_bound for e in rows)),
            pair(sum(e.completion_tokens for e in rows), sum(e.completion_tokens_bound for e in rows)),
            usd(sum(e.usd or 0 for e in rows), sum(e.usd_bound or 0 for e in rows)) if priced else "no price",
            style="bold",
        )
    return table


def pilot_notes(report: PreflightReport) -> list[str]:
    """Which rows' figures the pilot measured, one line each (none without a pilot)."""
    notes = [(e, _measured_note(e)) for e in report.estimates]
    return [f"measured by the pilot, {e.stage} ({e.role}): {note}" for e, note in notes if note != "-"]


def _print_figures(a: Assumptions) -> None:
    """The figures the expected column rests on, each said measured (by the pilot, on what n) or assumed."""

    def how(name: str) -> str:
        if not a.measured:
            return ""
        return f" (measured: {a.measured[name]})" if name in a.measured else " (assumed)"

    assumed = " (assumed)" if a.measured else ""
    tokens = (
        "prompt and completion tokens per call of the stages the pilot called (measured: their column above); "
        "of the others, "
        if a.measured
        else ""
    )
    console.print(
        ("figures, measured by the pilot or assumed: " if a.measured else "assumed (not measured): ")
        + f"{a.misjudged_share:.0%} of perturbed target pairs misjudged{how('misjudged_share')}; "
        f"{a.candidates_per_iteration:.3g} candidates per iteration, at most validate.max_candidates"
        f"{how('candidates_per_iteration')}; sequential validation stops after {a.sequential_share:.0%} of the test "
        f"items on average{how('sequential_share')}; {tokens}{a.chars_per_token:g} characters a prompt token; "
        f"free-text answers use {a.completion_share:.0%} of max_tokens{assumed}; every iteration runs{assumed}. "
        "Calls answered by the call cache cost nothing. Without validate.max_candidates, validation's bound is one "
        "candidate per misjudged pair.",
        highlight=False,
        soft_wrap=True,
    )


def _measured_note(e: StageEstimate) -> str:
    """Which of a row's figures the pilot measured, on how many of its calls."""
    parts = []
    if e.measured_calls:
        parts.append(f"calls per pair (n={e.measured_calls})")
    if e.measured_tokens:
        parts.append(f"tokens per call (n={e.measured_tokens})")
    return ", ".join(parts) or "-"


def _check_embedded() -> None:
    """The embedded default's engine and embedder, and llama.cpp where it is installed, each in a
    child process (`llm.smoke`)."""
    import importlib.util

    from ..api.checks import check_embedder, check_llamacpp, check_transformers

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
        err_console.print(
            "[bold red]check failed:[/] the embedded default does not work on this machine (above)", highlight=False
        )
        raise typer.Exit(code=ExitCode.CHECK_FAILED)
    console.print("check passed: the embedded engine and the embedder work here", highlight=False)

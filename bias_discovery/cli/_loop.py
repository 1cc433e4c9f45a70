"""The discovery loop: `run`, `resume`, `status`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError, DataError
from ..formatting import delta_clause, duration, effect_clause, plural
from ..settings.discover import DiscoverOptions
from ._common import app, console, err_console, fail, interrupted, warn
from ._exit_codes import ExitCode
from ._findings import exit_on_findings, parse_fail_on, run_findings
from ._options import AS_JSON, OVERRIDES, QUIET, TIMEOUT, fail_on_option, option

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from ..api import BudgetReached, Liveness, Run, RunState, Spend


def _skipped_rows_line(state: RunState | None) -> str | None:
    """ "skipped bad data rows: target 1, test 2 ...", or None."""
    if state is None or not state.skipped_rows:
        return None
    counts = ", ".join(f"{role} {n}" for role, n in state.skipped_rows.items())
    return f"skipped bad data rows: {counts}; each is named in events.jsonl"


def budget_stop(run_dir: Path, exc: BudgetReached) -> NoReturn:
    """The run stopped at its budget: say what it spent and how to go on, exit 4."""
    err_console.print(f"[bold]stopped:[/] {exc}", highlight=False, soft_wrap=True)
    for line in spend_lines(exc.spend):
        err_console.print(f"  {line}", highlight=False, soft_wrap=True)
    err_console.print(
        f"continue with a larger budget: bias-discovery resume {run_dir} --set {exc.setting}=... "
        f"(the limit that was reached); no call is paid twice",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(code=ExitCode.BUDGET)


def spend_lines(spend: Mapping[str, Spend]) -> list[str]:
    """One line per role that paid: calls, tokens and dollars (cached calls cost nothing)."""
    return [
        f"{role}: {s.calls:,} calls paid, {s.prompt_tokens:,} prompt + {s.completion_tokens:,} completion tokens, "
        f"${s.usd:,.4f}"
        for role, s in spend.items()
        if s.calls
    ]


def _end_run(run: Run) -> None:
    """The run's last lines, or, for a run that did not reach a stop reason, one line that
    says where it stands and a non-zero exit (a resume that exits 0 has finished the run)."""
    state = run.state
    if state is None or state.status != "finished":
        where = f"stage {state.stage} of iteration {state.iteration}" if state else "the start"
        fail(f"run {run.root} did not finish: it stands at {where}; continue it with: bias-discovery resume {run.root}")
    try:
        _print_run_end(run)
    except BiasDiscoveryError as exc:
        fail(str(exc))


def _print_run_end(run: Run) -> None:
    from ..formatting import MEASURE_LABELS

    state = run.state
    latest = run.library
    discovered = [b for b in latest.biases if b.origin.kind == "discovered"]
    console.print(
        f"run {run.root}: {state.status if state else '?'}; stop reason: {state.stop_reason if state else '?'}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"library: {plural(len(latest.biases), 'bias')} ({len(discovered)} discovered) in {run.record.library.latest_path}",
        highlight=False,
        soft_wrap=True,
    )
    for bias in discovered:
        v = bias.validation
        if v is not None:
            e, decided = v.effect, v.decisive_comparison
            clause = effect_clause(
                e.delta,
                e.ci_low,
                e.ci_high,
                e.n,
                decided.p_adjusted,
                control=v.decisive,
                method=e.method,
                label=MEASURE_LABELS[e.measure],
            )
            console.print(f"  {bias.id}: {clause}", highlight=False)
    statement = next(
        (b.validation.error_statement for b in latest.biases if b.validation and b.validation.error_statement), None
    )
    if statement:
        console.print(f"  error control: {statement}", highlight=False, soft_wrap=True)
    skipped = _skipped_rows_line(state)
    if skipped:
        console.print(skipped, highlight=False)
    if state is not None and state.spend:
        console.print(
            "paid (every session of the run; calls answered by the call cache cost nothing):", highlight=False
        )
        for line in spend_lines(state.spend):
            console.print(f"  {line}", highlight=False, soft_wrap=True)
    effect = next(
        (b.validation.rewrite_effect for b in latest.biases if b.validation and b.validation.rewrite_effect), None
    )
    if effect is not None:
        console.print(
            "  rewrite effect (placebo vs baseline): Δerror "
            + delta_clause(effect.delta, effect.ci_low, effect.ci_high, effect.n, effect.p_value),
            highlight=False,
            soft_wrap=True,
        )
    _print_summary(run)


def _print_summary(run: Run) -> None:
    """The run's outcome in three plain sentences, and the rewrites' quality (`report.summary`)."""
    from ..api.views import rewrite_sentence, run_summary

    summary = run_summary(run.root)
    if summary.rewrites is not None:
        console.print(f"  {rewrite_sentence(summary.rewrites)}", highlight=False, soft_wrap=True)
    console.print("")
    for sentence in summary.sentences():
        console.print(sentence, highlight=False, soft_wrap=True)


@app.command()
def run(
    config_path: Path = typer.Argument(..., metavar="CONFIG.yaml", help="Run config (see experiments/)."),
    run_dir: Path | None = option(DiscoverOptions, "run_dir"),
    set_: list[str] = OVERRIDES,
    allow_overlap: bool = option(
        DiscoverOptions,
        "allow_overlap",
        help="Go on when test pairs are also target pairs (same id or content); recorded (data.allow_overlap).",
    ),
    quiet: bool = QUIET,
    timeout: float | None = TIMEOUT,
    fail_on: list[str] = fail_on_option("accepted"),
) -> None:
    """Run the discovery loop to convergence.

    Perturb, evaluate, explain, identify, merge, validate; every artifact goes to the run
    directory."""
    from ..api import BudgetReached, discover
    from ..config import load_run_config
    from ..progress import progress_bar

    conditions = parse_fail_on(fail_on, ["accepted"])
    root = run_dir or Path("runs")
    try:
        config = load_run_config(config_path, set_)
        root = run_dir or Path("runs") / config.name
        options = DiscoverOptions(run_dir=root, allow_overlap=allow_overlap, timeout_s=timeout)
        run_ = discover(
            config,
            options,
            progress=None if quiet else progress_bar,
            on_warning=warn,
        )
    except BudgetReached as exc:
        budget_stop(root, exc)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(root)
    _end_run(run_)
    exit_on_findings(run_findings(run_, conditions))


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    allow_overlap: bool = option(
        DiscoverOptions,
        "allow_overlap",
        help="Go on although test pairs are also target pairs; written to the run's config.yaml.",
    ),
    set_: list[str] = option(
        DiscoverOptions,
        "overrides",
        help="A new budget: budget.max_usd=20, budget.roles.teacher.max_calls=5000 ... (repeatable; "
        "only budget settings change on a resume); written to the run's config.yaml.",
    ),
    quiet: bool = QUIET,
    timeout: float | None = TIMEOUT,
    fail_on: list[str] = fail_on_option("accepted"),
) -> None:
    """Continue a stopped or killed run.

    From its last checkpoint; no call is paid twice."""
    from ..api import BudgetReached, discover
    from ..progress import progress_bar

    conditions = parse_fail_on(fail_on, ["accepted"])
    try:
        options = DiscoverOptions(
            run_dir=run_dir, resume=True, allow_overlap=allow_overlap, timeout_s=timeout, overrides=set_
        )
        run_ = discover(options=options, progress=None if quiet else progress_bar, on_warning=warn)
    except BudgetReached as exc:
        budget_stop(run_dir, exc)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(run_dir)
    _end_run(run_)
    exit_on_findings(run_findings(run_, conditions))


def _status_record(
    state: Any, effective: str, problems: list[str], live: Any, last_seen: float | None, report: dict[str, Any]
) -> dict[str, Any]:
    """`status --json`: the state file, the status as it stands, the lock's liveness and the events' summary."""
    return {
        "state": state.model_dump() if state else None,
        "status": effective,
        "problems": problems,
        "liveness": {
            "state": live.state,
            "reason": live.reason,
            "holder": live.holder.model_dump() if live.holder else None,
            "heartbeat_age": live.heartbeat_age,
            "last_seen": last_seen,
        },
        **report,
    }


def _last_seen(state: Any, live: Any, events: list[dict[str, Any]]) -> float | None:
    """The newest sign of the run: its state's update, its lock holder's heartbeat, its last event."""
    signs = (
        state.updated_at if state else None,
        live.holder.heartbeat_at if live.holder else None,
        events[-1].get("time") if events else None,
    )
    return max([t for t in signs if isinstance(t, (int, float))], default=None)


def _damaged_files(rd: Any, *, quiet: bool) -> dict[str, str]:
    """The run's damaged SQLite files, named as `resume` names them, with what to do (warned
    unless `quiet`: `status --json` carries them)."""
    damaged: dict[str, str] = rd.damaged_databases()
    if damaged and not quiet:
        warn(rd.damage_advice(damaged))
    return damaged


@app.command()
def status(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    as_json: bool = AS_JSON,
) -> None:
    """Where a run stands.

    Iteration, stage, progress, library size, calls and tokens so far."""
    import json as _json

    from ..api import RunDir, effective_status, summarize_events

    try:
        rd = RunDir(run_dir)
        rd.require_run()
        try:
            state = rd.read_state()
        except DataError as exc:  # the rest of the run still says where it stands
            warn(f"{exc}; `bias-discovery resume {run_dir}` writes it anew")
            state = None
        problems: list[str] = []
        events = rd.read_events(problems)
        report = summarize_events(events, problems)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    if problems and not as_json:
        warn(f"{plural(len(problems), 'unreadable line')} of events.jsonl left out: " + "; ".join(problems[:3]))
    damaged = _damaged_files(rd, quiet=as_json)
    live = rd.liveness()
    last_seen = _last_seen(state, live, events)
    effective = effective_status(state.status if state else None, live)
    state = _with_ledger_spend(rd, state)
    if as_json:
        record = _status_record(state, effective, problems, live, last_seen, report)
        console.print_json(_json.dumps({**record, "damaged": damaged}))
        return
    console.print(_status_headline(run_dir, state, live, effective, last_seen), highlight=False, soft_wrap=True)
    if state and state.error:
        console.print(f"error: {state.error}", highlight=False)
    skipped = _skipped_rows_line(state)
    if skipped:
        console.print(skipped, highlight=False)
    if report["current"]:
        c = report["current"]
        label = (
            "in progress"
            if effective == "running"
            else ("stopped in" if state is not None and state.status == "stopped" else "interrupted in")
        )
        console.print(f"{label}: iteration {c['iteration']} {c['stage']} {c['done']}/{c['total']}", highlight=False)
    console.print(_usage_table(report))
    if state is not None and state.spend:
        console.print("paid so far (every session; cached calls cost nothing):", highlight=False)
        for line in spend_lines(state.spend):
            console.print(f"  {line}", highlight=False, soft_wrap=True)


def _with_ledger_spend(rd: Any, state: RunState | None) -> RunState | None:
    """`state` with what the run paid as the call cache's ledger has it (`RunDir.spend`): run.json's
    spend is written at a stage's end, so after a kill mid-stage it lags what was paid."""
    return state.model_copy(update={"spend": rd.spend(state)}) if state is not None else None


def _usage_table(report: dict[str, Any]) -> Table:
    """The events' calls and tokens by stage and role, with the totals."""
    table = Table(title="calls and tokens by stage")
    for column in ("stage", "role", "requests", "cached", "prompt tokens", "completion tokens"):
        table.add_column(column, justify="left" if column in ("stage", "role") else "right")
    for row in report["usage"]:
        table.add_row(
            row["stage"],
            row["role"],
            str(row["requests"]),
            str(row["cached"]),
            str(row["prompt_tokens"]),
            str(row["completion_tokens"]),
        )
    t = report["totals"]
    table.add_row(
        "all",
        "",
        str(t["requests"]),
        str(t["cached"]),
        str(t["prompt_tokens"]),
        str(t["completion_tokens"]),
        style="bold",
    )
    return table


def _status_headline(run_dir: Path, state: RunState | None, live: Liveness, effective: str, last_seen: Any) -> str:
    name = state.name if state else run_dir.name
    where = f"stage {state.stage} of iteration {state.iteration}" if state else "the start"
    library = f"; library {plural(state.library_size, 'bias')}" if state else ""
    if effective == "running":
        return f"{name}: running ({live.reason}), {where}{library}"
    if effective == "not_responding":
        pid = live.holder.pid if live.holder else "?"
        return (
            f"{name}: not responding at {where} ({live.reason}); if it is stuck, stop it (kill {pid}), "
            f"then: bias-discovery resume {run_dir}"
        )
    if effective == "finished" and state is not None:
        return f"{name}: finished, iteration {state.iteration}, stopped: {state.stop_reason}{library}"
    if state is not None and state.status == "stopped":
        from ..api import Spend

        spent = Spend()
        for s in state.spend.values():
            spent = spent.plus(s)
        return (
            f"{name}: stopped: budget reached at {where} ({state.stop_reason}); spent {spent.text()}; "
            f"resume with a larger budget: bias-discovery resume {run_dir} --set "
            f"{state.budget_limit or 'budget.max_usd'}=...{library}"
        )
    ago = f" ({duration(time.time() - last_seen)} ago)" if last_seen is not None else ""
    failed = ", after an error" if state is not None and state.status == "failed" else ""
    return f"{name}: stopped at {where}{ago}{failed}, resume with: bias-discovery resume {run_dir}{library}"

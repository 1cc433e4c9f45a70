"""The discovery loop: `run`, `resume`, `status`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import delta_clause, p_value
from .common import app, console, fail, interrupted, timeout_option, warn


def _print_run_end(run_dir: Path) -> None:
    from ..run import RunDir

    rd = RunDir(run_dir)
    state = rd.read_state()
    latest = rd.library.load_latest()
    discovered = [b for b in latest.biases if b.origin.kind == "discovered"]
    console.print(
        f"run {run_dir}: {state.status if state else '?'}; stop reason: {state.stop_reason if state else '?'}; "
        f"library: {len(latest.biases)} biases ({len(discovered)} discovered) in {rd.library.latest_path}",
        highlight=False,
    )
    for bias in discovered:
        v = bias.validation
        if v is not None:
            line = f"  {bias.id}: Δerror vs baseline {delta_clause(v.delta, v.ci_low, v.ci_high, v.n, v.p_value)}"
            if v.vs_placebo is not None:
                c = v.vs_placebo
                line += (
                    f"; vs placebo {delta_clause(c.delta, c.ci_low, c.ci_high, c.n, c.p_value)} "
                    f"(adjusted {p_value(c.p_adjusted)})"
                )
            console.print(line, highlight=False)
    effect = next((b.validation.rewrite_effect for b in latest.biases if b.validation and b.validation.rewrite_effect), None)
    if effect is not None:
        console.print(
            "  rewrite effect (placebo vs baseline): Δerror "
            + delta_clause(effect.delta, effect.ci_low, effect.ci_high, effect.n, effect.p_value),
            highlight=False,
        )


@app.command()
def run(
    config_path: Path = typer.Argument(..., metavar="CONFIG.yaml", help="Run config (see experiments/)."),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Run directory (default: runs/<name>)."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: key.sub=value (repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Run the discovery loop (perturb, evaluate, explain, identify, merge, validate) to convergence."""
    from ..config import load_run_config
    from ..graph import execute
    from ..io import atomic_write_text
    from ..progress import progress_bar
    from ..run import RunDir

    try:
        config = load_run_config(config_path, set_).with_timeout(timeout)
        root = run_dir or Path("runs") / config.name
        rd = RunDir(root)
        if rd.is_run():
            fail(f"{root} already holds a run; continue it with `bias-discovery resume {root}` or pick another --run-dir")
        if root.exists() and any(root.iterdir()):
            fail(f"{root} exists and is not empty; pick another --run-dir")
        root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(rd.config_path, config.to_yaml())
        execute(rd, config, resume=False, progress=None if quiet else progress_bar)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(root)
    _print_run_end(root)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Continue a run that was stopped or killed, from its last checkpoint (no call is paid twice)."""
    from ..config import load_run_config
    from ..graph import execute
    from ..progress import progress_bar
    from ..run import RunDir

    try:
        rd = RunDir(run_dir)
        rd.require_resumable()
        config = load_run_config(rd.config_path).with_timeout(timeout)  # this session only: config.yaml keeps the run's
        repaired = rd.library.repair_latest()
        if repaired:
            rd.event("repaired", what=repaired)
            warn(f"{repaired}; rewrote it from the iteration files")
        if not rd.checkpoint_path.is_file():
            warn(
                f"{rd.checkpoint_path} is missing: the loop restarts from iteration 1; "
                "every call it already paid for comes from the call cache"
            )
        execute(rd, config, resume=True, progress=None if quiet else progress_bar)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(run_dir)
    _print_run_end(run_dir)


@app.command()
def status(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Where a run stands: iteration, stage, progress, library size, calls and tokens so far."""
    import json as _json

    from ..run import RunDir, summarize_events

    try:
        rd = RunDir(run_dir)
        rd.require_run()
        state = rd.read_state()
        report = summarize_events(rd.read_events())
    except BiasDiscoveryError as exc:
        fail(str(exc))
    data = {"state": state.model_dump() if state else None, **report}
    if as_json:
        console.print_json(_json.dumps(data))
        return
    if state:
        console.print(
            f"[bold]{state.name}[/]: {state.status}, iteration {state.iteration}, stage {state.stage}"
            + (f", stopped: {state.stop_reason}" if state.stop_reason else "")
            + f"; library {state.library_size} biases",
            highlight=False,
        )
        if state.error:
            console.print(f"error: {state.error}", highlight=False)
    if report["current"]:
        c = report["current"]
        console.print(f"in progress: iteration {c['iteration']} {c['stage']} {c['done']}/{c['total']}", highlight=False)
    table = Table(title="calls and tokens by stage")
    for column in ("stage", "role", "requests", "cached", "prompt tokens", "completion tokens"):
        table.add_column(column, justify="left" if column in ("stage", "role") else "right")
    for row in report["usage"]:
        table.add_row(row["stage"], row["role"], str(row["requests"]), str(row["cached"]), str(row["prompt_tokens"]), str(row["completion_tokens"]))
    t = report["totals"]
    table.add_row("all", "", str(t["requests"]), str(t["cached"]), str(t["prompt_tokens"]), str(t["completion_tokens"]), style="bold")
    console.print(table)

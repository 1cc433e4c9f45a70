"""The discovery loop: `run`, `resume`, `status`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import delta_clause, effect_clause, plural
from .common import app, console, fail, interrupted, warn


def _print_run_end(run_dir: Path) -> None:
    from ..run import RunDir
    from ..stats import MEASURE_LABELS

    rd = RunDir(run_dir)
    state = rd.read_state()
    latest = rd.library.load_latest()
    discovered = [b for b in latest.biases if b.origin.kind == "discovered"]
    console.print(
        f"run {run_dir}: {state.status if state else '?'}; stop reason: {state.stop_reason if state else '?'}; "
        f"library: {plural(len(latest.biases), 'bias')} ({len(discovered)} discovered) in {rd.library.latest_path}",
        highlight=False,
    )
    for bias in discovered:
        v = bias.validation
        if v is not None:
            e, decided = v.effect, v.decisive_comparison
            clause = effect_clause(
                e.delta, e.ci_low, e.ci_high, e.n, decided.p_adjusted, control=v.decisive, method=e.method,
                label=MEASURE_LABELS[e.measure],
            )
            console.print(f"  {bias.id}: {clause}", highlight=False)
    statement = next((b.validation.error_statement for b in latest.biases if b.validation and b.validation.error_statement), None)
    if statement:
        console.print(f"  error control: {statement}", highlight=False, soft_wrap=True)
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
    allow_overlap: bool = typer.Option(
        False, "--allow-overlap", help="Go on when test pairs are also target pairs (same id or content); recorded (data.allow_overlap)."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Run the discovery loop to convergence.

    Perturb, evaluate, explain, identify, merge, validate; every artifact goes to the run
    directory."""
    from ..config import load_run_config
    from ..data.loaders import load_pairs
    from ..graph import check_data_overlap, execute
    from ..io import atomic_write_text
    from ..progress import progress_bar
    from ..run import RunDir

    try:
        config = load_run_config(config_path, set_ + (["data.allow_overlap=true"] if allow_overlap else []))
        root = run_dir or Path("runs") / config.name
        rd = RunDir(root)
        if rd.is_run():
            fail(f"{root} already holds a run; continue it with `bias-discovery resume {root}` or pick another --run-dir")
        if root.exists() and any(root.iterdir()):
            fail(f"{root} exists and is not empty; pick another --run-dir")
        d = config.data
        check_data_overlap(  # before the run directory exists: a refused run leaves nothing behind
            config,
            load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed),
            load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed),
        )
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
    allow_overlap: bool = typer.Option(
        False, "--allow-overlap", help="Go on although test pairs are also target pairs; written to the run's config.yaml."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Continue a stopped or killed run.

    From its last checkpoint; no call is paid twice."""
    from ..config import load_run_config
    from ..graph import execute
    from ..io import atomic_write_text
    from ..progress import progress_bar
    from ..run import RunDir

    try:
        rd = RunDir(run_dir)
        rd.require_resumable()
        config = load_run_config(rd.config_path)
        if allow_overlap and not config.data.allow_overlap:
            config = config.model_copy(update={"data": config.data.model_copy(update={"allow_overlap": True})})
            atomic_write_text(rd.config_path, config.to_yaml())
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
    """Where a run stands.

    Iteration, stage, progress, library size, calls and tokens so far."""
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
            + f"; library {plural(state.library_size, 'bias')}",
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

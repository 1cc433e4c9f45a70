"""The `bias-discovery` command line. Thin: parse options, call the library, print results.

User errors (`BiasDiscoveryError`, invalid config values) end with a one-paragraph message
on stderr and exit code 2; nothing half-written is left behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from .errors import BiasDiscoveryError

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from .judging import JudgeSummary

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Discover the unknown biases of an LLM judge, and turn them into harder benchmarks.",
)
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Discover the unknown biases of an LLM judge, and turn them into harder benchmarks."""


def default_cache_path() -> Path:
    """The shared call cache for one-off commands (`judge`); runs keep their own."""
    root = os.environ.get("BIAS_DISCOVERY_CACHE_DIR") or Path.home() / ".cache" / "bias-discovery"
    return Path(root) / "calls.sqlite"


def format_validation_error(exc: ValidationError, where: str = "") -> str:
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"]) or "(root)"
        lines.append(f"  {where}{loc}: {error['msg']}")
    return "invalid settings:\n" + "\n".join(lines)


def _fail(message: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_judge_summary(summary: JudgeSummary) -> None:
    table = Table(title=f"{summary.model} on {summary.data} (positions: {summary.positions})")
    for column in ("domain", "pairs", "valid", "error", "95% CI"):
        table.add_column(column, justify="right" if column != "domain" else "left")
    for domain, d in summary.per_domain.items():
        ci = "-" if d.ci_low is None else f"{_pct(d.ci_low)}-{_pct(d.ci_high)}"
        table.add_row(domain, str(d.n), str(d.n_valid), _pct(d.error_rate), ci)
    ci = "-" if summary.error_ci_low is None else f"{_pct(summary.error_ci_low)}-{_pct(summary.error_ci_high)}"
    table.add_row("all", str(summary.n_pairs), str(summary.n_valid_pairs), _pct(summary.error_rate), ci, style="bold")
    console.print(table)
    console.print(
        f"invalid pairs: {_pct(summary.invalid_rate)} ({summary.n_invalid_judgments} invalid judgments"
        f"{': ' + ', '.join(f'{k} {v}' for k, v in summary.invalid_reasons.items()) if summary.invalid_reasons else ''})"
        f" | position-A rate: {_pct(summary.position_a_rate)}"
        + (f" | consistency: {_pct(summary.position_consistency)}" if summary.position_consistency is not None else "")
        + f" | tokens: {summary.prompt_tokens} prompt, {summary.completion_tokens} completion"
        f" | cached calls: {summary.cached_calls}/{summary.n_judgments}",
        highlight=False,
    )


@app.command()
def judge(
    model: str = typer.Option(..., "--model", help="Judge model spec, provider/model: llamacpp/smollm2, openai/NAME, vllm/HF_ID."),
    data: str = typer.Option(..., "--data", help="demo, judgebench[:gpt|:claude], rewardbench, or a .jsonl/.json/.parquet path."),
    out: Path = typer.Option(..., "--out", help="Output directory for judgments.jsonl and summary.json."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Local copy of the named data sets (else $BIAS_DISCOVERY_DATA_DIR, else the hub)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Judge only the first N pairs."),
    positions: str = typer.Option("both", "--positions", help="both | swap | fixed."),
    seed: int = typer.Option(42, "--seed", help="Seed for the position swap and sampling."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Server URL for openai/ models, e.g. http://127.0.0.1:8000/v1."),
    reasoning: bool = typer.Option(True, "--reasoning/--no-reasoning", help="Ask for brief reasoning before the verdict."),
    reasoning_chars: int = typer.Option(600, "--reasoning-chars", min=20, help="Upper bound on the reasoning paragraph (characters)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Completion token budget per judgment; must cover the reasoning."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="SQLite call cache (default: ~/.cache/bias-discovery/calls.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the call cache."),
    compare: Optional[Path] = typer.Option(
        None, "--compare", metavar="PRO_DIR", callback=lambda value: _check_compare_dir(value),
        help="Also judge the exported Pro set in PRO_DIR (--limit applies to it too); print error per domain side by side, write compare.json.",
    ),
) -> None:
    """Measure a judge model on a pairwise data set: error rate per domain, invalid rate, position-A rate."""
    from .data.loaders import describe_source, load_pairs
    from .io import atomic_write_json, atomic_write_jsonl
    from .judging import JudgeSettings, judge_pairs, summarize
    from .llm.config import ModelConfig
    from .llm.registry import make_engine
    from .progress import progress_bar

    try:
        settings = JudgeSettings(
            positions=positions, reasoning=reasoning, reasoning_chars=reasoning_chars, max_tokens=max_tokens  # type: ignore[arg-type]
        )
        config = ModelConfig.from_spec(model, **({"base_url": base_url} if base_url else {}))
        if out.exists() and not out.is_dir():
            _fail(f"--out {out} exists and is not a directory")
        pairs = load_pairs(data, data_dir=data_dir, limit=limit)
        if not pairs:
            _fail(f"data {data!r} has no pairs")
        engine = make_engine(config, cache_path=None if no_cache else (cache or default_cache_path()))
        try:
            n_requests = len(pairs) * (2 if settings.positions == "both" else 1)
            with progress_bar(f"judging {len(pairs)} pairs", n_requests) as advance:
                result = judge_pairs(engine, pairs, settings, seed=seed, progress=advance)
        finally:
            engine.close()
        summary = summarize(result, model=config.spec, data=describe_source(data, data_dir), settings=settings, seed=seed)
    except ValidationError as exc:
        _fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(out / "judgments.jsonl", result.judgments)
    atomic_write_json(out / "summary.json", summary)
    print_judge_summary(summary)
    console.print(f"wrote {out / 'judgments.jsonl'} and {out / 'summary.json'}", highlight=False)
    if compare is not None:
        _judge_compare(config, settings, summary, compare, out=out, limit=limit, seed=seed,
                       cache_path=None if no_cache else (cache or default_cache_path()))


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


def _print_run_end(run_dir: Path) -> None:
    from .run import RunDir

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
            console.print(
                f"  {bias.id}: Δerror {v.delta:+.3f} (CI {v.ci_low if v.ci_low is None else round(v.ci_low, 3)}"
                f"..{v.ci_high if v.ci_high is None else round(v.ci_high, 3)}), p={v.p_value}",
                highlight=False,
            )


def _interrupted(run_dir: Path) -> None:
    err_console.print(f"interrupted; continue with: bias-discovery resume {run_dir}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=130)


@app.command()
def run(
    config_path: Path = typer.Argument(..., metavar="CONFIG.yaml", help="Run config (see experiments/)."),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Run directory (default: runs/<name>)."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: key.sub=value (repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Run the discovery loop (perturb, evaluate, explain, identify, merge, validate) to convergence."""
    from .config import load_run_config
    from .graph import execute
    from .io import atomic_write_text
    from .progress import progress_bar
    from .run import RunDir

    try:
        config = load_run_config(config_path, set_)
        root = run_dir or Path("runs") / config.name
        rd = RunDir(root)
        if rd.is_run():
            _fail(f"{root} already holds a run; continue it with `bias-discovery resume {root}` or pick another --run-dir")
        if root.exists() and any(root.iterdir()):
            _fail(f"{root} exists and is not empty; pick another --run-dir")
        root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(rd.config_path, config.to_yaml())
        execute(rd, config, resume=False, progress=None if quiet else progress_bar)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _interrupted(root)
    _print_run_end(root)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Continue a run that was stopped or killed, from its last checkpoint (no call is paid twice)."""
    from .config import load_run_config
    from .graph import execute
    from .progress import progress_bar
    from .run import RunDir

    try:
        rd = RunDir(run_dir)
        rd.require_resumable()
        config = load_run_config(rd.config_path)
        repaired = rd.library.repair_latest()
        if repaired:
            rd.event("repaired", what=repaired)
            err_console.print(f"[bold yellow]warning:[/] {repaired}; rewrote it from the iteration files", highlight=False, soft_wrap=True)
        if not rd.checkpoint_path.is_file():
            err_console.print(
                f"[bold yellow]note:[/] {rd.checkpoint_path} is missing: the loop restarts from iteration 1; "
                "every call it already paid for comes from the call cache",
                highlight=False, soft_wrap=True,
            )
        execute(rd, config, resume=True, progress=None if quiet else progress_bar)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _interrupted(run_dir)
    _print_run_end(run_dir)


@app.command()
def status(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Where a run stands: iteration, stage, progress, library size, calls and tokens so far."""
    import json as _json

    from .run import RunDir, summarize_events

    try:
        rd = RunDir(run_dir)
        rd.require_run()
        state = rd.read_state()
        report = summarize_events(rd.read_events())
    except BiasDiscoveryError as exc:
        _fail(str(exc))
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


# --------------------------------------------------------------------------------------------
# Browsing a run: `library show` / `library diff`, `report`, `view`
# --------------------------------------------------------------------------------------------

library_app = typer.Typer(
    no_args_is_help=True,
    help=(
        "Browse bias libraries. A library is named by RUN_DIR (the run's newest library), "
        "RUN_DIR@N (the library after iteration N; RUN_DIR@0 is the seed library) or the "
        "path of a library .json file."
    ),
)
app.add_typer(library_app, name="library")

_LIBRARY_REF_HELP = (
    "RUN_DIR (newest library), RUN_DIR@N (library after iteration N; @0 = seeds) or a library .json file."
)


def _pp(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} pp"


def _ci_pp(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def _p(x: float | None) -> str:
    return "-" if x is None else ("<0.001" if x < 0.001 else f"{x:.3f}")


def _origin(row: dict) -> str:
    if row["origin"] == "seed":
        return "seed" + (f" ({row['seed_library']})" if row.get("seed_library") else "")
    return f"iteration {row['origin_iteration']}"


_STATUS_STYLE = {"accepted": "green", "rejected": "yellow", "seed": "dim", "unvalidated": "dim"}


@library_app.command("show")
def library_show(
    ref: str = typer.Argument(..., metavar="RUN_DIR|RUN_DIR@N|FILE", help=_LIBRARY_REF_HELP),
    iteration: Optional[int] = typer.Option(None, "--iteration", "-i", min=0, help="Iteration of a run's library (same as RUN_DIR@N)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON on stdout."),
) -> None:
    """Show a bias library: origin, validation numbers (n, errors, Δ with CI, p), decision, top domain.

    For a run, the candidates that validation rejected up to that iteration are listed after the
    library's biases, marked rejected (they are not in the library).
    """
    import json as _json

    from rich.text import Text

    from .report.data import library_json, rejected_candidates, resolve_library

    try:
        resolved = resolve_library(ref, iteration)
        for warning in resolved.warnings:
            err_console.print(f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        rejected = (
            rejected_candidates(resolved.run_dir, upto=resolved.library.iteration) if resolved.run_dir is not None else []
        )
        data = library_json(resolved, rejected)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(_json.dumps(data, indent=2, ensure_ascii=False))
        return
    lib = data["library"]
    from rich import box

    table = Table(
        title=Text(
            f"{lib['name']}, iteration {lib['iteration']}: {lib['size']} biases"
            + (f" (judge {lib['target_model']})" if lib["target_model"] else "")
            + f" [{data['path']}]"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("bias (name, id)", ratio=1, min_width=12, overflow="fold")
    table.add_column("origin", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("error\nbase→pert", justify="right", no_wrap=True)
    table.add_column("Δ pp\n[CI]", justify="right", min_width=7)
    table.add_column("p", justify="right", no_wrap=True)
    table.add_column("decision", no_wrap=True, min_width=8)
    table.add_column("top\ndomain", min_width=9, overflow="fold")
    n_rejected = 0
    for row in data["biases"]:
        n_rejected += row["status"] == "rejected" and not row["in_library"]
        delta = _pp(row["delta"]).replace(" pp", "") + (
            f"\n{_ci_pp(row['ci_low'], row['ci_high'])}" if row["ci_low"] is not None else ""
        )
        errors = "-" if row["baseline_error"] is None else f"{_pct(row['baseline_error'])}\n→ {_pct(row['perturbed_error'])}"
        top = "-" if row["top_domain"] is None else f"{row['top_domain']}\n{_pp(row['top_domain_delta']).replace(' pp', '')}"
        name = Text(row["name"])
        name.append("\n" + row["id"], style="dim")
        status = row["status"] + ("" if row["in_library"] else "\n(not in\nlibrary)")
        table.add_row(
            name,
            Text("seed" if row["origin"] == "seed" else f"iter {row['origin_iteration']}"),
            Text("-" if row["n"] is None else str(row["n"])),
            Text(errors),
            Text(delta),
            Text(_p(row["p_value"])),
            Text(status, style=_STATUS_STYLE.get(row["status"], "")),
            Text(top),
        )
    console.print(table)
    if resolved.run_dir is not None:
        console.print(
            Text(f"{n_rejected} rejected candidate(s) from iterations up to {lib['iteration']} are listed after the library.")
        )


def _diff_number(field: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    last = field.rsplit(".", 1)[-1]
    if last in ("n", "n_excluded_invalid"):
        return f"{value:+.0f}" if signed else f"{value:.0f}"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _row_summary(row: dict) -> str:
    parts = [_origin(row), row["status"]]
    if row["delta"] is not None:
        parts.append(f"Δ {_pp(row['delta'])} {_ci_pp(row['ci_low'], row['ci_high'])}".rstrip())
        parts.append(f"p {_p(row['p_value'])}")
    return ", ".join(parts)


@library_app.command("diff")
def library_diff(
    a: str = typer.Argument(..., metavar="A", help="Older library: " + _LIBRARY_REF_HELP),
    b: str = typer.Argument(..., metavar="B", help="Newer library: " + _LIBRARY_REF_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON on stdout."),
) -> None:
    """Compare two libraries (two runs, two iterations of a run, or two files): added, removed,
    merged and changed biases, with the change in their validation numbers.

    Examples: `library diff runs/x@0 runs/x` (everything a run found), `library diff runs/x@1 runs/x@2`,
    `library diff runs/x runs/y`, `library diff bias_library/biasscope7.json runs/x`.
    """
    import json as _json

    from .report.data import bias_row, diff_refs, diff_to_json, resolve_library

    try:
        ref_a, ref_b = resolve_library(a), resolve_library(b)
        diff, rejected = diff_refs(ref_a, ref_b)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    data = diff_to_json(diff, ref_a, ref_b, rejected)
    if as_json:
        typer.echo(_json.dumps(data, indent=2, ensure_ascii=False))
        return
    lines = [
        f"A: {ref_a.label} ({diff.a_name}, iteration {diff.a_iteration}, {len(ref_a.library.biases)} biases)",
        f"B: {ref_b.label} ({diff.b_name}, iteration {diff.b_iteration}, {len(ref_b.library.biases)} biases)",
    ]
    if diff.is_empty:
        lines.append("no change: the libraries hold the same biases")
    if diff.added:
        lines.append(f"added ({len(diff.added)}):")
        lines += [f"  + {x.id}  {x.name}  ({_row_summary(bias_row(x))})" for x in diff.added]
    if diff.removed:
        lines.append(f"removed ({len(diff.removed)}):")
        lines += [f"  - {x.id}  {x.name}  ({_row_summary(bias_row(x))})" for x in diff.removed]
    if diff.merged:
        lines.append(f"merged ({len(diff.merged)}):")
        lines += [f"  ~ {m.bias.id}  {m.bias.name}  <- {', '.join(m.absorbed)}" for m in diff.merged]
    if diff.changed:
        lines.append(f"changed ({len(diff.changed)}):")
        for change in diff.changed:
            lines.append(f"  * {change.id}  {change.name}  (fields: {', '.join(change.fields)})")
            for field, number in change.numbers.items():
                lines.append(
                    f"      {field}: {_diff_number(field, number.before)} -> {_diff_number(field, number.after)}"
                    + (f" ({_diff_number(field, number.change, signed=True)})" if number.change is not None else "")
                )
    if rejected:
        lines.append(f"rejected by validation in between, not in B ({len(rejected)}):")
        lines += [f"  x {x.id}  {x.name}  ({_row_summary(bias_row(x, in_library=False))})" for x in rejected]
    lines.append(f"unchanged: {len(diff.unchanged)} biases")
    typer.echo("\n".join(lines))


@app.command()
def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    out: Optional[Path] = typer.Option(None, "--out", help="Output HTML file (default: RUN_DIR/report.html)."),
) -> None:
    """Write one self-contained HTML report of a run (opens from disk, fetches nothing): run header,
    calls and tokens, biases per iteration, Δerror with CIs overall and per domain, and each bias's
    definition, provenance and evidence (original vs perturbed response, the judge's explanation)."""
    from .report.render import write_report

    if out is not None and out.is_dir():
        _fail(f"--out {out} is a directory; give a file name such as {out / 'report.html'}")
    try:
        path = write_report(run_dir, out)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    console.print(f"wrote {path} ({path.stat().st_size:,} bytes)", highlight=False, soft_wrap=True)


@app.command()
def view(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
) -> None:
    """Serve a run's report on 127.0.0.1 and keep it current while the run goes on (Ctrl-C stops)."""
    from .report.data import require_run_like
    from .viewer import ReportServer

    try:
        require_run_like(run_dir)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    try:
        server = ReportServer(run_dir, port=port)
    except OSError as exc:
        _fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pick another --port")
    server.page()  # render once now: the first visit is instant
    console.print(f"serving {run_dir} at {server.url} (Ctrl-C to stop)", highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped", highlight=False)


# ---------------------------------------------------------------------------------------------
# export: JudgeBench-Pro-style benchmark, annotations, DPO data; judge --compare
# ---------------------------------------------------------------------------------------------

export_app = typer.Typer(
    no_args_is_help=True,
    help="Turn a run's biases into data: a JudgeBench-Pro-style benchmark, bias-augmented DPO data.",
)
app.add_typer(export_app, name="export")

_BIASES_HELP = (
    "all (every validated discovered bias, the default) | top-K (the K with the largest Δerror) | "
    "ID,NAME,... (any biases of the run's library, seeds included)."
)


def _check_compare_dir(value: Optional[Path]) -> Optional[Path]:
    """`judge --compare` callback: refuse a directory that is not a Pro set before judging."""
    if value is None:
        return None
    from .export.compare import check_pro_dir

    try:
        return check_pro_dir(value)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    return None


def _judge_compare(config, settings, summary, pro_dir: Path, *, out: Path, limit: Optional[int], seed: int, cache_path: Optional[Path]) -> None:  # type: ignore[no-untyped-def]
    from .export.compare import compare_with_pro, print_compare
    from .progress import progress_bar

    try:
        report = compare_with_pro(config, settings, summary, pro_dir, out=out, cache_path=cache_path, seed=seed, limit=limit, progress=progress_bar)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    print_compare(report, console)
    console.print(f"wrote {out / 'compare.json'}, {out / 'pro_summary.json'} and {out / 'pro_judgments.jsonl'}", highlight=False)


def _print_counts(title: str, counts: dict) -> None:
    table = Table(title=title)
    table.add_column("step")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    console.print(table)


@export_app.command("judgebench-pro")
def export_judgebench_pro_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    out: Path = typer.Option(..., "--out", help="Output directory (created; must not exist or be empty unless --overwrite)."),
    biases: Optional[str] = typer.Option(None, "--biases", help=_BIASES_HELP),
    variants: int = typer.Option(10, "--variants", min=1, help="Biased variants per test pair (K; the paper uses 10)."),
    filter_model: Optional[str] = typer.Option(None, "--filter-model", help="Adversarial filter judge, provider/model (default: the run's target)."),
    filter_base_url: Optional[str] = typer.Option(None, "--filter-base-url", help="Server URL for an openai/ filter model."),
    checker_model: Optional[str] = typer.Option(None, "--checker-model", help="Equivalence checker, provider/model (default: the run's teacher)."),
    checker_base_url: Optional[str] = typer.Option(None, "--checker-base-url", help="Server URL for an openai/ checker model."),
    data: Optional[str] = typer.Option(None, "--data", help="Test pairs (default: the run's test data): a named set or a file."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Local copy of the named data sets (default: the run's)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use a seeded sample of N test pairs (the run's seed)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Build a JudgeBench-Pro-style set: K biased variants per test pair, equivalence check, adversarial filter (both orders), dataset card, annotation sheet."""
    from .export.pro import export_judgebench_pro
    from .progress import progress_bar

    try:
        stats = export_judgebench_pro(
            run_dir, out, biases=biases, variants=variants, filter_model=filter_model, filter_base_url=filter_base_url,
            checker_model=checker_model, checker_base_url=checker_base_url, data=data, data_dir=data_dir, limit=limit,
            overwrite=overwrite, progress=None if quiet else progress_bar,
        )
    except ValidationError as exc:
        _fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    _print_counts(f"JudgeBench-Pro export of {stats['run_name']}", stats["counts"])
    length = stats["length"]
    if length["n"]:
        console.print(
            f"lengths (whitespace tokens): chosen {length['chosen']:.1f}, original rejected {length['original_rejected']:.1f}, "
            f"new rejected {length['new_rejected']:.1f} ({_pct(length['relative_increase'])} increase)",
            highlight=False,
        )
    console.print(
        f"wrote {out}: data.jsonl, data.parquet ({stats['counts']['kept_by_filter']} samples), README.md, stats.json, "
        f"variants.jsonl, annotation.csv/.jsonl (annotate, then `bias-discovery export apply-annotations {out} SHEET`)",
        highlight=False,
    )


@export_app.command("apply-annotations")
def export_apply_annotations_cmd(
    directory: Path = typer.Argument(..., metavar="DIR", help="An exported Pro set."),
    sheet: Path = typer.Argument(..., metavar="SHEET", help="The filled annotation sheet (.csv or .jsonl)."),
) -> None:
    """Apply two annotators' verdicts (keep/reject, adjudication on disagreement): drop rejected samples, report Cohen's kappa."""
    from .export.annotate import apply_annotations

    try:
        stats = apply_annotations(directory, sheet)
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    ann = stats["annotation"]
    kappa = "undefined (one label everywhere)" if ann["kappa"] is None else f"{ann['kappa']:.3f}"
    console.print(
        f"{ann['n_annotated']} samples annotated: agreement {_pct(ann['observed_agreement'])}, Cohen's kappa {kappa}, "
        f"{ann['n_adjudicated']} adjudicated; kept {ann['n_kept']}, rejected {ann['n_rejected']}. "
        f"Updated {directory / 'data.jsonl'}, data.parquet, stats.json, README.md.",
        highlight=False,
    )


@export_app.command("dpo")
def export_dpo_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A discovery run directory."),
    data: str = typer.Option(..., "--data", help="Preference pairs: a named set (rewardbench, judgebench, demo) or a .jsonl/.json/.parquet file."),
    out: Path = typer.Option(..., "--out", help="Output directory (created; must not exist or be empty unless --overwrite)."),
    biases: Optional[str] = typer.Option(None, "--biases", help=_BIASES_HELP),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Local copy of the named data sets (default: the run's)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use a seeded sample of N pairs (the run's seed)."),
    fmt: str = typer.Option("standard", "--format", help="standard (strings) | conversational (role/content messages): TRL's preference formats."),
    include_original: bool = typer.Option(False, "--include-original", help="Also keep each original (unperturbed) pair."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Bias-augmented DPO data: rejected responses rewritten with the run's biases; prompt/chosen/rejected for TRL's DPOTrainer."""
    from .export.dpo import export_dpo
    from .progress import progress_bar

    try:
        stats = export_dpo(
            run_dir, out, data=data, biases=biases, data_dir=data_dir, limit=limit, fmt=fmt,  # type: ignore[arg-type]
            include_original=include_original, overwrite=overwrite, progress=None if quiet else progress_bar,
        )
    except ValidationError as exc:
        _fail(format_validation_error(exc))
    except BiasDiscoveryError as exc:
        _fail(str(exc))
    _print_counts(f"DPO export of {stats['run_name']}", stats["counts"])
    console.print(f"wrote {out}: data.jsonl, data.parquet ({stats['counts']['rows']} rows), README.md, stats.json", highlight=False)


# Keep this guard last: `python -m bias_discovery.cli` runs main() here, so every command
# must be defined above it.
if __name__ == "__main__":  # pragma: no cover
    main()

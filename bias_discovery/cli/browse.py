"""Browsing a run: `library show` / `library diff`, `report`, `view`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import ci_pp, count, delta_clause, number, p_value, percent, pp
from .common import app, console, fail, warn

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


def _origin(row: dict) -> str:
    if row["origin"] == "seed":
        return "seed" + (f" ({row['seed_library']})" if row.get("seed_library") else "")
    return f"iteration {row['origin_iteration']}"


_STATUS_STYLE = {
    "accepted": "green",
    "rejected": "yellow",
    "confirmed": "green",
    "unconfirmed": "yellow",
    "seed": "dim",
    "unvalidated": "dim",
}


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

    from ..report.data import library_json, rejected_candidates, resolve_library

    try:
        resolved = resolve_library(ref, iteration)
        for warning in resolved.warnings:
            warn(warning)
        rejected = (
            rejected_candidates(resolved.run_dir, upto=resolved.library.iteration) if resolved.run_dir is not None else []
        )
        data = library_json(resolved, rejected)
    except BiasDiscoveryError as exc:
        fail(str(exc))
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
    table.add_column("Δ pp vs\nbaseline\n[CI]", justify="right", min_width=7)
    table.add_column("Δ pp vs\nplacebo\n[CI]", justify="right", min_width=7)
    table.add_column("p\n(adj)", justify="right", no_wrap=True)
    table.add_column("MDE pp\n(n)", justify="right", no_wrap=True)
    table.add_column("decision", no_wrap=True, min_width=8)
    table.add_column("top\ndomain", min_width=9, overflow="fold")
    n_rejected = 0
    for row in data["biases"]:
        n_rejected += row["status"] == "rejected" and not row["in_library"]
        delta = pp(row["delta"], unit="") + (f"\n{ci_pp(row['ci_low'], row['ci_high'])}" if row["ci_low"] is not None else "")
        placebo = pp(row["delta_vs_placebo"], unit="") + (
            f"\n{ci_pp(row['ci_low_vs_placebo'], row['ci_high_vs_placebo'])}" if row["ci_low_vs_placebo"] is not None else ""
        )
        p_text = p_value(row["decision_p"]) + (f"\n({p_value(row['decision_p_adjusted'])})" if row["decision_p_adjusted"] is not None else "")
        mde = "-" if row["mde_n"] is None else f"{pp(row['mde'], unit='', missing='none')}\n({row['mde_n']})"
        errors = "-" if row["baseline_error"] is None else f"{percent(row['baseline_error'])}\n→ {percent(row['perturbed_error'])}"
        top = "-" if row["top_domain"] is None else f"{row['top_domain']}\n{pp(row['top_domain_delta'], unit='')}"
        name = Text(row["name"])
        name.append("\n" + row["id"], style="dim")
        status = row["status"] + ("" if row["in_library"] else "\n(not in\nlibrary)")
        table.add_row(
            name,
            Text("seed" if row["origin"] == "seed" else f"iter {row['origin_iteration']}"),
            Text("-" if row["n"] is None else str(row["n"])),
            Text(errors),
            Text(delta),
            Text(placebo),
            Text(p_text),
            Text(mde),
            Text(status, style=_STATUS_STYLE.get(row["status"], "")),
            Text(top),
        )
    console.print(table)
    console.print(
        Text(
            "Δ: perturbed minus baseline (unperturbed items) or placebo (neutral rewrites) error, with its "
            "confidence interval; p: one-sided exact McNemar of the comparison that decides (adjusted for its "
            "family); MDE: the smallest Δ that test detects with 80 % power at n items."
        ),
        style="dim",
    )
    effect = data.get("rewrite_effect")
    if effect is not None:
        console.print(
            Text(
                "rewrite effect (placebo vs baseline): Δerror "
                f"{delta_clause(effect['delta'], effect['ci_low'], effect['ci_high'], effect['n'], effect['p_value'])}; "
                f"answer changed in {percent(effect['answer_change_rate'])} of "
                f"{effect.get('n_answer_checked') if effect.get('n_answer_checked') is not None else '-'} checked rewrites; "
                f"length ×{number(effect['length_ratio'], digits=2)}"
            )
        )
    if resolved.run_dir is not None:
        console.print(
            Text(f"{n_rejected} rejected candidate(s) from iterations up to {lib['iteration']} are listed after the library.")
        )


def _diff_number(field: str, value: float | None, signed: bool = False) -> str:
    """A number of `library diff`: counts whole, rates and p-values to three decimals."""
    whole = field.rsplit(".", 1)[-1] in ("n", "n_excluded_invalid")
    return number(value, digits=0 if whole else 3, signed=signed)


def _row_summary(row: dict) -> str:
    parts = [_origin(row), row["status"]]
    if row["delta"] is not None:
        parts.append(f"Δ {pp(row['delta'])} {ci_pp(row['ci_low'], row['ci_high'])}".rstrip())
        parts.append(f"p {p_value(row['p_value'])}")
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

    from ..report.data import bias_row, diff_refs, diff_to_json, resolve_library

    try:
        ref_a, ref_b = resolve_library(a), resolve_library(b)
        diff, rejected = diff_refs(ref_a, ref_b)
    except BiasDiscoveryError as exc:
        fail(str(exc))
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
            for field, values in change.numbers.items():
                lines.append(
                    f"      {field}: {_diff_number(field, values.before)} -> {_diff_number(field, values.after)}"
                    + (f" ({_diff_number(field, values.change, signed=True)})" if values.change is not None else "")
                )
    if rejected:
        lines.append(f"rejected by validation in between, not in B ({len(rejected)}):")
        lines += [f"  x {x.id}  {x.name}  ({_row_summary(bias_row(x, in_library=False))})" for x in rejected]
    lines.append(f"unchanged: {len(diff.unchanged)} biases")
    typer.echo("\n".join(lines))


@app.command()
def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR|AUDIT_DIR"),
    out: Optional[Path] = typer.Option(None, "--out", help="Output HTML file (default: DIR/report.html)."),
) -> None:
    """Write one self-contained HTML report of a run (opens from disk, fetches nothing): run header,
    calls and tokens, biases per iteration, Δerror with CIs overall and per domain, and each bias's
    definition, provenance and evidence (original vs perturbed response, the judge's explanation).
    An audit directory (`bias-discovery audit --out DIR`) gets its measures, per domain, with examples."""
    from ..audit.output import is_audit_dir
    from ..io import probe_writable
    from ..report.render import write_report

    if out is not None and out.is_dir():
        fail(f"--out {out} is a directory; give a file name such as {out / 'report.html'}")
    try:
        if out is not None:
            probe_writable(out.absolute().parent, what=f"--out {out}: its folder")
        elif run_dir.is_dir():
            try:
                probe_writable(run_dir, what="the report's default place,")
            except BiasDiscoveryError as exc:
                raise type(exc)(f"{exc}; write it elsewhere with --out FILE") from None
        problems: list[str] = []
        if is_audit_dir(run_dir):
            from ..report.audit import write_audit_report

            path = write_audit_report(run_dir, out)
        else:
            path = write_report(run_dir, out, problems)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the report {out or run_dir / 'report.html'}: {exc.strerror or exc}")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        warn(f"{len(problems)} unreadable entr{'y' if len(problems) == 1 else 'ies'} left out of the report (listed on the page too): {shown}")
    console.print(f"wrote {path} ({count(path.stat().st_size)} bytes)", highlight=False, soft_wrap=True)


@app.command()
def view(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
) -> None:
    """Serve a run's report on 127.0.0.1 and keep it current while the run goes on (Ctrl-C stops)."""
    from ..report.data import require_run_like
    from ..viewer import ReportServer

    try:
        require_run_like(run_dir)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    try:
        server = ReportServer(run_dir, port=port)
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pick another --port")
    server.page()  # render once now: the first visit is instant
    console.print(f"serving {run_dir} at {server.url} (Ctrl-C to stop)", highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped", highlight=False)

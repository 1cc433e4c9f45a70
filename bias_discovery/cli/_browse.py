"""Browsing a run: `library show` / `library diff`, `report`, `view`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import ci_pp, delta_clause, excluded_above, number, p_value, percent, plural, pp
from ..settings.common import DEFAULT_EXAMPLES
from ._bias_view import terminal_text
from ._common import PLAIN_HELP, app, console, fail, warn
from ._options import AS_JSON, flag

if TYPE_CHECKING:
    from rich.text import Text

    from ..api.reports import BiasRow, LibraryView

library_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=PLAIN_HELP,
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


_NAME_LINES = 3
"""A bias name longer than this many lines of its column is cut with an ellipsis (the id below
it is never cut: it is how a bias is named on the command line)."""
_NARROW = 110
"""Below this many columns `library show` gives its number columns fixed compact widths (a
confidence interval then takes two lines), so the table fits 80 columns."""
_COMPACT_WIDTHS = {"decision": 11, "n": 4, "error": 8, "delta": 8, "placebo": 8, "p": 7, "mde": 5, "top": 9}
"""The other columns' widths below `_NARROW`, fitting their longest values ("unconfirmed",
"→ 100.0%", "[+100.0,", "(0.012)", "+12.5")."""


def _wrapped(text: str, width: int, max_lines: int | None = None) -> str:
    """`text` wrapped to `width` at spaces and hyphens (a word longer than the column is split),
    cut to `max_lines` with an ellipsis."""
    import textwrap

    lines = textwrap.wrap(text, width, break_on_hyphens=True, break_long_words=True) or [""]
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: width - 1].rstrip() + "…"
    return "\n".join(lines)


def _examples_option(help: str) -> Any:
    """`--examples K` of the commands that show a bias's validation items."""
    return flag("examples", DEFAULT_EXAMPLES, "-k", min=0, help=help)


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
    bias: str | None = typer.Argument(
        None, metavar="[BIAS_ID]", help="Show this bias alone (an id or a name): its provenance, examples and reviews."
    ),
    iteration: int | None = flag(
        "iteration", None, "-i", min=0, help="Iteration of a run's library (same as RUN_DIR@N)."
    ),
    examples: int = _examples_option(
        help="With BIAS_ID: validation items shown whose verdict the bias flipped (and half as many it did not).",
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Show a bias library, or one bias of it.

    Origin, validation numbers (n, errors, the reported effect and both comparisons with CIs,
    p), decision, top domain, and what the validations' decisions control.

    For a run, the candidates that validation rejected up to that iteration are listed after the
    library's biases, marked rejected (they are not in the library).

    With BIAS_ID: its definition and numbers, where it came from (the misjudged cases it was
    identified from, with the judge's explanations and the teacher's identification, and the
    candidates merged into it), K examples from its validation (original and rewritten response
    as a word diff, the verdicts on both), and its reviews.
    """
    import json as _json

    from ..api.reports import library_view, rejected_candidates, resolve_library

    if bias is not None:
        _show_bias(ref, bias, iteration=iteration, examples=examples, as_json=as_json)
        return
    try:
        resolved = resolve_library(ref, iteration)
        for warning in resolved.warnings:
            warn(warning)
        rejected = (
            rejected_candidates(resolved.run_dir, upto=resolved.library.iteration)
            if resolved.run_dir is not None
            else []
        )
        view = library_view(resolved, rejected)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(_json.dumps(view.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
    _print_library(view, from_run=resolved.run_dir is not None)


@dataclass
class _Marks:
    """What the rows of a library table used, for the legend under it."""

    n_rejected: int = 0
    any_scored: bool = False
    any_bound: bool = False
    methods: dict[str, str] = field(default_factory=dict)
    """Each effect estimator named in the table, and the asterisks that mark it."""


def _print_library(view: LibraryView, *, from_run: bool) -> None:
    """The view of `library show`: the table, its legend, the error statements, the rewrite
    effect and (for a run) the count of rejected candidates."""
    from rich.text import Text

    narrow = console.width < _NARROW
    table, marks = _library_table(view, narrow)
    console.print(table)
    console.print(_legend(marks, narrow), style="dim")
    for entry in view.error_statements:
        where = f" (iterations {', '.join(str(t) for t in entry.iterations)})" if entry.iterations else ""
        console.print(Text(f"error control{where}: {entry.statement}"))
    effect = view.rewrite_effect
    if effect is not None:
        console.print(
            Text(
                "rewrite effect (placebo vs baseline): Δerror "
                f"{delta_clause(effect.delta, effect.ci_low, effect.ci_high, effect.n, effect.p_value)}; "
                f"answer changed in {percent(effect.answer_change_rate)} of "
                f"{effect.n_answer_checked if effect.n_answer_checked is not None else '-'} checked rewrites; "
                f"length ×{number(effect.length_ratio, digits=2)}"
            )
        )
    if from_run:
        n_rejected = marks.n_rejected
        console.print(
            Text(
                f"{plural(n_rejected, 'rejected candidate')} from iterations up to {view.library.iteration} "
                + ("is" if n_rejected == 1 else "are")
                + " listed after the library."
            )
        )


def _library_table(view: LibraryView, narrow: bool) -> tuple[Table, _Marks]:
    """The library's biases as a table that fits 80 columns, and what its rows used."""
    from rich import box
    from rich.text import Text

    lib = view.library
    widths: dict[str, int | None] = dict(_COMPACT_WIDTHS) if narrow else dict.fromkeys(_COMPACT_WIDTHS)
    others = sum(_COMPACT_WIDTHS.values()) + len(_COMPACT_WIDTHS)  # one space between columns
    name_width = min(40, max(12, console.width - (others if narrow else others + 14)))
    table = Table(
        title=Text(
            f"{lib.name}, iteration {lib.iteration}: {plural(lib.size, 'bias')}"
            + (f" (judge {lib.target_model})" if lib.target_model else "")
            + f" [{view.path}]"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 0),  # the box's column separator is the one space between columns
    )
    # Fits 80 columns: the name column takes what the numbers leave; names and ids are wrapped
    # here at spaces and hyphens, never folded mid-word by the table. Narrow, the measured Δ vs
    # placebo gives way to the effect (the decisive comparison's reported Δ, usually vs placebo).
    table.add_column("bias\n(name,\nid)", width=name_width, no_wrap=True)
    table.add_column("origin,\ndecision", no_wrap=True, width=widths["decision"], min_width=_COMPACT_WIDTHS["decision"])
    table.add_column("n", justify="right", no_wrap=True, width=widths["n"])
    table.add_column("error\nbase→\npert", justify="right", no_wrap=True, width=widths["error"])
    table.add_column(
        "effect\npp vs\ncontrol\n[CI]", justify="right", width=widths["delta"], min_width=_COMPACT_WIDTHS["delta"]
    )
    table.add_column(
        "Δ pp vs\nbaseline\n[CI]", justify="right", width=widths["delta"], min_width=_COMPACT_WIDTHS["delta"]
    )
    if not narrow:
        table.add_column(
            "Δ pp vs\nplacebo\n[CI]", justify="right", width=widths["placebo"], min_width=_COMPACT_WIDTHS["placebo"]
        )
    table.add_column("p\n(adj)", justify="right", no_wrap=True, width=widths["p"])
    table.add_column("MDE\npp\n(n)", justify="right", no_wrap=True, width=widths["mde"])
    table.add_column("top\ndomain", width=widths["top"], min_width=_COMPACT_WIDTHS["top"], overflow="fold")
    marks = _Marks()
    for row in view.biases:
        table.add_row(*_row_cells(row, marks, narrow, name_width))
    return table, marks


def _row_cells(row: BiasRow, marks: _Marks, narrow: bool, name_width: int) -> list[Text]:
    """One bias's cells (`marks` notes what the legend must explain)."""
    from rich.text import Text

    marks.n_rejected += row.status == "rejected" and not row.in_library
    marks.any_scored = marks.any_scored or row.measure in ("p_rejected", "score")
    effect_text = "-"
    if row.effect_upper_bound is not None:  # rejected: what its looks exclude, not a two-sided interval
        marks.any_bound = True
        effect_text = f"{excluded_above(row.effect_upper_bound, unit='')}\n{row.decisive}"
    elif row.effect is not None:
        mark = marks.methods.setdefault(row.effect_method or "estimator not recorded", "*" * (len(marks.methods) + 1))
        effect_text = f"{pp(row.effect, unit='')}{mark}\n{row.decisive}" + (
            f"\n{ci_pp(row.effect_ci_low, row.effect_ci_high)}" if row.effect_ci_low is not None else ""
        )
    delta = pp(row.delta_vs_baseline, unit="") + (
        f"\n{ci_pp(row.ci_low_vs_baseline, row.ci_high_vs_baseline)}" if row.ci_low_vs_baseline is not None else ""
    )
    placebo = pp(row.delta_vs_placebo, unit="") + (
        f"\n{ci_pp(row.ci_low_vs_placebo, row.ci_high_vs_placebo)}" if row.ci_low_vs_placebo is not None else ""
    )
    p_text = p_value(row.decision_p) + (
        f"\n({p_value(row.decision_p_adjusted)})" if row.decision_p_adjusted is not None else ""
    )
    mde = "-" if row.mde_n is None else f"{pp(row.mde, unit='', missing='none')}\n({row.mde_n})"
    mark = {"p_rejected": "P ", "score": "S "}.get(row.measure or "", "")
    errors = (
        "-"
        if row.baseline_error is None
        else (f"{mark}{percent(row.baseline_error)}\n→ {percent(row.perturbed_error)}")
    )
    top = "-" if row.top_domain is None else f"{row.top_domain}\n{pp(row.top_domain_delta, unit='')}"
    name = Text(_wrapped(terminal_text(row.name), name_width, _NAME_LINES))
    name.append("\n" + _wrapped(row.id, name_width), style="dim")
    origin = "seed" if row.origin == "seed" else f"iter {row.origin_iteration}"
    decision = Text("" if row.status == "seed" else origin + "\n")
    decision.append(
        row.status + ("" if row.in_library else "\n(not in\nlibrary)"), style=_STATUS_STYLE.get(row.status, "")
    )
    cells = [name, decision, Text("-" if row.n is None else str(row.n)), Text(errors), Text(effect_text), Text(delta)]
    cells += [] if narrow else [Text(placebo)]
    return [*cells, Text(p_text), Text(mde), Text(top)]


def _legend(marks: _Marks, narrow: bool) -> Text:
    """What the table's columns and marks mean (only the marks it used)."""
    from rich.text import Text

    return (
        Text(
            "effect: the reported Δerror against the control that decided, with its confidence interval "
            "(" + "; ".join(f"{mark} {method}" for method, mark in marks.methods.items()) + "); "
            if marks.methods
            else ""
        )
        + Text(
            "< X: a candidate not accepted (rejected, unconfirmed): its one-sided 95 % upper bound, given how it stopped "
            "and that it was not accepted: an effect above X is excluded (none: no effect up to +100 pp is); its estimate "
            "and two-sided interval are in --json; "
            if marks.any_bound
            else ""
        )
        + Text(
            "Δ vs baseline / placebo: perturbed minus unperturbed / neutrally rewritten error on the items used, as "
            + ("measured (Δ vs placebo: `--json` or a wider terminal); p:" if narrow else "measured; p:")
            + " the decisive comparison's one-sided p (adjusted for its family); MDE: the smallest Δ that "
            "test detects with 80 % power at n items."
            + (
                " P: validated on score verdicts: the judge's mean probability of preferring the rejected "
                "response instead of its error, every Δ, CI, p and MDE of the row in probability points "
                "(one-sided paired t-test). S: a pointwise judge's score of the rejected response as a share "
                "of its scale, every Δ, CI and MDE of the row in percent of the scale (one-sided paired t-test; "
                "`library show RUN BIAS` gives it in scale points and SDs)."
                if marks.any_scored
                else ""
            )
        )
    )


def _show_bias(ref: str, bias: str, *, iteration: int | None, examples: int, as_json: bool) -> None:
    """`library show REF BIAS`: one bias with its evidence (`report.evidence`)."""
    import json as _json

    from ..api import bias_evidence
    from ._bias_view import print_bias

    try:
        detail = bias_evidence(ref, bias, iteration=iteration, examples=examples, on_warning=warn)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(_json.dumps(detail.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
    print_bias(detail, console)


def _diff_number(field: str, value: float | None, signed: bool = False) -> str:
    """A number of `library diff`: counts whole, rates and p-values to three decimals."""
    whole = field.rsplit(".", 1)[-1] in ("n", "n_excluded_invalid")
    return number(value, digits=0 if whole else 3, signed=signed)


def _row_summary(row: dict) -> str:
    parts = [_origin(row), row["status"]]
    if row["effect_upper_bound"] is not None:
        parts.append(f"Δ vs {row['decisive']} {excluded_above(row['effect_upper_bound'])} (95 % upper bound)")
        parts.append(f"p {p_value(row['decision_p'])}")
    elif row["effect"] is not None:
        parts.append(
            f"Δ vs {row['decisive']} {pp(row['effect'])} {ci_pp(row['effect_ci_low'], row['effect_ci_high'])}".rstrip()
        )
        parts.append(f"p {p_value(row['decision_p'])}")
    return ", ".join(parts)


@library_app.command("diff")
def library_diff(
    a: str = typer.Argument(..., metavar="A", help="Older library: " + _LIBRARY_REF_HELP),
    b: str = typer.Argument(..., metavar="B", help="Newer library: " + _LIBRARY_REF_HELP),
    as_json: bool = AS_JSON,
) -> None:
    """Compare two libraries.

    Two runs, two iterations of a run, or two files: added, removed,
    merged and changed biases, with the change in their validation numbers.

    Examples: `library diff runs/x@0 runs/x` (everything a run found), `library diff runs/x@1 runs/x@2`,
    `library diff runs/x runs/y`, `library diff bias_library/biasscope7.json runs/x`.
    """
    import json as _json

    from ..api.reports import bias_row, diff_refs, diff_to_json, resolve_library

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
        f"A: {ref_a.label} ({diff.a_name}, iteration {diff.a_iteration}, {plural(len(ref_a.library.biases), 'bias')})",
        f"B: {ref_b.label} ({diff.b_name}, iteration {diff.b_iteration}, {plural(len(ref_b.library.biases), 'bias')})",
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
    lines.append(f"unchanged: {plural(len(diff.unchanged), 'bias')}")
    typer.echo("\n".join(lines))


@app.command()
def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR|AUDIT_DIR"),
    out: Path | None = flag(
        "out", None, help="Output HTML file (default: DIR/report.html; with --bias DIR/bias-ID.html)."
    ),
    bias: str | None = flag(
        "bias", None, metavar="BIAS_ID", help="Write the page of this bias alone (an id or a name)."
    ),
    examples: int = _examples_option(
        help="Validation items shown per bias whose verdict it flipped (and half as many it did not).",
    ),
) -> None:
    """Write the HTML report of a run or an audit.

    One self-contained page (opens from disk, fetches nothing): run header,
    calls and tokens, biases per iteration, Δerror with CIs overall and per domain, and a panel
    per bias, linked from the library table: definition, numbers, reviews, provenance (the
    misjudged cases, the judge's explanations, the teacher's identification, the merged
    candidates) and examples from validation (original vs perturbed response, the verdicts).
    With --bias, the page of one bias. An audit directory (`bias-discovery audit --out DIR`) gets
    its measures, per domain, with examples."""
    from ..api import report as write_page
    from ..io import probe_writable

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
        path = write_page(run_dir, out, bias=bias, examples=examples, problems=problems)
    except BiasDiscoveryError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the report {out or run_dir / 'report.html'}: {exc.strerror or exc}")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        warn(
            f"{plural(len(problems), 'unreadable entry', 'unreadable entries')} left out of the report (listed on the page too): {shown}"
        )
    console.print(f"wrote {path} ({plural(path.stat().st_size, 'byte')})", highlight=False, soft_wrap=True)


@app.command()
def view(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    port: int = flag("port", 8765, min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
) -> None:
    """Serve a run's report while the run goes on.

    On 127.0.0.1, kept current as the run writes its files (and a page per bias at /bias/ID);
    Ctrl-C stops."""
    from ..api.reports import ReportServer, require_run_like

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

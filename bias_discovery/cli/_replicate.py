"""`replicate`: re-validate a run's accepted biases on fresh perturbations."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from ..errors import BiasDiscoveryError
from ..formatting import delta_clause, p_value, percent, percent_range, plural, pp
from ..options import DataOptions
from ._common import app, console, fail, figure_column, options_error, stacked
from ._findings import exit_on_findings, parse_fail_on, replication_findings
from ._options import ALLOW_OVERLAP, DATA_DIR, OVERWRITE, QUIET, SKIP_BAD_ROWS, TIMEOUT, fail_on_option, flag, option

if TYPE_CHECKING:
    from ..api import Replication


def _figures(value: str, bounds: tuple[str, str] | None, n: int | None, *, split: bool) -> str:
    """A figure over its CI and its n, one a line; `split`: the CI's bounds on two lines
    (its comma ends the first), so that the column is as narrow as one bound."""
    lines = [value]
    if bounds is not None:
        low, high = bounds
        lines += [f"[{low},", f"{high}]"] if split else [f"[{low}, {high}]"]
    if n is not None:
        lines.append(f"({n})")
    return stacked(*lines)


def _effect(delta: float | None, low: float | None, high: float | None, n: int | None, *, split: bool) -> str:
    """An effect in pp over its CI and n ("-" when there is none)."""
    if delta is None:
        return "-"
    bounds = None if low is None or high is None else (pp(low, unit=""), pp(high, unit=""))
    return _figures(pp(delta, unit=""), bounds, n, split=split)


def _points(points: float | None, low: float | None, high: float | None, n: int | None, *, split: bool) -> str:
    """A score shift in scale points over its CI and n ("-" when there is none)."""
    if points is None:
        return "-"
    bounds = None if low is None or high is None else (f"{low:+.2f}", f"{high:+.2f}")
    return _figures(f"{points:+.2f}", bounds, n, split=split)


_ONE_LINE_CIS = 110
"""From this many columns a pointwise judge's replication table gives each CI one line: its
four columns of figures then fit beside a bias name of about 24 characters."""


def _bias_table(r: Replication, width: int | None = None) -> Table:
    """One row per replicated bias: the run's effect beside the replication's (a pointwise
    judge's: its score shift in points and its secondary measure too). Each figure sits over
    its CI, n and p in a column that never wraps, in a table without side borders, so that at
    80 columns every figure is whole; below `_ONE_LINE_CIS` columns (`width`: the console's),
    a pointwise judge's four such columns fit beside a readable bias name only with each CI on
    two lines."""
    from rich import box

    from ..formatting import MEASURE_LABELS

    pointwise = r.judge_mode == "pointwise"
    split = pointwise and (console.width if width is None else width) < _ONE_LINE_CIS
    table = Table(title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_lines=True)
    table.add_column("bias", overflow="fold")
    figure_column(table, f"run:\neffect\npp vs\n{r.control}\n[CI]\n(n)\np adj")
    figure_column(table, "replica-\ntion:\neffect\npp\n[CI]\n(n)\np\n(p adj)")
    if pointwise:
        figure_column(table, "score\nshift,\npoints\n[CI]\n(n)")
        figure_column(table, f"secondary\n{MEASURE_LABELS[r.secondary_measure or 'error']}\npp\n[CI]\n(n)")
    table.add_column("repro-\nduced", no_wrap=True)
    for b in r.biases:
        name = Text(b.name)
        name.append("\n" + b.id, style="dim")
        original = _effect(b.original_delta, b.original_ci_low, b.original_ci_high, b.original_n, split=split)
        replicated = _effect(b.delta, b.ci_low, b.ci_high, b.n, split=split)
        cells = [
            name,
            Text(stacked(original, p_value(b.original_p_adjusted))),
            Text(stacked(replicated, p_value(b.p_value), f"({p_value(b.p_adjusted)})")),
        ]
        if pointwise:
            n = b.secondary.n if b.secondary is not None else None
            shift_n = b.score_shift.n if b.score_shift is not None else None  # held-out items, as the effect
            cells += [
                Text(_points(b.score_shift_points, b.score_shift_ci_low, b.score_shift_ci_high, shift_n, split=split)),
                Text(_effect(b.secondary_delta, b.secondary_ci_low, b.secondary_ci_high, n, split=split), style="dim"),
            ]
        table.add_row(*cells, Text("yes" if b.reproduced else "no", style="green" if b.reproduced else "yellow"))
    return table


@app.command()
def replicate(
    run_dir: Path = typer.Argument(..., metavar="RUN"),
    seed: int | None = flag(
        "seed", None, help="Seed of the fresh rewrites, swaps and test sample (default: the run's + 1)."
    ),
    data: str | None = flag(
        "data",
        None,
        help="Other test data: a named set (judgebench, demo ...) or a file (default: the run's test data).",
    ),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(
        DataOptions, "limit", help="A seeded sample of N test pairs (default: the run's test_limit)."
    ),
    biases: str | None = flag(
        "biases", None, help="ID,NAME,... to replicate instead of the accepted biases (seeds too)."
    ),
    temperature: float | None = flag(
        "temperature",
        None,
        min=0.0,
        help="Teacher sampling of the fresh rewrites (default: the run's, or 0.7 when it rewrote greedily).",
    ),
    out: Path | None = flag("out", None, help="Output directory (default: RUN/replications/seed-S)."),
    overwrite: bool = OVERWRITE,
    allow_overlap: bool = ALLOW_OVERLAP,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    quiet: bool = QUIET,
    timeout: float | None = TIMEOUT,
    fail_on: list[str] = fail_on_option("replication-failed"),
) -> None:
    """Re-validate a run's biases on fresh perturbations.

    Every accepted bias, with a new seed or new data,
    with the run's own rule, control and models; report per bias whether it reproduced, its Δ and p,
    and the reproduction rate. Writes replication.json (every call goes through the run's cache)."""
    from ..api import ReplicationOptions
    from ..api import replicate as replicate_biases
    from ..progress import progress_bar

    conditions = parse_fail_on(fail_on, ["replication-failed"])
    try:
        options = ReplicationOptions(
            seed=seed,
            data=data,
            data_dir=data_dir,
            limit=limit,
            biases=biases,
            temperature=temperature,
            out=out,
            overwrite=overwrite,
            allow_overlap=allow_overlap,
            skip_bad_rows=skip_bad_rows,
            timeout_s=timeout,
        )
        r = replicate_biases(run_dir, options, progress=None if quiet else progress_bar)
    except ValidationError as exc:
        fail(options_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    print_replication(r)
    exit_on_findings(replication_findings(r, conditions))  # no bias replicated: no finding


def print_replication(r: Replication) -> None:
    """What `replicate` prints: the replication's design, a row per bias, the measures' meaning,
    the reproduction rate with its CI, and where replication.json went."""
    from ..formatting import MEASURE_LABELS

    where = r.out
    assert where is not None  # replicate() always writes replication.json somewhere
    console.print(
        f"replication of {r.run_name} (seed {r.seed}, run seed {r.run_seed}; {r.data}, {plural(r.n_test, 'test pair')}"
        + (f" ({plural(r.skipped_rows, 'bad row')} skipped)" if r.skipped_rows else "")
        + "; "
        f"rewrites at temperature {r.temperature:g}; {r.acceptance} rule vs {r.control}, α = {r.alpha:g}, "
        f"{r.correction} across the {plural(r.n_replicated, 'replicated bias')})",
        highlight=False,
    )
    if not r.biases:
        console.print(
            "nothing to replicate: the run accepted no bias (name biases with --biases ID,... to replicate them anyway)",
            highlight=False,
        )
        console.print(f"wrote {where / 'replication.json'}", highlight=False, soft_wrap=True)
        return
    pointwise = r.judge_mode == "pointwise"
    console.print(_bias_table(r))
    methods = list(dict.fromkeys(m for b in r.biases for m in (b.original_method, b.method) if m))
    labels = " / ".join(dict.fromkeys(MEASURE_LABELS[b.record.effect.measure] for b in r.biases))
    console.print(
        f"effect: the reported {labels} against the control, estimated by {'; '.join(methods)}",
        highlight=False,
        soft_wrap=True,
    )
    if pointwise:
        console.print(
            f"pointwise judge (scale {r.scale}): each response scored alone; deciding measure {MEASURE_LABELS[r.measure]} "
            f"(in percent of the scale for a score); the secondary {MEASURE_LABELS[r.secondary_measure or 'error']} is "
            "reported against the same control on the items the decision saw, not decisive",
            highlight=False,
            soft_wrap=True,
        )
    if r.error_statement:
        console.print(f"error control: {r.error_statement}", highlight=False, soft_wrap=True)
    if r.rewrite_effect is not None:
        e = r.rewrite_effect
        console.print(
            f"rewrite effect (placebo vs baseline): Δerror {delta_clause(e.delta, e.ci_low, e.ci_high, e.n, e.p_value)}",
            highlight=False,
        )
    console.print(
        f"reproduction rate: {r.n_reproduced} of {r.n_replicated} = {percent(r.reproduction_rate)} "
        f"(95 % Wilson CI {percent_range(r.reproduction_ci_low, r.reproduction_ci_high)})",
        highlight=False,
    )
    console.print(f"wrote {where / 'replication.json'}", highlight=False, soft_wrap=True)

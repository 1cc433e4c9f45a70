"""`bias-discovery matrix`: validate every bias against every judge on the same items."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import ci_pp, count, p_value, plural, pp
from ..options import DataOptions
from ._common import app, console, fail, figure_column, options_error
from ._findings import exit_on_findings, matrix_findings, parse_fail_on
from ._options import ALLOW_OVERLAP, DATA_DIR, OVERRIDES, QUIET, SKIP_BAD_ROWS, fail_on_option, flag, option

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from ..api import MatrixResult


def print_matrix(result: MatrixResult, out: Path) -> None:
    """One row per judge x bias (then the jury's): Δ against the control with its CI, n, the
    matrix-adjusted p and the decision; the family statement; the judge comparisons that
    found a difference; the calls this invocation paid."""
    skipped = f", {plural(result.skipped_rows, 'bad row')} skipped" if result.skipped_rows else ""
    console.print(
        f"matrix {result.name}: {plural(len(result.judges), 'judge')} x {plural(len(result.biases), 'bias')} on "
        f"{result.data} ({plural(result.n_test, 'pair')}{skipped}); teacher {result.teacher}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(matrix_table(result))
    if result.reviews:
        console.print(
            f"reviews in the run ({result.library}): "
            + "; ".join(f"{bias} {r.decision} by {r.reviewer}" for bias, r in result.reviews.items()),
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    console.print(result.family_statement, highlight=False, soft_wrap=True)
    shown = [d for d in result.judge_comparisons if d.larger]
    if result.judge_comparisons:
        console.print(
            f"judge comparisons: {len(shown)} of {len(result.judge_comparisons)} show a difference"
            + "".join(
                f"; {d.bias}: {d.larger} larger ({pp(d.difference if d.larger == d.judge_a else -d.difference)}, "
                f"p adj {p_value(d.p_adjusted)})"
                for d in shown
            ),
            highlight=False,
            soft_wrap=True,
        )
        console.print(result.comparison_statement, highlight=False, soft_wrap=True)
    calls = result.calls
    console.print(
        f"calls paid now: teacher {count(calls.teacher)}, checker {count(calls.checker)}, "
        + ", ".join(f"{name} {count(k)}" for name, k in calls.judges.items())
        + " (cache hits not counted)",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"wrote {out / 'matrix.json'}, matrix.csv and matrix.html", highlight=False, soft_wrap=True)


def matrix_table(result: MatrixResult) -> Table:
    """One row per judge x bias (then the jury's): Δ over its CI, n, the matrix-adjusted p, the
    MDE and the decision, figures in columns that never wrap (whole at 80 columns)."""
    control = result.settings.control
    table = Table(title_justify="left")
    table.add_column("judge\nbias", overflow="fold")
    for header in (f"Δ pp vs {control}\n[CI]", "n", "p adj", "MDE pp"):
        figure_column(table, header)
    table.add_column("accepted", no_wrap=True)
    for cell in [*result.cells, *result.jury]:
        table.add_row(
            escape(f"{cell.judge}\n{cell.bias}"),
            f"{pp(cell.delta, unit='')}\n{ci_pp(cell.ci_low, cell.ci_high, missing='-')}"
            if cell.n
            else "-\n(no valid item)",
            str(cell.n),
            p_value(cell.p_adjusted),
            pp(cell.mde, unit=""),
            "yes" if cell.accepted else "no",
        )
    return table


@app.command()
def matrix(
    config: Path | None = typer.Argument(
        None, metavar="CONFIG", help="A matrix config (experiments/matrix-cpu.yaml); flags replace its parts."
    ),
    out: Path = flag(
        "out",
        ...,
        help="The matrix directory: the outputs and the call cache (rerun into it to continue after a kill, or to add a judge).",
    ),
    judges: str | None = flag(
        "judges",
        None,
        help="SPEC,SPEC,...: model specs (hf/smollm2) or per-judge YAML files (name, model, prompt ...).",
    ),
    library: str | None = flag(
        "library",
        None,
        help="seeds, seed library names (calm12, biasscope7+chen4), a run directory (RUN_DIR, RUN_DIR@N) or a library .json file.",
    ),
    biases: str | None = flag("biases", None, help="ID,NAME,...: only these biases of the library."),
    data: str | None = flag("data", None, help="The test set: a named set (demo:test, judgebench ...) or a file."),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="A seeded sample of N test pairs."),
    teacher: str | None = flag(
        "teacher", None, help="The model that writes the rewrites (default: the config's, else hf/smollm2)."
    ),
    allow_overlap: bool = ALLOW_OVERLAP,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    overrides: list[str] = OVERRIDES,
    quiet: bool = QUIET,
    fail_on: list[str] = fail_on_option("accepted"),
) -> None:
    """Validate every bias against every judge on the same items.

    The teacher rewrites each test pair once per bias and once neutrally (the placebo); every
    judge judges the same rewrites. Per judge and bias: Δerror vs the placebo with its CI, the
    p adjusted across the whole matrix, accepted yes/no, n and the smallest detectable Δ; a
    jury row (the judges' majority); per bias, the judges compared pairwise. Writes
    matrix.json, matrix.csv and matrix.html into --out, whose call cache makes a rerun free and
    a judge added later pay only its own calls."""
    from ..api import MatrixOptions
    from ..api import matrix as validate_matrix
    from ..progress import progress_bar

    conditions = parse_fail_on(fail_on, ["accepted"])
    try:
        options = MatrixOptions(
            out=out,
            judges=judges,
            library=library,
            biases=biases,
            data=data,
            data_dir=data_dir,
            limit=limit,
            teacher=teacher,
            allow_overlap=allow_overlap,
            skip_bad_rows=skip_bad_rows,
            overrides=overrides or [],
        )
        result = validate_matrix(config, options, progress=None if quiet else progress_bar)
    except ValidationError as exc:
        fail(options_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    print_matrix(result, out)
    exit_on_findings(matrix_findings(result, conditions))

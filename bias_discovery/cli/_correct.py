"""`bias-discovery correct`: a judge's aggregate corrected with a few human labels (PPI++), the
labels a CI width needs (--plan), or a bound from the validated biases (--bias-library)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..settings.correct import CorrectOptions
from ._common import app, console, err_console, fail, options_error, warn
from ._exit_codes import ExitCode
from ._options import CACHE, NO_CACHE, OVERWRITE, QUIET, flag, option

if TYPE_CHECKING:
    from ..api import CorrectedEstimate, CorrectionReport

_NAMES = {
    "judge_only": "judge only",
    "labels_only": "labels only",
    "ppi++": "PPI++",
    "ppi++_covariates": "PPI++ covariates",
    "difference": "difference",
}


_CO = CorrectOptions
_LOG: Any = typer.Argument(..., help="The verdict log (pairwise) or score table (pointwise).", show_default=False)


def _table(title: str, rows: list[tuple[str, CorrectedEstimate]], confidence: float) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("estimate")
    table.add_column("value", justify="right")
    table.add_column(f"{confidence:.0%} CI", justify="right")
    table.add_column("n labelled", justify="right")
    table.add_column("n judge", justify="right")
    for label, e in rows:
        table.add_row(
            escape(label),
            f"{e.estimate:.3f}",
            f"{e.ci_low:.3f} to {e.ci_high:.3f}",
            str(e.n_labelled),
            str(e.n_unlabelled),
        )
    return table


def _print(report: CorrectionReport) -> None:
    console.print(
        f"{escape(report.log)}: {escape(report.quantity)}; {report.n_items} items, {report.n_labelled} labelled",
        highlight=False,
    )
    if report.estimates:
        rows = [(_NAMES[e.method], e) for e in report.estimates]
        console.print(_table("estimates", rows, report.confidence))
    for group in report.groups:
        console.print(_table(group.group, [(_NAMES[e.method], e) for e in group.estimates], report.confidence))
    for diff in report.differences:
        rows = [(_NAMES[m], e) for m, e in zip(diff.of, diff.estimates)]
        console.print(_table(f"{diff.x} minus {diff.y}", rows, report.confidence))
    _print_trait_flags(report)
    for g in report.gap:
        console.print(
            f"gap ~ {escape(g.name)}: {g.estimate:+.3f} ({report.confidence:.0%} CI {g.ci_low:+.3f} to "
            f"{g.ci_high:+.3f}, n = {g.n}, flagged {g.n_flagged})",
            highlight=False,
        )
    if report.plan is not None:
        p = report.plan.plan
        ppi = "more than the pool" if p.n_ppi is None else str(p.n_ppi)
        console.print(
            f"plan: a {p.confidence:.0%} CI {p.target_width:g} wide needs {p.n_labels_only} labels alone, {ppi} "
            f"with PPI++ ({report.plan.correlation_from} correlation {p.correlation:.2f}, pool {p.pool}); "
            f"{report.plan.n_pilot} at hand, {len(report.plan.to_label)} to label",
            highlight=False,
        )
    for b in report.bias_bound:
        console.print(
            f"bias bound {escape(b.bias)}: effect {b.effect:+.3f} x share {b.n_flagged}/{b.n} = {b.bound:+.3f}"
            + ("" if b.bound_ci is None else f" (range {b.bound_ci[0]:+.3f} to {b.bound_ci[1]:+.3f})"),
            highlight=False,
        )
    if report.bias_bound:
        console.print("This bounds only the biases found, not the judge's error.", highlight=False)
    if report.estimates:
        console.print(escape(report.assumption), highlight=False)


def _print_trait_flags(report: CorrectionReport) -> None:
    for f in report.trait_flags:
        used = "adjusted for" if f.used else f"not adjusted for: {f.note}"
        invalid = f", {f.n_invalid} invalid" if f.n_invalid else ""
        console.print(
            f"flag {escape(f.bias)} ({escape(f.model)}): {f.n_carrying} of {f.n_responses} responses carry "
            f"the trait{invalid}; {escape(used)}",
            highlight=False,
        )
    calls = report.checker_calls
    if calls is not None:
        bound = "" if calls.max_calls is None else f" (budget {calls.max_calls} paid calls)"
        console.print(
            f"checker {escape(calls.model)}: {calls.requests} requests, {calls.cached} from the call cache, "
            f"paid {calls.paid.text()}{bound}",
            highlight=False,
        )


@app.command()
def correct(
    log: Path = _LOG,
    mode: str = option(_CO, "mode"),
    columns: str | None = option(_CO, "columns"),
    scale: str = option(_CO, "scale"),
    labels: Path | None = option(_CO, "labels"),
    label_id: str = option(_CO, "label_id"),
    label_column: str | None = option(_CO, "label_column"),
    covariate: list[str] = flag("covariates", [], help="A column to adjust for (repeatable; `length`: pairwise)."),
    bias_flag: list[str] = flag("flags", [], help="A 0/1 column per bias: the item carries its trait (repeatable)."),
    confidence: float = option(_CO, "confidence"),
    plan: bool = option(_CO, "plan"),
    target_width: float = option(_CO, "target_width"),
    assumed_correlation: float | None = option(_CO, "assumed_correlation"),
    bias_library: Path | None = option(_CO, "bias_library"),
    checker_model: str | None = option(_CO, "checker_model"),
    checker_max_calls: int | None = option(_CO, "checker_max_calls"),
    seed: int = option(_CO, "seed"),
    model: str | None = option(_CO, "model"),
    rubric: Path | None = option(_CO, "rubric"),
    instruction: str = option(_CO, "instruction"),
    out: Path | None = option(_CO, "out"),
    overwrite: bool = OVERWRITE,
    cache: Path | None = CACHE,
    no_cache: bool = NO_CACHE,
    quiet: bool = QUIET,
) -> None:
    """Correct a judge's score with a few human labels (PPI++).

    Prints the judge-only, labels-only and PPI++ estimates with their CIs and n (per model and
    X minus Y with a group column; covariate-adjusted with --covariates; the gap per bias with
    --flags, or with --checker-model flagging the validated biases of --bias-library). --plan:
    the labels a CI width needs and which items to label. Writes correct.json and correct.html
    to --out."""
    from ..api import BudgetReached
    from ..api import correct as run_correct
    from ..progress import progress_bar

    try:
        options = _CO.model_validate(
            dict(
                mode=mode,
                columns=columns,
                scale=scale,
                labels=labels,
                label_id=label_id,
                label_column=label_column,
                covariates=covariate,
                flags=bias_flag,
                confidence=confidence,
                plan=plan,
                target_width=target_width,
                assumed_correlation=assumed_correlation,
                bias_library=bias_library,
                checker_model=checker_model,
                checker_max_calls=checker_max_calls,
                seed=seed,
                model=model,
                rubric=rubric,
                instruction=instruction,
                out=out,
                overwrite=overwrite,
                cache=False if no_cache else (cache or True),
            )
        )
    except ValidationError as exc:
        fail(options_error(exc))
    try:
        output = run_correct(log, options, progress=None if quiet else progress_bar, on_warning=warn)
    except BudgetReached as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}; nothing written", highlight=False, soft_wrap=True)
        raise typer.Exit(ExitCode.BUDGET) from None
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print(output.report)
    if output.out is not None:
        console.print(f"wrote {escape(str(output.out))}/correct.json and correct.html", highlight=False)

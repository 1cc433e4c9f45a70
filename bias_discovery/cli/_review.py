"""`review`: a reviewer's decision about a bias of a run, kept with the run."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import BiasDiscoveryError
from ._common import app, console, fail
from ._options import AS_JSON, flag


@app.command()
def review(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    bias: str = typer.Argument(..., metavar="BIAS_ID", help="A bias of the run's newest library (its id or name)."),
    decision: str = flag(
        "decision",
        ...,
        metavar="confirmed|rejected|unsure",
        help="confirmed: the bias is real and shown; rejected: it is not; unsure: not decided yet.",
    ),
    note: str = flag("note", "", help="Why, in your words (shown with the decision)."),
    reviewer: str | None = flag(
        "reviewer",
        None,
        help="Who reviews (default: $BIAS_DISCOVERY_REVIEWER, else your login name).",
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Record a reviewer's decision about a bias.

    Kept in RUN_DIR/reviews.jsonl with who and when; the run's records are not changed. A bias
    reviewed again keeps every review, newest first; its newest decision is what `library show`,
    the report and the exports show, and `export ... --reviewed-only` exports only the biases
    whose decision is confirmed. Look at the evidence first: `library show RUN_DIR BIAS_ID`.
    """
    from typing import get_args

    from ..api import ReviewDecision, load_run

    choices = get_args(ReviewDecision)
    if decision not in choices:
        fail(f"--decision must be one of {', '.join(choices)}, got {decision!r}")
    try:
        run = load_run(run_dir)
        run.record.require_run()
        stored = run.review(bias, decision, note=note, reviewer=reviewer)  # type: ignore[arg-type]
        count = len(run.record.reviews.of(stored.bias_id))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(stored.model_dump_json(indent=2))
        return
    console.print(
        f"recorded in {run.record.reviews.path}: {stored.bias_id} {stored.decision} by {stored.reviewer} at "
        f"{stored.reviewed_at} ({count} review{'s' if count != 1 else ''} of this bias; "
        f"`bias-discovery library show {run_dir} {stored.bias_id}` shows them)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )

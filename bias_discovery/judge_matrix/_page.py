"""Render a bias matrix (matrix.json) as one self-contained HTML page: a heatmap of Δ with
the CI on hover and in the tables, the jury row, the judge comparisons.

Same rules as the run report: no external resource, no script, and text that models or users
wrote (bias names, judge names) reaches the page only as escaped Jinja2 values. The heatmap's
colours are computed here from numbers, never from text.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..formatting import ci_pp, count, p_value, percent, pp
from ..pages import MISSING, page_template
from ._records import MatrixCell, MatrixResult

__all__ = ["cell_colour", "render_matrix"]

TEMPLATE = Path(__file__).with_name("matrix_template.html")
FULL_SCALE = 0.3
"""|Δ| at which the heatmap's colour is fullest (30 pp); larger effects look the same."""


def cell_colour(delta: float | None) -> str:
    """The heatmap colour of a Δ: orange for a judge that errs more with the bias, blue for
    one that errs less, white at 0, fuller up to |Δ| = `FULL_SCALE`."""
    if delta is None:
        return "hsl(0, 0%, 96%)"
    strength = min(1.0, abs(delta) / FULL_SCALE)
    hue, saturation = (24, 90) if delta > 0 else (212, 70)
    return f"hsl({hue}, {saturation}%, {round(100 - 42 * strength)}%)"


def _hover(cell: MatrixCell, confidence: float) -> str:
    if not cell.n:
        return f"{cell.judge} on {cell.bias_name}: no item valid in both arms ({cell.n_excluded_invalid} left out)"
    ci = ci_pp(cell.ci_low, cell.ci_high, missing="no CI")
    return (
        f"{cell.judge} on {cell.bias_name}: Δ{cell.measure} {pp(cell.delta)} vs {cell.control}, "
        f"{percent(confidence, digits=0, unit=' %')} CI {ci}; n {cell.n}"
        + (f" ({cell.n_excluded_invalid} left out)" if cell.n_excluded_invalid else "")
        + f"; p {p_value(cell.p_value)}, adjusted {p_value(cell.p_adjusted)}; "
        + ("accepted" if cell.accepted else "not accepted")
        + f"; smallest detectable Δ {pp(cell.mde) if cell.mde is not None else 'none at this n'}"
    )


def _heat(cell: MatrixCell, confidence: float) -> dict[str, Any]:
    return {"cell": cell, "colour": cell_colour(cell.delta if cell.n else None), "hover": _hover(cell, confidence)}


def build_matrix_context(result: MatrixResult) -> dict[str, Any]:
    settings = result.settings
    confidence = settings.confidence
    by_key = {(c.judge, c.bias): c for c in [*result.cells, *result.jury]}
    rows = [
        {"name": name, "jury": False, "cells": [_heat(by_key[(name, b)], confidence) for b in result.biases]}
        for name in result.judges
    ]
    if result.jury:
        rows.append(
            {"name": "jury", "jury": True, "cells": [_heat(by_key[("jury", b)], confidence) for b in result.biases]}
        )
    return {
        "title": f"bias matrix {result.name}",
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "r": result,
        "rows": rows,
        "legend": [(d, cell_colour(d)) for d in (-FULL_SCALE, -0.1, 0.0, 0.1, FULL_SCALE)],
        "confidence_pct": percent(confidence, digits=0, unit=" %"),
        "settings": [
            ("acceptance", settings.acceptance),
            ("control", settings.control),
            ("alpha", f"{settings.alpha:g}"),
            ("correction", settings.correction),
            ("min_delta", f"{settings.min_delta:g}"),
            ("power (MDE)", f"{settings.power:g}"),
            ("positions", settings.positions),
            ("bootstrap resamples", count(settings.n_boot)),
            ("seed", str(result.seed)),
        ],
    }


def render_matrix(result: MatrixResult) -> str:
    """The matrix's page as one HTML string."""
    template = page_template(TEMPLATE)
    return template.render(missing=MISSING, **build_matrix_context(result))

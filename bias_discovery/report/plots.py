"""The report's plots, drawn with matplotlib (no pyplot, no global backend) into SVG.

Each function returns a ``data:image/svg+xml;base64,...`` URI for an ``<img>`` tag: the page
stays one self-contained file, and an SVG shown through ``<img>`` never runs scripts, so a
bias name a model wrote cannot do anything there. Mathtext is off (a ``$`` in a name is a
dollar sign) and text stays text (``svg.fonttype: none``), which keeps the files small.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..formatting import pp

__all__ = ["ForestRow", "biases_per_iteration_plot", "delta_forest_plot", "reliability_plot"]

ACCEPTED = "#1a7f37"
REJECTED = "#b35900"
SEED = "#8c959f"
CANDIDATES = "#6e7781"

_RC: dict[Any, Any] = {  # matplotlib types its keys as a Literal of every rc name
    "svg.fonttype": "none",
    "svg.hashsalt": "bias-discovery",
    "text.parse_math": False,
    "font.size": 9,
    "font.family": ["DejaVu Sans", "sans-serif"],
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
}


@dataclass
class ForestRow:
    """One bias in the Δerror plot: overall and per-domain deltas with their CIs; a rejected
    candidate with `upper` (its one-sided upper bound) shows that instead of its overall Δ."""

    label: str
    accepted: bool
    delta: float
    ci_low: float | None
    ci_high: float | None
    per_domain: dict[str, tuple[float, float | None, float | None]]
    upper: float | None = None


def _label(text: str, limit: int = 42) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _to_uri(figure) -> str:  # noqa: ANN001 - matplotlib Figure
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "bias-discovery"}, bbox_inches="tight")
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def biases_per_iteration_plot(
    iterations: Sequence[int], discovered: Sequence[int], validated: Sequence[int], seeds: int
) -> str:
    """Cumulative number of discovered biases per iteration (BiasScope's Figure 2), with the
    cumulative number of candidates validated for scale."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(8.5, 3.2))
        ax = figure.add_subplot()
        ax.plot(
            iterations,
            validated,
            marker="o",
            color=CANDIDATES,
            linestyle="--",
            linewidth=1.2,
            label="candidates validated (cumulative)",
        )
        ax.plot(
            iterations, discovered, marker="o", color=ACCEPTED, linewidth=2.2, label="biases discovered (cumulative)"
        )
        for x, y in zip(iterations, discovered):
            ax.annotate(
                str(y), (x, y), textcoords="offset points", xytext=(0, 6), ha="center", color=ACCEPTED, fontsize=8
            )
        ax.set_xlabel("iteration")
        ax.set_ylabel("biases")
        ax.set_title(f"Biases discovered per iteration (seed library: {seeds})", loc="left")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        top = max([*discovered, *validated, 1])
        ax.set_ylim(-0.05 * top, top * 1.25 + 0.5)
        if len(iterations) == 1:
            ax.set_xlim(iterations[0] - 1, iterations[0] + 1)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        return _to_uri(figure)


def delta_forest_plot(rows: Sequence[ForestRow], domains: Sequence[str], *, xlabel: str = "Δ error (pp)") -> str:
    """Δerror (perturbed - baseline) with its confidence interval, per bias: one panel for
    all test items, then one per domain (domains without a CI show the point only). In the
    first panel a rejected candidate with an upper bound shows it as a bar open to the left,
    ending at the bound (the effects its looks exclude lie to the right). `xlabel` names the
    measure (a pointwise judge's score shift is in percent of the scale)."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    columns = ["all test items", *domains]
    with matplotlib.rc_context(_RC):
        height = 1.2 + 0.34 * len(rows)
        width = min(3.2 + 2.1 * len(columns), 16.0)
        figure = Figure(figsize=(width, height))
        axes = figure.subplots(1, len(columns), sharey=True, squeeze=False)[0]
        ys = list(range(len(rows)))[::-1]
        values: list[float] = []
        bounds: list[tuple[int, float]] = []
        for column, ax in zip(columns, axes):
            for y, row in zip(ys, rows):
                point: tuple[float, float | None, float | None] | None
                if column == "all test items" and row.upper is not None:
                    bounds.append((y, row.upper))
                    values.append(min(row.upper, 1.0))
                    continue
                if column == "all test items":
                    point = (row.delta, row.ci_low, row.ci_high)
                else:
                    point = row.per_domain.get(column)
                if point is None:
                    continue
                delta, low, high = point
                color = ACCEPTED if row.accepted else REJECTED
                if low is not None and high is not None:
                    ax.errorbar(
                        [delta],
                        [y],
                        xerr=[[max(delta - low, 0)], [max(high - delta, 0)]],
                        fmt="o",
                        color=color,
                        ecolor=color,
                        elinewidth=1.4,
                        capsize=3,
                        markersize=5,
                    )
                    values += [low, high]
                else:
                    ax.plot([delta], [y], marker="o", color=color, markersize=5, markerfacecolor="white")
                values.append(delta)
            ax.axvline(0.0, color="#57606a", linewidth=0.8, linestyle=":")
            ax.set_title(_label(column, 24), loc="center")
            ax.set_xlabel(xlabel)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: pp(x, unit="", digits=0) if abs(x) > 1e-9 else "0"))
            ax.grid(axis="x", alpha=0.3)
        low = min(values + [-0.1])
        high = max(values + [0.1])
        pad = 0.08 * (high - low)
        for ax in axes:
            ax.set_xlim(low - pad, high + pad)
        for row_y, bound in bounds:  # open to the left: from the panel's edge to the bound
            axes[0].plot([low - pad, bound], [row_y, row_y], color=REJECTED, linewidth=1.4, linestyle="--")
            axes[0].plot([bound], [row_y], marker="|", color=REJECTED, markersize=9, markeredgewidth=1.6)
        axes[0].set_yticks(ys, [_label(r.label) for r in rows])
        axes[0].set_ylim(-0.7, len(rows) - 0.3)
        handles = [
            Line2D([], [], marker="o", color=ACCEPTED, linestyle="", label="accepted"),
            Line2D([], [], marker="o", color=REJECTED, linestyle="", label="rejected"),
        ]
        if bounds:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="|",
                    color=REJECTED,
                    linestyle="--",
                    label="rejected: effects above the bar's end excluded",
                )
            )
        figure.legend(handles=handles, loc="lower right", ncols=2, frameon=False, fontsize=8, bbox_to_anchor=(1.0, 1.0))
        return _to_uri(figure)


def reliability_plot(bins: Sequence[tuple[float, float, int, float | None, float | None]], title: str) -> str:
    """The reliability diagram of verdict probabilities: per confidence bin (low, high, n,
    mean confidence, accuracy) the accuracy against the mean confidence, the diagonal being a
    calibrated judge; each bin's verdict count is written above its point."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(4.6, 3.6))
        ax = figure.add_subplot()
        ax.plot([0.5, 1.0], [0.5, 1.0], color=SEED, linestyle="--", linewidth=1, label="calibrated")
        shown = [(c, a, n) for _, _, n, c, a in bins if n and c is not None and a is not None]
        if shown:
            ax.plot(
                [c for c, _, _ in shown],
                [a for _, a, _ in shown],
                marker="o",
                color=ACCEPTED,
                linewidth=1.8,
                label="judge",
            )
            for c, a, n in shown:
                ax.annotate(
                    str(n), (c, a), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7, color=CANDIDATES
                )
        for low, _, _, _, _ in bins:
            ax.axvline(low, color=SEED, alpha=0.15, linewidth=0.6)
        ax.set_xlim(0.48, 1.02)
        ax.set_ylim(-0.02, 1.08)
        ax.set_xlabel("confidence (probability of the verdict's label)")
        ax.set_ylabel("accuracy")
        ax.set_title(_label(title, 60), loc="left")
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        return _to_uri(figure)

"""The page of a correction (`correct --out DIR`: correct.html): the three estimates (judge
alone, labels alone, PPI++) and the covariate-adjusted one with their CIs in one plot, per
model and X minus Y, the gap per bias flag, the plan and the bias bound, in tables. One
self-contained file; every value reaches it escaped (`html.escape`)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from ..auditing.correction import CorrectionReport
from ..io import atomic_write_text
from ..stats import CorrectedEstimate
from .plots import _RC, _to_uri

__all__ = ["correction_view", "estimates_plot", "is_correction_dir", "render_correction", "write_correction_report"]

_NAMES = {
    "judge_only": "judge only",
    "labels_only": "labels only",
    "ppi++": "PPI++",
    "ppi++_covariates": "PPI++ with covariates",
    "difference": "difference",
}
_COLOURS = {"judge_only": "#b35900", "labels_only": "#6e7781", "ppi++": "#1a7f37", "ppi++_covariates": "#0969da"}


def estimates_plot(rows: Sequence[tuple[str, CorrectedEstimate]], xlabel: str) -> str:
    """Each estimate as a point with its CI bar, labelled with its method and n."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(6.4, 0.9 + 0.42 * len(rows)))
        axes = figure.subplots()
        ys = list(range(len(rows)))[::-1]
        for y, (_label, est) in zip(ys, rows):
            colour = _COLOURS.get(est.method, "#24292f")
            axes.errorbar(
                [est.estimate],
                [y],
                xerr=[[est.estimate - est.ci_low], [est.ci_high - est.estimate]],
                fmt="o",
                color=colour,
                capsize=3,
            )
        axes.set_yticks(ys, [label for label, _ in rows])
        axes.set_xlabel(xlabel)
        axes.grid(axis="x", color="#d0d7de", linewidth=0.6)
        return _to_uri(figure)


def _n(est: CorrectedEstimate) -> str:
    return f"{est.n_labelled} labelled + {est.n_unlabelled} judged only"


def _estimate_table(estimates: Sequence[CorrectedEstimate], confidence: float) -> str:
    head = f"<tr><th>estimate</th><th>value</th><th>{confidence:.0%} CI</th><th>n</th><th>λ</th></tr>"
    body = "".join(
        f"<tr><td>{escape(_NAMES[e.method])}</td><td>{e.estimate:.4f}</td>"
        f"<td>{e.ci_low:.4f} to {e.ci_high:.4f}</td><td>{escape(_n(e))}</td>"
        f"<td>{'' if e.lam is None else f'{e.lam:.2f}'}</td></tr>"
        for e in estimates
    )
    return f"<table>{head}{body}</table>"


def _trait_flags(report: CorrectionReport) -> list[str]:
    """Which responses the checker model said carry each bias's trait, and what that cost."""
    if not report.trait_flags:
        return []
    parts = ["<h2>Trait flags from the checker model</h2><table><tr><th>bias</th><th>model</th>"]
    parts.append("<th>carry the trait</th><th>invalid</th><th>adjusted for</th></tr>")
    for f in report.trait_flags:
        used = "yes" if f.used else f"no: {f.note}"
        parts.append(
            f"<tr><td>{escape(f.bias)}</td><td>{escape(f.model)}</td><td>{f.n_carrying}/{f.n_responses}</td>"
            f"<td>{f.n_invalid}</td><td>{escape(used)}</td></tr>"
        )
    parts.append("</table>")
    calls = report.checker_calls
    if calls is not None:
        parts.append(
            f"<p>{calls.requests} yes/no requests, {calls.cached} answered by the call cache; paid "
            f"{escape(calls.paid.text())}.</p>"
        )
    return parts


def _sections(report: CorrectionReport) -> list[str]:
    parts = _trait_flags(report)
    for group in report.groups:
        parts.append(f"<h3>{escape(group.group)} ({group.n_items} items)</h3>")
        parts.append(_estimate_table(group.estimates, report.confidence))
    for diff in report.differences:
        parts.append(f"<h3>{escape(diff.x)} minus {escape(diff.y)}</h3>")
        rows = [e.model_copy(update={"method": m}) for e, m in zip(diff.estimates, diff.of)]
        parts.append(_estimate_table(rows, report.confidence))
    if report.gap:
        parts.append("<h2>The judge-minus-human gap per bias flag</h2><table><tr><th>term</th><th>Δ gap</th>")
        parts.append(f"<th>{report.confidence:.0%} CI</th><th>n</th><th>flagged</th></tr>")
        for g in report.gap:
            parts.append(
                f"<tr><td>{escape(g.name)}</td><td>{g.estimate:+.4f}</td><td>{g.ci_low:+.4f} to {g.ci_high:+.4f}</td>"
                f"<td>{g.n}</td><td>{g.n_flagged}</td></tr>"
            )
        parts.append("</table>")
    if report.plan is not None:
        p = report.plan.plan
        parts.append(
            f"<h2>Plan</h2><p>For a {p.confidence:.0%} CI {p.target_width:g} wide ({report.plan.correlation_from} "
            f"judge-human correlation {p.correlation:.2f}, SD {p.sd:.3f}, pool {p.pool}): labels only need "
            f"{p.n_labels_only}, PPI++ needs {p.n_ppi if p.n_ppi is not None else 'more than the pool'}; "
            f"{report.plan.n_pilot} at hand, {len(report.plan.to_label)} to label (to_label.csv, seed "
            f"{report.plan.seed}).</p>"
        )
    if report.bias_bound:
        parts.append("<h2>Bias bound (only the biases found; not the judge's error)</h2><table>")
        parts.append("<tr><th>bias</th><th>effect</th><th>share</th><th>bound</th><th>range</th></tr>")
        for b in report.bias_bound:
            rng = "" if b.bound_ci is None else f"{b.bound_ci[0]:+.4f} to {b.bound_ci[1]:+.4f}"
            parts.append(
                f"<tr><td>{escape(b.bias)}</td><td>{b.effect:+.4f}</td><td>{b.n_flagged}/{b.n}</td>"
                f"<td>{b.bound:+.4f}</td><td>{rng}</td></tr>"
            )
        parts.append("</table>")
    return parts


def correction_view(name: str, report: CorrectionReport) -> dict[str, Any]:
    """One correction as a section of the run's report (the template escapes every value):
    its estimates plotted and tabled, the checker's trait flags and the gap."""
    rows = [(_NAMES[e.method], e) for e in report.estimates]
    return {
        "name": name,
        "quantity": report.quantity,
        "log": report.log,
        "n_items": report.n_items,
        "n_labelled": report.n_labelled,
        "confidence": f"{report.confidence:.0%}",
        "plot_uri": estimates_plot(rows, report.quantity) if rows else None,
        "estimates": [
            {
                "name": label,
                "value": f"{e.estimate:.4f}",
                "ci": f"{e.ci_low:.4f} to {e.ci_high:.4f}",
                "n": _n(e),
                "lam": "" if e.lam is None else f"{e.lam:.2f}",
            }
            for label, e in rows
        ],
        "trait_flags": [
            {
                "bias": f.bias,
                "carrying": f"{f.n_carrying}/{f.n_responses}",
                "used": "yes" if f.used else f"no: {f.note}",
            }
            for f in report.trait_flags
        ],
        "gap": [
            {"name": g.name, "value": f"{g.estimate:+.4f}", "ci": f"{g.ci_low:+.4f} to {g.ci_high:+.4f}", "n": g.n}
            for g in report.gap
        ],
        "assumption": report.assumption,
    }


def render_correction(report: CorrectionReport) -> str:
    """correct.html: the estimates plotted, then every table of the record."""
    rows = [(_NAMES[e.method], e) for e in report.estimates]
    for group in report.groups:
        rows += [(f"{group.group}: {_NAMES[e.method]}", e) for e in group.estimates]
    plot = f'<img alt="the estimates with their CIs" src="{estimates_plot(rows, report.quantity)}">' if rows else ""
    title = f"Corrected: {report.quantity}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}"
        "td,th{padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>{escape(title)}</h1><p>{escape(report.log)}: {report.n_items} items, {report.n_labelled} with a "
        f"human label; {report.n_without_judge} without a valid judge value left out.</p>"
        f"<h2>Estimates</h2>{plot}{_estimate_table(report.estimates, report.confidence)}"
        f"<p><em>{escape(report.assumption)}</em></p>{''.join(_sections(report))}</body></html>"
    )


CORRECT_FILE = "correct.json"
PAGE_FILE = "correct.html"


def is_correction_dir(path: Path) -> bool:
    """Whether `path` is a `correct --out` directory (it holds correct.json)."""
    return (Path(path) / CORRECT_FILE).is_file()


def write_correction_report(root: Path | str, out: Path | str | None = None) -> Path:
    """correct.html of a `correct --out` directory, drawn again from its correct.json (errors
    name the file and the field)."""
    from ..run import JsonArtifact

    record = JsonArtifact(Path(root) / CORRECT_FILE, CorrectionReport).read()
    target = Path(out) if out is not None else Path(root) / PAGE_FILE
    atomic_write_text(target, render_correction(record))
    return target

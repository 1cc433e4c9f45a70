"""Render an audit directory (`bias-discovery audit --out DIR`) as one self-contained HTML page.

Same rules as the run report: no external resource, no script, and model-written text (bias
definitions from library files, rewritten responses, the judge's explanations) reaches the
page only as escaped Jinja2 values.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..auditing.display import judge_measure_lines, metric_rows, rows_kind
from ..auditing.output import read_audit
from ..auditing.records import AuditReport, BiasAudit
from ..formatting import count
from ..io import atomic_write_text, read_jsonl
from ..pages import MISSING, page_template
from .evidence import word_diff
from .plots import reliability_plot

__all__ = ["render_audit", "write_audit_report"]

TEMPLATE = Path(__file__).with_name("audit_template.html")

KEY_MEASURES = {
    "position": ("z", "pb", "acc_both", "q_hat"),
    "length": ("lb", "spearman_rho", "acc_both", "q_hat"),
    "perturbation": ("delta_error", "rr", "asr", "cr"),
    "pointwise:perturbation": ("score_shift", "score_unchanged", "delta_error", "score_repeat_unchanged"),
    "pointwise:length": ("score_length_slope", "score_length_rho", "score_shift@x3", "score_unchanged"),
}
"""The measures of each kind shown per domain and in the summary."""

MAX_EXAMPLES = 3


def _read_if_present(path: Path) -> list[dict[str, Any]]:
    """A JSONL file of the audit directory, [] when absent (an audit of built-ins only has no
    perturbed.jsonl); a malformed line is a DataError naming the file and line."""
    return read_jsonl(path) if path.is_file() else []


def _pick(rows: list[dict[str, str]], fields: tuple[str, ...]) -> list[dict[str, str]]:
    by_field = {r["field"]: r for r in rows}
    return [by_field[f] for f in fields if f in by_field]


def _examples(
    entry: BiasAudit, report: AuditReport, perturbed: list[dict], judgments: list[dict]
) -> list[dict[str, Any]]:
    """Pairs where the judge preferred the perturbed rejected response (then other valid
    rewrites), one per pair: original and rewrite side by side, with the judge's explanation."""
    if entry.kind != "perturbation":
        return []
    rewrites = {p["pair_id"]: p for p in perturbed if p.get("bias_id") == entry.id and p.get("valid")}
    mine = [j for j in judgments if j.get("condition") == entry.id and j.get("seed") == report.settings.seed]
    mine.sort(
        key=lambda j: (j.get("picked") != "rejected", -(j.get("score") or 0))
    )  # the judge fell for it first (pointwise: highest score)
    out: list[dict[str, Any]] = []
    shown: set[str] = set()
    for j in mine:
        p = rewrites.get(j.get("pair_id"))
        if p is None or p["pair_id"] in shown:
            continue  # one example per pair (a mitigation judges it in both orders)
        shown.add(p["pair_id"])
        left, right = word_diff(p["original_rejected"], p["perturbed_rejected"])
        out.append(
            {
                "pair_id": p["pair_id"],
                "domain": p.get("domain", ""),
                "question": p.get("question", ""),
                "left": left,
                "right": right,
                "order": j.get("order", "").replace("_", " "),
                "picked": j.get("picked") or (f"score {j['score']:g}" if j.get("score") is not None else "invalid"),
                "explanation": j.get("explanation", ""),
            }
        )
        if len(out) == MAX_EXAMPLES:
            break
    return out


def _card(entry: BiasAudit, report: AuditReport, perturbed: list[dict], judgments: list[dict]) -> dict[str, Any]:
    schemes = [("none", entry)] + ([(report.settings.mitigation, entry.mitigated)] if entry.mitigated else [])
    kind = rows_kind(entry.kind, report.settings.mode)
    tables = [metric_rows(m, kind, missing=MISSING) for _, m in schemes]
    rows = []
    for i, first in enumerate(tables[0]):
        rows.append({"label": first["label"], "meaning": first["meaning"], "cells": [t[i] for t in tables]})
    domains = []
    for domain, metrics in entry.per_domain.items():
        cells = _pick(metric_rows(metrics, kind, missing=MISSING), KEY_MEASURES[kind])
        domains.append({"domain": domain, "cells": cells})
    key_labels = [r["label"] for r in _pick(tables[0], KEY_MEASURES[kind])]
    return {
        "entry": entry,
        "schemes": [{"name": name, "calls_per_verdict": m.calls_per_verdict, "calls": m.calls} for name, m in schemes],
        "rows": rows,
        "domains": domains,
        "key_labels": key_labels,
        "examples": _examples(entry, report, perturbed, judgments),
    }


def _summary(entry: BiasAudit, report: AuditReport) -> dict[str, Any]:
    kind = rows_kind(entry.kind, report.settings.mode)
    plain = _pick(metric_rows(entry, kind, missing=MISSING), KEY_MEASURES[kind])[:2]
    mitigated = (
        _pick(metric_rows(entry.mitigated, kind, missing=MISSING), KEY_MEASURES[kind])[:2] if entry.mitigated else []
    )
    flags = [f for f in ("position" if entry.position_flag else "", "length" if entry.length_flag else "") if f]
    return {"entry": entry, "plain": plain, "mitigated": mitigated, "flags": flags}


def _yes_no(value: bool | None) -> str:
    return "not recorded" if value is None else ("yes" if value else "no")


def _reliability(report: AuditReport) -> str | None:
    """The reliability diagram's SVG URI, when the verdicts carried probabilities."""
    cal = report.calibration
    if cal is None or not cal.n_verdicts:
        return None
    bins = [(b.low, b.high, b.n, b.confidence, b.accuracy) for b in cal.bins]
    return reliability_plot(bins, f"Reliability of {report.model}'s verdict probabilities ({cal.n_verdicts} verdicts)")


def build_audit_context(root: Path, report: AuditReport) -> dict[str, Any]:
    perturbed = _read_if_present(root / "perturbed.jsonl")
    judgments = _read_if_present(root / "judgments.jsonl")
    s = report.settings
    return {
        "title": f"audit of {report.model}",
        "root": str(root),
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "report": report,
        "settings": [
            ("repeats K", str(s.repeats)),
            ("mitigation", s.mitigation),
            ("temperature", "not recorded" if s.temperature is None else f"{s.temperature:g}"),
            ("ties allowed", _yes_no(s.allow_tie)),
            ("reasoning", _yes_no(s.reasoning)),
            ("max tokens", "not recorded" if s.max_tokens is None else str(s.max_tokens)),
            ("seed", str(s.seed)),
            ("bootstrap resamples", count(s.n_boot)),
        ],
        "judge_lines": judge_measure_lines(report, missing=MISSING),
        "reliability": _reliability(report),
        "summary": [_summary(e, report) for e in report.biases],
        "cards": [_card(e, report, perturbed, judgments) for e in report.biases],
    }


def render_audit(root: Path | str) -> str:
    """Read an audit directory and return its report as one HTML string."""
    root = Path(root)
    report = read_audit(root)
    template = page_template(TEMPLATE)
    return template.render(**build_audit_context(root, report))


def write_audit_report(root: Path | str, out: Path | str | None = None) -> Path:
    """Render the audit in `root` to `out` (default ``DIR/report.html``), atomically."""
    out = Path(out) if out is not None else Path(root) / "report.html"
    atomic_write_text(out, render_audit(root))
    return out

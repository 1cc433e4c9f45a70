"""Render a run directory as one self-contained HTML page (`bias-discovery report`).

The page has no external resource: CSS is inline, plots are SVG data URIs, and the static
report has no script at all (the live viewer adds one small poller of its own).

Everything a model wrote (bias names, definitions, responses, explanations) is untrusted.
It reaches the page only as Jinja2 *values* under ``autoescape=True``: never as template
source, never through ``|safe``/``Markup``, never inside a ``<script>`` block. The word diff
of the evidence is passed as (kind, text) segments that the template wraps in
``<ins>``/``<del>``, so the diff markup is ours and the text inside it is escaped.
"""

from __future__ import annotations

import difflib
import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import formatting
from ..formatting import percent, plural
from ..io import atomic_write_text
from ..library import Bias, RewriteEffect
from ..pages import MISSING, page_template
from ..run import ValidationReport
from .data import RunData, bias_row, collect_run
from .plots import ForestRow, biases_per_iteration_plot, delta_forest_plot

__all__ = ["render_report", "render_run", "write_report", "word_diff"]

TEMPLATE = Path(__file__).with_name("template.html")


# --------------------------------------------------------------------------------------------
# Formatting (filters): numbers go through `bias_discovery.formatting`, as in the terminal,
# with the page's en dash for a missing value (`bias_discovery.pages`)
# --------------------------------------------------------------------------------------------


def when(ts: Any) -> str:
    if ts is None:
        return MISSING
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: Any) -> str:
    return formatting.duration(seconds, missing=MISSING)


# --------------------------------------------------------------------------------------------
# Word diff
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s+|[^\s]+")


def _merge(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, text in segments:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        elif text:
            out.append((kind, text))
    return out


def word_diff(original: str, perturbed: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Word-level diff: (segments of the original, segments of the perturbed response), each
    a list of (``eq`` | ``del`` | ``ins``, text). Texts are raw: the template escapes them."""
    a, b = _TOKEN.findall(original), _TOKEN.findall(perturbed)
    left: list[tuple[str, str]] = []
    right: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            left.append(("eq", "".join(a[i1:i2])))
            right.append(("eq", "".join(b[j1:j2])))
        else:
            if i2 > i1:
                left.append(("del", "".join(a[i1:i2])))
            if j2 > j1:
                right.append(("ins", "".join(b[j1:j2])))
    return _merge(left), _merge(right)


# --------------------------------------------------------------------------------------------
# View model
# --------------------------------------------------------------------------------------------


def _spec(model: Any) -> str:
    if isinstance(model, dict):
        spec = f"{model.get('provider', '?')}/{model.get('model', '?')}"
        urls = model.get("base_url")
        if isinstance(urls, list):  # replicas
            urls = ", ".join(str(u) for u in urls)
        return spec + (f" @ {urls}" if urls else "")
    return "–" if model is None else str(model)


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _data_desc(config: dict[str, Any], role: str) -> str:
    name = _get(config, f"data.{role}")
    limit = _get(config, f"data.{role}_limit")
    if name is None:
        return "–"
    return f"{name}" + (f" (first {plural(limit, 'pair')})" if limit else "")


def _settings(config: dict[str, Any]) -> list[tuple[str, str]]:
    sequential = bool(_get(config, "validate.sequential.enabled"))
    items = [
        ("seed library", _get(config, "seed_library")),
        ("max iterations", _get(config, "max_iterations")),
        ("seed", _get(config, "seed")),
        ("judge positions", _get(config, "judge.positions")),
        ("deeper explain", _get(config, "deeper_explain.enabled")),
        ("merge", _join(("top_k", _get(config, "merge.top_k")), ("similarity ≥", _get(config, "merge.similarity_threshold")))),
        (
            "validation",
            _join(
                ("", _get(config, "validate.when")),
                ("acceptance", _get(config, "validate.acceptance")),
                ("α", _get(config, "validate.alpha")),
                ("correction", _get(config, "validate.correction")),
                ("min Δ", _get(config, "validate.min_delta")),
                ("max candidates", _get(config, "validate.max_candidates")),
            ),
        ),
        (
            "validation controls",
            _join(
                ("control", _get(config, "validate.control")),
                ("answer check", _get(config, "validate.answer_check")),
                ("error control per", _get(config, "validate.error_control")),
                ("seeds validated", _get(config, "validate.seeds")),
            ),
        ),
        (
            "sequential looks",
            _join(
                ("", _get(config, "validate.sequential.looks") if sequential else "off"),
                ("spending", _get(config, "validate.sequential.spending") if sequential else None),
                ("futility <", _get(config, "validate.sequential.futility") if sequential else None),
                ("effect after an early acceptance", _get(config, "validate.sequential.effect") if sequential else None),
            ),
        ),
    ]
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return "on" if v else "off"
        return "–" if v is None or v == "" else str(v)

    return [(k, show(v)) for k, v in items]


def _join(*pairs: tuple[str, Any]) -> str:
    return ", ".join(f"{k} {v}".strip() for k, v in pairs if v is not None)


def _domain_rows(bias: Bias, record: dict[str, Any] | None) -> list[dict[str, Any]]:
    v = bias.validation
    if v is None:
        return []
    rec_domains = (record or {}).get("per_domain") or {}
    rows = []
    for domain, d in sorted(v.per_domain.items()):
        r = rec_domains.get(domain) or {}  # libraries from before the shared comparison kept no CI per domain
        rows.append(
            {
                "domain": domain,
                "n": d.n,
                "baseline": d.control_error,
                "perturbed": d.arm_error,
                "delta": d.delta,
                "ci_low": d.ci_low if d.ci_low is not None else r.get("ci_low"),
                "ci_high": d.ci_high if d.ci_high is not None else r.get("ci_high"),
                "p": d.p_value,
            }
        )
    return rows


def _evidence(run: RunData, bias: Bias) -> list[dict[str, Any]]:
    items = []
    for e in bias.evidence:
        case = run.cases.get((e.pair_id, e.bias_injected or ""), {})
        original = e.original_rejected if e.original_rejected is not None else case.get("original_rejected")
        if original is not None:
            left, right = word_diff(str(original), e.perturbed_response)
        else:
            left, right = None, [("eq", e.perturbed_response)]
        items.append(
            {
                "pair_id": e.pair_id,
                "bias_injected": e.bias_injected,
                "order": e.order,
                "question": case.get("question"),
                "chosen": case.get("chosen"),
                "domain": case.get("domain"),
                "left": left,
                "right": right,
                "changed": any(kind != "eq" for kind, _ in right) or any(kind != "eq" for kind, _ in (left or [])),
                "explanation": e.judge_explanation,
                "deeper": e.deeper_explanation,
            }
        )
    return items


def _card(run: RunData, bias: Bias, in_library: bool) -> dict[str, Any]:
    record = run.records.get(bias.id)
    return {
        "bias": bias,
        "row": bias_row(bias, in_library=in_library),
        "domains": _domain_rows(bias, record),
        "record": record,
        "evidence": _evidence(run, bias),
    }


def _forest_rows(run: RunData, biases: Sequence[Bias]) -> tuple[list[ForestRow], list[str]]:
    """Per bias its reported effect (honest after a sequential stop) and, per domain, the
    comparison vs the baseline on the items used."""
    rows, domains = [], set()
    for bias in biases:
        v = bias.validation
        if v is None:
            continue
        per_domain = {}
        for d in _domain_rows(bias, run.records.get(bias.id)):
            per_domain[d["domain"]] = (d["delta"], d["ci_low"], d["ci_high"])
            domains.add(d["domain"])
        e = v.effect
        rows.append(ForestRow(label=bias.name, accepted=v.accepted, delta=e.delta, ci_low=e.ci_low, ci_high=e.ci_high, per_domain=per_domain))
    return rows, sorted(domains)


STOP_WORDS = {
    "efficacy": "clearly biased: stopped early for efficacy",
    "futility": "hopeless: stopped early for futility",
    "complete": "every test item",
}
LOOK_WORDS = {
    "continue": "go on",
    "efficacy": "stop: biased",
    "futility": "stop: futile",
    "final": "decided with the family",
}


def _answer_check_text(reports: list[ValidationReport], effect: RewriteEffect | None, config: dict[str, Any]) -> str:
    """How the rewrites' final answers were checked in this run: how many were read
    mechanically, which model checked the rest, and whether that model was the rewriter."""
    if _get(config, "validate.answer_check") is False:
        return "off: rewrites that reach the chosen answer are not excluded"
    records = [c for r in reports for c in r.candidates]
    extracted = sum(c.n_answer_extracted for c in records) + ((effect.n_answer_extracted or 0) if effect else 0)
    checked = sum(c.n_answer_checked for c in records) + ((effect.n_answer_checked or 0) if effect else 0)
    last = reports[-1] if reports else None
    checker = last.checker if last is not None else None
    if checker is None:  # a run from before the checker was recorded
        return "by the equivalence prompt (checker not recorded in this run's files)"
    text = (
        f"final answers read mechanically where the item states them in a fixed form ({extracted} of {checked} "
        f"checked rewrites); the rest by {checker} with the equivalence prompt"
    )
    if last is not None and last.self_checked:
        text += (
            "; self-checked: that model is the teacher that wrote the rewrites (no other model was configured; "
            "set validate.checker for an independent check)"
        )
    return text


def _configured_error_statement(config: dict[str, Any]) -> str:
    """The error statement of a run's settings, before any validation has written its own."""
    from ..config import RunConfig
    from ..judging import measure_of
    from ..stages.family import FamilySettings

    try:
        resolved = RunConfig.model_validate(config)
    except ValueError:
        return "–"
    family = FamilySettings.planned(
        resolved.validate_, resolved.planned_validations,
        measure=measure_of(resolved.judge),
    )
    return family.error_statement(resolved.validate_.decision_control)


def _validation_summary(run: RunData) -> dict[str, Any]:
    """The report's Validation section: the rule, the control, error control, looks, power."""
    reports = [info.validation for info in run.iterations if info.validation is not None]
    last = reports[-1] if reports else None
    config = run.config
    control = last.control if last is not None else (_get(config, "validate.control") or "baseline")
    if last is not None and last.candidates:
        rule = last.candidates[0].decisive_comparison.rule
    else:
        rule = f"{_get(config, 'validate.acceptance') or 'paired'} vs {control} (no candidate validated yet)"
    error_text = last.error_statement if last is not None else _configured_error_statement(config)
    plan = last.sequential if last is not None else None
    if plan is not None and len(plan.looks) > 1:
        looks = (
            f"growing slices of {', '.join(str(n) for n in plan.looks)} test items; α spent "
            f"{', '.join(f'{x:.2g}' for x in plan.levels)} ({plan.spending.replace('_', '-')}); a candidate stops "
            f"early when clearly biased or when its conditional power falls below {percent(plan.futility, digits=0, unit=' %')}"
        )
    elif plan is not None:
        looks = f"one look at all {plural(plan.n_total, 'test item')}"
    else:
        looks = "every test item (one look)"
    power_rows = []
    for r in reports:
        power_rows.append(
            {
                "iteration": r.iteration,
                "candidates": len(r.candidates),
                "accepted": len(r.accepted),
                "alpha": f"{r.alpha_family:.3g}" if r.alpha_family is not None else f"{r.alpha:.3g}",
                "mde": r.mde,
                "mde_missing": "none at this n" if r.mde_n is not None else "–",
                "mde_n": r.mde_n,
                "mde_alpha": f"{r.mde_alpha:.3g}" if r.mde_alpha is not None else "–",
            }
        )
    power = last.power if last is not None and last.power is not None else 0.8
    return {
        "validation_rule": rule,
        "control": control,
        "error_control_text": error_text,
        "answer_check_text": _answer_check_text(reports, run.rewrite_effect, config),
        "looks_text": looks,
        "power_rows": [row for row in power_rows if row["mde_n"] is not None],
        "power_pct": percent(power, digits=0, unit=" %"),
    }


def build_context(run: RunData, *, live: bool = False, version: str = "") -> dict[str, Any]:
    config = run.config
    state = run.state
    latest = run.latest
    discovered = run.discovered
    validated = [b for b in discovered if b.validation is not None] + [b for b in run.rejected if b.validation is not None]
    validated.sort(key=lambda b: -(b.validation.effect.delta if b.validation else 0.0))

    per_iteration_uri = None
    if run.libraries:
        xs = [lib.iteration for lib in run.libraries]
        found = [sum(1 for b in lib.biases if b.origin.kind == "discovered") for lib in run.libraries]
        by_iter = {info.iteration: info for info in run.iterations}
        cumulative, total = [], 0
        for x in xs:
            info = by_iter.get(x)
            total += (info.validated or 0) if info else 0
            cumulative.append(total)
        seeds = sum(1 for b in run.libraries[0].biases if b.origin.kind == "seed")
        per_iteration_uri = biases_per_iteration_plot(xs, found, cumulative, seeds)

    forest_uri = None
    forest_rows, domains = _forest_rows(run, validated)
    if forest_rows:
        forest_uri = delta_forest_plot(forest_rows, domains)

    summary_rows = [bias_row(b) for b in (latest.biases if latest else [])]
    summary_rows += [bias_row(b, in_library=False) for b in run.rejected]
    seconds = (state.updated_at - state.started_at) if state else None

    return {
        "live": live,
        "version": version,
        "nonce": secrets.token_hex(16) if live else "",
        "title": f"{run.name} — bias-discovery report",
        "run_name": run.name,
        "root": str(run.root),
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "state": state,
        "running": run.status == "running",
        "status": run.status,
        "problems": run.problems,
        "duration": duration(seconds),
        "started": when(state.started_at) if state else "–",
        "updated": when(state.updated_at) if state else "–",
        "current": run.usage.get("current"),
        "usage": run.usage.get("usage") or [],
        "totals": run.usage.get("totals") or {},
        "models": [
            ("target (judge)", _spec(config.get("target"))),
            ("teacher", _spec(config.get("teacher"))),
            ("embedder", _get(config, "embedder.model") or "–"),
        ],
        "data": [
            ("target data", _data_desc(config, "target")),
            ("test data", _data_desc(config, "test")),
            ("data dir", _get(config, "data.data_dir") or "–"),
        ],
        "settings": _settings(config),
        "config_text": run.config_text,
        "latest": latest,
        "n_seeds": len(run.seeds),
        "n_discovered": len(discovered),
        "n_rejected": len(run.rejected),
        "iterations": run.iterations,
        "per_iteration_uri": per_iteration_uri,
        "forest_uri": forest_uri,
        "forest_domains": domains,
        "summary_rows": summary_rows,
        "baseline": run.baseline,
        "discovered_cards": [_card(run, b, True) for b in discovered],
        "rejected_cards": [_card(run, b, False) for b in run.rejected],
        "seeds": run.seeds,
        "seed_rows": [{"bias": b, "row": bias_row(b)} for b in run.seeds],
        "seeds_validated": any(b.validation is not None for b in run.seeds),
        "rewrite_effect": run.rewrite_effect,
        "stop_words": STOP_WORDS,
        "look_words": LOOK_WORDS,
        "confidence_pct": percent(_get(config, "validate.confidence") or 0.95, digits=0, unit=" %"),
        **_validation_summary(run),
    }


def _template():  # noqa: ANN202
    return page_template(TEMPLATE)


def render_run(run: RunData, *, live: bool = False, version: str = "") -> str:
    """The HTML page for collected run data (`live`: add the viewer's reload poller)."""
    return _template().render(**build_context(run, live=live, version=version))


def render_report(run_dir: Path | str, *, live: bool = False, version: str = "") -> str:
    """Read a run directory and return its report as one HTML string."""
    return render_run(collect_run(run_dir), live=live, version=version)


def write_report(run_dir: Path | str, out: Path | str | None = None, problems: list[str] | None = None) -> Path:
    """Render the report of `run_dir` to `out` (default ``RUN_DIR/report.html``), atomically;
    what could not be read and was left out (the page lists it) is added to `problems`."""
    out = Path(out) if out is not None else Path(run_dir) / "report.html"
    run = collect_run(run_dir)
    atomic_write_text(out, render_run(run))
    if problems is not None:
        problems.extend(run.problems)
    return out

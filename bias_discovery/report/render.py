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

import secrets
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import formatting
from ..errors import BiasDiscoveryError
from ..formatting import percent, plural
from ..io import atomic_write_text
from ..library import Bias, RewriteEffect
from ..pages import MISSING, page_template
from ..run import RunDir, ValidationReport
from .correction import correction_view
from .data import RunData, bias_row, collect_run
from .evidence import DEFAULT_EXAMPLES, BiasDetail, EvidenceReader, bias_detail, word_diff
from .plots import ForestRow, biases_per_iteration_plot, delta_forest_plot
from .summary import RunSummary, rewrite_sentence, run_summary

__all__ = ["render_bias_page", "render_report", "render_run", "write_bias_page", "write_report", "word_diff"]

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
        *(
            [
                (
                    "judge",
                    f"pointwise, scale {_get(config, 'judge.scale')}, deciding measure {_get(config, 'judge.pointwise_measure')} "
                    "(no positions: each response scored alone)",
                )
            ]
            if _get(config, "judge.mode") == "pointwise"
            else [("judge positions", _get(config, "judge.positions"))]
        ),
        ("deeper explain", _get(config, "deeper_explain.enabled")),
        (
            "merge",
            _join(("top_k", _get(config, "merge.top_k")), ("similarity ≥", _get(config, "merge.similarity_threshold"))),
        ),
        (
            "validation",
            _join(
                ("", _get(config, "validate.when")),
                ("acceptance", _get(config, "validate.acceptance")),
                ("α", _get(config, "validate.alpha")),
                ("correction", _get(config, "validate.correction")),
                ("min Δ", _get(config, "validate.min_delta")),
                ("held out", _get(config, "validate.held_out")),
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
                (
                    "effect after an early acceptance",
                    _get(config, "validate.sequential.effect") if sequential else None,
                ),
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


def _details(run: RunData, examples: int) -> dict[str, BiasDetail]:
    """Every bias of the newest library and every rejected candidate with its evidence, by id
    (what could not be read is added to the run's problems, which the page lists)."""
    reader = EvidenceReader(run.root, run.problems)
    upto = run.latest.iteration if run.latest is not None else None
    label = f"{run.root}@{upto}" if upto is not None else str(run.root)
    found = [(b, True) for b in (run.latest.biases if run.latest else [])] + [(b, False) for b in run.rejected]
    return {
        bias.id: bias_detail(
            bias, in_library=in_library, reader=reader, library=label, upto=upto, examples=examples, reviews=run.reviews
        )
        for bias, in_library in found
    }


def _card(detail: BiasDetail, bias: Bias, run: RunData) -> dict[str, Any]:
    return {"bias": bias, "row": detail.row, "detail": detail, "record": run.records.get(bias.id)}


def _forest_rows(details: Sequence[BiasDetail]) -> tuple[list[ForestRow], list[str]]:
    """Per bias its reported effect (honest after a sequential stop and the decision; a
    rejected candidate's upper bound) and, per domain, the comparison vs the baseline on the
    items used."""
    rows, domains = [], set()
    for detail in details:
        v = detail.validation
        if v is None:
            continue
        per_domain = {}
        for domain, d in detail.domains.items():
            per_domain[domain] = (d.delta, d.ci_low, d.ci_high)
            domains.add(domain)
        e = v.effect
        rows.append(
            ForestRow(
                label=detail.row.name,
                accepted=v.accepted,
                delta=e.delta,
                ci_low=e.ci_low,
                ci_high=e.ci_high,
                per_domain=per_domain,
                upper=e.upper_bound,
            )
        )
    return rows, sorted(domains)


STOP_WORDS = {
    "efficacy": "clearly biased: stopped early for efficacy",
    "futility": "hopeless: stopped early for futility",
    "complete": "every test item the decision sees",
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
        resolved.validate_,
        resolved.planned_validations,
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
    validated_any = any(r.candidates for r in reports)
    if validated_any and last is not None:
        error_text = last.error_statement
    elif reports:  # validations ran on no candidate: nothing was decided, no error to control
        error_text = (
            "No candidate reached validation, so no acceptance was decided and no error was controlled "
            f"(configured: {_get(config, 'validate.correction') or 'holm'} at α = {_get(config, 'validate.alpha')}, "
            f"error_control: {_get(config, 'validate.error_control') or 'run'})."
        )
    else:
        error_text = _configured_error_statement(config)
    plan = last.sequential if last is not None else None
    if plan is not None and len(plan.looks) > 1:
        looks = (
            f"growing slices of {', '.join(str(n) for n in plan.looks)} test items; α spent "
            f"{', '.join(f'{x:.2g}' for x in plan.levels)} ({plan.spending.replace('_', '-')}); a candidate stops "
            f"early when clearly biased or when its conditional power falls below {percent(plan.futility, digits=0, unit=' %')}"
        )
    elif plan is not None:
        looks = f"one look at all {plural(plan.n_total, 'test item')} the decision sees"
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
        "validated_any": validated_any,
        "power_rows": [row for row in power_rows if row["mde_n"] is not None],
        "power_pct": percent(power, digits=0, unit=" %"),
    }


def build_context(
    run: RunData,
    *,
    live: bool = False,
    version: str = "",
    examples: int = DEFAULT_EXAMPLES,
    bias_page: str | None = None,
    review_form: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The template's values: the whole report, or with `bias_page` the page of that bias;
    `review_form` (the viewer's: its token and the default reviewer) adds a review form to
    each library bias's panel."""
    config = run.config
    state = run.state
    latest = run.latest
    discovered = run.discovered
    details = _details(run, examples)
    validated = [b for b in discovered if b.validation is not None] + [
        b for b in run.rejected if b.validation is not None
    ]
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
    forest_rows, domains = _forest_rows([details[b.id] for b in validated])
    if forest_rows:
        forest_uri = delta_forest_plot(forest_rows, domains, xlabel=_forest_label(validated))

    summary_rows = [bias_row(b) for b in (latest.biases if latest else [])]
    summary_rows += [bias_row(b, in_library=False) for b in run.rejected]
    seconds = (state.updated_at - state.started_at) if state else None

    return {
        "live": live,
        "review_form": review_form if live else None,
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
        "discovered_cards": [_card(details[b.id], b, run) for b in discovered],
        "rejected_cards": [_card(details[b.id], b, run) for b in run.rejected],
        "seed_cards": [_card(details[b.id], b, run) for b in run.seeds],
        "bias_page": None if bias_page is None else _card(details[bias_page], _bias_of(run, bias_page), run),
        "reviewed": {bias_id: detail.decision for bias_id, detail in details.items() if detail.decision is not None},
        "seeds": run.seeds,
        "seed_rows": [{"bias": b, "row": bias_row(b)} for b in run.seeds],
        "seeds_validated": any(b.validation is not None for b in run.seeds),
        "rewrite_effect": run.rewrite_effect,
        "stop_words": STOP_WORDS,
        "look_words": LOOK_WORDS,
        "confidence_pct": percent(_get(config, "validate.confidence") or 0.95, digits=0, unit=" %"),
        "outcome": _outcome(run),
        **_validation_summary(run),
    }


def _outcome(run: RunData) -> dict[str, Any] | None:
    """The run's three plain sentences and its rewrite quality (`summary.run_summary`), which
    the page opens with, as the end of `run` prints them; None (and a problem on the page) when
    the run's files cannot say them yet."""
    if run.state is None or not run.config:
        return None
    try:
        summary: RunSummary = run_summary(run.root)
    except (
        OSError,
        ValueError,
        BiasDiscoveryError,
    ) as exc:  # a damaged or missing record: the rest of the page still renders
        run.problems.append(f"the run's summary: {exc}")
        return None
    return {
        "sentences": summary.sentences(),
        "rewrites": None if summary.rewrites is None else rewrite_sentence(summary.rewrites),
    }


def _template():  # noqa: ANN202
    return page_template(TEMPLATE)


def _bias_of(run: RunData, bias_id: str) -> Bias:
    for bias in (run.latest.biases if run.latest else []) + run.rejected:
        if bias.id == bias_id:
            return bias
    raise KeyError(bias_id)


def render_run(
    run: RunData,
    *,
    live: bool = False,
    version: str = "",
    examples: int = DEFAULT_EXAMPLES,
    review_form: dict[str, str] | None = None,
) -> str:
    """The HTML page for collected run data (`live`: add the viewer's reload poller, and its
    `review_form`)."""
    return _template().render(
        **build_context(run, live=live, version=version, examples=examples, review_form=review_form),
        corrections=[correction_view(name, record) for name, record in run.corrections],
    )


def render_report(
    run_dir: Path | str,
    *,
    live: bool = False,
    version: str = "",
    examples: int = DEFAULT_EXAMPLES,
    review_form: dict[str, str] | None = None,
) -> str:
    """Read a run directory and return its report as one HTML string."""
    return render_run(collect_run(run_dir), live=live, version=version, examples=examples, review_form=review_form)


def _page_bias(run: RunData, bias: str) -> str:
    """The id of the bias `bias` names (an id or a name) in the run's newest library or among
    its rejected candidates; ConfigError naming it otherwise."""
    from ..errors import ConfigError
    from ..library import BiasLibrary

    found = BiasLibrary(name="run", biases=(run.latest.biases if run.latest else []) + run.rejected).find(bias)
    if found is None:
        ids = [b.id for b in (run.latest.biases if run.latest else [])] + [b.id for b in run.rejected]
        raise ConfigError(
            f"no bias {bias!r} in {run.root} (nor among its rejected candidates); ids: {', '.join(ids) or 'none'}"
        )
    return found.id


def _forest_label(biases: Sequence[Bias]) -> str:
    """The forest plot's axis: the measure its biases were validated on (a pointwise judge's
    rejected score in percent of the scale; P(rejected) of score verdicts; else the error)."""
    measures = {b.validation.effect.measure for b in biases if b.validation is not None}
    if measures == {"score"}:
        return "Δ score of rejected (pp of scale)"
    if measures == {"p_rejected"}:
        return "Δ P(rejected) (pp)"
    return "Δ error (pp)" if measures <= {"error"} else "Δ error or score (pp)"


def render_bias_page(
    run_dir: Path | str,
    bias: str,
    *,
    live: bool = False,
    version: str = "",
    examples: int = DEFAULT_EXAMPLES,
    problems: list[str] | None = None,
    review_form: dict[str, str] | None = None,
) -> str:
    """The page of one bias of a run (an id or a name): the report's panel of it, alone, with
    the run's header; what could not be read is added to `problems`."""
    run = collect_run(run_dir)
    context = build_context(
        run, live=live, version=version, examples=examples, bias_page=_page_bias(run, bias), review_form=review_form
    )
    if problems is not None:
        problems.extend(run.problems)
    return _template().render(**context)


def write_bias_page(
    run_dir: Path | str,
    bias: str,
    out: Path | str | None = None,
    *,
    examples: int = DEFAULT_EXAMPLES,
    problems: list[str] | None = None,
) -> Path:
    """Render the page of one bias (an id or a name) to `out` (default ``RUN_DIR/bias-ID.html``),
    atomically; what could not be read and was left out is added to `problems`."""
    run = collect_run(run_dir)
    bias_id = _page_bias(run, bias)
    context = build_context(run, examples=examples, bias_page=bias_id)
    path = Path(out) if out is not None else RunDir(run_dir).bias_page_path(bias_id)
    atomic_write_text(path, _template().render(**context))
    if problems is not None:
        problems.extend(run.problems)
    return path


def write_report(
    run_dir: Path | str,
    out: Path | str | None = None,
    problems: list[str] | None = None,
    *,
    examples: int = DEFAULT_EXAMPLES,
) -> Path:
    """Render the report of `run_dir` to `out` (default ``RUN_DIR/report.html``), atomically;
    what could not be read and was left out (the page lists it) is added to `problems`."""
    out = Path(out) if out is not None else Path(run_dir) / "report.html"
    run = collect_run(run_dir)
    atomic_write_text(out, render_run(run, examples=examples))
    if problems is not None:
        problems.extend(run.problems)
    return out

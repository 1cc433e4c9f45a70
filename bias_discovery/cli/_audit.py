"""`bias-discovery audit`: measure a judge on known biases (CALM, Chen et al., Wei et al., the
bias monitor), unmitigated and with a mitigation, on the same items."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import count, plural
from ..options import DataOptions
from ..settings.audit import AuditSettings
from ..settings.common import PerturbSettings
from ..settings.judge import JudgeSettings
from ._common import app, console, fail, figure_column, flag_of, format_validation_error, options_error, stacked, warn
from ._findings import audit_findings, check_fail_on_mode, exit_on_findings, parse_fail_on
from ._judge import _judge_fields
from ._options import (
    ALLOW_OVERLAP,
    CACHE,
    DATA_DIR,
    NO_CACHE,
    NO_REASONING_CAP,
    OVERWRITE,
    QUIET,
    REASONING,
    REASONING_CHARS,
    SKIP_BAD_ROWS,
    TIMEOUT,
    VERDICT,
    bounds_of,
    default_of,
    fail_on_option,
    flag,
    option,
    reasoning_fields,
)

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from ..api import AuditOptions, AuditReport, BiasAudit, SchemeAudit


def print_audit(report: AuditReport) -> None:
    """One table per audited bias: each measure unmitigated (and mitigated) with its 95 % CI,
    n and p; then what each measure is and what it is compared against."""
    from ..api.views import EXCLUDED_MEANING, ROWS, rows_kind

    temperature = report.settings.temperature
    console.print(
        f"audit of {report.model} on {report.data}: {plural(report.n_pairs, 'pair')}, K = {plural(report.settings.repeats, 'repeat')}, "
        + (f"temperature {temperature:g}, " if temperature is not None else "")
        + f"seed {report.settings.seed}"
        + (f", teacher {report.teacher}" if report.teacher else "")
        + (
            f"; pointwise judge, scale {report.settings.scale}: score measures"
            if report.settings.mode == "pointwise"
            else ""
        ),
        highlight=False,
    )
    mode = report.settings.mode
    if report.from_log is not None:
        log = report.from_log
        console.print(
            f"from a log ({log.format}): {count(log.verdicts)} verdicts of {count(log.rows)} rows in {log.path}; no model called"
            + "".join(f"; {count(k)} rows skipped ({why})" for why, k in log.skipped.items()),
            highlight=False,
            soft_wrap=True,
        )
    for entry in report.biases:
        console.print(audit_table(entry, report))
    console.print("measures (each against what it is compared with):", highlight=False)
    shown = []
    for kind in dict.fromkeys(rows_kind(e.kind, mode) for e in report.biases):
        for row in ROWS[kind]:
            if row.label not in shown:
                shown.append(row.label)
                console.print(f"  {row.label}: {row.meaning}", highlight=False, soft_wrap=True)
    console.print(f"  {EXCLUDED_MEANING}", highlight=False, soft_wrap=True)
    print_judge_measures(report)
    calls = report.calls
    if report.from_log is not None:
        for note in report.notes:
            console.print(f"note: {note}", highlight=False, soft_wrap=True)
        return
    console.print(
        f"judge calls: {count(calls.judge)} distinct ({count(calls.judge_cached)} from the cache, {count(calls.judge_invalid)} invalid)"
        f" | teacher calls: {count(calls.teacher)} | tokens: {count(calls.prompt_tokens)} prompt, {count(calls.completion_tokens)} completion",
        highlight=False,
    )
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


def audit_table(entry: BiasAudit, report: AuditReport) -> Table:
    """One audited bias's measures: per scheme, the value over its 95 % CI and p (one figure a
    line) and its n over the items it left out, in a table without side borders whose figure
    columns never wrap, so that at 80 columns every figure is whole, also beside a mitigated
    judge's; the measure's name wraps. What each scheme cost is the caption."""
    from rich import box
    from rich.cells import cell_len

    from ..api.views import metric_rows, rows_kind

    mode = report.settings.mode
    title = f"{entry.name} [{entry.id}, {entry.source}]: {plural(entry.n_items, 'pair')}"
    if entry.n_perturb_invalid:
        title += f" ({entry.n_perturb_invalid} left out: invalid rewrite)"
    table = Table(
        title=escape(title),
        title_justify="left",
        caption_justify="left",
        min_width=cell_len(title),  # a title as wide as it is, not wrapped to the narrow table
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("score measure" if mode == "pointwise" else "measure", overflow="fold")
    columns: list[tuple[str, SchemeAudit]] = [("none", entry)]
    if entry.mitigated is not None:
        columns.append((report.settings.mitigation, entry.mitigated))
    for scheme, _ in columns:
        figure_column(table, escape(f"{scheme}\n[95% CI]"))
        figure_column(table, "n")
    rows = [metric_rows(metrics, rows_kind(entry.kind, mode)) for _, metrics in columns]
    for i, first in enumerate(rows[0]):
        cells = [escape(first["label"])]
        for scheme_rows in rows:
            r = scheme_rows[i]
            lines = [r["value"], *([f"({r['flag']})"] if r["flag"] else []), r["ci"]]
            if r["p"] != "-":
                lines.append(f"p = {r['p']}")
            # "12 left out" as "12" over "left out": the n column stays as narrow as its n
            cells += [escape(stacked(*lines)), stacked(r["n"], *r["excluded"].split(" ", 1))]
        table.add_row(*cells)
    table.caption = "cost: " + "; ".join(
        f"{scheme} {plural(m.calls_per_verdict, 'call')} per {'score' if mode == 'pointwise' else 'verdict'}, "
        f"{plural(m.calls, 'call')}"
        for scheme, m in columns
    )
    return table


def print_judge_measures(report: AuditReport) -> None:
    """Agreement with the labels, calibration and self-preference, and what the data could
    not support (and why)."""
    from ..api.views import judge_measure_lines

    for line in judge_measure_lines(report):
        console.print(line, highlight=False, soft_wrap=True)


_MODEL: Any = flag(
    "model",
    None,
    help="Judge model spec: hf/smollm2 (the embedded default), llamacpp/smollm2, openai/NAME, vllm/HF_ID (not with --from-log).",
)
_DATA: Any = flag(
    "data",
    None,
    help="demo, judgebench[:gpt|:claude], rewardbench, taubench, or a .jsonl/.json/.parquet/.eval path; with --from-log: the pairs a "
    "judgments.jsonl judged (lengths, response models).",
)
_BIASES: Any = flag(
    "biases",
    None,
    help="Comma-separated: position and length (built-in, no teacher), seed libraries (calm12, chen4, biasscope7, social5, security, agent6), "
    "bias ids or names from them, a run directory (its validated biases) or a library .json file.",
)
_OUT: Any = flag("out", None, help="Output directory: audit.json, audit.csv, judgments.jsonl, perturbed.jsonl.")
_FROM_LOG: Any = flag(
    "from_log",
    None,
    help="Audit verdicts a judge already gave, with no model call: our judgments.jsonl, an inspect_ai log (.eval, .json), "
    "or a JSONL/CSV/parquet log with --columns.",
)
_COLUMNS: Any = flag(
    "columns",
    None,
    help="--from-log: the column map of a generic log, key=column,... (pair_id, verdict, label, order, probability, "
    "response_a/b, length_a/b, model_a/b, judge_model, repeat, domain) or a YAML file of them.",
)
_JUDGE_MODEL: Any = flag("judge_model", None, help="--from-log: the judge, when the log does not name it.")
_JUDGE_FAMILY: Any = flag(
    "judge_family",
    None,
    help="The judge's model family for self-preference (default: read from its name: openai/gpt-4o -> gpt).",
)
_TEACHER: Any = flag(
    "teacher", None, help="Teacher model spec that injects library biases (not needed for position, length)."
)
_TEACHER_BASE_URL: Any = flag("teacher_base_url", None, help="Server URL of an openai/ teacher (default: --base-url).")
_REPEATS: Any = option(
    AuditSettings,
    "repeats",
    help="K: every verdict asked K times with new seeds (flipping noise, consistency); at least 2.",
)
_MITIGATION: Any = option(
    AuditSettings,
    "mitigation",
    help="Also measure a mitigated judge on the same items: none | swap | shuffle3 | votes6.",
)
_TEMPERATURE: Any = option(
    JudgeSettings, "temperature", help="Judge sampling temperature (0 = greedy; Wei et al. use 0.1)."
)
_MAX_TOKENS: Any = option(
    JudgeSettings, "max_tokens", help="Completion token budget per judgment; must cover the reasoning."
)
_MODE: Any = option(
    JudgeSettings,
    "mode",
    help="pairwise (pick one of two) | pointwise (score each response alone on --scale: score measures; no position).",
)
_RUBRIC: Any = flag("rubric", None, help="Pointwise: the rubric text (the judge_pointwise_rubric prompt).")
_PROMPTS: Any = flag(
    "prompts",
    None,
    help="Other judge prompt templates, comma-separated (shipped names or files): each pair is also judged under "
    "each, and the audit reports how often the verdict changes, against the judge's own repeat noise.",
)
_PERTURB_MAX_TOKENS: Any = flag(
    "perturb_max_tokens",
    default_of(PerturbSettings, "max_tokens"),
    **bounds_of(PerturbSettings, "max_tokens"),
    help="The teacher's budget for one rewritten response.",
)
_N_BOOT: Any = option(AuditSettings, "n_boot", help="Bootstrap resamples for the CIs of q̂, PB, LB, ρ and Δerror.")


@app.command()
def audit(
    ctx: typer.Context,
    model: str | None = _MODEL,
    data: str | None = _DATA,
    biases: str | None = _BIASES,
    out: Path | None = _OUT,
    from_log: Path | None = _FROM_LOG,
    columns: str | None = _COLUMNS,
    judge_model: str | None = _JUDGE_MODEL,
    judge_family: str | None = _JUDGE_FAMILY,
    teacher: str | None = _TEACHER,
    base_url: str | None = flag("base_url", None, help="Server URL of an openai/ judge."),
    teacher_base_url: str | None = _TEACHER_BASE_URL,
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="Audit only the first N pairs."),
    repeats: int = _REPEATS,
    mitigation: str = _MITIGATION,
    seed: int = option(AuditSettings, "seed", help="Seed of the order draw, the repeats and sampling."),
    temperature: float = _TEMPERATURE,
    reasoning: bool = REASONING,
    reasoning_chars: int | None = REASONING_CHARS,
    no_reasoning_cap: bool = NO_REASONING_CAP,
    max_tokens: int = _MAX_TOKENS,
    allow_tie: bool = option(JudgeSettings, "allow_tie", help="Offer a third verdict, tie (Chen et al.)."),
    verdict: str = VERDICT,
    mode: str = _MODE,
    scale: str = option(JudgeSettings, "scale", help="Pointwise: an integer range such as 1-10, or pass/fail."),
    rubric: str | None = _RUBRIC,
    prompts: str | None = _PROMPTS,
    perturb_max_tokens: int = _PERTURB_MAX_TOKENS,
    n_boot: int = _N_BOOT,
    cache: Path | None = CACHE,
    no_cache: bool = NO_CACHE,
    overwrite: bool = OVERWRITE,
    quiet: bool = QUIET,
    allow_overlap: bool = ALLOW_OVERLAP,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    timeout: float | None = TIMEOUT,
    fail_on: list[str] = fail_on_option("flagged", "threshold"),
) -> None:
    """Audit a judge on known biases.

    CALM's RR/CR/Acc and Δerror (paired McNemar), Chen et al.'s
    ASR, Wei et al.'s Acc_both, flipping noise and de-noised position/length bias, the bias
    monitor's z and Spearman ρ; each overall and per domain with n and a 95 % CI, unmitigated
    and (--mitigation) mitigated on the same items. Writes audit.json and audit.csv.

    A pointwise judge (--mode pointwise) is audited on scores: the score shift against the
    original, the robustness rate for scores, the pair error, the score against padded length."""
    from ..api import AuditOptions

    conditions = parse_fail_on(fail_on, ["flagged", "threshold"])
    if from_log is not None:
        _refuse_model_flags(model=model, biases=biases, teacher=teacher, prompts=prompts)
        _refuse_ignored_flags(ctx)
        check_fail_on_mode(conditions, "pairwise")  # a log's verdicts are pairwise (logs.py)
        logged = _audit_from_log(
            from_log, columns, data, data_dir, judge_model, judge_family, seed, n_boot, out, overwrite
        )
        exit_on_findings(audit_findings(logged, conditions))
        return
    model, data, biases, out = _required(model=model, data=data, biases=biases, out=out)
    check_fail_on_mode(conditions, mode)
    try:
        settings = _settings(
            repeats=repeats,
            mitigation=mitigation,
            seed=seed,
            n_boot=n_boot,
            perturb_max_tokens=perturb_max_tokens,
            mode=mode,
            scale=scale,
            rubric=rubric,
            max_tokens=max_tokens,
            temperature=temperature,
            allow_tie=allow_tie,
            verdict=verdict,
            **reasoning_fields(reasoning, reasoning_chars, no_reasoning_cap),
        )
        options = AuditOptions(
            settings=settings,
            out=out,
            teacher=teacher,
            base_url=base_url,
            teacher_base_url=teacher_base_url,
            data_dir=data_dir,
            limit=limit,
            cache=False if no_cache else (cache or True),
            overwrite=overwrite,
            allow_overlap=allow_overlap,
            skip_bad_rows=skip_bad_rows,
            timeout_s=timeout,
            judge_family=judge_family,
            prompts=[p.strip() for p in prompts.split(",") if p.strip()] if prompts else [],
        )
    except ValidationError as exc:
        fail(options_error(exc) if exc.title == "AuditOptions" else format_validation_error(exc))
    report = _audit_model(model, data, biases, options, quiet=quiet)
    exit_on_findings(audit_findings(report, conditions))


def _required(
    *, model: str | None, data: str | None, biases: str | None, out: Path | None
) -> tuple[str, str, str, Path]:
    """A model audit needs --model, --data, --biases and --out: the ones missing, named (exit 2)."""
    missing = [
        flag_of(name)
        for name, value in (("model", model), ("data", data), ("biases", biases), ("out", out))
        if value is None
    ]
    if missing:
        fail(f"audit needs {', '.join(missing)} (or --from-log FILE to audit verdicts already given)")
    assert model is not None and data is not None and biases is not None and out is not None
    return model, data, biases, out


def _audit_model(model: str, data: str, biases: str, options: AuditOptions, *, quiet: bool) -> AuditReport:
    """Audit `model` through the API (`api.audit`), print the audit and say where it went."""
    from ..api import audit as audit_judge
    from ..progress import progress_bar

    try:
        output = audit_judge(model, data, biases, options, progress=None if quiet else progress_bar, on_warning=warn)
    except ValidationError as exc:
        fail(options_error(exc) if exc.title == "AuditOptions" else format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_written(output.report, options.out)
    return output.report


def _print_written(report: AuditReport, out: Path | None) -> None:
    """The audit as tables, and the files it was written to (none: a log audited without --out)."""
    print_audit(report)
    if out is not None:
        console.print(
            f"wrote {out / 'audit.json'} and {out / 'audit.csv'} (report: bias-discovery report {out})", highlight=False
        )


def _settings(
    *,
    repeats: int,
    mitigation: str,
    seed: int,
    n_boot: int,
    perturb_max_tokens: int,
    mode: str,
    scale: str,
    rubric: str | None,
    **judge: object,
) -> AuditSettings:
    """The audit's settings from its flags; a pointwise judge takes --scale and --rubric (and
    no position setting), a pairwise one refuses them (`judge._judge_fields`)."""
    fields = _judge_fields(
        mode=mode, positions=default_of(JudgeSettings, "positions"), scale=scale, rubric=rubric, prompt=None, **judge
    )
    return AuditSettings(
        repeats=repeats,
        mitigation=mitigation,  # type: ignore[arg-type]
        seed=seed,
        n_boot=n_boot,
        judge=JudgeSettings.model_validate(fields),
        perturb=PerturbSettings(max_tokens=perturb_max_tokens),
    )


def _refuse_model_flags(**given_flags: str | None) -> None:
    """--from-log calls no model: a flag that would call one is an error, named."""
    given = [flag_of(name) for name, value in given_flags.items() if value]
    if given:
        fail(
            f"--from-log reads verdicts already given: {', '.join(given)} would call a model; leave {'it' if len(given) == 1 else 'them'} out"
        )


_FROM_LOG_FLAGS = frozenset(
    {
        "from_log",
        "columns",
        "data",
        "data_dir",
        "judge_model",
        "judge_family",
        "seed",
        "n_boot",
        "out",
        "overwrite",
        "quiet",
        "fail_on",
        "model",
        "biases",
        "teacher",
        "prompts",
    }
)
"""The flags `audit --from-log` reads (the model-calling ones are refused by `_refuse_model_flags`)."""


def _refuse_ignored_flags(ctx: typer.Context) -> None:
    """--from-log audits the verdicts as logged: a flag it would ignore (--limit, --mode,
    --repeats, --mitigation, --verdict, the judge's sampling ...) given on the command line or
    through its environment variable is an error, named, rather than silently not applied."""
    given = [
        param
        for param in ctx.command.params
        if param.name not in _FROM_LOG_FLAGS
        and getattr(ctx.get_parameter_source(param.name or ""), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    ]
    if given:
        names = ", ".join(param.opts[0] for param in given)
        fail(
            f"--from-log audits the verdicts as the log holds them: {names} would be ignored; leave "
            f"{'it' if len(given) == 1 else 'them'} out (a log's repeats, orders and verdicts are read from the log)"
        )


def _audit_from_log(
    path: Path,
    columns: str | None,
    data: str | None,
    data_dir: Path | None,
    judge_model: str | None,
    judge_family: str | None,
    seed: int,
    n_boot: int,
    out: Path | None,
    overwrite: bool,
) -> AuditReport:
    from ..api import LogAuditOptions, audit_log

    try:
        options = LogAuditOptions(
            columns=columns,
            data=data,
            data_dir=data_dir,
            judge_model=judge_model,
            judge_family=judge_family,
            seed=seed,
            n_boot=n_boot,
            out=out,
            overwrite=overwrite,
        )
        output = audit_log(path, options)
    except ValidationError as exc:
        fail(options_error(exc) if exc.title == "LogAuditOptions" else format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    _print_written(output.report, out)
    return output.report

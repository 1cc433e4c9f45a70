"""`bias-discovery audit`: measure a judge on known biases (CALM, Chen et al., Wei et al., the
bias monitor), unmitigated and with a mitigation, on the same items."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ..auditing.settings import AuditSettings
from ..config import PerturbSettings
from ..errors import BiasDiscoveryError
from ..formatting import count, plural
from ..settings.judge import JudgeSettings
from .common import app, console, fail, format_validation_error, options_error, timeout_option, warn
from .options import NO_REASONING_CAP, QUIET, REASONING, REASONING_CHARS, bounds_of, default_of, reasoning_fields

if TYPE_CHECKING:  # imported lazily at run time: the CLI must start fast
    from ..auditing import AuditReport, SchemeAudit


def print_audit(report: AuditReport) -> None:
    """One table per audited bias: each measure unmitigated (and mitigated) with its 95 % CI,
    n and p; then what each measure is and what it is compared against."""
    from ..auditing.display import EXCLUDED_MEANING, ROWS, metric_rows

    mitigation = report.settings.mitigation
    console.print(
        f"audit of {report.model} on {report.data}: {plural(report.n_pairs, 'pair')}, K = {plural(report.settings.repeats, 'repeat')}, "
        f"temperature {report.settings.temperature:g}, seed {report.settings.seed}"
        + (f", teacher {report.teacher}" if report.teacher else ""),
        highlight=False,
    )
    for entry in report.biases:
        title = f"{entry.name} [{entry.id}, {entry.source}]: {plural(entry.n_items, 'pair')}"
        if entry.n_perturb_invalid:
            title += f" ({entry.n_perturb_invalid} left out: invalid rewrite)"
        table = Table(title=escape(title), title_justify="left", caption_justify="left")
        table.add_column("measure", no_wrap=True)
        columns: list[tuple[str, SchemeAudit]] = [("none", entry)]
        if entry.mitigated is not None:
            columns.append((mitigation, entry.mitigated))
        for scheme, _ in columns:
            table.add_column(escape(f"{scheme}\n[95% CI]"), justify="right", no_wrap=True)
            table.add_column("n", justify="right", no_wrap=True)
        rows = [metric_rows(metrics, entry.kind) for _, metrics in columns]
        for i, first in enumerate(rows[0]):
            cells = [escape(first["label"])]
            for scheme_rows in rows:
                r = scheme_rows[i]
                text = r["value"] + (f" ({r['flag']})" if r["flag"] else "") + f"\n{r['ci']}"
                if r["p"] != "-":
                    text += f"\np = {r['p']}"
                cells += [escape(text), r["n"] + (f"\n{r['excluded']}" if r["excluded"] else "")]
            table.add_row(*cells)
        table.caption = "cost: " + "; ".join(
            f"{scheme} {plural(m.calls_per_verdict, 'call')} per verdict, {plural(m.calls, 'call')}"
            for scheme, m in columns
        )
        console.print(table)
    console.print("measures (each against what it is compared with):", highlight=False)
    shown = []
    for kind in dict.fromkeys(e.kind for e in report.biases):
        for row in ROWS[kind]:
            if row.label not in shown:
                shown.append(row.label)
                console.print(f"  {row.label}: {row.meaning}", highlight=False, soft_wrap=True)
    console.print(f"  {EXCLUDED_MEANING}", highlight=False, soft_wrap=True)
    calls = report.calls
    console.print(
        f"judge calls: {count(calls.judge)} distinct ({count(calls.judge_cached)} from the cache, {count(calls.judge_invalid)} invalid)"
        f" | teacher calls: {count(calls.teacher)} | tokens: {count(calls.prompt_tokens)} prompt, {count(calls.completion_tokens)} completion",
        highlight=False,
    )
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


@app.command()
def audit(
    model: str = typer.Option(..., "--model", help="Judge model spec: llamacpp/smollm2, openai/NAME, vllm/HF_ID."),
    data: str = typer.Option(..., "--data", help="demo, judgebench[:gpt|:claude], rewardbench, or a .jsonl/.json/.parquet path."),
    biases: str = typer.Option(
        ..., "--biases",
        help="Comma-separated: position and length (built-in, no teacher), seed libraries (calm12, chen4, biasscope7, social5), "
        "bias ids or names from them, a run directory (its validated biases) or a library .json file.",
    ),
    out: Path = typer.Option(..., "--out", help="Output directory: audit.json, audit.csv, judgments.jsonl, perturbed.jsonl."),
    teacher: str | None = typer.Option(None, "--teacher", help="Teacher model spec that injects library biases (not needed for position, length)."),
    base_url: str | None = typer.Option(None, "--base-url", help="Server URL of an openai/ judge."),
    teacher_base_url: str | None = typer.Option(None, "--teacher-base-url", help="Server URL of an openai/ teacher (default: --base-url)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Local copy of the named data sets (else $BIAS_DISCOVERY_DATA_DIR, else the hub)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Audit only the first N pairs."),
    repeats: int = typer.Option(default_of(AuditSettings, "repeats"), "--repeats", help="K: every verdict asked K times with new seeds (flipping noise, consistency); at least 2."),
    mitigation: str = typer.Option(default_of(AuditSettings, "mitigation"), "--mitigation", help="Also measure a mitigated judge on the same items: none | swap | shuffle3 | votes6."),
    seed: int = typer.Option(default_of(AuditSettings, "seed"), "--seed", help="Seed of the order draw, the repeats and sampling."),
    temperature: float = typer.Option(
        default_of(JudgeSettings, "temperature"), "--temperature", **bounds_of(JudgeSettings, "temperature"),
        help="Judge sampling temperature (0 = greedy; Wei et al. use 0.1).",
    ),
    reasoning: bool = REASONING,
    reasoning_chars: int | None = REASONING_CHARS,
    no_reasoning_cap: bool = NO_REASONING_CAP,
    max_tokens: int = typer.Option(
        default_of(JudgeSettings, "max_tokens"), "--max-tokens", **bounds_of(JudgeSettings, "max_tokens"),
        help="Completion token budget per judgment; must cover the reasoning.",
    ),
    allow_tie: bool = typer.Option(default_of(JudgeSettings, "allow_tie"), "--allow-tie", help="Offer a third verdict, tie (Chen et al.)."),
    perturb_max_tokens: int = typer.Option(
        default_of(PerturbSettings, "max_tokens"), "--perturb-max-tokens", **bounds_of(PerturbSettings, "max_tokens"),
        help="The teacher's budget for one rewritten response.",
    ),
    n_boot: int = typer.Option(
        default_of(AuditSettings, "n_boot"), "--n-boot", **bounds_of(AuditSettings, "n_boot"),
        help="Bootstrap resamples for the CIs of q̂, PB, LB, ρ and Δerror.",
    ),
    cache: Path | None = typer.Option(None, "--cache", help="SQLite call cache (default: ~/.cache/bias-discovery/calls.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the call cache."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an --out directory that is not empty."),
    quiet: bool = QUIET,
    allow_overlap: bool = typer.Option(
        False, "--allow-overlap", help="Audit a run's biases on data that shares pairs (id or content) with its target pairs; recorded."
    ),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows", help="Skip data rows that cannot be used (malformed, a missing field, identical responses, a repeated id), count them and say so, instead of stopping at the first."),
    timeout: float | None = timeout_option(),
) -> None:
    """Audit a judge on known biases.

    CALM's RR/CR/Acc and Δerror (paired McNemar), Chen et al.'s
    ASR, Wei et al.'s Acc_both, flipping noise and de-noised position/length bias, the bias
    monitor's z and Spearman ρ; each overall and per domain with n and a 95 % CI, unmitigated
    and (--mitigation) mitigated on the same items. Writes audit.json and audit.csv."""
    from ..api import AuditOptions
    from ..api import audit as audit_judge
    from ..progress import progress_bar

    reasoning_settings = reasoning_fields(reasoning, reasoning_chars, no_reasoning_cap)
    try:
        settings = AuditSettings(
            repeats=repeats,
            mitigation=mitigation,  # type: ignore[arg-type]
            seed=seed,
            n_boot=n_boot,
            judge=JudgeSettings(max_tokens=max_tokens, temperature=temperature, allow_tie=allow_tie, **reasoning_settings),
            perturb=PerturbSettings(max_tokens=perturb_max_tokens),
        )
        options = AuditOptions(
            settings=settings, out=out, teacher=teacher, base_url=base_url, teacher_base_url=teacher_base_url,
            data_dir=data_dir, limit=limit, cache=False if no_cache else (cache or True), overwrite=overwrite,
            allow_overlap=allow_overlap, skip_bad_rows=skip_bad_rows, timeout_s=timeout,
        )
        output = audit_judge(model, data, biases, options, progress=None if quiet else progress_bar, on_warning=warn)
    except ValidationError as exc:
        fail(options_error(exc) if exc.title == "AuditOptions" else format_validation_error(exc))
    except BiasDiscoveryError as exc:
        fail(str(exc))
    print_audit(output.report)
    console.print(f"wrote {out / 'audit.json'} and {out / 'audit.csv'} (report: bias-discovery report {out})", highlight=False)

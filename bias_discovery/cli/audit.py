"""`bias-discovery audit`: measure a judge on known biases (CALM, Chen et al., Wei et al., the
bias monitor), unmitigated and with a mitigation, on the same items."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ..errors import BiasDiscoveryError
from ..formatting import count, plural
from ..options import DataOptions
from ..settings.audit import AuditSettings
from ..settings.common import PerturbSettings
from ..settings.judge import JudgeSettings
from .common import app, console, fail, format_validation_error, options_error, warn
from .options import (
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
    bounds_of,
    default_of,
    flag,
    option,
    reasoning_fields,
)

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
    model: str = flag("model", ..., help="Judge model spec: llamacpp/smollm2, openai/NAME, vllm/HF_ID."),
    data: str = flag("data", ..., help="demo, judgebench[:gpt|:claude], rewardbench, or a .jsonl/.json/.parquet path."),
    biases: str = flag("biases", ..., help="Comma-separated: position and length (built-in, no teacher), seed libraries (calm12, chen4, biasscope7, social5), "
        "bias ids or names from them, a run directory (its validated biases) or a library .json file.",
    ),
    out: Path = flag("out", ..., help="Output directory: audit.json, audit.csv, judgments.jsonl, perturbed.jsonl."),
    teacher: str | None = flag("teacher", None, help="Teacher model spec that injects library biases (not needed for position, length)."),
    base_url: str | None = flag("base_url", None, help="Server URL of an openai/ judge."),
    teacher_base_url: str | None = flag("teacher_base_url", None, help="Server URL of an openai/ teacher (default: --base-url)."),
    data_dir: Path | None = DATA_DIR,
    limit: int | None = option(DataOptions, "limit", help="Audit only the first N pairs."),
    repeats: int = option(AuditSettings, "repeats", help="K: every verdict asked K times with new seeds (flipping noise, consistency); at least 2."),
    mitigation: str = option(AuditSettings, "mitigation", help="Also measure a mitigated judge on the same items: none | swap | shuffle3 | votes6."),
    seed: int = option(AuditSettings, "seed", help="Seed of the order draw, the repeats and sampling."),
    temperature: float = option(JudgeSettings, "temperature", help="Judge sampling temperature (0 = greedy; Wei et al. use 0.1).",
    ),
    reasoning: bool = REASONING,
    reasoning_chars: int | None = REASONING_CHARS,
    no_reasoning_cap: bool = NO_REASONING_CAP,
    max_tokens: int = option(JudgeSettings, "max_tokens", help="Completion token budget per judgment; must cover the reasoning.",
    ),
    allow_tie: bool = option(JudgeSettings, "allow_tie", help="Offer a third verdict, tie (Chen et al.)."),
    perturb_max_tokens: int = flag("perturb_max_tokens", default_of(PerturbSettings, "max_tokens"), **bounds_of(PerturbSettings, "max_tokens"),
        help="The teacher's budget for one rewritten response.",
    ),
    n_boot: int = option(AuditSettings, "n_boot", help="Bootstrap resamples for the CIs of q̂, PB, LB, ρ and Δerror.",
    ),
    cache: Path | None = CACHE,
    no_cache: bool = NO_CACHE,
    overwrite: bool = OVERWRITE,
    quiet: bool = QUIET,
    allow_overlap: bool = ALLOW_OVERLAP,
    skip_bad_rows: bool = SKIP_BAD_ROWS,
    timeout: float | None = TIMEOUT,
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

"""`bias-discovery judge ... --compare DIR`: one judge on the original set and on a Pro set.

The judge command has already judged the original set (`--data`); this judges the exported
Pro set at DIR with the same model and settings, and puts the two error rates side by side
per domain (the shape of the BiasScope paper's Table 9), each set's JudgeBench score (net vote
over the judged orders, `JudgeSummary.judgebench_score`) next to it. The Pro set is read from
``DIR/data.jsonl`` (label-style: ``response_A``/``response_B``/``label``; ids from
``sample_id``), so `--positions fixed` keeps its seeded A/B order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..data.loaders import FieldMap, load_pairs
from ..data.pairs import PreferencePair
from ..errors import ExportError
from ..formatting import percent, plural, pp
from ..io import atomic_write_json, atomic_write_jsonl
from ..judging import JudgeSummary, calls_per_pair, judge_pairs, summarize
from ..llm.config import ModelConfig
from ..progress import ProgressFactory, progress_or_quiet
from ..settings.judge import JudgeSettings
from .pro_stats import read_pro_stats


class CompareRow(BaseModel):
    domain: str
    original_n: int
    original_error: float | None
    original_ci_low: float | None = None
    original_ci_high: float | None = None
    """The original error's 95 % CI (Wilson, over its n valid pairs); None in files written before it was kept."""
    pro_n: int
    pro_error: float | None
    pro_ci_low: float | None = None
    pro_ci_high: float | None = None
    """The Pro error's 95 % CI, as the original's."""
    delta: float | None
    """pro_error - original_error."""
    original_judgebench: float | None = None
    """JudgeBench's own score (accuracy by net vote, over all original_pairs) on the original set."""
    pro_judgebench: float | None = None
    """The same on the Pro set."""
    original_pairs: int = 0
    pro_pairs: int = 0
    """All pairs of the domain (the JudgeBench score's n; the error's n counts valid pairs only)."""


class CompareReport(BaseModel):
    """compare.json."""

    model: str
    original_data: str
    pro_dir: str
    rows: list[CompareRow]
    original: JudgeSummary
    pro: JudgeSummary


def check_pro_dir(directory: Path, settings: JudgeSettings | None = None) -> Path:
    """Fail early (before any judging) when `directory` is not a usable Pro set, or (with the
    judge's `settings`) one built for another judge mode or scale: a set for pointwise judges
    was filtered on scores of its scale, a pairwise one on verdicts in both orders."""
    if not directory.is_dir():
        raise ExportError(f"`compare` {directory}: no such directory")
    stats_path = directory / "stats.json"
    data_path = directory / "data.jsonl"
    if not stats_path.is_file() or not data_path.is_file():
        raise ExportError(
            f"`compare` {directory}: not an exported Pro set (needs data.jsonl and stats.json; build one "
            "with `bias-discovery export judgebench-pro`)"
        )
    stats = read_pro_stats(directory, label=f"`compare` {directory}")
    if settings is not None and settings.mode != stats.judge_mode:
        raise ExportError(
            f"`compare` {directory}: a Pro set for {stats.judge_mode} judges (stats.json judge_mode"
            + (f", scale {stats.scale}" if stats.scale else "")
            + f"), but judge.mode is {settings.mode}; judge it with judge.mode {stats.judge_mode}"
        )
    if (
        settings is not None
        and settings.mode == "pointwise"
        and stats.scale is not None
        and settings.scale != stats.scale
    ):
        raise ExportError(
            f"`compare` {directory}: a Pro set filtered on the scale {stats.scale}, but judge.scale is {settings.scale}; "
            f"judge it with judge.scale {stats.scale}"
        )
    if not data_path.read_text(encoding="utf-8").strip():
        raise ExportError(f"`compare` {directory}: the Pro set has no samples; nothing to compare")
    return directory


def load_pro_pairs(directory: Path, limit: int | None = None) -> list[PreferencePair]:
    return load_pairs(directory / "data.jsonl", field_map=FieldMap(id="sample_id", style="label"), limit=limit)


def compare_rows(original: JudgeSummary, pro: JudgeSummary) -> list[CompareRow]:
    rows = []
    for domain in sorted(set(original.per_domain) | set(pro.per_domain)):
        o, p = original.per_domain.get(domain), pro.per_domain.get(domain)
        oe, pe = (o.error_rate if o else None), (p.error_rate if p else None)
        rows.append(
            CompareRow(
                domain=domain,
                original_n=o.n_valid if o else 0,
                original_error=oe,
                original_ci_low=o.ci_low if o else None,
                original_ci_high=o.ci_high if o else None,
                pro_n=p.n_valid if p else 0,
                pro_error=pe,
                pro_ci_low=p.ci_low if p else None,
                pro_ci_high=p.ci_high if p else None,
                delta=None if oe is None or pe is None else pe - oe,
                original_judgebench=o.judgebench_score if o else None,
                pro_judgebench=p.judgebench_score if p else None,
                original_pairs=o.n if o else 0,
                pro_pairs=p.n if p else 0,
            )
        )
    oe, pe = original.error_rate, pro.error_rate
    rows.append(
        CompareRow(
            domain="all",
            original_n=original.n_valid_pairs,
            original_error=oe,
            original_ci_low=original.error_ci_low,
            original_ci_high=original.error_ci_high,
            pro_n=pro.n_valid_pairs,
            pro_error=pe,
            pro_ci_low=pro.error_ci_low,
            pro_ci_high=pro.error_ci_high,
            delta=None if oe is None or pe is None else pe - oe,
            original_judgebench=original.judgebench_score,
            pro_judgebench=pro.judgebench_score,
            original_pairs=original.n_pairs,
            pro_pairs=pro.n_pairs,
        )
    )
    return rows


def compare_with_pro(
    config: ModelConfig,
    settings: JudgeSettings,
    original: JudgeSummary,
    pro_dir: Path,
    *,
    out: Path | None,
    cache_path: Path | None,
    seed: int,
    limit: int | None = None,
    progress: ProgressFactory | None = None,
    engine: Any = None,
) -> CompareReport:
    """Judge the Pro set at `pro_dir` with `config`/`settings`, write ``pro_judgments.jsonl``,
    ``pro_summary.json`` and ``compare.json`` into `out` (None: nowhere), and return the report."""
    check_pro_dir(pro_dir, settings)
    pairs = load_pro_pairs(pro_dir, limit)
    own = engine is None
    if own:
        from ..llm.registry import make_engine

        engine = make_engine(config, cache_path=cache_path)
    try:
        n_requests = len(pairs) * calls_per_pair(settings)
        with progress_or_quiet(progress)(f"judging the Pro set: {plural(len(pairs), 'sample')}", n_requests) as advance:
            result = judge_pairs(engine, pairs, settings, seed=seed, progress=advance)
    finally:
        if own:
            engine.close()
    pro = summarize(result, model=config.spec, data=f"pro: {pro_dir.resolve()}", settings=settings, seed=seed)
    report = CompareReport(
        model=config.spec,
        original_data=original.data,
        pro_dir=str(pro_dir.resolve()),
        rows=compare_rows(original, pro),
        original=original,
        pro=pro,
    )
    if out is None:
        return report
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(out / "pro_judgments.jsonl", result.judgments)
    atomic_write_json(out / "pro_summary.json", pro)
    atomic_write_json(out / "compare.json", report)
    return report


def compare_table(report: CompareReport) -> Any:
    """Per domain and overall: each set's error over its 95 % CI and n, their difference and
    each set's JudgeBench score, one figure a line in columns that never wrap, so that at 80
    columns every figure is whole (a rich `Table`)."""
    from rich.table import Table

    def error(value: float | None, low: float | None, high: float | None, n: int) -> str:
        ci = [] if low is None or high is None else [f"({percent(low, unit='')}-{percent(high, unit='')})"]
        return "\n".join([percent(value, unit=""), *ci, f"({n})"])

    table = Table(title=f"{report.model}: error (%) on the original set and on the Pro set")
    table.add_column("domain", overflow="fold")
    for header in (
        "original\nerr\n(95% CI)\n(n)",
        "Pro\nerr\n(95% CI)\n(n)",
        "Δ (pp)",
        "original\nJB score",
        "Pro\nJB score",
    ):
        table.add_column(header, justify="right", no_wrap=True)  # as cli's figure_column
    for row in report.rows:
        table.add_row(
            row.domain,
            error(row.original_error, row.original_ci_low, row.original_ci_high, row.original_n),
            error(row.pro_error, row.pro_ci_low, row.pro_ci_high, row.pro_n),
            pp(row.delta, unit=""),
            percent(row.original_judgebench, unit=""),
            percent(row.pro_judgebench, unit=""),
            style="bold" if row.domain == "all" else None,
        )
    return table


def print_compare(report: CompareReport, console: Any) -> None:
    console.print(compare_table(report))
    wrong = (
        "whose rejected response scored at least as high as the chosen one (each scored alone)"
        if report.pro.mode == "pointwise"
        else "judged wrong in at least one order"
    )
    console.print(
        f"err: share of the valid pairs (n) {wrong}, with its 95% CI (Wilson). Δ (pp): Pro err minus original err. JB score: JudgeBench's own "
        "score (%), the share of all pairs whose net vote over the judged orders is positive (+1 right, "
        f"-1 wrong, 0 invalid); n = {report.original.n_pairs} original and {report.pro.n_pairs} Pro pairs.",
        highlight=False,
    )

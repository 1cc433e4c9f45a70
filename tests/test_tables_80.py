"""No table cuts a figure at 80 columns (piped, or in a CI log): the tables of `check` and
`status` rendered at 80 columns with the largest figures a real run prints hold every figure
whole on one line, and no "…" (issue 47: `28,560,4…` in check's estimate)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table

from bias_discovery.api.checks import PreflightReport, StageEstimate
from bias_discovery.preflight import StageCalls

BIG = [
    ("perturb", "teacher", 6_200.0, 28_560_412.0, 2_667_312.0, 1_234.5),
    ("validate (judge)", "target", 124_000.0, 285_604_123.0, 26_673_120.0, 12_345.67),
    ("deeper_explain", "target", 1_860.0, 9_999_999.0, 999_999.0, 99.99),
    ("identify", "teacher", 1_860.0, 4_123_456.0, 1_234_567.0, 45.6),
]


def _render(table: Table) -> str:
    out = io.StringIO()
    Console(file=out, width=80, color_system=None, legacy_windows=False).print(table)
    return out.getvalue()


def _estimates(*, pilot: bool) -> PreflightReport:
    from bias_discovery.api.checks import Assumptions

    rows = [
        StageEstimate(
            stage=stage,
            role=role,
            calls=calls,
            calls_bound=int(calls * 3),
            prompt_tokens=prompt,
            prompt_tokens_bound=prompt * 3,
            completion_tokens=completion,
            completion_tokens_bound=completion * 3,
            usd=usd,
            usd_bound=usd * 3,
            measured_calls=12 if pilot else 0,
            measured_tokens=40 if pilot else 0,
        )
        for stage, role, calls, prompt, completion, usd in BIG
    ]
    calls = [
        StageCalls(
            stage=e.stage,
            role=e.role,
            per_iteration=e.calls_bound,
            total=4 * e.calls_bound,
            exact=False,
            note="one rewrite per target pair, every iteration runs",
        )
        for e in rows
    ]
    return PreflightReport(
        endpoints=[], calls=calls, estimates=rows, assumptions=Assumptions(), max_iterations=4, n_target=620, n_test=620
    )


def _figures(table: Table) -> list[str]:
    """Every figure of the table's right-aligned columns, one per line of a cell."""
    found = []
    for column in table.columns:
        if column.justify != "right":
            continue
        for cell in column.cells:
            found += [line for line in str(cell).splitlines() if re.search(r"\d", line)]
    return found


def _assert_whole(table: Table) -> None:
    text = _render(table)
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80, text
    lines = text.splitlines()
    for figure in _figures(table):
        assert any(figure in line for line in lines), f"{figure!r} is not whole on one line:\n{text}"


@pytest.mark.parametrize("pilot", [False, True], ids=["assumed", "piloted"])
def test_checks_tables_keep_every_figure_whole_at_80_columns(pilot: bool) -> None:
    from bias_discovery.cli._check import estimates_table, pilot_notes, planned_calls_table

    report = _estimates(pilot=pilot)
    _assert_whole(planned_calls_table(report))
    table = estimates_table(report)
    _assert_whole(table)
    notes = pilot_notes(report)
    assert len(notes) == (len(BIG) if pilot else 0)
    assert (
        not pilot
        or notes[0] == "measured by the pilot, perturb (teacher): calls per pair (n=12), tokens per call (n=40)"
    )
    assert "28,560,412" in _render(table) and "≤ 856,812,369" in _render(table)


def test_status_usage_table_keeps_every_figure_whole_at_80_columns() -> None:
    from bias_discovery.cli._loop import _usage_table

    usage = [
        {
            "stage": stage,
            "role": role,
            "requests": int(calls),
            "cached": int(calls // 3),
            "prompt_tokens": int(prompt),
            "completion_tokens": int(completion),
        }
        for stage, role, calls, prompt, completion, _ in BIG
    ]
    totals = {k: sum(u[k] for u in usage) for k in ("requests", "cached", "prompt_tokens", "completion_tokens")}
    _assert_whole(_usage_table({"usage": usage, "totals": totals}))


@pytest.mark.parametrize("scored", [False, True], ids=["choice", "score verdicts"])
def test_the_judge_table_keeps_every_figure_whole_at_80_columns(scored: bool) -> None:
    from bias_discovery.cli._judge import judge_table
    from bias_discovery.judging import DomainSummary, JudgeSummary, ScoreSummary

    score = ScoreSummary(n=613, mean_p_rejected=0.4756, ci_low=0.4432, ci_high=0.5081) if scored else None
    domains = {
        name: DomainSummary(
            n=n, n_valid=n - 3, error_rate=0.4751, ci_low=0.4123, ci_high=0.5384, judgebench_score=0.5123, score=score
        )
        for name, n in (("knowledge", 154), ("reasoning", 98), ("mathematics", 56), ("coding", 42))
    }
    summary = JudgeSummary(
        model="openai/Qwen2.5-7B-Instruct",
        data="judgebench (local: /data/judgebench)",
        positions="both",
        seed=42,
        n_pairs=620,
        n_valid_pairs=613,
        n_judgments=1240,
        n_invalid_judgments=7,
        invalid_reasons={"no_verdict": 7},
        error_rate=0.4751,
        error_ci_low=0.4358,
        error_ci_high=0.5147,
        invalid_rate=0.0113,
        error_rate_invalid_as_error=0.48,
        position_a_rate=0.61,
        position_consistency=0.71,
        judgebench_score=0.5123,
        per_domain=domains,
        prompt_tokens=1_234_567,
        completion_tokens=234_567,
        cached_calls=0,
        score=score,
    )
    table = judge_table(summary)
    _assert_whole(table)
    assert "(43.6%-51.5%)" in _render(table)

"""No table cuts a figure at 80 columns (piped, or in a CI log): every table the command line
prints (`check`, `status`, `judge` and its reliability bins, `judge --compare`, `replicate`,
`matrix`, `audit`, `correct`, the exports' counts; `library show` in test_library_cli.py)
rendered at 80 columns with the largest figures a real run prints holds every figure whole on
one line, and no "…" (issue 47: `28,560,4…` in check's estimate)."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

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
            text = cell.plain if isinstance(cell, Text) else str(cell)
            found += [line for line in text.splitlines() if re.search(r"\d", line)]
    return found


def _assert_whole(table: Table) -> None:
    text = _render(table)
    assert "…" not in text, text
    assert max(cell_len(line) for line in text.splitlines()) <= 80, text
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


def test_the_reliability_table_keeps_every_figure_whole_at_80_columns() -> None:
    from bias_discovery.cli._judge import reliability_table
    from bias_discovery.stats import Calibration
    from bias_discovery.stats._calibration import ReliabilityBin

    bins = [
        ReliabilityBin(low=0.5 + i / 20, high=0.55 + i / 20, n=123_456, confidence=0.5249, accuracy=1.0)
        for i in range(10)
    ]
    cal = Calibration(n_items=61_728, n_verdicts=1_234_560, ece=0.1234, brier=0.2345, bins=bins)
    table = reliability_table(cal)
    _assert_whole(table)
    assert "0.95-1.00" in _render(table) and "123456" in _render(table)


# The widest figures each table can print: effects of -100 pp with CIs reaching ±100 pp, n in
# the tens of thousands, scores shifted by a double-digit number of points.
N = 12_345


def _replication(mode: str):
    from bias_discovery.api import Replication
    from bias_discovery.library import ScoreShift
    from bias_discovery.replication import ReplicatedBias
    from bias_discovery.stats import PairedComparison

    # model_construct: the table reads the figures below, not the validation records they come from
    bias = ReplicatedBias.model_construct(
        id="d12-overconfident-expert-citation-bias",
        name="Overconfident expert citation bias",
        reproduced=True,
        delta=-1.0,
        ci_low=-1.0,
        ci_high=-0.8765,
        n=N,
        p_value=1.2e-9,
        p_adjusted=0.0456,
        original_delta=0.4567,
        original_ci_low=-1.0,
        original_ci_high=1.0,
        original_n=N,
        original_p_adjusted=0.0123,
        score_shift_points=-10.25,
        score_shift_ci_low=-12.5,
        score_shift_ci_high=-8.75,
        score_shift=ScoreShift.model_construct(n=N),
        secondary_delta=-0.9876,
        secondary_ci_low=-1.0,
        secondary_ci_high=-0.5,
        secondary=PairedComparison.model_construct(n=N),
    )
    return Replication.model_construct(control="placebo", judge_mode=mode, secondary_measure="error", biases=[bias])


@pytest.mark.parametrize("mode", ["pairwise", "pointwise"])
def test_the_replication_table_keeps_every_figure_whole_at_80_columns(mode: str) -> None:
    """Before: `[-100.…` and `[-12.5…` (a pointwise judge's eight columns) and the bias name cut."""
    from bias_discovery.cli._replicate import _bias_table

    table = _bias_table(_replication(mode), width=80)
    _assert_whole(table)
    text = _render(table)
    assert "Overconfident" in " ".join(text.split()) and f"({N})" in text
    if mode == "pairwise":
        assert "[-100.0, +100.0]" in text and "[-100.0, -87.6]" in text
    else:  # four columns of figures: each CI on two lines, split at its comma
        assert "[-12.50," in text and "-8.75]" in text and "(0.046)" in text
        assert "[-12.50, -8.75]" in _render(_bias_table(_replication(mode), width=120))  # one line where it fits


def test_the_matrix_table_keeps_every_figure_whole_at_80_columns() -> None:
    from bias_discovery.api import MatrixResult
    from bias_discovery.cli._matrix import matrix_table
    from bias_discovery.judge_matrix._records import MatrixCell, MatrixSettingsRecord

    cell = MatrixCell.model_construct(
        judge="openai/Qwen2.5-72B-Instruct-AWQ",
        bias="d12-overconfident-expert-citation-bias",
        delta=-1.0,
        ci_low=-1.0,
        ci_high=1.0,
        n=N,
        p_adjusted=0.0123,
        mde=0.1234,
        accepted=True,
    )
    jury = cell.model_copy(update={"judge": "jury (majority of 3)", "n": 0})
    result = MatrixResult.model_construct(
        settings=MatrixSettingsRecord.model_construct(control="placebo"), cells=[cell], jury=[jury]
    )
    table = matrix_table(result)
    _assert_whole(table)
    assert "[-100.0, +100.0]" in _render(table) and "(no valid item)" in _render(table)


def _big(value: float):
    from bias_discovery.metrics import Estimate

    return Estimate(value=value, n=N, ci_low=-1.0 if value < 0 else 0.0, ci_high=1.0, n_excluded=1_234)


def _audit_entry(kind: str, mitigated: bool):
    from bias_discovery.api import AuditMetrics, BiasAudit, SchemeAudit
    from bias_discovery.auditing.records import PaddingLevel
    from bias_discovery.stats import PairedComparison

    comparison = PairedComparison.model_construct(
        delta=-1.0, ci_low=-1.0, ci_high=1.0, n=N, p_value=0.0123, n_excluded_invalid=1_234
    )
    figures: dict = {}
    for name, field in AuditMetrics.model_fields.items():
        annotation = str(field.annotation)
        if "PairedComparison" in annotation:
            figures[name] = comparison
        elif "Estimate" in annotation and "list" not in annotation and "dict" not in annotation:
            figures[name] = _big(-1.0)
    shift = _big(-12.345).model_copy(update={"ci_low": -12.5, "ci_high": 10.25})
    figures.update(
        position_flag=True,
        length_flag=True,
        spearman_p=1e-4,
        padding=[
            PaddingLevel.model_construct(
                factor=f,
                words_added=_big(0.5),
                score_shift=shift,
                score_shift_share=comparison,
                score_unchanged=_big(0.5),
            )
            for f in (1.5, 2, 4)
        ],
    )
    scheme = SchemeAudit.model_construct(scheme="shuffle3", calls_per_verdict=3, calls=123_456, **figures)
    return BiasAudit.model_construct(
        id="d12-overconfident-expert-citation-bias",
        name="Overconfident expert citation",
        kind=kind,
        source="run qwen7b",
        n_items=N,
        n_perturb_invalid=12,
        scheme="none",
        calls_per_verdict=1,
        calls=N,
        mitigated=scheme if mitigated else None,
        **figures,
    )


@pytest.mark.parametrize(
    "mode,kind",
    [
        ("pairwise", "position"),
        ("pairwise", "length"),
        ("pairwise", "perturbation"),
        ("pointwise", "length"),
        ("pointwise", "perturbation"),
    ],
)
@pytest.mark.parametrize("mitigated", [False, True], ids=["unmitigated", "mitigated"])
def test_the_audit_table_keeps_every_figure_whole_at_80_columns(mode: str, kind: str, mitigated: bool) -> None:
    """Before: with a mitigated judge beside the unmitigated one, `[-100.0%, -87.6…` and
    `1234 left …`, and measure names cut (`PB (q solv…`)."""
    from bias_discovery.api import AuditReport
    from bias_discovery.auditing.records import AuditSettingsRecord
    from bias_discovery.cli._audit import audit_table

    settings = AuditSettingsRecord.model_construct(mode=mode, mitigation="shuffle3")
    table = audit_table(_audit_entry(kind, mitigated), AuditReport.model_construct(settings=settings))
    _assert_whole(table)
    text = _render(table)
    assert "left out" in text and ("[-12.50, +10.25]" if mode == "pointwise" else "[-100.0, +100.0] pp") in text
    assert ("shuffle3" in text) == mitigated
    labels = [str(cell) for cell in table.columns[0].cells]
    assert all(label in " ".join(text.split()) for label in labels if " " not in label)


def test_the_pro_comparison_keeps_every_figure_whole_at_80_columns() -> None:
    """Before: `mathem…` and `origin…` cut; now each error sits over its 95 % CI and n."""
    from bias_discovery.api.views import compare_table
    from bias_discovery.export.compare import CompareReport, CompareRow

    row = CompareRow(
        domain="mathematics",
        original_n=N,
        original_error=0.4567,
        original_ci_low=0.4123,
        original_ci_high=0.5012,
        pro_n=N,
        pro_error=1.0,
        pro_ci_low=0.9987,
        pro_ci_high=1.0,
        delta=0.5433,
        original_judgebench=0.5123,
        pro_judgebench=0.0,
    )
    report = CompareReport.model_construct(
        model="openai/Qwen2.5-7B-Instruct", rows=[row, row.model_copy(update={"domain": "all"})]
    )
    table = compare_table(report)
    _assert_whole(table)
    text = _render(table)
    assert "mathematics" in text and "(41.2-50.1)" in text and "(99.9-100.0)" in text and f"({N})" in text


def test_the_corrected_estimates_keep_every_figure_whole_at_80_columns() -> None:
    from bias_discovery.api import CorrectedEstimate
    from bias_discovery.cli._correct import _table

    estimate = CorrectedEstimate.model_construct(
        estimate=-0.123456, ci_low=-0.5, ci_high=0.25, n_labelled=N, n_unlabelled=1_234_567
    )
    table = _table("ppi++_covariates by domain", [("PPI++ covariates", estimate), ("labels only", estimate)], 0.95)
    _assert_whole(table)
    assert "-0.500 to 0.250" in _render(table)


def test_the_export_counts_keep_each_count_beside_its_kind_at_80_columns() -> None:
    """A count by kind (dropped by filter, per bias) lists one kind a line: before, a count
    wrapped onto the line below its kind (`filter_judge_wrong` / `12345, invalid 12`)."""
    from bias_discovery.cli._export import counts_table

    counts = {
        "pairs_in": N,
        "variants_written": 123_456,
        "dropped_by_filter": {"answer_changed": 1_234, "too_long": 234, "filter_judge_wrong": N, "invalid": 12},
        "biases": {"d12-overconfident-expert-citation-bias": N, "authority-bias": 1_234},
        "none": None,
        "empty": {},
    }
    table = counts_table("judgebench-pro: counts", counts)
    _assert_whole(table)
    text = _render(table)
    assert f"filter_judge_wrong {N}" in text and f"d12-overconfident-expert-citation-bias {N}" in text


def test_an_audit_from_a_log_prints_at_80_columns_with_nothing_cut(tmp_path) -> None:
    """The command as a user runs it in a CI log (80 columns): `audit --from-log` on a generic
    log of 300 pairs in both orders, in process; no line is wider than 80 and nothing is cut."""
    from helpers import cli_in_process

    log = tmp_path / "log.csv"
    rows = []
    for i in range(300):
        better = "A" if i % 2 else "B"  # as shown in order AB; the label is as shown, so it swaps in BA
        for order in ("AB", "BA"):
            label = better if order == "AB" else {"A": "B", "B": "A"}[better]
            rows.append(f"p{i},{order},{'A' if (i + (order == 'BA')) % 3 else 'B'},{label}\n")
    log.write_text("id,shown,v,gold\n" + "".join(rows))
    columns = "pair_id=id,order=shown,verdict=v,label=gold"
    out = cli_in_process(
        "audit", "--from-log", str(log), "--columns", columns, "--n-boot", "200", env={"COLUMNS": "80"}
    )
    assert "…" not in out.stdout, out.stdout
    assert "first wins" in out.stdout and "Acc_both" in out.stdout, out.stdout
    assert "Position (built-in) [position, log]: 300 pairs\n" in out.stdout  # not wrapped to the narrow table
    # the tables' lines, from a header to its caption (the sentences around them are
    # soft-wrapped by the terminal, not cut)
    lines = out.stdout.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("measure ")]
    captions = [i for i, line in enumerate(lines) if line.startswith("cost: ")]
    assert len(headers) == len(captions) == 1, out.stdout  # position (length needs the responses)
    for start, end in zip(headers, captions):
        assert max(cell_len(line) for line in lines[start:end]) <= 80, out.stdout

"""`bias-discovery correct` / `api.correct`: a judge's aggregate corrected with a few labels.
Fast: generated logs, in process; the estimates themselves are checked against ppi_py in
tests/stats/test_stats_ppi.py. Bad input: a clear error naming file, line and field, and
nothing written."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import ppi_py
import pytest
from typer.testing import CliRunner

from bias_discovery.api import correct
from bias_discovery.cli import app
from bias_discovery.errors import DataError

PAIR_COLUMNS = "pair_id=pair_id,verdict=verdict,order=order"


def _pair_log(path: Path, n: int = 120, *, label_every: int = 4, seed: int = 1) -> dict[str, float]:
    """A generic pairwise log (both orders per pair) with a `human` column on every
    `label_every`-th pair, a length difference and a verbosity flag; returns the true labels."""
    rng = random.Random(seed)
    truth: dict[str, float] = {}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pair_id", "verdict", "order", "human", "len_diff", "verbose", "constant"])
        for i in range(n):
            better_a = rng.random() < 0.55
            verbose = int(rng.random() < 0.4)
            truth[f"p{i}"] = 1.0 if better_a else 0.0
            for order in ("AB", "BA"):
                picks_a = rng.random() < (0.8 if better_a else 0.25) + 0.15 * verbose
                shown_a = order == "AB"
                verdict = ("A" if picks_a else "B") if shown_a else ("B" if picks_a else "A")
                human = ("A" if better_a else "B") if i % label_every == 0 else ""
                w.writerow([f"p{i}", verdict, order, human, rng.randint(-40, 40), verbose, 3])
    return truth


def _score_table(path: Path, n: int = 90) -> None:
    rng = random.Random(2)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "score", "label", "model", "words"])
        for i in range(n):
            y = rng.randint(1, 6)
            s = min(6, max(1, y + rng.choice([0, 1, 1, -1])))
            w.writerow([f"e{i}", s, y if i % 3 == 0 else "", "x" if i % 2 else "y", rng.randint(100, 600)])


def test_pairwise_estimates_are_ppi_py_on_the_logs_arrays(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    _pair_log(log)
    out = correct(log, columns=PAIR_COLUMNS, label_column="human", covariates=["len_diff"], flags=["verbose"])
    report = out.report
    assert report.mode == "pairwise" and report.n_items == 120 and report.n_labelled == 30
    methods = [e.method for e in report.estimates]
    assert methods == ["judge_only", "labels_only", "ppi++", "ppi++_covariates"]
    # rebuild the arrays from the file: the judge's value is its share of A picks over both orders
    picks: dict[str, list[float]] = {}
    labels: dict[str, float] = {}
    for row in csv.DictReader(log.open()):
        a = (row["verdict"] == "A") == (row["order"] == "AB")
        picks.setdefault(row["pair_id"], []).append(1.0 if a else 0.0)
        if row["human"]:
            labels[row["pair_id"]] = 1.0 if row["human"] == "A" else 0.0
    ids = list(picks)
    judge = np.array([np.mean(picks[i]) for i in ids])
    lab = np.array([i in labels for i in ids])
    y = np.array([labels[i] for i in ids if i in labels])
    ppi = report.estimates[2]
    low, high = ppi_py.ppi_mean_ci(y, judge[lab], judge[~lab], alpha=0.05, lam=None)
    assert (ppi.ci_low, ppi.ci_high) == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)
    point = ppi_py.ppi_mean_pointestimate(y, judge[lab], judge[~lab], lam=None)
    assert ppi.estimate == pytest.approx(float(np.ravel(point)[0]), abs=1e-9)
    assert report.estimates[0].estimate == pytest.approx(float(judge.mean()), abs=1e-12)
    assert report.estimates[1].estimate == pytest.approx(float(y.mean()), abs=1e-12)
    assert [g.name for g in report.gap] == ["intercept", "verbose"] and report.gap[1].n == 30


def test_labels_from_a_second_file_and_the_outputs(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    truth = _pair_log(log, label_every=10**6)  # no label in the log itself (pair 0 only)
    labels = tmp_path / "human.jsonl"
    chosen = sorted(truth)[:25]
    labels.write_text("".join(json.dumps({"id": i, "label": "A" if truth[i] else "B"}) + "\n" for i in chosen))
    out = correct(log, columns=PAIR_COLUMNS, labels=labels, out=tmp_path / "out")
    assert out.report.n_labelled == 25
    record = json.loads((tmp_path / "out" / "correct.json").read_text())
    assert record["kind"] == "correction" and [e["method"] for e in record["estimates"]][:3] == [
        "judge_only",
        "labels_only",
        "ppi++",
    ]
    page = (tmp_path / "out" / "correct.html").read_text()
    assert "data:image/svg+xml;base64," in page and "PPI++" in page and "random sample" in page


def test_pointwise_groups_and_difference(tmp_path: Path) -> None:
    table = tmp_path / "scores.csv"
    _score_table(table)
    out = correct(table, mode="pointwise", scale="1-6", columns="id=id,score=score,label=label,group=model")
    report = out.report
    assert report.scale and report.n_items == 90 and report.n_labelled == 30
    assert [g.group for g in report.groups] == ["x", "y"]
    (diff,) = report.differences
    x = {e.method: e for e in report.groups[0].estimates}
    y = {e.method: e for e in report.groups[1].estimates}
    k = diff.of.index("ppi++")
    assert diff.estimates[k].estimate == pytest.approx(x["ppi++"].estimate - y["ppi++"].estimate)
    se = np.hypot(x["ppi++"].standard_error, y["ppi++"].standard_error)
    assert diff.estimates[k].width == pytest.approx(2 * 1.959963984540054 * se)


def test_plan_writes_a_seeded_sample_of_unlabelled_items(tmp_path: Path) -> None:
    table = tmp_path / "scores.csv"
    _score_table(table, n=300)
    first = correct(table, mode="pointwise", scale="1-6", plan=True, target_width=0.6, out=tmp_path / "a")
    again = correct(table, mode="pointwise", scale="1-6", plan=True, target_width=0.6)
    plan = first.report.plan
    assert plan is not None and again.report.plan is not None
    assert plan.correlation_from == "pilot" and plan.n_pilot == 100
    assert plan.plan.n_ppi is not None and plan.plan.n_ppi < plan.plan.n_labels_only
    assert plan.to_label == again.report.plan.to_label  # seeded
    assert len(plan.to_label) == max(0, plan.plan.n_ppi - 100)
    written = (tmp_path / "a" / "to_label.csv").read_text().split()
    assert written == ["id", *plan.to_label]
    labelled = {f"e{i}" for i in range(0, 300, 3)}
    assert not labelled & set(plan.to_label)


def test_plan_without_labels_needs_an_assumed_correlation(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    _pair_log(log, label_every=10**6)
    with pytest.raises(DataError, match="pilot of at least 10"):
        correct(log, columns=PAIR_COLUMNS, plan=True)
    out = correct(log, columns=PAIR_COLUMNS, plan=True, assumed_correlation=0.6, target_width=0.2)
    assert out.report.plan is not None and out.report.plan.correlation_from == "assumed"
    assert out.report.plan.plan.n_ppi is not None and len(out.report.plan.to_label) == out.report.plan.plan.n_ppi


@pytest.mark.parametrize(
    ("write", "options", "message"),
    [
        (
            lambda d: (d / "h.csv").write_text("id,label\np0,A\nnot-a-pair,B\n"),
            {"labels": "h.csv"},
            r"h\.csv:3: item 'not-a-pair' of the labels .* is not in the log",
        ),
        (lambda d: None, {"label_column": "empty"}, "0 of 120 items carry a human label"),
        (
            lambda d: (d / "h.csv").write_text("id,label\np0,C\n"),
            {"labels": "h.csv"},
            r"h\.csv:2: column 'label' has value 'C'",
        ),
        (lambda d: None, {"label_column": "human", "covariates": ["constant"]}, "covariate 'constant' is constant"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path, write, options, message) -> None:
    log = tmp_path / "log.csv"
    _pair_log(log, label_every=10**6)
    write(tmp_path)
    with open(log) as f:  # an all-empty label column
        rows = list(csv.reader(f))
    with open(log, "w", newline="") as f:
        csv.writer(f).writerows([[*r, "empty" if k == 0 else ""] for k, r in enumerate(rows)])
    options = {k: (tmp_path / v if k == "labels" else v) for k, v in options.items()}
    with pytest.raises(DataError, match=message):
        correct(log, columns=PAIR_COLUMNS, out=tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_a_pointwise_label_outside_the_scale_names_the_line(tmp_path: Path) -> None:
    table = tmp_path / "scores.csv"
    table.write_text("id,score,label\ne0,3,4\ne1,4,7\ne2,2,\n")
    with pytest.raises(DataError, match=r"scores\.csv:3: column 'label' has value '7', outside the scale"):
        correct(table, mode="pointwise", scale="1-6", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_prints_the_three_estimates_and_fails_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bias_discovery.cli import _common as common

    monkeypatch.setattr(common.console, "_width", 80)
    log = tmp_path / "log.csv"
    _pair_log(log)
    result = CliRunner().invoke(
        app, ["correct", str(log), "--columns", PAIR_COLUMNS, "--label-column", "human", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    for name in ("judge only", "labels only", "PPI++", "95% CI", "n labelled"):
        assert name in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    bad = CliRunner().invoke(app, ["correct", str(log), "--columns", PAIR_COLUMNS, "--label-column", "nope"])
    assert bad.exit_code == 2
    assert "label column 'nope' is missing" in " ".join(bad.output.split())


def test_bias_bound_is_effect_times_share_with_both_intervals() -> None:
    from bias_discovery.auditing.correction import bias_bound
    from bias_discovery.auditing.correction_inputs import Item
    from bias_discovery.stats import wilson_interval

    items = [Item(item_id=str(k), judge=0.5, flags={"verbosity": float(k < 30)}) for k in range(100)]
    (row,) = bias_bound(items, {"verbosity": (0.2, (0.1, 0.3))})
    low, high = wilson_interval(30, 100)
    assert (row.n, row.n_flagged, row.share) == (100, 30, 0.3)
    assert row.bound == pytest.approx(0.06)
    assert row.share_ci == pytest.approx((low, high))
    assert row.bound_ci == pytest.approx((0.1 * low, 0.3 * high))
    with pytest.raises(DataError, match="no item carries its flag column"):
        bias_bound(items, {"authority": (0.1, None)})


def test_report_redraws_the_page_of_a_correct_directory(tmp_path: Path) -> None:
    from bias_discovery.api import report

    log = tmp_path / "log.csv"
    _pair_log(log)
    correct(log, columns=PAIR_COLUMNS, label_column="human", out=tmp_path / "out")
    (tmp_path / "out" / "correct.html").unlink()
    page = report(tmp_path / "out")
    assert page == tmp_path / "out" / "correct.html"
    assert "data:image/svg+xml;base64," in page.read_text()


def test_plan_with_an_assumed_correlation_and_a_one_valued_judge_uses_half_the_span(tmp_path: Path) -> None:
    table = tmp_path / "scores.csv"
    table.write_text("id,score\n" + "".join(f"e{i},1\n" for i in range(40)))
    plan = correct(table, mode="pointwise", scale="1-6", plan=True, assumed_correlation=0.5, target_width=1.2)
    assert plan.report.plan is not None and plan.report.plan.plan.sd == 2.5

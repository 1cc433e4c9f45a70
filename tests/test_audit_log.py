"""`audit --from-log`: the known-bias audit of verdicts a judge already gave, with no model call.

The planted judge is the stub server (tests/stub_openai.py --planted-position/--planted-length):
a live audit against it writes judgments.jsonl, the stub is stopped, and the audit from that log
must find both planted biases with CIs that cover them. Then the other log formats (inspect_ai,
generic JSONL / CSV / parquet with a column map), bad rows, and what a log cannot support."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest

from bias_discovery.api import audit, audit_log
from bias_discovery.auditing.fromlog import model_family
from bias_discovery.auditing.logs import ColumnMap
from bias_discovery.errors import DataError

from helpers import cli
from stub_openai import launch

PLANTED_POSITION, PLANTED_LENGTH, PLANTED_ERROR = 0.3, 0.4, 0.2


def write_pairs(path: Path, n: int) -> Path:
    """Pairs the planted stub judges ("right answer" marks the chosen response), half of them
    with the chosen response longer, none of equal length."""
    with path.open("w") as f:
        for i in range(n):
            short, long = 4 + i % 5, 12 + i % 7
            chosen_words, rejected_words = (long, short) if i % 2 == 0 else (short, long)
            f.write(
                json.dumps(
                    {
                        "id": f"q{i:03d}",
                        "question": f"Question {i}: which is right?",
                        "domain": ["math", "code"][i % 2],
                        "chosen": "The right answer " + " ".join(["so"] * chosen_words) + f" {i}.",
                        "rejected": "A wrong answer " + " ".join(["eh"] * rejected_words) + f" {i}.",
                    }
                )
                + "\n"
            )
    return path


@pytest.fixture(scope="module")
def stub_audit(tmp_path_factory) -> Path:
    """A live audit of the planted stub judge (200 pairs, both orders, 2 repeats): its
    directory, written while the stub ran; the stub is stopped when this returns."""
    root = tmp_path_factory.mktemp("stub_audit")
    data = write_pairs(root / "pairs.jsonl", 200)
    with launch(
        0.0,
        "--planted-position",
        str(PLANTED_POSITION),
        "--planted-length",
        str(PLANTED_LENGTH),
        "--planted-error",
        str(PLANTED_ERROR),
        "--planted-salt",
        "from-log",
    ) as (url, _):
        audit(
            "openai/served",
            str(data),
            "position,length",
            base_url=url,
            out=root / "live",
            cache=False,
            settings={"repeats": 2, "n_boot": 500, "judge": {"reasoning": False, "max_tokens": 8}},
        )
    return root


def _entry(report, bias_id):
    return next(b for b in report.biases if b.id == bias_id)


def test_planted_position_and_length_found_from_the_log_with_no_server(stub_audit: Path, tmp_path: Path):
    """No server is up: the audit reads the log only. PB's CI covers the planted 0.3 and LB's
    the planted (1 - 0.3) x 0.4 = 0.28; q̂ is 0 (the stub ignores the seed); the figures are
    the live audit's, on the same verdicts."""
    out = audit_log(
        stub_audit / "live" / "judgments.jsonl",
        data=str(stub_audit / "pairs.jsonl"),
        n_boot=500,
        out=tmp_path / "from_log",
    )
    report = out.report
    assert report.from_log is not None and report.from_log.format == "judgments" and report.calls.judge == 0
    position, length = _entry(report, "position"), _entry(report, "length")
    assert position.pb.n == 200 and position.pb.ci_low <= PLANTED_POSITION <= position.pb.ci_high
    assert position.q_hat.value == 0.0 and position.position_flag is True
    planted_lb = (1 - PLANTED_POSITION) * PLANTED_LENGTH
    assert length.lb.n == 200 and length.lb.ci_low <= planted_lb <= length.lb.ci_high and length.lb.value > 0.1
    live = json.loads((stub_audit / "live" / "audit.json").read_text())
    live_position = next(b for b in live["biases"] if b["id"] == "position")
    for field in ("pb", "z", "acc_both", "rr", "cr"):
        assert getattr(position, field).value == pytest.approx(live_position[field]["value"]), field
    assert report.agreement is not None and report.agreement.n == 200
    assert {u.measure for u in report.unsupported} >= {"calibration", "self-preference"}
    written = json.loads((tmp_path / "from_log" / "audit.json").read_text())
    assert written["from_log"]["verdicts"] == 800 and not (tmp_path / "from_log" / "judgments.jsonl").exists()


def test_without_the_data_length_is_unsupported_and_says_why(stub_audit: Path):
    report = audit_log(stub_audit / "live" / "judgments.jsonl", n_boot=200).report
    assert [b.id for b in report.biases] == ["position"]
    [length] = [u for u in report.unsupported if u.measure == "length"]
    assert "--data" in length.reason


def test_the_command_prints_the_log_audit_and_the_report_renders(stub_audit: Path, tmp_path: Path):
    out = tmp_path / "cli"
    result = cli(
        "audit",
        "--from-log",
        str(stub_audit / "live" / "judgments.jsonl"),
        "--data",
        str(stub_audit / "pairs.jsonl"),
        "--n-boot",
        "200",
        "--out",
        str(out),
    )
    assert "from a log" in result.stdout and "not supported" in result.stdout and "PB" in result.stdout
    cli("report", str(out))
    html = (out / "report.html").read_text()
    assert "from a log" in html and "not supported" in html


# -- other formats ------------------------------------------------------------------------


def _generic_rows(stub_audit: Path) -> list[dict]:
    """The live audit's verdicts as a generic log: the responses as shown, a label, a
    probability, the models that wrote the responses and the judge's name."""
    pairs = {json.loads(line)["id"]: json.loads(line) for line in (stub_audit / "pairs.jsonl").read_text().splitlines()}
    rows = []
    for line in (stub_audit / "live" / "judgments.jsonl").read_text().splitlines():
        j = json.loads(line)
        p = pairs[j["pair_id"]]
        chosen_first = j["order"] == "chosen_first"
        a, b = (p["chosen"], p["rejected"]) if chosen_first else (p["rejected"], p["chosen"])
        rows.append(
            {
                "qid": j["pair_id"],
                "shown_first": a,
                "shown_second": b,
                "choice": j["verdict"],
                "gold": "A" if chosen_first else "B",
                "p_a": 0.9 if j["verdict"] == "A" else 0.1,
                "len_a": len(a.split()),
                "len_b": len(b.split()),
                "writer_a": "gpt-4o" if (a == p["chosen"]) == (int(j["pair_id"][1:]) % 4 < 2) else "claude-3-5-sonnet",
                "writer_b": "claude-3-5-sonnet" if (a == p["chosen"]) == (int(j["pair_id"][1:]) % 4 < 2) else "gpt-4o",
                "judge": "openai/gpt-4o-mini",
            }
        )
    return rows


COLUMNS = (
    "pair_id=qid,verdict=choice,label=gold,response_a=shown_first,response_b=shown_second,probability=p_a,"
    "model_a=writer_a,model_b=writer_b,judge_model=judge"
)


def test_a_generic_jsonl_csv_and_parquet_log_give_the_same_audit(stub_audit: Path, tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _generic_rows(stub_audit)
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (tmp_path / "log.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "log.parquet")
    reports = [
        audit_log(tmp_path / f"log.{ext}", columns=COLUMNS, n_boot=200).report for ext in ("jsonl", "csv", "parquet")
    ]
    live = audit_log(stub_audit / "live" / "judgments.jsonl", data=str(stub_audit / "pairs.jsonl"), n_boot=200).report
    for report in reports:
        assert report.from_log.format == "generic" and report.model == "openai/gpt-4o-mini"
        # the repeats come in file order: the same figures as the audit's own log
        assert _entry(report, "position").pb.value == pytest.approx(_entry(live, "position").pb.value)
        assert _entry(report, "length").lb.value == pytest.approx(_entry(live, "length").lb.value)
        cal = report.calibration
        assert (
            cal is not None
            and cal.n_verdicts == 800
            and cal.ece is not None
            and cal.ece_ci_low <= cal.ece <= cal.ece_ci_high
        )
        sp = report.self_preference
        assert sp is not None and sp.judge_family == "gpt" and sp.n_items == 200 and sp.delta is not None
    # a YAML column map reads the same
    (tmp_path / "map.yaml").write_text(
        "\n".join(f"{k}: {v}" for k, v in (e.split("=") for e in COLUMNS.split(","))) + "\n"
    )
    again = audit_log(jsonl, columns=str(tmp_path / "map.yaml"), n_boot=200).report
    assert _entry(again, "position").pb.value == _entry(reports[0], "position").pb.value


def test_a_log_without_labels_or_repeats_says_what_it_cannot_measure(tmp_path: Path):
    log = tmp_path / "log.csv"
    log.write_text(
        "id,shown,v\n"
        + "".join(f"p{i},{o},{'A' if (i + (o == 'BA')) % 3 else 'B'}\n" for i in range(30) for o in ("AB", "BA"))
    )
    report = audit_log(log, columns="pair_id=id,order=shown,verdict=v", n_boot=200).report
    position = _entry(report, "position")
    assert position.z.value is not None and position.pb is None and position.acc_both is None and position.q_hat is None
    measures = {u.measure: u.reason for u in report.unsupported}
    assert (
        "labels" in measures["agreement with labels"]
        and "repeated" in measures["flipping noise q̂, de-noised PB and LB, CALM's CR"]
    )
    assert "lengths" in measures["length"] and "not named" in measures["self-preference"]


def _inspect_sample(pair: str, order: str, target: str, answer: str | None, epoch: int) -> dict:
    return {
        "id": f"{pair}::{order}",
        "epoch": epoch,
        "input": "Which is right?",
        "target": target,
        "choices": ["first response words here", "second one"]
        if order == "original"
        else ["second one", "first response words here"],
        "metadata": {"sample_id": pair, "order": order, "domain": "math", "pair_id": pair},
        "scores": {"pairwise_verdict": {"value": {"right": 1}, "answer": answer}},
    }


def test_inspect_ai_logs_json_and_eval(tmp_path: Path):
    """inspect_ai's documented log format (what `export inspect`'s task writes): the judge
    always answers A, so every pair is won by the first position in both orders."""
    samples = [
        _inspect_sample(f"s{i}", order, target, "A", epoch)
        for i in range(12)
        for order, target in (("original", "A"), ("swapped", "B"))
        for epoch in (1, 2)
    ]
    header = {"version": 2, "status": "success", "eval": {"task": "pairwise", "model": "openai/gpt-4o"}}
    (tmp_path / "log.json").write_text(json.dumps({**header, "samples": samples}))
    with zipfile.ZipFile(tmp_path / "log.eval", "w") as archive:
        archive.writestr("header.json", json.dumps(header))
        for s in samples:
            archive.writestr(f"samples/{s['id'].replace('::', '_')}_epoch_{s['epoch']}.json", json.dumps(s))
    for name in ("log.json", "log.eval"):
        report = audit_log(tmp_path / name, n_boot=200).report
        position = _entry(report, "position")
        assert report.from_log.format == "inspect" and report.model == "openai/gpt-4o" and report.settings.repeats == 2
        assert position.first_win_rate.value == 1.0 and position.z.n == 12 and position.pb.value == 1.0
        assert position.q_hat.value == 0.0 and _entry(report, "length").n_items == 12


@pytest.mark.parametrize(
    ("content", "columns", "message"),
    [
        (
            "pair_id,verdict,label\np1,A,A\np1,C,B\n",
            "pair_id=pair_id,verdict=verdict,label=label",
            "log.csv:3: column 'verdict' has value 'C'",
        ),
        (
            "pair_id,verdict,label\np1,A,A\np1,B,maybe\n",
            "pair_id=pair_id,verdict=verdict,label=label",
            "log.csv:3: column 'label' has value 'maybe'",
        ),
        (
            "pair_id,verdict\np1,A\n",
            "pair_id=pair_id,verdict=verdict",
            "log.csv:2: cannot tell which response was shown first",
        ),
        (
            "pair_id,verdict,label,p\np1,A,A,1.5\n",
            "pair_id=pair_id,verdict=verdict,label=label,probability=p",
            "log.csv:2: field 'p' has value '1.5'",
        ),
        ("pair_id,verdict\np1,A\n", "pair_id=pair_id,verdict=verdict,colour=x", "invalid column map"),
    ],
)
def test_a_bad_row_is_named_with_file_line_and_field(tmp_path: Path, content: str, columns: str, message: str):
    (tmp_path / "log.csv").write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        audit_log(tmp_path / "log.csv", columns=columns)


def test_a_bad_line_of_our_judgments_log_is_named(tmp_path: Path):
    log = tmp_path / "judgments.jsonl"
    good = {
        "pair_id": "p1",
        "domain": "math",
        "order": "chosen_first",
        "verdict": "A",
        "picked": "chosen",
        "correct": True,
    }
    log.write_text(json.dumps(good) + "\n" + json.dumps({**good, "order": "sideways"}) + "\n")
    with pytest.raises(DataError, match=r"judgments.jsonl:2: field 'order' has value 'sideways'"):
        audit_log(log)
    log.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(DataError, match=r"judgments.jsonl:2"):
        audit_log(log)


def test_the_command_refuses_a_bad_log_and_writes_nothing(tmp_path: Path):
    (tmp_path / "log.csv").write_text("pair_id,verdict,label\np1,A,Z\n")
    result = cli(
        "audit",
        "--from-log",
        str(tmp_path / "log.csv"),
        "--columns",
        "pair_id=pair_id,verdict=verdict,label=label",
        "--out",
        str(tmp_path / "out"),
        check=False,
    )
    assert result.returncode != 0 and "log.csv:2" in result.stderr + result.stdout and not (tmp_path / "out").exists()
    result = cli("audit", "--from-log", str(tmp_path / "log.csv"), "--model", "openai/x", check=False)
    assert result.returncode != 0 and "--from-log" in result.stderr + result.stdout


def test_model_family():
    assert model_family("gpt-4o-2024-05-13") == "gpt" and model_family("openai/gpt-4o") == "gpt"
    assert model_family("claude-3-5-sonnet-20240620") == "claude" and model_family("meta-llama/Llama-3-8B") == "llama"
    assert model_family("llamacpp/smollm2") == "smollm"


def test_column_map_from_flags():
    cols = ColumnMap.parse("pair_id=qid,verdict=choice")
    assert cols.pair_id == "qid" and cols.verdict == "choice" and cols.label is None
    with pytest.raises(DataError, match="not of the form key=column"):
        ColumnMap.parse("pair_id")


# -- calibration of a live audit's score verdicts -------------------------------------------


def test_a_live_audit_with_score_verdicts_reports_calibration_and_a_reliability_plot(tmp_path: Path):
    """A scripted judge that says P(A) = 0.9 whatever it is shown: right at 90 % confidence
    when the right answer is first, wrong at 90 % when it is second: accuracy 50 %, ECE 0.4,
    Brier (0.1² + 0.9²) / 2 = 0.41."""
    from bias_discovery.report.audit import write_audit_report

    from fakes import ScriptedEngine

    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "question": f"Q{i}?", "chosen": f"RIGHT {i}", "rejected": f"wrong {i}"}) + "\n"
            for i in range(10)
        )
    )
    engine = ScriptedEngine(lambda request: "Verdict: A", probability_of_a=lambda request: 0.9)
    output = audit(
        "openai/unused",
        str(data),
        "position",
        out=tmp_path / "audit",
        cache=False,
        engines={"target": engine},
        settings={"repeats": 2, "n_boot": 200, "judge": {"verdict": "score", "reasoning": False, "max_tokens": 4}},
    )
    cal = output.report.calibration
    assert cal is not None and cal.n_items == 10 and cal.n_verdicts == 40
    assert cal.ece == pytest.approx(0.4) and cal.brier == pytest.approx(0.41) and cal.accuracy == 0.5
    html = write_audit_report(tmp_path / "audit").read_text()
    assert "calibration: ECE 0.400" in html and 'alt="reliability diagram' in html
    # the same verdicts from the log: the same calibration
    again = audit_log(tmp_path / "audit" / "judgments.jsonl", n_boot=200).report.calibration
    assert again is not None and again.ece == pytest.approx(0.4) and again.brier == pytest.approx(0.41)


# -- logs read as written (issue 47) --------------------------------------------------------

_MAP = "pair_id=pair_id,verdict=verdict,label=label"


@pytest.mark.parametrize(
    ("name", "content", "columns", "message"),
    [
        # a row with no verdict field: not an invalid verdict, a malformed row
        (
            "log.jsonl",
            '{"pair_id": "p1", "verdict": "A", "label": "A"}\n{"pair_id": "p1", "label": "B"}\n',
            _MAP,
            r"log.jsonl:2: no column 'verdict' \(the column map's verdict\)",
        ),
        ("log.csv", "pair_id,verdict,label\np1,A,A\np1,B\n", _MAP, r"log.csv:3: field 'label' is missing"),
        ("log.csv", "pair_id,verdict,label\np1,A,A,x\n", _MAP, r"log.csv:2: more cells than the header's 3"),
        # a column map naming a column the file lacks
        (
            "log.csv",
            "pair_id,verdict,label\np1,A,A\n",
            _MAP + ",length_a=len_a,length_b=len_b",
            r"log.csv:1: no column 'len_a' \(the column map's length_a\); the header has: pair_id, verdict, label",
        ),
        (
            "log.jsonl",
            '{"pair_id": "p1", "choice": "A", "label": "A"}\n',
            _MAP,
            r"log.jsonl:1: no column 'verdict' \(the column map's verdict\); the row has: pair_id, choice, label",
        ),
        # broken first line, as a broken later line; an empty file
        ("log.jsonl", '{"pair_id": "p1", "verdict": \n', _MAP, r"log.jsonl:1: malformed JSON"),
        ("log.jsonl", "\n \n", _MAP, r"log.jsonl: the log file is empty"),
        ("log.csv", "", _MAP, r"log.csv: the log file is empty"),
        ("judgments.jsonl", "{not json\n", None, r"judgments.jsonl:1: malformed JSON"),
        ("judgments.jsonl", "", None, r"judgments.jsonl: the log file is empty"),
        ("log.json", '{"eval": {}, "samples": [', None, r"log.json: malformed JSON"),
        # our judgments.jsonl: a row with no 'picked' is not an invalid verdict
        (
            "judgments.jsonl",
            '{"pair_id": "p1", "order": "chosen_first", "picked": "chosen"}\n{"pair_id": "p1", "order": "rejected_first"}\n',
            None,
            r"judgments.jsonl:2: field 'picked' is missing",
        ),
    ],
)
def test_a_log_is_read_as_written(tmp_path: Path, name: str, content: str, columns: str | None, message: str):
    """Issue 47: each of these audited before (exit 0, the row counted as an invalid verdict,
    or a "not a judgments.jsonl" guess); each is now an error naming the file, line and field."""
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=message):
        audit_log(tmp_path / name, columns=columns)


def test_a_csv_cell_keeps_its_newlines_and_later_rows_their_line(tmp_path: Path):
    from bias_discovery.auditing.logs import read_log

    rows = [
        ["pair_id", "verdict", "label", "a", "b"],
        ["p1", "A", "A", "first line\nsecond line", "short"],
        ["p1", "B", "B", "short", "first line\nsecond line"],
        ["p2", "A", "A", "x y", "z"],
    ]
    with (tmp_path / "log.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    log = read_log(tmp_path / "log.csv", ColumnMap.parse(_MAP + ",response_a=a,response_b=b"))
    assert log.pairs[0].texts == ("first line\nsecond line", "short") and len(log.verdicts) == 3
    # the physical line of a row after a multi-line cell: p2 starts on line 6
    assert [v.where.rsplit(":", 1)[1] for v in log.verdicts] == ["2", "4", "6"]
    rows.append(["p3", "maybe", "A", "u", "v"])
    with (tmp_path / "log.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(DataError, match=r"log.csv:7: column 'verdict' has value 'maybe'"):
        read_log(tmp_path / "log.csv", ColumnMap.parse(_MAP + ",response_a=a,response_b=b"))


def test_an_inspect_log_with_two_bias_variants_of_a_pair_audits_each_variant(tmp_path: Path):
    """`export inspect` gives the variants of a source pair (one per injected bias) the same
    pair_id and their own sample_id: each variant is a pair of the audit."""
    samples = []
    for i in range(6):
        for bias in ("b1", "b2"):
            sid = f"p{i}::{bias}"
            right, wrong = f"right {i} words", f"wrong {i} {bias}"
            for order, target, choices in (("original", "A", [right, wrong]), ("swapped", "B", [wrong, right])):
                samples.append(
                    {
                        "id": f"{sid}::{order}",
                        "epoch": 1,
                        "target": target,
                        "choices": choices,
                        "metadata": {"sample_id": sid, "order": order, "pair_id": f"p{i}", "injected_bias": bias},
                        "scores": {"pairwise_verdict": {"value": {"right": 1}, "answer": "A"}},
                    }
                )
    (tmp_path / "log.json").write_text(json.dumps({"eval": {"model": "m"}, "samples": samples}))
    report = audit_log(tmp_path / "log.json", n_boot=100).report
    position = _entry(report, "position")
    assert position.z.n == 12 and position.first_win_rate.value == 1.0


def test_a_malformed_eval_header_is_named(tmp_path: Path):
    for header, message in (
        ("{not json", "header.json: malformed JSON"),
        ('["x"]', "header.json: expected a JSON object"),
    ):
        with zipfile.ZipFile(tmp_path / "log.eval", "w") as archive:
            archive.writestr("header.json", header)
            archive.writestr("samples/s1_epoch_1.json", json.dumps(_inspect_sample("s1", "original", "A", "A", 1)))
        with pytest.raises(DataError, match=message):
            audit_log(tmp_path / "log.eval")


def _cli_in_process(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from bias_discovery.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--limit", "5"], "--limit"),
        (["--mode", "pairwise"], "--mode"),
        (["--repeats", "3"], "--repeats"),
        (["--mitigation", "swap"], "--mitigation"),
        (["--verdict", "score"], "--verdict"),
        (["--repeats", "3", "--temperature", "0.5"], "--repeats, --temperature"),
    ],
)
def test_from_log_refuses_a_flag_it_would_ignore(tmp_path: Path, extra: list[str], named: str):
    (tmp_path / "log.csv").write_text("pair_id,verdict,label\np1,A,A\np1,B,B\n")
    code, output = _cli_in_process("audit", "--from-log", str(tmp_path / "log.csv"), "--columns", _MAP, *extra)
    assert code == 2 and f"{named} would be ignored" in output


def test_from_log_checks_fail_on_as_the_live_audit_does(tmp_path: Path):
    """A threshold on a pointwise measure cannot be met by a log's pairwise verdicts: a usage
    error before reading, as the live pairwise audit gives; a pairwise one gates as live."""
    log = tmp_path / "log.csv"
    log.write_text("pair_id,verdict,label\n" + "".join(f"p{i},A,A\np{i},A,B\n" for i in range(10)))
    code, output = _cli_in_process("audit", "--from-log", str(log), "--columns", _MAP, "--fail-on", "score-shift>0.1")
    assert code == 2 and "score_shift is a pointwise measure" in output
    code, output = _cli_in_process(
        "audit", "--from-log", str(log), "--columns", _MAP, "--fail-on", "position-consistency<0.8"
    )
    assert code == 3 and "position-consistency<0.8: position has rr = 0" in output

"""The edges a user meets first: outputs that cannot be written, inputs that cannot be read.

Each is a one-line error naming the file, line or field, exit code 2, no traceback, and it
comes before any model call is paid for; bad data rows can be skipped and counted instead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_export import FILTER, fake_engines, make_bias, make_fake_run
from test_export import write_pairs as write_export_pairs
from test_loop import make_config, run_fake, write_pairs
from test_report import build_hostile_run

from bias_discovery.errors import DataError
from bias_discovery.judging import JudgeResult, JudgeSettings, Judgment, summarize
from bias_discovery.loop.graph import execute
from bias_discovery.run import RunDir

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import cli_in_process


def one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    """The error of a refused command: exit 2, no traceback, one message on stderr."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    return " ".join(result.stderr.split())


class CountingServer:
    """An HTTP server that counts every request it gets (the model calls a command makes)."""

    def __init__(self) -> None:
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.requests += 1
                body = json.dumps({"error": {"message": "this stub answers nothing"}}).encode()
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def counting_server() -> Iterator[CountingServer]:
    server = CountingServer()
    yield server
    server.close()


# --------------------------------------------------------------------------------------------
# Outputs: proved writable before the first model call
# --------------------------------------------------------------------------------------------


def test_judge_refuses_an_unwritable_out_before_any_model_call(
    read_only_dir: Path, tmp_path: Path, counting_server: CountingServer
):
    out = read_only_dir / "judged"
    result = cli_in_process(
        "judge",
        "--model",
        "openai/stub",
        "--base-url",
        counting_server.url,
        "--data",
        "demo",
        "--limit",
        "2",
        "--no-cache",
        "--out",
        str(out),
        check=False,
    )
    message = one_line_error(result)
    assert f"--out {out} is not writable: cannot create a file in {read_only_dir}" in message
    assert counting_server.requests == 0, "a model call was made before --out was checked"
    (tmp_path / "a-file").write_text("x")
    result = cli_in_process(
        "judge",
        "--model",
        "openai/stub",
        "--base-url",
        counting_server.url,
        "--data",
        "demo",
        "--limit",
        "2",
        "--no-cache",
        "--out",
        str(tmp_path / "a-file" / "judged"),
        check=False,
    )
    assert f"{tmp_path / 'a-file'} is not a directory" in one_line_error(result)
    assert counting_server.requests == 0


def test_report_export_and_audit_refuse_an_unwritable_out(read_only_dir: Path, tmp_path: Path):
    hostile = build_hostile_run(tmp_path / "hostile")
    out = read_only_dir / "report.html"
    message = one_line_error(cli_in_process("report", str(hostile), "--out", str(out), check=False))
    assert f"--out {out}: its folder {read_only_dir} is not writable" in message
    assert not (hostile / "report.html").exists()

    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    for command in (
        ["export", "judgebench-pro", str(run), "--filter-model", "llamacpp/other.gguf"],
        ["export", "dpo", str(run), "--data", "demo"],
        ["audit", "--model", "hf/smollm2", "--data", "demo", "--biases", "position"],
    ):
        target = read_only_dir / "out"
        message = one_line_error(cli_in_process(*command, "--out", str(target), check=False))
        assert f"--out {target}: its folder {read_only_dir} is not writable" in message, command


# --------------------------------------------------------------------------------------------
# Inputs: named, exit 2; bad rows skipped and counted on request
# --------------------------------------------------------------------------------------------


def test_identical_responses_are_refused_with_file_line_and_fields(tmp_path: Path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        json.dumps({"question": "2+2?", "chosen": "4", "rejected": "5"})
        + "\n"
        + json.dumps({"question": "3+3?", "chosen": "6", "rejected": " 6\n"})
        + "\n"
    )
    message = one_line_error(
        cli_in_process("judge", "--model", "hf/smollm2", "--data", str(data), "--out", str(tmp_path / "j"), check=False)
    )
    assert f"{data}:2: fields 'chosen' and 'rejected' hold the same text" in message and "--skip-bad-rows" in message
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(
        json.dumps({"question": "q", "response_A": "same", "response_B": "same", "label": "A>B"}) + "\n"
    )
    message = one_line_error(
        cli_in_process(
            "judge", "--model", "hf/smollm2", "--data", str(labelled), "--out", str(tmp_path / "j"), check=False
        )
    )
    assert f"{labelled}:1: fields 'response_A' and 'response_B' hold the same text" in message
    assert not (tmp_path / "j").exists()


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path):
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_bytes(
        b'{"question": "q", "chosen": "a", "rejected": "b"}\n{"question": "caf\xe9", "chosen": "a", "rejected": "b"}\n'
    )
    message = one_line_error(
        cli_in_process(
            "judge", "--model", "hf/smollm2", "--data", str(jsonl), "--out", str(tmp_path / "j"), check=False
        )
    )
    assert f"{jsonl}:2: not UTF-8 text (byte 0xe9 at column 18)" in message
    listed = tmp_path / "pairs.json"
    listed.write_bytes(b'[\n {"question": "q", "chosen": "a", "rejected": "b"},\n {"question": "\xff"}\n]\n')
    message = one_line_error(
        cli_in_process(
            "audit",
            "--model",
            "hf/smollm2",
            "--data",
            str(listed),
            "--biases",
            "position",
            "--out",
            str(tmp_path / "a"),
            check=False,
        )
    )
    assert f"{listed}:3: not UTF-8 text (byte 0xff at column 16)" in message


def test_a_binary_config_and_a_directory_as_config(tmp_path: Path):
    binary = tmp_path / "model.gguf"
    binary.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)))
    for command in ("run", "check"):
        message = one_line_error(
            cli_in_process(command, str(binary), "--run-dir", str(tmp_path / "r"), check=False)
            if command == "run"
            else cli_in_process(command, str(binary), check=False)
        )
        assert str(binary) in message and "YAML" in message, message
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"name: x\n\x00\x00\n")
    assert f"{nul}: a binary file (it holds NUL bytes), not a YAML run config" in one_line_error(
        cli_in_process("check", str(nul), check=False)
    )
    assert f"{tmp_path}: cannot read the config file" in one_line_error(
        cli_in_process("check", str(tmp_path), check=False)
    )
    assert not (tmp_path / "r").exists()


def test_a_run_dir_that_is_a_file(tmp_path: Path):
    config = make_config(tmp_path)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(config.to_yaml())
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("precious")
    message = one_line_error(cli_in_process("run", str(config_path), "--run-dir", str(a_file), check=False))
    assert f"--run-dir {a_file}: {a_file} is not a directory" in message
    for command in ("resume", "status"):
        assert f"{a_file}: a file, not a run directory" in one_line_error(
            cli_in_process(command, str(a_file), check=False)
        )
    assert a_file.read_text() == "precious"


def test_a_run_skips_and_counts_bad_rows_when_asked(tmp_path: Path):
    data = write_pairs(tmp_path / "with-bad-rows.jsonl", 24)
    target = write_pairs(tmp_path / "target-with-bad-rows.jsonl", 24, prefix="t", question="Target question")
    for path in (data, target):
        with path.open("a") as f:
            f.write('{"id": "broken", "question": "q", "chosen": \n')
            f.write(json.dumps({"id": "same", "question": "q", "chosen": "x", "rejected": "x"}) + "\n")
    config = make_config(
        tmp_path, max_iterations=1, data={"target": str(target), "test": str(data), "skip_bad_rows": True}
    )
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    execute(
        rd, config, resume=False, engines={"target": ScriptedEngine(authority_world)}, embedder=BagOfWordsEmbedder()
    )
    assert rd.read_state().skipped_rows == {"target": 2, "test": 2}
    skipped = [e for e in rd.read_events() if e["event"] == "skipped_rows"]
    assert [e["role"] for e in skipped] == ["target", "test"]
    assert (
        skipped[0]["rows"][0].startswith(f"{target}:25: malformed JSON")
        and f"{target}:26: fields 'chosen'" in skipped[0]["rows"][1]
    )
    assert len(rd.baseline.result.read().outcomes) == 24
    text = " ".join(cli_in_process("status", str(rd.root)).stdout.split())
    assert "skipped bad data rows: target 2, test 2" in text
    # without the setting the same data is refused at the first bad row, naming it
    strict = make_config(tmp_path, max_iterations=1, data={"target": str(target), "test": str(data)})
    rd2 = RunDir(tmp_path / "strict")
    rd2.root.mkdir()
    with pytest.raises(DataError, match=f"{target}:25: malformed JSON"):
        execute(
            rd2,
            strict,
            resume=False,
            engines={"target": ScriptedEngine(authority_world)},
            embedder=BagOfWordsEmbedder(),
        )


def test_exports_skip_and_count_bad_rows_when_asked(tmp_path: Path):
    from bias_discovery.export.dpo import export_dpo
    from bias_discovery.export.pro import export_judgebench_pro

    run = make_fake_run(tmp_path / "run", discovered=[make_bias("Expert Citation Bias", discovered=True)])
    data = write_export_pairs(tmp_path / "pairs.jsonl", 4)
    with data.open("a") as f:
        f.write(json.dumps({"id": "same", "question": "q", "chosen": "x", "rejected": "x"}) + "\n")
    with pytest.raises(DataError, match=f"{data}:5: fields 'chosen' and 'rejected' hold the same text"):
        export_dpo(run, tmp_path / "dpo", data=str(data), engines=fake_engines())
    assert not (tmp_path / "dpo").exists()
    stats = export_dpo(run, tmp_path / "dpo", data=str(data), skip_bad_rows=True, engines=fake_engines())
    assert stats.skipped_rows == 1 and stats.counts.pairs == 4
    stats = export_judgebench_pro(
        run,
        tmp_path / "pro",
        variants=1,
        data=str(data),
        filter_model=FILTER,
        skip_bad_rows=True,
        engines=fake_engines(),
    )
    assert stats.skipped_rows == 1


def test_a_damaged_run_json_is_named_by_status_and_rewritten_by_resume(tmp_path: Path):
    config = make_config(tmp_path, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config)
    rd.state_path.write_bytes(b'{"name": "fake-run", "stat')
    result = cli_in_process("status", str(rd.root))
    assert f"{rd.state_path}: not valid JSON" in " ".join(result.stderr.split())
    assert "stopped at the start" in " ".join(result.stdout.split())  # no state: nothing claims it runs
    execute(rd, config, resume=True, engines={"target": ScriptedEngine(authority_world)}, embedder=BagOfWordsEmbedder())
    assert rd.read_state().status == "finished"
    assert any(e["event"] == "repaired" and "run.json" in e["what"] for e in rd.read_events())


def test_status_names_damaged_run_files_as_resume_does(tmp_path: Path):
    """A truncated checkpoints.sqlite is named by `status` (text and --json) with resume's advice."""
    config = make_config(tmp_path, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config)
    data = rd.checkpoint_path.read_bytes()
    rd.checkpoint_path.write_bytes(data[: len(data) // 3])
    result = cli_in_process("status", str(rd.root))
    message = " ".join(result.stderr.split())
    assert f"{rd.checkpoint_path} (the loop's checkpoints) is damaged" in message, message
    assert f"`bias-discovery resume {rd.root}`" in message
    record = json.loads(cli_in_process("status", str(rd.root), "--json").stdout)
    assert set(record["damaged"]) == {"checkpoints.sqlite"}


def test_report_counts_and_names_corrupt_lines(tmp_path: Path):
    run = build_hostile_run(tmp_path / "hostile")
    rd = RunDir(run)
    with rd.events_path.open("ab") as f:
        f.write(b'{"time": 1, "event": "stage_end", "usage": "not a mapping"}\n{"time": 2, "ev\n')
    explanations = rd.iteration(1).explanations.path
    with explanations.open("ab") as f:
        f.write(b"\xff\xfe garbage\n")
    result = cli_in_process("report", str(run))
    warning = " ".join(result.stderr.split())
    assert "3 unreadable entries left out of the report" in warning, warning
    lines = len(rd.events_path.read_bytes().splitlines())
    assert f"{rd.events_path}:{lines}: malformed JSON" in warning
    assert f"{explanations}:" in warning and "not UTF-8 text (byte 0xff at column 1)" in warning
    assert "events.jsonl: event" in warning and "has fields of the wrong type" in warning
    page = (run / "report.html").read_text()
    assert "3 unreadable entries were left out of this report" in page


def test_an_engine_error_says_why_on_screen(capsys: pytest.CaptureFixture[str]):
    """A prompt longer than the context is an invalid judgment; its reason is printed, not only
    counted (the real-model case, a 3 MB field, is in test_judge_cli.py)."""
    from bias_discovery.cli._judge import print_judge_summary

    reason = "llama.cpp error: Requested tokens (812345) exceed context window of 8192"
    judgments = [
        Judgment(
            pair_id="p",
            domain="math",
            order=order,
            verdict=None,
            picked=None,
            correct=None,
            invalid_reason="engine_error",
            raw_output=reason,
            prompt_tokens=0,
            completion_tokens=0,
        )
        for order in ("chosen_first", "rejected_first")
    ]
    from bias_discovery.judging import PairOutcome

    result = JudgeResult(
        judgments=judgments,
        outcomes=[PairOutcome(pair_id="p", domain="math", correct=None, orders=["chosen_first", "rejected_first"])],
    )
    summary = summarize(result, model="m", data="d", settings=JudgeSettings(), seed=1)
    assert summary.invalid_examples == {"engine_error": reason}
    print_judge_summary(summary)
    out = " ".join(capsys.readouterr().out.split())
    assert f"engine_error (2): {reason}" in out

"""Bounded waits (issue 18): a model server that accepts connections and never answers fails at
`--timeout` with a message naming its URL and the deadline, through the CLI; while it hangs, the
progress line says what is being waited on, and the log says so every 30 s (issue 35). The
server is a real socket server in a process of its own (tests/stub_openai.py --hang). How long
the failure takes on a real clock is measured in benchmarks/bounded_waits.py, not here: a test
asserts on what happened and in which order, never on how long it took."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai.engine import WAIT_NOTE_AFTER_S, OpenAIServerEngine
from bias_discovery.llm.types import GenerationRequest
from bias_discovery.progress import wait_display

from helpers import cli
from stub_openai import launch, stats


def test_judge_against_a_server_that_never_answers_fails_within_the_timeout(tmp_path: Path) -> None:
    timeout = 3.0
    with launch(0.0, "--hang") as (url, _):
        result = cli(
            "judge",
            "--model",
            "openai/served",
            "--base-url",
            url,
            "--data",
            "demo",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--no-cache",
            "--timeout",
            f"{timeout:g}",
            check=False,
            timeout=120,
        )
        first = stats(url)["first_request_at"]
    assert result.returncode == 2, result.stdout + result.stderr
    assert first is not None, "the CLI never reached the server"
    message = " ".join(result.stderr.split())
    # the deadline ended it, not the retries running out: fewer attempts than allowed
    assert url in message and "within the 3 s deadline (--timeout; " in message, message
    tried, allowed = message.split("(--timeout; ")[1].split(" attempts)")[0].split(" of ")
    assert int(tried) < int(allowed), message
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_the_progress_line_shows_the_wait_and_the_deadline_holds_without_a_cli() -> None:
    notes: list[str | None] = []
    timeout = WAIT_NOTE_AFTER_S + 2.5
    with launch(0.0, "--hang") as (url, _):
        engine = OpenAIServerEngine(ModelConfig.from_spec("openai/served", base_url=url, timeout_s=timeout))
        with wait_display(notes.append), pytest.raises(EngineError) as info:
            engine.generate([GenerationRequest.chat("hello")])
        engine.close()
    assert url in str(info.value) and f"within the {timeout:g} s deadline" in str(info.value)
    shown = [n for n in notes if n]
    assert shown, notes
    # "waiting on http://127.0.0.1:PORT/v1: 6 s, attempt 1/5" (GET /models: the dialect is asked first)
    assert shown[0].startswith(f"waiting on {url}: ") and shown[0].endswith(", attempt 1/5"), shown
    waited = [int(n.split(": ")[1].split(" s")[0]) for n in shown]
    assert waited[0] >= WAIT_NOTE_AFTER_S and waited == sorted(waited)  # never before its time, and counting up
    assert notes[-1] is None  # cleared when the batch ended


def test_a_submitted_request_shows_the_wait_too() -> None:
    """The streamed order submits requests one by one: the same note while the server hangs,
    cleared once the request has failed at its deadline."""
    notes: list[str | None] = []
    timeout = WAIT_NOTE_AFTER_S + 2.5
    with launch(0.0, "--hang") as (url, _):
        engine = OpenAIServerEngine(ModelConfig.from_spec("openai/served", base_url=url, timeout_s=timeout))
        with wait_display(notes.append):
            future = engine.submit(GenerationRequest.chat("hello"))
            with pytest.raises(EngineError, match="deadline"):
                future.result(timeout=timeout + 10)
            time.sleep(1.5)  # the watcher's next look finds nothing in flight
        engine.close()
    shown = [n for n in notes if n]
    assert shown and shown[0].startswith(f"waiting on {url}: ") and notes[-1] is None, notes


@pytest.mark.parametrize(
    "command",
    [
        ["judge"],
        ["audit"],
        ["run"],
        ["resume"],
        ["check"],
        ["replicate"],
        ["export", "judgebench-pro"],
        ["export", "dpo"],
    ],
)
def test_every_command_that_calls_a_model_takes_timeout(command: list[str]) -> None:
    from typer.testing import CliRunner

    from bias_discovery.cli import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--timeout" in result.output
    # the default named in the help is the config model's, not a retyped number
    default = ModelConfig.model_fields["timeout_s"].default
    assert f"timeout_s, {default:g} s" in " ".join(result.output.split()), result.output


def test_verbose_shows_what_the_engine_logs_and_the_default_does_not(tmp_path: Path) -> None:
    """`bias-discovery --verbose` prints the package's log records on stderr (here the dialect
    the engine found); without it the same command prints none."""
    with launch(0.0) as (url, _):
        args = ("judge", "--model", "openai/served", "--base-url", url, "--data", "demo", "--limit", "2", "--no-cache")
        verbose = cli("--verbose", *args, "--out", str(tmp_path / "verbose"), timeout=120)
        plain = cli(*args, "--out", str(tmp_path / "plain"), timeout=120)
    shown = " ".join(verbose.stderr.split())
    assert "bias_discovery.llm.openai.engine:" in shown and "dialect (from GET /models)" in shown, verbose.stderr
    assert "bias_discovery." not in plain.stderr and "dialect" not in plain.stderr, plain.stderr


def test_the_wait_log_names_server_stage_and_time_every_30_s(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35: a request waiting past WAIT_LOG_EVERY_S is named in the log, and again every
    WAIT_LOG_EVERY_S while one waits, one line per server (its oldest request), with the stage,
    the path, the time waited and the deadline. On a clock the test sets: no time passes."""
    from bias_discovery.llm.openai.engine import WAIT_LOG_EVERY_S, _Waiting

    engine = OpenAIServerEngine(
        ModelConfig.from_spec("openai/served", base_url="http://a:1/v1,http://b:2/v1", timeout_s=300)
    )
    engine._waiting = {
        1: _Waiting("http://a:1/v1", 0.0, 1, 5, "iter 1 evaluate (baseline)", "/chat/completions"),
        2: _Waiting("http://a:1/v1", 10.0, 1, 5, "iter 1 evaluate (baseline)", "/chat/completions"),
        3: _Waiting("http://b:2/v1", 20.0, 2, 5, None, "/models"),
    }
    assert WAIT_LOG_EVERY_S == 30.0
    logged: list[tuple[float, list[str]]] = []
    with caplog.at_level("WARNING", logger="bias_discovery.llm.openai.engine"):
        for now in (0.0, 29.0, 30.0, 31.0, 50.0, 59.0, 60.0, 61.0, 90.0):
            caplog.clear()
            engine._log_waits(now)
            logged.append((now, [r.getMessage() for r in caplog.records]))
    engine.close()
    lines = {now: messages for now, messages in logged if messages}
    assert list(lines) == [30.0, 50.0, 60.0, 90.0]  # a at 30, 60, 90; b once it has waited 30 s (at 50)
    a = "still waiting on http://a:1/v1 (stage: iter 1 evaluate (baseline), /chat/completions): {} s, attempt 1/5, deadline 300 s (`timeout_s`)"
    assert lines[30.0] == [a.format(30)]
    assert lines[50.0] == [
        "still waiting on http://b:2/v1 (stage: none named, /models): 30 s, attempt 2/5, deadline 300 s (`timeout_s`)"
    ]
    assert lines[60.0] == [a.format(60)]
    assert lines[90.0] == [a.format(90)] + [lines[50.0][0].replace(": 30 s", ": 70 s")]
    assert all(r.levelname == "WARNING" for r in caplog.records)


def test_a_hung_server_is_named_in_a_non_tty_log_with_its_stage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 35, through the CLI in-process, stderr not a TTY: while the stub hangs, stderr gets
    "still waiting on URL (stage: judging 2 pairs, ...)" lines. The engine's wait clock runs 30
    times faster than real time here, so the 4 s deadline is 120 s on it: the test asserts on
    the lines (their server, stage, order), not on how long anything took."""
    from typer.testing import CliRunner

    import bias_discovery.llm.openai.engine as engine_module
    from bias_discovery.cli import app

    monkeypatch.setattr(engine_module, "_now", lambda: time.monotonic() * 30)
    with launch(0.0, "--hang") as (url, _):
        result = CliRunner().invoke(
            app,
            [
                "judge",
                "--model",
                "openai/served",
                "--base-url",
                url,
                "--data",
                "demo",
                "--limit",
                "2",
                "--out",
                str(tmp_path / "out"),
                "--no-cache",
                "--timeout",
                "4",
            ],
        )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if "still waiting on" in line]
    assert lines, result.stderr
    waited = []
    for line in lines:
        assert f"WARNING bias_discovery.llm.openai.engine: still waiting on {url} (stage: judging 2 pairs, /" in line, (
            line
        )
        assert line.endswith(", deadline 4 s (`timeout_s`)"), line
        waited.append(int(line.split("): ")[1].split(" s,")[0]))
    assert all(later - earlier >= 30 for earlier, later in zip(waited, waited[1:])), waited  # one line per 30 s
    assert not (tmp_path / "out").exists()

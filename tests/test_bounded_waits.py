"""Bounded waits (issue 18): a model server that accepts connections and never answers fails
within `--timeout` plus 5 s with a message naming its URL, through the CLI; while it hangs, the
progress line says what is being waited on. The server is a real socket server in a process
of its own (tests/stub_openai.py --hang)."""

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
            "judge", "--model", "openai/served", "--base-url", url, "--data", "demo", "--limit", "2",
            "--out", str(tmp_path / "out"), "--no-cache", "--timeout", f"{timeout:g}", check=False, timeout=120,
        )
        ended = time.time()
        first = stats(url)["first_request_at"]
    assert result.returncode == 2, result.stdout + result.stderr
    assert first is not None, "the CLI never reached the server"
    # from its first request to the process's exit: the deadline plus 5 s at most
    assert ended - first <= timeout + 5, (ended - first, result.stderr)
    message = " ".join(result.stderr.split())
    assert url in message and "within the 3 s deadline" in message, message
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_the_progress_line_shows_the_wait_and_the_deadline_holds_without_a_cli() -> None:
    notes: list[str | None] = []
    timeout = WAIT_NOTE_AFTER_S + 2.5
    with launch(0.0, "--hang") as (url, _):
        engine = OpenAIServerEngine(ModelConfig.from_spec("openai/served", base_url=url, timeout_s=timeout))
        started = time.monotonic()
        with wait_display(notes.append), pytest.raises(EngineError) as info:
            engine.generate([GenerationRequest.chat("hello")])
        took = time.monotonic() - started
        engine.close()
    assert took <= timeout + 5
    assert url in str(info.value)
    shown = [n for n in notes if n]
    assert shown, notes
    # "waiting on http://127.0.0.1:PORT/v1: 6 s, attempt 1/5" (GET /models: the dialect is asked first)
    assert shown[0].startswith(f"waiting on {url}: ") and shown[0].endswith(", attempt 1/5"), shown
    seconds = int(shown[-1].split(": ")[1].split(" s")[0])
    assert WAIT_NOTE_AFTER_S <= seconds <= timeout + 1
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


@pytest.mark.parametrize("command", [
    ["judge"], ["audit"], ["run"], ["resume"], ["check"], ["replicate"], ["export", "judgebench-pro"], ["export", "dpo"],
])
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

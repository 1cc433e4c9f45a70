"""The terminal: --help that reads well at 80 columns, the options every command shares, and
defaults read from the settings models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from bias_discovery.auditing.runner import AuditSettings
from bias_discovery.cli import app
from bias_discovery.config import PerturbSettings, RunConfig
from bias_discovery.judging import JudgeSettings

WIDTH = 80


def is_group(command: Any) -> bool:
    return hasattr(command, "commands")


def commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `group` (Typer's click, which it vendors), with its path."""
    for name, command in group.commands.items():
        yield path + (name,), command
        if is_group(command):
            yield from commands(command, path + (name,))


ROOT: Any = typer.main.get_command(app)
ALL = [((), ROOT), *commands(ROOT)]


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}, terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    return result.output


def paragraphs(text: str) -> list[list[str]]:
    """The description's paragraphs (between the usage line and the first section), as lines."""
    lines = text.splitlines()
    body = []
    for line in lines[1:]:
        if line.rstrip().endswith(":") and not line.startswith(" "):  # "Options:", "Arguments:", "Commands:"
            break
        body.append(line)
    blocks, current = [], []
    for line in body:
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "bias-discovery")
def test_help_fits_80_columns_and_wraps_naturally(path: tuple[str, ...]) -> None:
    text = help_text(path)
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    assert "…" not in text
    # A description wrapped by the terminal's width, not by the docstring's line breaks: no line
    # ends where the next line's first word would still have fitted.
    for block in paragraphs(text):
        for line, following in zip(block, block[1:]):
            assert len(line) + 1 + len(following.split()[0]) > WIDTH - 2, (line, following)


@pytest.mark.parametrize("path", [p for p, c in ALL if is_group(c)], ids=lambda p: " ".join(p) or "bias-discovery")
def test_command_lists_show_whole_first_sentences(path: tuple[str, ...]) -> None:
    text = help_text(path)
    listed = text.split("Commands:\n", 1)[1].splitlines()
    assert listed and all(line.rstrip().endswith(".") and not line.rstrip().endswith("...") for line in listed), listed


def test_judge_help_names_every_option_in_full() -> None:
    text = help_text(("judge",))
    for flag in (
        "--reasoning-chars",
        "--no-reasoning-cap",
        "--reasoning / --no-reasoning",
        "--compare PRO_DIR",
        "--quiet",
    ):
        assert flag in text


@pytest.mark.parametrize(
    "path",
    [
        ("judge",),
        ("audit",),
        ("run",),
        ("resume",),
        ("replicate",),
        ("matrix",),
        ("export", "judgebench-pro"),
        ("export", "dpo"),
    ],
)
def test_every_command_that_draws_progress_bars_takes_quiet(path: tuple[str, ...]) -> None:
    assert "--quiet" in help_text(path)


@pytest.mark.parametrize("name", ["judge", "audit"])
def test_every_command_that_judges_has_every_reasoning_flag(name: str) -> None:
    params = {p.name for p in ROOT.commands[name].params}
    assert {"reasoning", "reasoning_chars", "no_reasoning_cap"} <= params


def test_option_defaults_are_the_settings_models_defaults() -> None:
    def default(command: str, param: str) -> object:
        return next(p.default for p in ROOT.commands[command].params if p.name == param)

    judge = JudgeSettings()
    for param in ("positions", "allow_tie", "mitigation", "max_tokens", "reasoning"):
        assert default("judge", param) == getattr(judge, param), param
    # --prompt's default depends on --mode: left unset, the settings model picks the mode's own
    assert default("judge", "prompt") is None
    assert (judge.prompt, JudgeSettings(mode="pointwise").prompt) == ("judge_pairwise", "judge_pointwise")
    assert default("judge", "seed") == RunConfig.model_fields["seed"].default
    audit = AuditSettings()
    assert [default("audit", p) for p in ("repeats", "mitigation", "seed", "n_boot")] == [
        audit.repeats,
        audit.mitigation,
        audit.seed,
        audit.n_boot,
    ]
    assert default("audit", "temperature") == judge.temperature and default("audit", "max_tokens") == judge.max_tokens
    assert default("audit", "perturb_max_tokens") == PerturbSettings().max_tokens
    # unset --reasoning-chars means the model's cap (shown in --help), not a second number
    assert default("judge", "reasoning_chars") is None and default("audit", "reasoning_chars") is None
    assert f"[default: ({judge.reasoning_chars});" in " ".join(help_text(("audit",)).split())


def test_audit_refuses_a_cap_and_no_cap_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        app,
        [
            "audit",
            "--model",
            "hf/smollm2",
            "--data",
            "demo",
            "--biases",
            "position",
            "--out",
            str(tmp_path / "a"),
            "--reasoning-chars",
            "100",
            "--no-reasoning-cap",
        ],
    )
    assert result.exit_code == 2 and "--reasoning-chars and --no-reasoning-cap contradict each other" in result.output


def test_messages_from_below_the_cli_show_settings_as_flags() -> None:
    """Code below cli/ names settings in backticks (the Python API's argument names); `fail`
    and `warn` show the flags a command-line user typed. Other backticked words stay."""
    from bias_discovery.cli._common import with_flags

    message = (
        "`out` /x exists and is not empty; pass `overwrite`; `timeout_s`, `overrides` a=1, `skip_bad_rows`; `model`"
    )
    assert (
        with_flags(message)
        == "--out /x exists and is not empty; pass --overwrite; --timeout, --set a=1, --skip-bad-rows; `model`"
    )

"""The house rules that stay true by test: no function in the package over 100 lines, a
complexity list (ruff C901's per-file-ignores) that names only files that still need it, so it
only shrinks, commit subjects of at most 72 characters, and every flag of the command line
written once."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def _script(name: str):  # noqa: ANN202 - a script, loaded as a module
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_function_in_the_package_is_over_100_lines() -> None:
    gate = _script("function_length")
    rows = gate.function_lengths(REPO / "bias_discovery")
    assert len(rows) > 1000  # it read the package
    over = [(lines, where) for lines, where in rows if lines > gate.LIMIT]
    assert over == []


def test_the_function_length_gate_counts_a_long_function(tmp_path: Path) -> None:
    gate = _script("function_length")
    body = "\n".join(f"    x{i} = {i}" for i in range(100))
    (tmp_path / "m.py").write_text(f"def short():\n    return 1\n\n\n@staticmethod\ndef long():\n{body}\n")
    assert gate.function_lengths(tmp_path) == [
        (102, f"{tmp_path / 'm.py'}:6 long"),
        (2, f"{tmp_path / 'm.py'}:1 short"),
    ]
    assert gate.main([str(tmp_path)]) == 1
    assert gate.main([str(tmp_path), "--limit", "102"]) == 0


def _ruff() -> str:
    found = Path(sys.executable).parent / "ruff"
    if found.exists():
        return str(found)
    which = shutil.which("ruff")
    if which is None:
        pytest.skip("ruff is not installed (./scripts/setup.sh --test installs the lint tools)")
    return which


def test_the_complexity_list_names_only_files_over_the_limit() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    lint = config["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] == 10
    listed = sorted(path for path, codes in lint["per-file-ignores"].items() if "C901" in codes)
    assert listed, "the complexity gate lists today's offenders"
    result = subprocess.run(
        [
            _ruff(),
            "check",
            "--select",
            "C901",
            "--config",
            "lint.per-file-ignores = {}",
            "--output-format",
            "concise",
            "--exit-zero",
            "--quiet",
            *listed,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    offenders = {line.split(":", 1)[0] for line in result.stdout.splitlines() if " C901 " in line}
    stale = [path for path in listed if path not in offenders]
    assert stale == [], (
        f"no function of these files is over the complexity limit now: delete their lines in pyproject.toml: {stale}"
    )


def test_a_commit_subject_is_at_most_72_characters_with_the_detail_in_the_body(tmp_path: Path) -> None:
    gate = _script("commit_subject")
    assert gate.problems("settings: JudgeSettings below the logic\n\nThe detail, as long as it needs.\n") == []
    assert gate.problems("# a comment git strips\n" + "x" * 72 + "\n") == []
    (long,) = gate.problems("x" * 73 + "\n")
    assert "73 characters (at most 72)" in long
    (glued,) = gate.problems("subject\nbody right under it\n")
    assert "one blank line" in glued
    assert gate.problems("# only comments\n\n") == ["the message is empty"]
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("y" * 80 + "\n", encoding="utf-8")
    assert gate.main([str(message)]) == 1
    message.write_text("short subject\n\nbody\n", encoding="utf-8")
    assert gate.main([str(message)]) == 0


def test_the_pre_commit_config_runs_the_gates() -> None:
    import yaml

    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert hooks["lint"]["entry"] == "scripts/lint.sh" and hooks["lint"]["pass_filenames"] is False
    assert hooks["commit-subject"]["entry"].endswith("scripts/commit_subject.py")
    assert hooks["commit-subject"]["stages"] == ["commit-msg"]
    assert set(config["default_install_hook_types"]) == {"pre-commit", "commit-msg"}
    for hook in hooks.values():
        script = REPO / hook["entry"].split()[-1]
        assert hook["entry"].startswith("ruff") or script.is_file(), hook


FLAG_LITERAL = re.compile(r"""["'](-{1,2}[a-z][a-z0-9-]*(?:/-{1,2}[a-z][a-z0-9-]*)?)["']""")
"""A string literal that is a flag and nothing else ("--out", "-k", "--reasoning/--no-reasoning")."""


def test_no_flag_is_defined_twice_in_the_cli() -> None:
    """Every flag is written once in cli/: commands take the shared ones from cli/_options.py and
    make the others from their setting's name (`flag`, `option`)."""
    found = Counter(
        flag
        for path in sorted((REPO / "bias_discovery" / "cli").glob("*.py"))
        for flag in FLAG_LITERAL.findall(path.read_text(encoding="utf-8"))
    )
    assert found["--reasoning/--no-reasoning"] == 1  # the grep sees the flags
    assert [flag for flag, n in found.items() if n > 1] == []


def test_every_option_a_command_takes_is_named_once_per_command() -> None:
    """What the generated flags must still keep: no two parameters of a command share a flag."""
    import typer.main

    from bias_discovery.cli import app

    def commands(group, path=()):  # noqa: ANN001, ANN202 - click's command groups
        for name, command in group.commands.items():
            yield path + (name,), command
            if hasattr(command, "commands"):
                yield from commands(command, path + (name,))

    seen = 0
    for path, command in commands(typer.main.get_command(app)):
        flags = [opt for param in command.params for opt in [*param.opts, *param.secondary_opts]]
        assert len(flags) == len(set(flags)), path
        seen += len(flags)
    assert seen > 100


def test_the_command_line_starts_on_the_settings_alone() -> None:
    """Importing the CLI (what `bias-discovery --help` does) imports the settings, not the logic
    nor numpy: a command imports what it runs when it runs."""
    probe = (
        "import sys, bias_discovery.cli; "
        "print(' '.join(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('bias_discovery.'))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert {"bias_discovery.cli", "bias_discovery.settings.judge", "bias_discovery.config"} <= loaded
    logic = {
        "numpy",
        "bias_discovery.judging",
        "bias_discovery.stats",
        "bias_discovery.library",
        "bias_discovery.stages",
        "bias_discovery.auditing",
        "bias_discovery.report",
        "bias_discovery.judge_matrix",
        "bias_discovery.run",
    }
    assert loaded & logic == set()

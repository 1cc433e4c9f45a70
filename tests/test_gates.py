"""The lint gates run with the suite (so `pytest` alone, as the README's test command runs it,
is what CI passes or fails on): ruff, mypy, import-linter and the function-length gate, as scripts/lint.sh runs them with
the tools of this environment (./scripts/setup.sh --test installs them, at the locked versions)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow


def test_ruff_mypy_and_the_import_contracts_pass() -> None:
    bin_dir = Path(sys.executable).parent
    missing = [
        tool for tool in ("ruff", "mypy", "lint-imports") if not (bin_dir / tool).exists() and not shutil.which(tool)
    ]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (./scripts/setup.sh --test installs the lint tools)")
    result = subprocess.run(
        ["bash", "scripts/lint.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "VENV": str(bin_dir.parent)},
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "lint: format, ruff, mypy, import-linter and function-length passed" in result.stdout

"""The docs site: `mkdocs build --strict` passes, and the reference pages generated from the
code at build time (docs/hooks/reference.py) hold what they are generated from."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO


def _text(page: Path) -> str:
    """A built page's visible text, tags dropped and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_generated_references(tmp_path: Path):
    """A renamed option, an undocumented config field, a broken link or anchor is a warning, and
    --strict turns a warning into a failed build. (The docs tools are in the `docs` extra, which
    `./scripts/setup.sh --test` installs; without them the test is skipped, saying so, as the
    lint gates are.)"""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (./scripts/setup.sh --test installs the docs tools)")
    site = tmp_path / "site"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    config = _text(site / "reference" / "config" / "index.html")
    assert re.search(r"max_iterations\s*·\s*int\s*·\s*default\s+4\s*·\s*≥ 1", config), (
        "max_iterations with type, default, bounds"
    )
    assert "validate.sequential.futility" in config and "the most iterations the loop makes" in config.lower()
    cli = _text(site / "reference" / "cli" / "index.html")
    assert "--run-dir" in cli and "bias-discovery export judgebench-pro" in cli
    api_html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    api = _text(site / "reference" / "api" / "index.html")
    assert "load_run" in api and "discover" in api
    from bias_discovery.api import AuditOutput, JudgeOutput, MatrixResult, Replication, Run

    for result in (JudgeOutput, AuditOutput, Run, Replication, MatrixResult):  # the columns other code reads
        assert ", ".join(f"<code>{c}</code>" for c in result.columns()) + "." in api_html, result.__name__
    run_dir = _text(site / "reference" / "run-directory" / "index.html")
    assert "iter_NNN/validation.json" in run_dir and "ValidationReport" in run_dir
    assert (site / "index.html").is_file() and (site / "benchmarks" / "index.html").is_file()

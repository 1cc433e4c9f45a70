"""The layer table of CONTRIBUTING.md is the import-linter contract of pyproject.toml, and it
places every module of the package."""

from __future__ import annotations

import re

import pytest

from helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def contract_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert layers["containers"] == ["bias_discovery"]
    return list(layers["layers"])


def table_layers() -> list[str]:
    """The contract column of the table under "### The layers", top to bottom."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("### The layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer ")]
    cells = [re.split(r"(?<!\\)\|", row)[2].strip() for row in rows if not row.startswith("| ---")]
    return [cell.strip("`").replace("\\|", "|") for cell in cells]


def test_the_table_is_the_contract() -> None:
    assert table_layers() == contract_layers()


def test_every_module_of_the_package_has_a_layer() -> None:
    placed = [name.strip() for layer in contract_layers() for name in re.split(r"[:|]", layer)]
    assert len(placed) == len(set(placed)), placed
    package = REPO / "bias_discovery"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert modules == set(placed), (sorted(modules - set(placed)), sorted(set(placed) - modules))

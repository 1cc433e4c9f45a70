"""The layer table of CONTRIBUTING.md is the import-linter contract of pyproject.toml, and it
places every module of the package; cli/, api/, stats/, judge_matrix/ and preflight/ name their
internal modules with a leading underscore, and no other package imports them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

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


# --- Public and internal modules (CONTRIBUTING.md) ----------------------------------------------

PACKAGE = REPO / "bias_discovery"
PRIVATE_LAYOUT = {
    "cli": set(),
    "api": {"reports", "exports", "checks", "views"},
    "stats": set(),
    "judge_matrix": set(),
    "preflight": set(),
}
"""The packages whose internal modules have a leading underscore, each with its public modules
(besides `__init__`). The other packages are internal as a whole (CONTRIBUTING.md)."""


def test_internal_modules_have_a_leading_underscore() -> None:
    """In cli/, api/, stats/, judge_matrix/ and preflight/, every module that is not public starts with `_`, so a reader sees what
    may change without notice, as in inspect_ai."""
    offenders = []
    for package, public in PRIVATE_LAYOUT.items():
        root = PACKAGE / package
        names = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
        assert public <= names, f"{package}/: public modules {sorted(public - names)} are gone; update PRIVATE_LAYOUT"
        offenders += [
            f"bias_discovery/{package}/{name}: not public, so it is named _{name}"
            for name in sorted(names - public - {"__init__", "__main__"})
            if not name.startswith("_")
        ]
    assert not offenders, "\n".join(offenders)


def module_name(path: Path) -> str:
    """A file's dotted name; `__init__.py` keeps its own part, so it counts as inside its package."""
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every dotted name a file imports (`from X import y` gives X and X.y), relative ones resolved."""

    package = module_name(path).split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def private_module_owner(dotted: str) -> str | None:
    """The package that owns the first private module in `dotted` (None: no private module):
    `bias_discovery.api._runs.Run` -> `bias_discovery.api`. Only a file or package counts, not a
    private name inside a module."""
    parts = dotted.split(".")
    if parts[0] != "bias_discovery":
        return None
    for i, part in enumerate(parts[1:], start=1):
        where = REPO.joinpath(*parts[: i + 1])
        if not (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()):
            return None
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_module_imports_another_packages_private_module() -> None:
    """The package, the benchmarks and the scripts take a package's names from the package
    (`from ..api import RunDir`), never from its `_module`; only the package's own modules do.
    Tests and the docs' hooks may (they test and document the internals)."""
    files = [*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]
    offenders = []
    for path in sorted(files):
        importer, seen = module_name(path), set()
        for line, dotted in imported_modules(path):
            owner = private_module_owner(dotted)
            if owner is not None and not importer.startswith(owner + ".") and line not in seen:
                seen.add(line)  # one message per import statement: its module, else its first name
                offenders.append(
                    f"{path.relative_to(REPO)}:{line}: imports {dotted}, private to {owner}; import it from {owner}"
                )
    assert not offenders, "\n".join(offenders)

"""Locate the files that ship with the project: prompt templates, seed bias libraries and the
example run configs.

In a source checkout (or an editable install) they live at the repository's top level
(`prompts/`, `bias_library/`, `experiments/`); a wheel maps them into the package (see
pyproject.toml), so `bias-discovery run experiments/quickstart-cpu.yaml` works outside a checkout.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the directory of a shipped resource folder (`prompts` or `bias_library`)."""
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"resource folder {name!r} not found next to the package ({_PACKAGE_DIR}); is the installation complete?"
    )


def prompts_dir() -> Path:
    return resource_dir("prompts")


def bias_library_dir() -> Path:
    return resource_dir("bias_library")


def shipped_config(path: Path | str) -> Path | None:
    """The example config a path names when it does not exist here: `experiments/NAME.yaml`,
    `NAME.yaml` or `NAME` -> the copy shipped with the package; None when there is none (or the
    path exists, or is absolute)."""
    path = Path(path)
    if path.exists() or path.is_absolute():
        return None
    parts = path.parts[1:] if path.parts and path.parts[0] == "experiments" else path.parts
    if not parts:
        return None
    try:
        root = resource_dir("experiments")
    except FileNotFoundError:
        return None
    for candidate in (root.joinpath(*parts), root.joinpath(*parts).with_suffix(".yaml")):
        if candidate.is_file():
            return candidate
    return None

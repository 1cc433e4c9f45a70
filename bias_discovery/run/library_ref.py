"""Library references: one library named as the `library show` / `library diff` commands and
the matrix's `library` setting take it:

    RUN_DIR          the run's newest library
    RUN_DIR@N        the run's library after iteration N (``RUN_DIR@0`` is the seed library)
    FILE.json        any library file (a seed library, a run's ``latest.json`` ...)

`require_run_like` is the looser run check of the views (a copy of a run without its SQLite
files still browses).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..library import (
    BiasLibrary,
    load_library,
)
from .rundir import RunDir

_AT_ITERATION = re.compile(r"^(?P<path>.+)@(?P<iteration>\d+)$")


def require_run_like(root: Path) -> None:
    """`root` must be a run directory: a folder with ``config.yaml`` or ``library/``.

    Looser than `RunDir.require_run` on purpose: a copy of a run without its SQLite files
    (shared, published) still browses.
    """
    if not root.exists():
        raise ConfigError(f"{root}: no such run directory")
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory")
    if not (root / "config.yaml").is_file() and not (root / "library").is_dir():
        raise ConfigError(
            f"{root}: not a run directory (no config.yaml and no library/ folder); "
            "start one with `bias-discovery run CONFIG.yaml --run-dir DIR`"
        )


@dataclass
class LibraryRef:
    """One resolved library reference (see the module docstring for the syntax)."""

    spec: str
    library: BiasLibrary
    path: Path
    """The library file read."""
    run_dir: Path | None = None
    """The run the library belongs to, when the reference named a run."""
    warnings: list[str] = field(default_factory=list)
    """Problems found on the way that did not stop the read (a damaged latest.json)."""

    @property
    def label(self) -> str:
        if self.run_dir is not None:
            return f"{self.run_dir}@{self.library.iteration}"
        return str(self.path)


def resolve_library(spec: str, iteration: int | None = None) -> LibraryRef:
    """Load the library that `spec` names (``RUN_DIR``, ``RUN_DIR@N`` or ``FILE.json``).

    `iteration` (``--iteration N``) applies to run directories, like ``@N``. Raises
    ConfigError for a path that is neither a run nor a file, LibraryError (naming the file)
    for a library that is missing or does not parse.
    """
    path = Path(spec)
    if not path.exists():
        match = _AT_ITERATION.match(spec)
        if match is None:
            raise ConfigError(
                f"{spec}: no such run directory or library file "
                "(give RUN_DIR, RUN_DIR@ITERATION or a library .json file)"
            )
        at = int(match.group("iteration"))
        if iteration is not None and iteration != at:
            raise ConfigError(f"{spec}: names iteration {at}, but `iteration` says {iteration}")
        path, iteration = Path(match.group("path")), at
        if not path.is_dir():
            raise ConfigError(f"{spec}: {path} is not a run directory")
    if path.is_dir():
        require_run_like(path)
        store = RunDir(path).library
        saved = store.iterations()
        if iteration is None:
            if not saved:
                library = store.load_latest()  # latest.json, or a LibraryError saying none
                return LibraryRef(spec=spec, library=library, path=store.latest_path, run_dir=path)
            iteration = saved[-1]
        library = store.load_iteration(iteration)
        problem = store.latest_problem()
        warnings = (
            [f"{problem}; the iteration files are the record (`bias-discovery resume` rewrites it)"] if problem else []
        )
        return LibraryRef(spec=spec, library=library, path=store.path_for(iteration), run_dir=path, warnings=warnings)
    if iteration is not None:
        raise ConfigError(f"{spec}: `iteration` / @N applies to run directories, not to a library file")
    return LibraryRef(spec=spec, library=load_library(path), path=path)

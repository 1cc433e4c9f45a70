"""A run's `library/` folder: one library file per iteration, plus `latest.json`."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import LibraryError
from ..io import atomic_write_json
from ..library import BiasLibrary, load_library, save_library

_ITER_RE = re.compile(r"^iter_(\d{3,})\.json$")


def iteration_filename(iteration: int) -> str:
    """File name of an iteration's library inside a run's `library/` folder: ``iter_003.json``."""
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    return f"iter_{iteration:03d}.json"


class LibraryStore:
    """The `library/` folder of a run: ``iter_NNN.json`` per iteration and ``latest.json``.

    The iteration files are the record; ``latest.json`` is a convenience copy of the highest
    one for people and viewers. `load_latest` trusts the iteration files, so a run killed
    between the two writes still resumes from the right library; `latest_problem` says when
    the copy is damaged or stale and `repair_latest` rewrites it from the iteration files.
    """

    def __init__(self, run_dir: Path | str) -> None:
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / "library"

    def __repr__(self) -> str:
        return f"LibraryStore({str(self.run_dir)!r})"

    @property
    def latest_path(self) -> Path:
        """``RUN_DIR/library/latest.json``."""
        return self.directory / "latest.json"

    def path_for(self, iteration: int) -> Path:
        """``RUN_DIR/library/iter_{iteration:03d}.json``."""
        return self.directory / iteration_filename(iteration)

    def iterations(self) -> list[int]:
        """The iterations saved so far, ascending."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _ITER_RE.match(path.name)
            if match and path.is_file():
                found.append(int(match.group(1)))
        return sorted(found)

    def save_iteration(self, library: BiasLibrary, *, overwrite: bool = False) -> Path:
        """Write ``iter_NNN.json`` for `library.iteration`, then refresh ``latest.json``.

        A library without a `parent` gets the file name of the newest saved iteration before
        its own. Both writes are atomic. Re-saving the same content is a no-op (resume-safe);
        saving different content for an iteration already on disk needs `overwrite=True`.
        ``latest.json`` is only moved forward: re-saving an older iteration leaves it alone.
        A file that does not parse as a library is never replaced (see `save_library`), except
        ``latest.json``, which is only a copy (see `repair_latest`).
        """
        if library.parent is None and library.iteration > 0:
            earlier = [i for i in self.iterations() if i < library.iteration]
            if earlier:
                library = library.model_copy(update={"parent": iteration_filename(earlier[-1])})
        path = save_library(library, self.path_for(library.iteration), overwrite=overwrite)
        if library.iteration >= max(self.iterations(), default=library.iteration):
            self._write_latest(library)
        return path

    def load_iteration(self, iteration: int) -> BiasLibrary:
        """The library of one iteration; LibraryError if missing, invalid or mislabeled."""
        path = self.path_for(iteration)
        if not path.exists():
            saved = ", ".join(str(i) for i in self.iterations()) or "none"
            raise LibraryError(f"{path}: no library for iteration {iteration} (saved: {saved})")
        library = load_library(path)
        if library.iteration != iteration:
            raise LibraryError(f"{path}: iteration: file says {library.iteration}, its name says {iteration}")
        return library

    def load_latest(self) -> BiasLibrary:
        """The library of the highest saved iteration (``latest.json`` if there are none)."""
        iterations = self.iterations()
        if iterations:
            return self.load_iteration(iterations[-1])
        if self.latest_path.exists():
            return load_library(self.latest_path)
        raise LibraryError(
            f"{self.directory}: no bias library saved in this run yet (it stopped before its first step was done); "
            f"`bias-discovery resume {self.directory.parent}` starts it from the beginning, paying no call twice"
        )

    def latest_problem(self) -> str | None:
        """Why ``latest.json`` is not a copy of the newest iteration file, or None when it is
        (or when there is no iteration file to compare with)."""
        iterations = self.iterations()
        if not iterations:
            return None
        newest = self.load_iteration(iterations[-1])
        if not self.latest_path.exists():
            return f"{self.latest_path} is missing"
        try:
            latest = load_library(self.latest_path)
        except LibraryError as exc:
            return f"{self.latest_path} is damaged ({str(exc).splitlines()[0]})"
        if not latest.same_content(newest):
            return f"{self.latest_path} is not a copy of {iteration_filename(iterations[-1])} (stale)"
        return None

    def repair_latest(self) -> str | None:
        """Rewrite ``latest.json`` from the newest iteration file when `latest_problem` finds
        one; returns what was repaired (None when nothing was). Nothing is lost: the iteration
        files are the record, ``latest.json`` is a copy of the newest."""
        problem = self.latest_problem()
        if problem is not None:
            self._write_latest(self.load_iteration(self.iterations()[-1]))
        return problem

    def _write_latest(self, library: BiasLibrary) -> None:
        try:
            save_library(library, self.latest_path, overwrite=True)
        except LibraryError:
            # latest.json does not parse: it is a copy of an iteration file, so replacing it
            # loses nothing (save_library protects files that may be the only copy).
            atomic_write_json(self.latest_path, library)

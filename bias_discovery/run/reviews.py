"""A reviewer's decisions about a run's biases: ``RUN_DIR/reviews.jsonl``.

A discovered bias is a claim a person may want to check before using it (in a paper, an
export). A review says what they decided (`confirmed`, `rejected`, `unsure`), why (a note),
who and when. Reviews are kept beside the run's records and never change them: the library
and validation files stay what the loop computed, and a review is read next to them.

One line per review, appended in the order they were made; a bias reviewed twice keeps both
lines, and the newest one is its decision (`ReviewLog.decisions`). Writers hold an exclusive
``flock`` on the run directory while they read the file and write it back atomically, so two
reviewers at once both land and a kill leaves the old file or the new one.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError, DataError
from ..library import BiasLibrary, utc_now_iso
from .artifacts import JsonlArtifact

__all__ = ["REVIEWER_ENV", "Review", "ReviewDecision", "ReviewLog", "default_reviewer"]

ReviewDecision = Literal["confirmed", "rejected", "unsure"]
"""confirmed: the reviewer agrees the bias is real and shown; rejected: they do not; unsure:
neither yet. Only `confirmed` biases pass `export ... --reviewed-only`."""

REVIEWER_ENV = "BIAS_DISCOVERY_REVIEWER"
"""The environment variable naming the reviewer when none is given (else the login name)."""


class Review(BaseModel):
    """One line of ``reviews.jsonl``: one reviewer's decision about one bias."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bias_id: str = Field(min_length=1)
    """The id of the reviewed bias in the run's library."""
    bias_name: str
    """Its name when it was reviewed (for people reading the file)."""
    decision: ReviewDecision
    note: str = ""
    """Why, in the reviewer's words."""
    reviewer: str = Field(min_length=1)
    reviewed_at: str
    """When, ISO-8601 in UTC, to the second."""
    library_iteration: int = Field(ge=0)
    """The library the reviewer saw (``library/iter_NNN.json``): a later iteration may have
    validated the bias again."""

    @field_validator("reviewer", "bias_id")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


def default_reviewer() -> str:
    """`$BIAS_DISCOVERY_REVIEWER`, else the login name, else ``unknown``."""
    named = os.environ.get(REVIEWER_ENV, "").strip()
    if named:
        return named
    try:
        return getpass.getuser() or "unknown"
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        return "unknown"


class ReviewLog:
    """``RUN_DIR/reviews.jsonl``: every review of the run's biases, oldest first on disk."""

    def __init__(self, run_root: Path) -> None:
        self.run_root = run_root
        self.artifact = JsonlArtifact(run_root / "reviews.jsonl", Review)

    @property
    def path(self) -> Path:
        return self.artifact.path

    def __repr__(self) -> str:
        return f"ReviewLog({str(self.path)!r})"

    def read(self) -> list[Review]:
        """Every review, oldest first; [] without the file; DataError naming the file, line
        and field for a line that is not a review."""
        return self.artifact.read() if self.artifact.exists() else []

    def read_lenient(self, problems: list[str] | None = None) -> list[Review]:
        """The lines that are reviews, oldest first (for the views: a damaged line is left out
        and named in `problems`, the rest is still shown)."""
        return self.artifact.read_lenient(problems)

    def of(self, bias_id: str, reviews: list[Review] | None = None) -> list[Review]:
        """The reviews of one bias, newest first."""
        found = self.read() if reviews is None else reviews
        return [r for r in reversed(found) if r.bias_id == bias_id]

    def decisions(self, reviews: list[Review] | None = None) -> dict[str, Review]:
        """Each reviewed bias's newest review (its decision), by bias id."""
        newest: dict[str, Review] = {}
        for review in self.read() if reviews is None else reviews:
            newest[review.bias_id] = review  # oldest first on disk: the last one wins
        return newest

    def add(
        self,
        library: BiasLibrary,
        bias: str,
        decision: ReviewDecision,
        *,
        note: str = "",
        reviewer: str | None = None,
    ) -> Review:
        """Record a decision about `bias` (an id or a name) of `library` (the run's newest).

        ConfigError naming the bias when the library does not hold it (a candidate validation
        rejected is not in it); DataError when the file holds a line that is not a review
        (nothing is written then: fix or move the file first)."""
        found = library.find(bias)
        if found is None:
            raise ConfigError(
                f"bias {bias!r} is not in the library of {self.run_root} (iteration {library.iteration}); "
                f"it holds: {', '.join(library.ids()) or 'no bias'}"
            )
        review = Review(
            bias_id=found.id,
            bias_name=found.name,
            decision=decision,
            note=note,
            reviewer=reviewer if reviewer is not None and reviewer.strip() else default_reviewer(),
            reviewed_at=utc_now_iso(),
            library_iteration=library.iteration,
        )
        with self._locked():
            earlier = self.read()
            self.artifact.write([*earlier, review])
        return review

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive flock on the run directory while the file is read and written back
        (the run lock takes the same one for its check-and-write, briefly)."""
        try:
            guard = os.open(self.run_root, os.O_RDONLY)
        except OSError as exc:
            raise DataError(f"{self.run_root}: cannot open the run directory ({exc.strerror or exc})") from None
        try:
            try:
                import fcntl

                fcntl.flock(guard, fcntl.LOCK_EX)
            except (ImportError, OSError):
                pass  # no flock on this system: a single reviewer at a time is still safe
            yield
        finally:
            os.close(guard)

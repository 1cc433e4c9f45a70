"""Overlap between the items a bias was discovered on and the items it is validated on.

Validating a bias on the pairs it was found on is circular: the judge already erred there,
with that very rewrite in mind. A run's `data.target` and `data.test` must therefore be
disjoint, and so must the data a replication, an audit or a Pro set measures a run's biases
on. Two pairs are the same item when they share their id, or their content (question, chosen
and rejected response, whitespace-normalised): a copy of a data set under new ids is still
the same data.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from ..errors import DataError
from .pairs import PreferencePair

__all__ = ["DataOverlap", "PairKey", "check_overlap", "content_hash", "find_overlap", "pair_keys"]

_SPACE = re.compile(r"\s+")
_MAX_EXAMPLES = 5


def content_hash(question: str, chosen: str, rejected: str) -> str:
    """sha256 of the pair's three texts, each with its whitespace collapsed."""
    text = "\x1f".join(_SPACE.sub(" ", part).strip() for part in (question, chosen, rejected))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class PairKey(NamedTuple):
    """What identifies an item: its id and its content hash."""

    id: str
    content: str


def pair_keys(pairs: Iterable[PreferencePair]) -> list[PairKey]:
    return [PairKey(p.id, content_hash(p.question, p.chosen, p.rejected)) for p in pairs]


class DataOverlap(BaseModel):
    """How many validation items are also discovery items (recorded wherever biases are
    measured on data: validation.json, replication.json, audit.json, a Pro set's stats.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    discovery: str
    """The items the biases were discovered on (a run's `data.target`, or its perturbed pairs)."""
    validation: str
    """The items they are measured on here."""
    n_discovery: int = Field(ge=0)
    n_validation: int = Field(ge=0)
    by_id: int = Field(ge=0, description="Validation items whose pair id is a discovery item's.")
    by_content: int = Field(ge=0, description="Validation items whose content is a discovery item's.")
    shared: int = Field(ge=0, description="Validation items shared either way.")
    examples: list[str] = Field(default_factory=list, description="A few shared validation pair ids.")
    allowed: bool = False
    """The overlap was accepted (`--allow-overlap`, `data.allow_overlap`)."""


def find_overlap(
    discovery: Sequence[PairKey], validation: Sequence[PairKey], *, discovery_name: str, validation_name: str
) -> DataOverlap:
    """Count the validation items that are discovery items, by id and by content."""
    ids = {key.id for key in discovery}
    contents = {key.content for key in discovery}
    by_id = by_content = 0
    shared: list[str] = []
    for key in validation:
        same_id, same_content = key.id in ids, key.content in contents
        by_id += same_id
        by_content += same_content
        if same_id or same_content:
            shared.append(key.id)
    return DataOverlap(
        discovery=discovery_name,
        validation=validation_name,
        n_discovery=len({key.id for key in discovery}),
        n_validation=len(validation),
        by_id=by_id,
        by_content=by_content,
        shared=len(shared),
        examples=shared[:_MAX_EXAMPLES],
    )


def check_overlap(overlap: DataOverlap, *, allow: bool, how_to_allow: str) -> DataOverlap:
    """The overlap, marked allowed; a DataError when it is not empty and not allowed."""
    if overlap.shared and not allow:
        raise DataError(
            f"{overlap.validation} shares {overlap.shared} of its {overlap.n_validation} pairs with the items the biases "
            f"were discovered on ({overlap.discovery}): {overlap.by_id} by pair id, {overlap.by_content} by content "
            f"(e.g. {', '.join(overlap.examples)}); validating a bias on the items it was found on is circular. "
            f"Use disjoint data, or {how_to_allow} to go on anyway (the overlap is recorded)"
        )
    return overlap.model_copy(update={"allowed": allow})

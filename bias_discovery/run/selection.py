"""Which biases of a run's library a product of the run uses (an export, a replication, an
audit): ``all``, ``top-K`` or explicit ids/names (`select_biases`)."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ExportError
from ..library import Bias, BiasLibrary


def validated_biases(library: BiasLibrary) -> list[Bias]:
    """The discovered biases whose test-set validation accepted them, in library order."""
    return [
        b
        for b in library.biases
        if b.origin.kind == "discovered" and b.validation is not None and b.validation.accepted
    ]


_TOP_K = re.compile(r"^top-(\d+)$", re.I)


def _available(library: BiasLibrary) -> str:
    return ", ".join(library.ids()) or "none"


def select_biases(library: BiasLibrary, spec: str | None, *, run_dir: Path | str) -> list[Bias]:
    """The biases an export uses.

    - ``None`` or ``"all"``: every validated-and-accepted discovered bias;
    - ``"top-K"``: the K accepted ones with the largest reported effect (`BiasValidation.effect`:
      honest after an early stop; fewer if there are fewer);
    - ``"ID,NAME,..."``: the named biases, in the given order, duplicates once; an entry
      matches a bias id exactly, else a bias name case-insensitively (or its slug). Seed
      biases may be named too.

    Raises ExportError for an empty selection (naming the available ids and how to name them
    explicitly) and for an entry that names no bias (listing the available ids).
    """
    text = (spec or "all").strip()
    if text.lower() == "all" or _TOP_K.match(text):
        chosen = validated_biases(library)
        match = _TOP_K.match(text)
        if match:
            k = int(match.group(1))
            if k < 1:
                raise ExportError(f"`biases` {text}: K must be at least 1")
            chosen = sorted(chosen, key=lambda b: -(b.validation.effect.delta if b.validation else 0.0))[:k]
        if not chosen:
            raise ExportError(
                f"run {run_dir} has no validated biases; name "
                f"biases explicitly with `biases` ID,...  available: {_available(library)}"
            )
        return chosen
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if not entries:
        raise ExportError(f"`biases` {spec!r} names no bias; available: {_available(library)}")
    chosen, seen, unknown = [], set(), []
    for entry in entries:
        bias = library.find(entry)
        if bias is None:
            unknown.append(entry)
        elif bias.id not in seen:
            seen.add(bias.id)
            chosen.append(bias)
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        raise ExportError(
            f"unknown bias {names} in run {run_dir}; available ids: {_available(library)}"
        )
    return chosen

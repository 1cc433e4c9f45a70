"""Which biases of a run's library a product of the run uses (an export, a replication, an
audit): ``all``, ``top-K`` or explicit ids/names (`select_biases`), optionally only those a
reviewer confirmed (`reviewed_only`: the newest review in ``reviews.jsonl``)."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ExportError
from ..library import Bias, BiasLibrary
from .reviews import Review
from .rundir import RunDir


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


def _confirmed(bias: Bias, decisions: dict[str, Review]) -> bool:
    review = decisions.get(bias.id)
    return review is not None and review.decision == "confirmed"


def _unconfirmed_text(biases: list[Bias], decisions: dict[str, Review]) -> str:
    def state(bias: Bias) -> str:
        review = decisions.get(bias.id)
        return "not reviewed" if review is None else f"{review.decision} by {review.reviewer}"

    return ", ".join(f"{b.id} ({state(b)})" for b in biases)


def select_biases(
    library: BiasLibrary, spec: str | None, *, run_dir: Path | str, reviewed_only: bool = False
) -> list[Bias]:
    """The biases an export uses.

    - ``None`` or ``"all"``: every validated-and-accepted discovered bias;
    - ``"top-K"``: the K accepted ones with the largest reported effect (`BiasValidation.effect`:
      honest after an early stop; fewer if there are fewer);
    - ``"ID,NAME,..."``: the named biases, in the given order, duplicates once; an entry
      matches a bias id exactly, else a bias name case-insensitively (or its slug). Seed
      biases may be named too.

    `reviewed_only`: only biases whose newest review (`bias-discovery review`) is `confirmed`;
    with ``all`` and ``top-K`` the others are left out before the K are taken, a named bias
    that is not confirmed is an error naming it.

    Raises ExportError for an empty selection (naming the available ids and how to name them
    explicitly) and for an entry that names no bias (listing the available ids); DataError for
    a reviews file that does not parse (a decision is not guessed from part of it).
    """
    decisions = RunDir(run_dir).reviews.decisions() if reviewed_only else {}
    text = (spec or "all").strip()
    if text.lower() == "all" or _TOP_K.match(text):
        chosen = validated_biases(library)
        if reviewed_only:
            unconfirmed = [b for b in chosen if not _confirmed(b, decisions)]
            chosen = [b for b in chosen if _confirmed(b, decisions)]
            if not chosen:
                raise ExportError(
                    f"`reviewed_only`: no validated bias of run {run_dir} is confirmed by a review"
                    + (f" ({_unconfirmed_text(unconfirmed, decisions)})" if unconfirmed else "")
                    + f"; confirm one with `bias-discovery review {run_dir} BIAS_ID --decision confirmed`"
                )
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
        raise ExportError(f"unknown bias {names} in run {run_dir}; available ids: {_available(library)}")
    unconfirmed = [b for b in chosen if reviewed_only and not _confirmed(b, decisions)]
    if unconfirmed:
        raise ExportError(
            f"`reviewed_only`: not confirmed by a review: {_unconfirmed_text(unconfirmed, decisions)}; "
            f"confirm with `bias-discovery review {run_dir} BIAS_ID --decision confirmed`, or leave them out"
        )
    return chosen

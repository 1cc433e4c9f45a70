"""Position-bias mitigations as judge wrappers: which calls a mitigated verdict makes, and how
their verdicts combine into one (`judge.mitigation`, `judge --mitigation`, `audit --mitigation`).

* ``swap`` (the mitigation notes' position-swapping protocol): judge both orders and map the
  verdicts back to responses. If they agree, that response wins; otherwise the result is a
  tie, recorded as position-inconsistent. 2 calls per verdict.
* ``shuffle3`` (their "multiple shuffles", n = 3): orders first, swapped, first; the majority
  response wins, confidence = the share of votes agreeing with it. The third call repeats the
  first order with a derived seed (the call cache keys on the seed: the same seed would be
  the same answer, free but not a new vote). At temperature 0 a deterministic engine gives
  the third vote the first vote's answer. 3 calls per verdict.
* ``votes6`` (Chen et al. §4.5): six votes with positions alternated, A_1 = 0, Tie = 0.5,
  A_2 = 1 (our chosen = A_1, rejected = A_2), averaged; below 0.5 chosen, above rejected,
  exactly 0.5 a tie. 6 calls per verdict.

Pure: orders, seeds and preferences in, preferences out; `judging` builds the requests.
Invalid votes are left out of a combination; a verdict with no valid vote is invalid (None).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from .data.pairs import Order
from .metrics import Preference, chen_vote_preference
from .settings.judge import MITIGATIONS, Mitigation

__all__ = [
    "CALLS_PER_VERDICT",
    "MITIGATIONS",
    "MitigatedVerdict",
    "Mitigation",
    "combine_votes",
    "derive_seed",
    "flip",
    "jury_verdict",
    "plan",
]

CALLS_PER_VERDICT: dict[Mitigation, int] = {"none": 1, "swap": 2, "shuffle3": 3, "votes6": 6}
"""What a mitigation costs: model calls per verdict."""


def flip(order: Order) -> Order:
    return "rejected_first" if order == "chosen_first" else "chosen_first"


def derive_seed(seed: int, *parts: object) -> int:
    """A new seed from `seed` and a label, stable across runs and machines (31 bits, which
    every engine accepts). Repeats and extra votes use derived seeds so the call cache, which
    keys on the seed, never answers a repeat with an earlier call."""
    digest = hashlib.sha256(":".join(str(p) for p in (seed, *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def plan(mitigation: Mitigation, first: Order, seed: int) -> list[tuple[Order, int]]:
    """The (order, seed) of each call a verdict makes, starting with `first`. Orders alternate;
    a vote that repeats an order already asked gets a derived seed."""
    n = CALLS_PER_VERDICT[mitigation]
    calls = []
    for vote in range(n):
        order = first if vote % 2 == 0 else flip(first)
        round_ = vote // 2
        calls.append((order, seed if round_ == 0 else derive_seed(seed, "vote", round_)))
    return calls


class MitigatedVerdict(BaseModel):
    """One verdict of a mitigated judge, from the votes of its calls."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preference: Preference | None
    """The response preferred (chosen / rejected / tie); None when no vote was valid."""
    confidence: float | None
    """Share of the valid votes that agree with `preference` (swap: 1.0 when the orders agree,
    0.5 for the tie of a disagreement, as in the protocol)."""
    position_consistent: bool | None
    """True when every valid vote picked the same response; None for a single call."""
    n_votes: int
    n_valid_votes: int


def _leaders(votes: Sequence[Preference]) -> list[Preference]:
    """The preferences with the most votes (one, or several sharing the top count)."""
    counts: dict[Preference, int] = {}
    for v in votes:
        counts[v] = counts.get(v, 0) + 1
    best = max(counts.values())
    return [v for v, c in counts.items() if c == best]


def _majority(votes: Sequence[Preference]) -> Preference:
    leaders = _leaders(votes)
    return leaders[0] if len(leaders) == 1 else "tie"  # no single majority: a tie, never an arbitrary pick


def jury_verdict(votes: Sequence[Preference | None]) -> Preference | None:
    """A jury's verdict from its judges' verdicts on one item shown in one order: the
    preference most judges gave. A tie of votes (two preferences share the top count, e.g. one
    judge for each response) is invalid (None), not a "tie" verdict: the jury did not decide;
    so is an item no judge gave a valid verdict on. Invalid votes are left out."""
    valid = [v for v in votes if v is not None]
    if not valid:
        return None
    leaders = _leaders(valid)
    return leaders[0] if len(leaders) == 1 else None


def combine_votes(mitigation: Mitigation, votes: Sequence[Preference | None]) -> MitigatedVerdict:
    """Combine the votes of one verdict's calls (in `plan` order, mapped back to responses)."""
    if len(votes) != CALLS_PER_VERDICT[mitigation]:
        raise ValueError(f"{mitigation} combines {CALLS_PER_VERDICT[mitigation]} votes; got {len(votes)}")
    valid = [v for v in votes if v is not None]
    consistent = None if mitigation == "none" or not valid else len(set(valid)) == 1
    preference: Preference | None
    if not valid:
        preference, confidence = None, None
    elif mitigation == "none":
        preference, confidence = valid[0], None
    elif mitigation == "swap":
        if len(valid) < 2:
            preference, confidence, consistent = None, None, None  # one order alone is no swap
        elif valid[0] == valid[1]:
            preference, confidence = valid[0], 1.0
        else:
            preference, confidence = "tie", 0.5
    else:
        preference = _majority(valid) if mitigation == "shuffle3" else chen_vote_preference(valid)
        confidence = sum(1 for v in valid if v == preference) / len(valid)
    return MitigatedVerdict(
        preference=preference,
        confidence=confidence,
        position_consistent=consistent,
        n_votes=len(votes),
        n_valid_votes=len(valid),
    )

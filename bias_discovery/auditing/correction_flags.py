"""Per-bias trait flags from the checker model, for `correct`: whether a response carries the
trait of a validated bias, when no user column says so.

The checker model is asked once per response and bias, with the bias's name, definition and
manifestations (prompt ``trait_check``), under a `choices` constraint (yes / no), as the
rewrite checks ask their same / different question: a reply is one word or it is invalid,
never guessed. The calls go through the engine the caller gives (the call cache, the meter and
the budget of the checker's role), so a second `correct` on the same log asks nothing.

A pointwise item's flag is 1 when its response carries the trait. A pairwise item's flag is
response A's trait minus response B's (-1, 0 or 1): a bias moves the win rate of A only
where one response carries its trait and the other does not, so that difference is what the
gap regression and the covariates need, and its mean is the share that moves the win rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from ..errors import DataError
from ..library import Bias
from ..llm.base import Engine
from ..llm.budget import Spend
from ..llm.types import Constraint, GenerationRequest
from ..progress import ProgressCallback
from ..prompts import load_prompt
from .correction_inputs import Item

__all__ = ["TRAIT_CHOICES", "CheckerCalls", "TraitFlags", "ask_checker", "parse_trait", "trait_request", "usable_flags"]

TRAIT_CHOICES = ("yes", "no")
TRAIT_MAX_TOKENS = 4
"""A constrained one-word reply: a few tokens cover "yes" / "no" with any tokenizer."""
NO_QUESTION = "(not given)"
"""The question shown for an item without one (a pairwise log holds none)."""


class TraitFlags(BaseModel):
    """How one bias's flags were obtained and whether they were adjusted for (correct.json's
    `trait_flags`)."""

    bias: str
    """The bias's id (the flag's name in `flags`, the gap and the bound)."""
    name: str
    """The bias's name."""
    source: Literal["checker"] = "checker"
    """Where the flags come from (a user's flag column is listed in `flags` only)."""
    model: str
    """The checker model asked."""
    n_responses: int
    """Responses asked about (pointwise: one per item; pairwise: two per item)."""
    n_carrying: int
    """Of them, the responses the checker said carry the trait."""
    n_invalid: int
    """Replies that were neither yes nor no (an engine error, a cut reply)."""
    used: bool = False
    """Adjusted for: a covariate of ppi++_covariates and a regressor of the gap."""
    note: str = ""
    """Why not, when not used."""


class CheckerCalls(BaseModel):
    """What the checker's flags cost, counted as every call is (the meter of its role)."""

    model: str
    """The checker model."""
    requests: int
    """Requests made (one per response and bias), cached or not."""
    cached: int
    """Of them, answered by the call cache (paid earlier, not now)."""
    paid: Spend
    """What the others cost: calls, tokens, dollars (at the model's price)."""
    max_calls: int | None = None
    """The budget of paid calls it ran under (None: no bound)."""


def trait_request(bias: Bias, question: str, response: str, *, seed: int) -> GenerationRequest:
    """Ask whether `response` carries `bias`'s trait: "yes" / "no", greedy, constrained."""
    messages = load_prompt("trait_check").render(
        question=question,
        response=response,
        bias_name=bias.name,
        bias_definition=bias.definition,
        bias_manifestations="; ".join(bias.manifestations) or "(as defined)",
    )
    return GenerationRequest(
        messages=messages,
        max_tokens=TRAIT_MAX_TOKENS,
        temperature=0.0,
        seed=seed,
        constraint=Constraint(choices=TRAIT_CHOICES),
    )


def parse_trait(text: str, finish_reason: str) -> bool | None:
    """True (yes), False (no), or None when the reply is unusable (cut, failed, another word)."""
    if finish_reason != "stop":
        return None
    word = text.strip().strip(".\"'*` ").lower()
    return {"yes": True, "no": False}.get(word)


@dataclass(frozen=True)
class _Ask:
    item: Item
    side: int
    bias: Bias


def _responses(item: Item, mode: Literal["pairwise", "pointwise"], path: str) -> tuple[str, ...]:
    if mode == "pointwise":
        if not item.text:
            raise DataError(
                f"{path}: item {item.item_id!r} has no response text for the checker model (map it: `columns` text=...)"
            )
        return (item.text,)
    if item.texts is None:
        raise DataError(
            f"{path}: pair {item.item_id!r} has no response texts for the checker model "
            "(a generic log maps them: `columns` response_a=...,response_b=...)"
        )
    return item.texts


def ask_checker(
    engine: Engine,
    items: Sequence[Item],
    biases: Sequence[Bias],
    *,
    mode: Literal["pairwise", "pointwise"],
    path: str,
    model: str,
    instruction: str,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[TraitFlags]:
    """Flag every item with a judge value for every bias in `biases` (sets `item.flags[bias.id]`
    where every reply of the item is valid); one record per bias."""
    asks: list[_Ask] = []
    requests: list[GenerationRequest] = []
    for item in (i for i in items if i.judge is not None):
        question = item.question or (instruction if mode == "pointwise" else NO_QUESTION)
        for side, response in enumerate(_responses(item, mode, path)):
            for bias in biases:
                asks.append(_Ask(item, side, bias))
                requests.append(trait_request(bias, question, response, seed=seed))
    replies = engine.generate(requests, progress=progress) if requests else []
    answers: dict[tuple[str, str], list[bool | None]] = {}
    for ask, reply in zip(asks, replies):
        answers.setdefault((ask.item.item_id, ask.bias.id), []).append(parse_trait(reply.text, reply.finish_reason))
    by_id = {i.item_id: i for i in items}
    for (item_id, bias_id), said in answers.items():
        if any(s is None for s in said):
            continue
        first = float(bool(said[0]))
        by_id[item_id].flags[bias_id] = first if len(said) == 1 else first - float(bool(said[1]))
    records = []
    for bias in biases:
        said = [s for (_, b), values in answers.items() if b == bias.id for s in values]
        records.append(
            TraitFlags(
                bias=bias.id,
                name=bias.name,
                model=model,
                n_responses=len(said),
                n_carrying=sum(1 for s in said if s),
                n_invalid=sum(1 for s in said if s is None),
            )
        )
    return records


def _adds_rank(labelled: Sequence[Item], columns: Sequence[str], name: str) -> bool:
    """Whether flag `name` is not a combination of the intercept and `columns` on the labelled
    items (a collinear column makes the regressions singular)."""
    import numpy as np

    def column(n: str) -> list[float]:
        return [i.covariates[n] if n in i.covariates else i.flags[n] for i in labelled]

    design = np.column_stack([np.ones(len(labelled)), *(column(n) for n in columns)])
    return bool(np.linalg.matrix_rank(np.column_stack([design, column(name)])) > np.linalg.matrix_rank(design))


def usable_flags(items: Sequence[Item], records: Sequence[TraitFlags], *, taken: Sequence[str] = ()) -> list[str]:
    """The checker's flags that can be adjusted for (marks each record `used`, or says why
    not): every item with a judge value flagged, the flag not constant on them nor on the
    labelled items (a constant column is the intercept again), not a combination of the
    columns before it there (the user's covariates and flags, `taken`, then the flags used),
    and room for it in a regression on the labelled items (more labels than columns plus one)."""
    judged = [i for i in items if i.judge is not None]
    labelled = [i for i in judged if i.label is not None]
    room = len(labelled) - 2 - len(taken) if len(labelled) >= 2 else len(records)
    used: list[str] = []
    for record in records:
        values = [i.flags.get(record.bias) for i in judged]
        if any(v is None for v in values):
            record.note = f"{record.n_invalid} invalid repl{'y' if record.n_invalid == 1 else 'ies'} of the checker"
        elif len(set(values)) < 2:
            record.note = f"constant ({values[0]:g}) on all {len(judged)} items"
        elif len(labelled) >= 2 and len({i.flags[record.bias] for i in labelled}) < 2:
            record.note = f"constant on the {len(labelled)} labelled items"
        elif len(labelled) >= 2 and not _adds_rank(labelled, [*taken, *used], record.bias):
            record.note = "the same as other columns on the labelled items (collinear)"
        elif len(used) >= room:
            record.note = f"{len(labelled)} labelled items leave no room for a column beside {len(taken) + len(used)}"
        else:
            record.used = True
            used.append(record.bias)
    return used

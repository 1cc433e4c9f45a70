"""Perturb: the teacher rewrites a rejected response so that it carries one bias, or (the
placebo of validation) rewrites it neutrally, with the same content and no trait.

A trajectory (`PreferencePair.kind == "trajectory"`) is rewritten one turn at a time: the
teacher rewrites the turn `PerturbSettings.turn` chooses (prompts `perturb_turn` and
`neutral_rewrite_turn`), the rewrite is spliced back with every other message byte for byte as
it was, and a rewrite that changed an action is dropped at once (`stages.turns`)."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import PerturbSettings
from ..data.pairs import PreferencePair
from ..data.trajectory import Trajectory
from ..errors import ConfigError
from ..library import Bias
from ..llm.base import Engine, ProgressCallback
from ..llm.types import GenerationRequest, GenerationResponse
from ..prompts import load_prompt
from .records import PerturbedPair
from .turns import TurnRule, choose_turn, context_before, splice, turn_text

_PREAMBLE = re.compile(r"^\s*(?:here is|here's)?\s*(?:the\s+)?rewritten (?:answer|turn)\s*:?\s*\n?", re.I)


def keyed_rng(*parts: object) -> random.Random:
    """A random generator that depends only on its key, not on batch order or size."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def assign_biases(
    pairs: Sequence[PreferencePair], biases: Sequence[Bias], *, seed: int, iteration: int
) -> list[tuple[PreferencePair, Bias]]:
    """Sample one bias per pair (b_k ~ B_t), seeded per pair so a resumed run draws the same."""
    if not biases:
        raise ValueError("cannot perturb with an empty bias library")
    return [(p, keyed_rng(seed, iteration, p.id).choice(list(biases))) for p in pairs]


PLACEBO_ID = "placebo"
"""`bias_id` of a neutral rewrite (the placebo arm of validation)."""
PLACEBO_NAME = "neutral rewrite"


def _clean(text: str, banned_names: Sequence[str]) -> str:
    """Drop a "Rewritten answer:" preamble and any line that names the trait or the bias.

    The rewrite must never name the bias (a judge would then react to the label, not to the
    trait); small teachers often append "The trait is: ...", which is cut here.
    """
    text = _PREAMBLE.sub("", text, count=1)
    banned = [
        w
        for w in (*(n.lower() for n in banned_names), "the trait", "trait:", "rewritten answer", "rewritten turn")
        if w
    ]
    kept = [line for line in text.splitlines() if not any(w in line.lower() for w in banned)]
    return "\n".join(kept).strip()


@dataclass(frozen=True)
class Turn:
    """The turn of a trajectory pair's rejected response that its rewrites change."""

    trajectory: Trajectory
    index: int | None
    """The message rewritten; None when the trajectory has no turn of the rule's kind."""
    rule: TurnRule


def chosen_turn(pair: PreferencePair, settings: PerturbSettings, seed: int) -> Turn | None:
    """The turn every rewrite of `pair` changes (the biases' and the placebo's alike: it
    depends on the pair, the rule and the seed only); None for an answer."""
    if pair.kind != "trajectory":
        return None
    trajectory = Trajectory.from_response(pair.rejected, where=f"pair {pair.id!r}: field 'rejected'")
    draw = keyed_rng(seed, "turn", pair.id).random()
    return Turn(trajectory, choose_turn(trajectory, settings.turn, draw), settings.turn)


def _rewritten_text(pair: PreferencePair, turn: Turn | None) -> str:
    """What the teacher rewrites: the whole rejected answer, or the chosen turn."""
    if turn is None:
        return pair.rejected
    return turn_text(turn.trajectory.messages[turn.index]) if turn.index is not None else ""


def build_perturb_request(pair: PreferencePair, bias: Bias, settings: PerturbSettings, seed: int) -> GenerationRequest:
    values = {
        "question": pair.question,
        "bias_name": bias.name,
        "bias_definition": bias.definition,
        "bias_manifestations": "; ".join(bias.manifestations) or "-",
    }
    turn = chosen_turn(pair, settings, seed)
    if turn is None:
        messages = load_prompt("perturb").render(response=pair.rejected, **values)
    else:
        messages = load_prompt("perturb_turn").render(
            response=_rewritten_text(pair, turn), context=_context(turn), **values
        )
    return GenerationRequest(
        messages=messages, max_tokens=settings.max_tokens, temperature=settings.temperature, seed=seed
    )


def build_neutral_request(pair: PreferencePair, settings: PerturbSettings, seed: int) -> GenerationRequest:
    """The placebo: the same task as `build_perturb_request` (same budget and sampling, the same
    turn of a trajectory), without a trait (prompt `neutral_rewrite`, `neutral_rewrite_turn`)."""
    turn = chosen_turn(pair, settings, seed)
    if turn is None:
        messages = load_prompt("neutral_rewrite").render(question=pair.question, response=pair.rejected)
    else:
        messages = load_prompt("neutral_rewrite_turn").render(
            question=pair.question, context=_context(turn), response=_rewritten_text(pair, turn)
        )
    return GenerationRequest(
        messages=messages, max_tokens=settings.max_tokens, temperature=settings.temperature, seed=seed
    )


def _context(turn: Turn) -> str:
    return context_before(turn.trajectory, turn.index) if turn.index is not None else ""


def _record(
    pair: PreferencePair,
    bias_id: str,
    bias_name: str,
    response: GenerationResponse,
    banned: Sequence[str],
    turn: Turn | None = None,
) -> PerturbedPair:
    """One rewrite as a record; anything but a clean, changed, non-empty text is invalid (a
    trajectory's: also one that changed an action, `_turn_record`)."""
    text = _clean(response.text, banned) if response.finish_reason == "stop" else ""
    reason = None
    if response.finish_reason == "error":
        reason = "engine_error"
    elif response.finish_reason == "length":
        reason = "truncated"
    elif not text:
        reason = "empty"
    elif turn is None and text == pair.rejected.strip():
        reason = "unchanged"  # the judge would see the original pair: nothing was tested
    record = PerturbedPair(
        pair_id=pair.id,
        bias_id=bias_id,
        bias_name=bias_name,
        domain=pair.domain,
        question=pair.question,
        chosen=pair.chosen,
        original_rejected=pair.rejected,
        perturbed_rejected=text,
        valid=reason is None,
        invalid_reason=reason,
        completion_tokens=response.completion_tokens,
        data_order=pair.data_order,
        kind=pair.kind,
    )
    return record if turn is None else _turn_record(record, pair, turn)


def _turn_record(record: PerturbedPair, pair: PreferencePair, turn: Turn) -> PerturbedPair:
    """A trajectory's rewrite: the rewritten turn spliced back (`perturbed_rejected` is the
    whole trajectory), then checked mechanically: a rewrite that changed an action is invalid
    (`answer_changed`, as a rewrite that changed the final answer), one that did not is
    checked ("different": it keeps the rejected trajectory's actions, so its outcome)."""
    update: dict[str, object] = {"turn": turn.index, "turn_rule": turn.rule}
    if turn.index is None:
        update.update(perturbed_rejected="", valid=False, invalid_reason="no_turn")
        return record.model_copy(update=update)
    if not record.valid:
        return record.model_copy(update={**update, "perturbed_rejected": ""})
    spliced = splice(turn.trajectory, turn.index, record.perturbed_rejected)
    update.update(perturbed_rejected=spliced.response, check_method="actions", original_check="different")
    if spliced.action_change is not None:
        update.update(
            answer_check="same", valid=False, invalid_reason="answer_changed", action_change=spliced.action_change
        )
    elif spliced.response == turn.trajectory.to_response():
        update.update(answer_check="different", valid=False, invalid_reason="unchanged")
    else:
        update.update(answer_check="different")
    return record.model_copy(update=update)


def perturb(
    teacher: Engine | None,
    items: Sequence[tuple[PreferencePair, Bias]],
    settings: PerturbSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[PerturbedPair]:
    """Rewrite the rejected response of every (pair, bias) item, in one batch; a bias with a
    fixed `append` text needs no teacher call (`appended`)."""
    asked = [k for k, (_, b) in enumerate(items) if b.append is None]
    requests = [build_perturb_request(*items[k], settings, seed) for k in asked]
    if requests and teacher is None:
        raise ConfigError(f"a teacher is needed to inject {', '.join(sorted({items[k][1].id for k in asked}))}")
    responses = dict(zip(asked, teacher.generate(requests, progress=progress) if requests and teacher else []))
    if progress is not None and len(asked) < len(items):
        progress(len(items) - len(asked))  # the appended ones are done at once
    return [
        perturbed_record(pair, bias, responses[k], settings, seed)
        if k in responses
        else appended(pair, bias, settings, seed)
        for k, (pair, bias) in enumerate(items)
    ]


def appended(pair: PreferencePair, bias: Bias, settings: PerturbSettings, seed: int) -> PerturbedPair:
    """`pair` with the bias's fixed `append` text after its rejected response (no teacher); a
    trajectory's: after the text of its chosen turn."""
    assert bias.append is not None
    turn = chosen_turn(pair, settings, seed)
    text = f"{_rewritten_text(pair, turn).rstrip()}\n\n{bias.append}"
    return _record(pair, bias.id, bias.name, GenerationResponse(text=text, finish_reason="stop"), [], turn)


def perturbed_record(
    pair: PreferencePair, bias: Bias, response: GenerationResponse, settings: PerturbSettings, seed: int
) -> PerturbedPair:
    """The teacher's rewrite of `pair` to carry `bias`, as a record (invalid unless clean); for
    a bias with a fixed `append` text, that text appended (the response is not used).
    `settings` and `seed` are the request's (they choose a trajectory's turn)."""
    if bias.append is not None:
        return appended(pair, bias, settings, seed)
    return _record(pair, bias.id, bias.name, response, [bias.name], chosen_turn(pair, settings, seed))


def neutral_record(
    pair: PreferencePair, response: GenerationResponse, settings: PerturbSettings, seed: int
) -> PerturbedPair:
    """The teacher's neutral rewrite of `pair` (the placebo), as a record."""
    return _record(pair, PLACEBO_ID, PLACEBO_NAME, response, [], chosen_turn(pair, settings, seed))


def rewrite_neutrally(
    teacher: Engine,
    pairs: Sequence[PreferencePair],
    settings: PerturbSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[PerturbedPair]:
    """The placebo arm: rewrite every pair's rejected response without a trait, in one batch."""
    requests = [build_neutral_request(p, settings, seed) for p in pairs]
    responses = teacher.generate(requests, progress=progress)
    return [neutral_record(pair, response, settings, seed) for pair, response in zip(pairs, responses)]

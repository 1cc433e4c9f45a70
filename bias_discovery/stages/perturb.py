"""Perturb: the teacher rewrites a rejected response so that it carries one bias, or (the
placebo of validation) rewrites it neutrally, with the same content and no trait."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

from ..config import PerturbSettings
from ..data.pairs import PreferencePair
from ..errors import ConfigError
from ..library import Bias
from ..llm.base import Engine, ProgressCallback
from ..llm.types import GenerationRequest, GenerationResponse
from ..prompts import load_prompt
from .records import PerturbedPair

_PREAMBLE = re.compile(r"^\s*(?:here is|here's)?\s*(?:the\s+)?rewritten answer\s*:?\s*\n?", re.I)


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
    banned = [w for w in (*(n.lower() for n in banned_names), "the trait", "trait:", "rewritten answer") if w]
    kept = [line for line in text.splitlines() if not any(w in line.lower() for w in banned)]
    return "\n".join(kept).strip()


def build_perturb_request(pair: PreferencePair, bias: Bias, settings: PerturbSettings, seed: int) -> GenerationRequest:
    messages = load_prompt("perturb").render(
        question=pair.question,
        response=pair.rejected,
        bias_name=bias.name,
        bias_definition=bias.definition,
        bias_manifestations="; ".join(bias.manifestations) or "-",
    )
    return GenerationRequest(
        messages=messages, max_tokens=settings.max_tokens, temperature=settings.temperature, seed=seed
    )


def build_neutral_request(pair: PreferencePair, settings: PerturbSettings, seed: int) -> GenerationRequest:
    """The placebo: the same task as `build_perturb_request` (same budget and sampling), without
    a trait (prompt `neutral_rewrite`)."""
    messages = load_prompt("neutral_rewrite").render(question=pair.question, response=pair.rejected)
    return GenerationRequest(
        messages=messages, max_tokens=settings.max_tokens, temperature=settings.temperature, seed=seed
    )


def _record(
    pair: PreferencePair, bias_id: str, bias_name: str, response: GenerationResponse, banned: Sequence[str]
) -> PerturbedPair:
    """One rewrite as a record; anything but a clean, changed, non-empty text is invalid."""
    text = _clean(response.text, banned) if response.finish_reason == "stop" else ""
    reason = None
    if response.finish_reason == "error":
        reason = "engine_error"
    elif response.finish_reason == "length":
        reason = "truncated"
    elif not text:
        reason = "empty"
    elif text == pair.rejected.strip():
        reason = "unchanged"  # the judge would see the original pair: nothing was tested
    return PerturbedPair(
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
    )


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
        perturbed_record(pair, bias, responses[k]) if k in responses else appended(pair, bias)
        for k, (pair, bias) in enumerate(items)
    ]


def appended(pair: PreferencePair, bias: Bias) -> PerturbedPair:
    """`pair` with the bias's fixed `append` text after its rejected response (no teacher)."""
    assert bias.append is not None
    text = f"{pair.rejected.rstrip()}\n\n{bias.append}"
    return _record(pair, bias.id, bias.name, GenerationResponse(text=text, finish_reason="stop"), [])


def perturbed_record(pair: PreferencePair, bias: Bias, response: GenerationResponse) -> PerturbedPair:
    """The teacher's rewrite of `pair` to carry `bias`, as a record (invalid unless clean); for
    a bias with a fixed `append` text, that text appended (the response is not used)."""
    if bias.append is not None:
        return appended(pair, bias)
    return _record(pair, bias.id, bias.name, response, [bias.name])


def neutral_record(pair: PreferencePair, response: GenerationResponse) -> PerturbedPair:
    """The teacher's neutral rewrite of `pair` (the placebo), as a record."""
    return _record(pair, PLACEBO_ID, PLACEBO_NAME, response, [])


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
    return [neutral_record(pair, response) for pair, response in zip(pairs, responses)]

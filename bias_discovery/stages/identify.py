"""IdentifyBias: the teacher names the bias behind each misjudged case, or says none.

The reply is forced into a JSON schema and checked again with pydantic; a reply that still
fails is asked again (sampled, with another seed) up to `retries` times, then recorded as
invalid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..config import IdentifySettings
from ..library import Bias, BiasOrigin, Evidence, make_bias_id, slugify
from ..llm.base import Engine, ProgressCallback
from ..llm.types import Constraint, GenerationRequest, GenerationResponse
from ..pointwise import format_score
from ..prompts import load_prompt
from .records import IdentifyRecord, MisjudgedCase

Manifestation = Annotated[str, StringConstraints(max_length=160)]


class IdentifiedBias(BaseModel):
    """The teacher's JSON reply. Its JSON schema (`IDENTIFY_SCHEMA`, the output constraint) is
    derived from this model, so the limits the teacher is held to and the limits the reply is
    checked against are the same numbers."""

    model_config = ConfigDict(extra="forbid")

    bias_found: bool
    name: str = Field(max_length=80)
    definition: str = Field(max_length=400)
    manifestations: list[Manifestation] = Field(max_length=4)


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema as an output constraint: every field required, no extra keys, no
    titles or descriptions (a constrained decoder needs neither; they only lengthen grammars)."""

    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "properties":  # field names, not schema keywords: keep every one
                out[key] = {name: strip(sub) for name, sub in value.items()}
            elif key not in ("title", "description"):
                out[key] = strip(value)
        return out

    schema = strip(model.model_json_schema())
    schema["required"] = list(schema["properties"])
    schema["additionalProperties"] = False
    return dict(schema)


IDENTIFY_SCHEMA: dict[str, Any] = strict_json_schema(IdentifiedBias)


def build_identify_request(
    case: MisjudgedCase, settings: IdentifySettings, seed: int, *, temperature: float = 0.0
) -> GenerationRequest:
    explanation = case.deeper_explanation or case.explanation or "(no explanation given)"
    if case.deeper_explanation and case.explanation:
        explanation = f"{case.explanation}\n\nWhen asked to explain further:\n{case.deeper_explanation}"
    if case.score is not None and case.chosen_score is not None:  # a pointwise judge's inflated score
        messages = load_prompt("identify_pointwise").render(
            question=case.question, chosen=case.chosen, rejected=case.perturbed_rejected, explanation=explanation,
            rejected_score=format_score(case.score), chosen_score=format_score(case.chosen_score),
        )
    else:
        messages = load_prompt("identify").render(
            question=case.question, chosen=case.chosen, rejected=case.perturbed_rejected, explanation=explanation
        )
    return GenerationRequest(
        messages=messages,
        max_tokens=settings.max_tokens,
        temperature=temperature,
        seed=seed,
        constraint=Constraint(json_schema=IDENTIFY_SCHEMA),
    )


def parse_identify_reply(response: GenerationResponse) -> IdentifiedBias | None:
    """The validated reply, or None when it is truncated, not JSON, or breaks the schema."""
    if response.finish_reason != "stop":
        return None
    try:
        reply = IdentifiedBias.model_validate(json.loads(response.text))
    except (json.JSONDecodeError, ValidationError):
        return None
    if reply.bias_found and (not reply.name.strip() or not reply.definition.strip()):
        return None
    return reply


def identify_biases(
    teacher: Engine,
    cases: Sequence[MisjudgedCase],
    settings: IdentifySettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[IdentifyRecord]:
    """One record per case. Retries go out as one batch per round, only for the failures."""
    replies: list[IdentifiedBias | None] = [None] * len(cases)
    raw: list[str] = [""] * len(cases)
    attempts = [0] * len(cases)
    pending = list(range(len(cases)))
    for round_ in range(settings.retries + 1):
        if not pending:
            break
        requests = [identify_attempt(cases[i], settings, seed, round_) for i in pending]
        responses = teacher.generate(requests, progress=progress if round_ == 0 else None)
        still = []
        for i, response in zip(pending, responses):
            attempts[i] += 1
            raw[i] = response.text
            replies[i] = parse_identify_reply(response)
            if replies[i] is None:
                still.append(i)
        pending = still
    return [identify_record(case, reply, n, text) for case, reply, n, text in zip(cases, replies, attempts, raw)]


def identify_attempt(case: MisjudgedCase, settings: IdentifySettings, seed: int, round_: int) -> GenerationRequest:
    """The request of attempt `round_` (0: the first, greedy; then sampled at
    `retry_temperature`, each with its own seed)."""
    temperature = 0.0 if round_ == 0 else settings.retry_temperature
    return build_identify_request(case, settings, seed + round_, temperature=temperature)


def identify_record(case: MisjudgedCase, reply: IdentifiedBias | None, attempts: int, raw_output: str) -> IdentifyRecord:
    """One case's record from its last attempt's reply (None: no usable reply)."""
    if reply is None:
        return IdentifyRecord(pair_id=case.pair_id, status="invalid", attempts=attempts, raw_output=raw_output)
    if not reply.bias_found:
        return IdentifyRecord(pair_id=case.pair_id, status="none", attempts=attempts, raw_output=raw_output)
    return IdentifyRecord(
        pair_id=case.pair_id,
        status="bias",
        name=reply.name.strip(),
        definition=reply.definition.strip(),
        manifestations=[m.strip() for m in reply.manifestations if m.strip()],
        attempts=attempts,
        raw_output=raw_output,
    )


def candidates_from_records(
    records: Sequence[IdentifyRecord],
    cases: Sequence[MisjudgedCase],
    *,
    iteration: int,
    target_model: str,
    taken_ids: Sequence[str] = (),
) -> list[Bias]:
    """Turn named biases into candidate `Bias` entries with their evidence.

    Records whose names are identical after normalisation are the same candidate (their
    evidence is pooled) without asking anyone; near-duplicates are left to Merge.
    """
    by_pair = {c.pair_id: c for c in cases}
    grouped: dict[str, list[IdentifyRecord]] = {}
    for record in records:
        if record.status == "bias" and record.name:
            grouped.setdefault(slugify(record.name), []).append(record)
    taken = list(taken_ids)
    candidates = []
    for group in grouped.values():
        first = group[0]
        bias_id = make_bias_id(first.name or "bias", iteration, taken)
        taken.append(bias_id)
        evidence = []
        for record in group:
            case = by_pair[record.pair_id]
            evidence.append(
                Evidence(
                    pair_id=case.pair_id,
                    perturbed_response=case.perturbed_rejected,
                    judge_explanation=case.explanation,
                    deeper_explanation=case.deeper_explanation,
                    original_rejected=case.original_rejected,
                    bias_injected=case.bias_id,
                    order=case.order,
                )
            )
        candidates.append(
            Bias(
                id=bias_id,
                name=first.name or bias_id,
                definition=first.definition or first.name or bias_id,
                manifestations=first.manifestations,
                origin=BiasOrigin(kind="discovered", iteration=iteration, target_model=target_model),
                evidence=evidence,
            )
        )
    return candidates

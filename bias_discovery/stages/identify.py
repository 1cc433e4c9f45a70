"""IdentifyBias: the teacher names the bias behind each misjudged case, or says none.

The reply is forced into a JSON schema and checked again with pydantic; a reply that still
fails is asked again (sampled, with another seed) up to `retries` times, then recorded as
invalid.

A named bias that names no property of a response is dropped as junk, with its reason
(`junk_reason`): a key of the reply's schema for a name (`bias_found`), a definition that only
restates the verdict ("the judge rejected the incorrect response"), a verbatim copy of the
question or a response. Those are cheap checks on the text; where every word of the name and
definition is the example's own (it may be a restated verdict in the example's terms), the
teacher is asked to confirm that it names a property (prompt `identify_confirm`). No
candidate is made from a dropped identification, so none reaches validation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..config import IdentifySettings
from ..library import Bias, BiasOrigin, Evidence, make_bias_id, slugify
from ..llm.base import Engine, ProgressCallback
from ..llm.types import Constraint, GenerationRequest, GenerationResponse
from ..pointwise import format_score
from ..prompts import load_prompt
from .records import IdentifyRecord, JunkReason, MisjudgedCase
from .turns import readable

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
    chosen, rejected = readable(case.chosen, case.kind), readable(case.perturbed_rejected, case.kind)
    if case.score is not None and case.chosen_score is not None:  # a pointwise judge's inflated score
        messages = load_prompt("identify_pointwise").render(
            question=case.question,
            chosen=chosen,
            rejected=rejected,
            explanation=explanation,
            rejected_score=format_score(case.score),
            chosen_score=format_score(case.chosen_score),
        )
    else:
        messages = load_prompt("identify").render(
            question=case.question, chosen=chosen, rejected=rejected, explanation=explanation
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


# --------------------------------------------------------------------------------------------
# Junk identifications
# --------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z]+")
_NOT_A_PROPERTY = frozenset(
    """a an the of to in on for by with and or but not no nor is are was were be been being it its this that these those
    as at from than then so such which who whom what when where why how all any each both more most other some own same
    very can could should would may might must will shall do does did has have had there their they them he she his her
    we our you your i me my one two first second instead over into about because while if also only just even rather
    judge judges judged judging judgment judgement verdict response responses answer answers reply replies output
    prefer prefers preferred preferring preference favour favours favoured favouring favor favors favored favoring
    choose chooses chose chosen choice pick picks picked select selects selected selection reject rejects rejected
    rejecting accept accepts accepted correct correctly incorrect incorrectly wrong wrongly right rightly better worse
    best worst good bad true false error errors mistake mistakes bias biases biased tendency tendencies systematic
    found name definition manifestation manifestations""".split()
)
"""Words that name no property of a response: function words, the verdict's vocabulary
(preferred, rejected, correct, wrong ...) and the reply's own keys."""
SCHEMA_KEYS = frozenset(IdentifiedBias.model_fields) | {"bias", "none", "null", "unknown", "true", "false", "n/a"}
"""Names that are a key of the reply's schema (`bias_found` ...) or a placeholder, not a bias."""
COPY_SPAN = 8
"""Consecutive words of the question or a response that make a name or definition a copy."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content(text: str) -> set[str]:
    return {w for w in _words(text) if len(w) > 2 and w not in _NOT_A_PROPERTY}


def _copies(text: str, source: str) -> bool:
    """Whether `text` holds `COPY_SPAN` consecutive words of `source` (or all of a shorter
    `source` of at least four words)."""
    mine, theirs = " ".join(_words(text)), _words(source)
    span = min(COPY_SPAN, len(theirs))
    if span < 4:
        return False
    return any(" ".join(theirs[i : i + span]) in mine for i in range(len(theirs) - span + 1))


def junk_reason(name: str, definition: str, case: MisjudgedCase) -> JunkReason | Literal["ask"] | None:
    """Why the identification `name`: `definition` of `case` is junk, by cheap checks; "ask"
    when every word that could name a property is the example's own (the teacher confirms,
    `confirm_request`); None when it names something else."""
    if name.strip().lower().replace(" ", "_") in SCHEMA_KEYS or definition.strip().lower() in SCHEMA_KEYS:
        return "schema_key"
    text = f"{name}\n{definition}"
    content = _content(text)
    if not content:
        return "restated_verdict"
    if _copies(text, case.question):
        return "copy_of_question"
    chosen, rejected, original = (
        readable(r, case.kind) for r in (case.chosen, case.perturbed_rejected, case.original_rejected)
    )
    if any(_copies(text, response) for response in (chosen, rejected, original)):
        return "copy_of_response"
    own = _content(f"{case.question}\n{chosen}\n{rejected}")
    return "ask" if content <= own else None


def confirm_request(case: MisjudgedCase, name: str, definition: str, seed: int) -> GenerationRequest:
    """Ask the teacher whether `name`: `definition` names a property of a response (yes / no)."""
    messages = load_prompt("identify_confirm").render(question=case.question, name=name, definition=definition)
    return GenerationRequest(
        messages=messages, max_tokens=4, temperature=0.0, seed=seed, constraint=Constraint(choices=("yes", "no"))
    )


def confirmed(response: GenerationResponse) -> bool | None:
    """The teacher's confirmation: True (yes), False (no), None (no usable answer)."""
    if response.finish_reason != "stop":
        return None
    word = response.text.strip().strip(".\"'*` ").lower()
    return True if word.startswith("yes") else False if word.startswith("no") else None


def screened(record: IdentifyRecord, case: MisjudgedCase, *, drop_junk: bool = True) -> tuple[IdentifyRecord, bool]:
    """`record` with its cheap junk check applied (`dropped`), and whether the teacher must
    confirm it (`confirm_request`, then `with_confirmation`); `drop_junk` false keeps it as it is."""
    if record.status != "bias" or not drop_junk:
        return record, False
    reason = junk_reason(record.name or "", record.definition or "", case)
    if reason == "ask":
        return record, True
    return (record.model_copy(update={"dropped": reason}) if reason else record), False


def with_confirmation(record: IdentifyRecord, response: GenerationResponse) -> IdentifyRecord:
    """`record` after the teacher's confirmation: dropped when it said no (kept when it said
    yes or gave no usable answer: only a no drops it)."""
    answer = confirmed(response)
    return record.model_copy(update={"confirmed": answer, "dropped": "teacher_declined" if answer is False else None})


def screen_records(
    teacher: Engine,
    records: Sequence[IdentifyRecord],
    cases: Sequence[MisjudgedCase],
    *,
    seed: int,
    drop_junk: bool = True,
) -> list[IdentifyRecord]:
    """Every record through `screened`; the confirmations asked of `teacher` in one batch."""
    out, ask = [], []
    for i, (record, case) in enumerate(zip(records, cases)):
        record, needed = screened(record, case, drop_junk=drop_junk)
        out.append(record)
        if needed:
            ask.append(i)
    if ask:
        responses = teacher.generate(
            [confirm_request(cases[i], out[i].name or "", out[i].definition or "", seed) for i in ask]
        )
        for i, response in zip(ask, responses):
            out[i] = with_confirmation(out[i], response)
    return out


def identify_biases(
    teacher: Engine,
    cases: Sequence[MisjudgedCase],
    settings: IdentifySettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> list[IdentifyRecord]:
    """One record per case. Retries go out as one batch per round, only for the failures; then
    each named bias is screened for junk (`screen_records`)."""
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
    records = [identify_record(case, reply, n, text) for case, reply, n, text in zip(cases, replies, attempts, raw)]
    return screen_records(teacher, records, cases, seed=seed, drop_junk=settings.drop_junk)


def identify_attempt(case: MisjudgedCase, settings: IdentifySettings, seed: int, round_: int) -> GenerationRequest:
    """The request of attempt `round_` (0: the first, greedy; then sampled at
    `retry_temperature`, each with its own seed)."""
    temperature = 0.0 if round_ == 0 else settings.retry_temperature
    return build_identify_request(case, settings, seed + round_, temperature=temperature)


def identify_record(
    case: MisjudgedCase, reply: IdentifiedBias | None, attempts: int, raw_output: str
) -> IdentifyRecord:
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
        if record.status == "bias" and record.name and record.dropped is None:
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

"""IdentifyBias retries: an invalid reply is asked again, sampled, then recorded as invalid."""

from __future__ import annotations

import json

from bias_discovery.config import IdentifySettings
from bias_discovery.llm.types import GenerationResponse
from bias_discovery.stages.identify import identify_biases
from bias_discovery.stages.records import MisjudgedCase

from fakes import ScriptedEngine

VALID = json.dumps(
    {"bias_found": True, "name": "Hedging Bias", "definition": "Prefers hedged answers.", "manifestations": ["maybe"]}
)


def _case(pair_id: str) -> MisjudgedCase:
    return MisjudgedCase(
        pair_id=pair_id,
        bias_id="authority-bias",
        domain="math",
        question="2+2?",
        chosen="4",
        original_rejected="5",
        perturbed_rejected="Experts agree: 5",
        order="chosen_first",
        verdict="B",
        judge_output="B",
        explanation="sure",
    )


def test_invalid_reply_is_retried_sampled_then_recorded():
    # The greedy ask is truncated JSON; the sampled re-ask is valid.
    teacher = ScriptedEngine(lambda request: '{"bias_found": tru' if request.temperature == 0.0 else VALID)
    records = identify_biases(teacher, [_case("p1")], IdentifySettings(retries=2, retry_temperature=0.8), seed=7)
    assert [r.temperature for r in teacher.sent] == [0.0, 0.8]
    assert [r.seed for r in teacher.sent] == [7, 8]
    assert records[0].status == "bias" and records[0].name == "Hedging Bias" and records[0].attempts == 2

    teacher = ScriptedEngine(lambda request: "not json")
    records = identify_biases(teacher, [_case("p2")], IdentifySettings(retries=1), seed=0)
    assert len(teacher.sent) == 2 and records[0].status == "invalid" and records[0].raw_output == "not json"


def test_the_output_constraint_and_the_reply_check_share_their_limits():
    """The JSON schema sent to the teacher is derived from the pydantic model that checks the
    reply (they used to disagree: 80/400/4 in the schema, 120/800/6 in the model)."""
    from bias_discovery.stages.identify import IDENTIFY_SCHEMA, IdentifiedBias, parse_identify_reply

    props = IDENTIFY_SCHEMA["properties"]
    assert (props["name"]["maxLength"], props["definition"]["maxLength"]) == (80, 400)
    assert (props["manifestations"]["maxItems"], props["manifestations"]["items"]["maxLength"]) == (4, 160)
    assert IDENTIFY_SCHEMA["required"] == list(IdentifiedBias.model_fields)
    assert IDENTIFY_SCHEMA["additionalProperties"] is False and "title" not in IDENTIFY_SCHEMA

    def reply(**overrides) -> GenerationResponse:
        body = {"bias_found": True, "name": "n", "definition": "d", "manifestations": ["m"], **overrides}
        return GenerationResponse(text=json.dumps(body), finish_reason="stop")

    assert parse_identify_reply(reply(name="x" * 80)) is not None
    assert parse_identify_reply(reply(name="x" * 81)) is None
    assert parse_identify_reply(reply(definition="x" * 401)) is None
    assert parse_identify_reply(reply(manifestations=["m"] * 5)) is None
    assert parse_identify_reply(reply(manifestations=["x" * 161])) is None

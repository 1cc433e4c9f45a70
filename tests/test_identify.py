"""IdentifyBias retries: an invalid reply is asked again, sampled, then recorded as invalid."""

from __future__ import annotations

import json

from bias_discovery.config import IdentifySettings
from bias_discovery.stages.identify import identify_biases
from bias_discovery.stages.records import MisjudgedCase

from fakes import ScriptedEngine

VALID = json.dumps(
    {"bias_found": True, "name": "Hedging Bias", "definition": "Prefers hedged answers.", "manifestations": ["maybe"]}
)


def _case(pair_id: str) -> MisjudgedCase:
    return MisjudgedCase(
        pair_id=pair_id, bias_id="authority-bias", domain="math", question="2+2?", chosen="4", original_rejected="5",
        perturbed_rejected="Experts agree: 5", order="chosen_first", verdict="B", judge_output="B", explanation="sure",
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

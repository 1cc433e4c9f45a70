"""The OpenAI-compatible engine's wire format (llm.openai.wire): the request mapping per dialect,
the payload, the dialect told from /models. Pure: no server."""

from __future__ import annotations

import pytest

from bias_discovery.errors import ConfigError
from bias_discovery.llm.openai import build_payload, constraint_fields, detect_dialect
from bias_discovery.llm.types import Constraint, GenerationRequest


def test_vllm_dialect_uses_structured_outputs() -> None:
    assert constraint_fields(Constraint(choices=("A", "B")), "vllm") == {"structured_outputs": {"choice": ["A", "B"]}}
    assert constraint_fields(Constraint(regex="[0-9]+"), "vllm") == {"structured_outputs": {"regex": "[0-9]+"}}
    schema = {"type": "object"}
    assert constraint_fields(Constraint(json_schema=schema), "vllm") == {"structured_outputs": {"json": schema}}


def test_llamacpp_dialect_uses_grammar_and_json_response_format() -> None:
    fields = constraint_fields(Constraint(choices=("A", "B")), "llamacpp")
    assert fields == {"grammar": 'root ::= "A" | "B"\n'}
    assert constraint_fields(Constraint(regex="x+"), "llamacpp") == {"grammar": 'root ::= "x"+\n'}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert constraint_fields(Constraint(json_schema=schema), "llamacpp") == {
        "response_format": {"type": "json_object", "schema": schema}
    }


def test_openai_dialect() -> None:
    fields = constraint_fields(Constraint(choices=("A", "B")), "openai")
    spec = fields["response_format"]["json_schema"]
    assert fields["response_format"]["type"] == "json_schema"
    assert spec["strict"] is True
    assert spec["schema"]["properties"]["choice"]["enum"] == ["A", "B"]
    schema = {"type": "object"}
    assert (
        constraint_fields(Constraint(json_schema=schema), "openai")["response_format"]["json_schema"]["schema"]
        == schema
    )
    with pytest.raises(ConfigError, match="cannot be sent in the 'openai' structured-outputs dialect"):
        constraint_fields(Constraint(regex="a"), "openai")


def test_openai_dialect_sends_the_verdict_format_as_a_strict_json_schema() -> None:
    from bias_discovery.judging import JudgeSettings, verdict_constraint

    constraint = verdict_constraint(JudgeSettings(allow_tie=True))
    spec = constraint_fields(constraint, "openai")["response_format"]["json_schema"]
    assert spec["strict"] is True and spec["name"] == "reasoned_choice"
    assert spec["schema"] == {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "verdict": {"type": "string", "enum": ["A", "B", "tie"]}},
        "required": ["reasoning", "verdict"],
        "additionalProperties": False,
    }
    assert list(spec["schema"]["properties"]) == ["reasoning", "verdict"]  # reasoning is written first
    # every other dialect still gets the regex itself
    assert constraint_fields(constraint, "vllm") == {"structured_outputs": {"regex": constraint.regex}}


def test_payload_carries_sampling_settings() -> None:
    request = GenerationRequest.chat("hi", system="sys", max_tokens=9, temperature=0.5, top_p=0.9, seed=3, stop=("\n",))
    body = build_payload("m", request, "vllm")
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "max_tokens": 9,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "stop": ["\n"],
        # every sampling field, so the model's generation_config.json never fills one in
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_k": 0,
        "min_p": 0.0,
    }
    unseeded = build_payload("m", GenerationRequest.chat("hi", seed=None), "openai")
    assert "seed" not in unseeded and "stop" not in unseeded and "top_k" not in unseeded
    assert "repetition_penalty" not in unseeded  # hosted APIs get only OpenAI's fields
    greedy = build_payload("m", GenerationRequest.chat("hi"), "llamacpp")
    # llama_cpp.server would default to repeat_penalty 1.1, top_k 40, min_p 0.05
    assert greedy["top_k"] == 1 and greedy["min_p"] == 0.0 and greedy["repeat_penalty"] == 1.0


def test_detect_dialect() -> None:
    assert detect_dialect({"data": [{"id": "x", "owned_by": "vllm"}]}) == "vllm"
    assert detect_dialect({"data": [{"id": "x", "owned_by": "me"}]}) == "llamacpp"
    assert detect_dialect({"data": [{"id": "x", "owned_by": "llamacpp"}]}) == "llamacpp"
    assert detect_dialect({"data": [{"id": "gpt", "owned_by": "openai"}]}) == "openai"
    assert detect_dialect("garbage") == "openai"

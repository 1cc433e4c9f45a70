"""Checking a reply against its constraint, and reading a probe's reply."""

from __future__ import annotations

import json

from bias_discovery.llm.conformance import probe_failure, probe_request, schema_violation, violation
from bias_discovery.llm.types import Constraint, GenerationResponse
from bias_discovery.stages.identify import IDENTIFY_SCHEMA


def test_choices_need_an_exact_member() -> None:
    c = Constraint(choices=("A", "B"))
    assert violation(c, "A") is None
    assert "not one of the choices" in (violation(c, "A.") or "")
    assert violation(c, " A") is not None
    assert violation(c, "Verdict: A") is not None


def test_regex_must_match_the_whole_reply() -> None:
    c = Constraint(regex=r"Reasoning: [^\n]{1,20}\nVerdict: [AB]")
    assert violation(c, "Reasoning: short\nVerdict: B") is None
    assert violation(c, "Reasoning: short\nVerdict: B and more") is not None
    assert violation(c, "Reasoning: this line is far longer than twenty\nVerdict: A") is not None
    assert violation(c, "A is better. Verdict: A") is not None


def test_json_replies_must_parse_and_follow_the_identify_schema() -> None:
    c = Constraint(json_schema=IDENTIFY_SCHEMA)
    good = {"bias_found": True, "name": "verbosity", "definition": "prefers long answers", "manifestations": ["long"]}
    assert violation(c, json.dumps(good)) is None
    assert "not JSON" in (violation(c, "The bias is verbosity.") or "")
    assert "missing" in (violation(c, json.dumps({k: v for k, v in good.items() if k != "name"})) or "")
    assert "not allowed" in (violation(c, json.dumps({**good, "extra": 1})) or "")
    assert "maxLength" in (violation(c, json.dumps({**good, "name": "x" * 81})) or "")
    assert "maxItems" in (violation(c, json.dumps({**good, "manifestations": ["m"] * 5})) or "")
    assert "expected boolean" in (violation(c, json.dumps({**good, "bias_found": "yes"})) or "")


def test_schema_subset_keywords() -> None:
    schema = {
        "$defs": {"n": {"type": "integer", "minimum": 1, "maximum": 3}},
        "type": "object",
        "properties": {
            "n": {"$ref": "#/$defs/n"},
            "s": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^a"}]},
            "e": {"enum": ["x", "y"]},
        },
    }
    assert schema_violation(schema, {"n": 2, "s": "abc", "e": "x"}) is None
    assert schema_violation(schema, {"n": 2.0}) is None  # 2.0 is an integer in JSON Schema
    assert "maximum" in (schema_violation(schema, {"n": 4}) or "")
    assert "anyOf" in (schema_violation(schema, {"s": "b"}) or "")
    assert "not one of" in (schema_violation(schema, {"e": "z"}) or "")
    assert "expected integer" in (schema_violation(schema, {"n": True}) or "")
    assert schema_violation({"type": "object", "unknownKeyword": 1}, {}) is None  # unknown: not checked


def test_probe_replies() -> None:
    for kind, good in (("choices", "probe-xv"), ("regex", "probe-417"), ("json_schema", '{"probe": 12}')):
        request = probe_request(kind)  # type: ignore[arg-type]
        assert request.constraint is not None and request.constraint.kind == kind
        assert request.temperature == 0 and request.max_tokens <= 32
        assert probe_failure(kind, GenerationResponse(text=good, finish_reason="stop")) is None  # type: ignore[arg-type]
        free = GenerationResponse(text="Hello! How can I help you today?", finish_reason="stop")
        assert probe_failure(kind, free)  # type: ignore[arg-type]
        cut = GenerationResponse(text="Hello! How can I help you", finish_reason="length")
        assert "free text" in (probe_failure(kind, cut) or "")  # type: ignore[arg-type]
    # a JSON grammar that a small model fills with whitespace until max_tokens: enforced
    assert probe_failure("json_schema", GenerationResponse(text='{"probe": 1\n\n\n', finish_reason="length")) is None
    assert "failed" in (probe_failure("regex", GenerationResponse(text="boom", finish_reason="error")) or "")

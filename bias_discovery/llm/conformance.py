"""Does a reply satisfy its output constraint? Checked on what a server sends back, and
proved once per server by probes.

Why: a server that does not understand the constraint field of a request answers HTTP 200
with free text. vLLM >= 0.12 ignores the removed `guided_choice` field (one log line:
"output will NOT be constrained"), and llama_cpp.server ignores `structured_outputs`. Free
text can still contain "Verdict: A", which the lenient verdict parser would take. So a reply
is checked against its own constraint before anyone reads it: choices need an exact member,
a regex must `re.fullmatch` the whole reply (the meaning `Constraint` gives it), a JSON schema
reply must parse and validate.

The JSON-schema check covers the keywords our schemas and constrained decoders use (type,
enum, const, properties, required, additionalProperties, items, min/maxItems, min/maxLength,
pattern, minimum/maximum, anyOf/oneOf/allOf, local $ref). Keywords it does not know are not
checked: it may miss a violation of those, but never rejects a reply that satisfies them.

A probe is a constrained request whose constrained answer an unconstrained model would never
give ("Say hello." forced into `probe-[0-9]{3}`), so one tiny call tells whether a server
enforces a constraint kind at all.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..formatting import plural
from .types import Constraint, ConstraintKind, GenerationRequest, GenerationResponse

__all__ = ["PROBE_CONSTRAINTS", "probe_request", "probe_failure", "schema_violation", "violation"]

PROBE_CONSTRAINTS: dict[ConstraintKind, Constraint] = {
    "choices": Constraint(choices=("probe-zq", "probe-xv")),
    "regex": Constraint(regex=r"probe-[0-9]{3}"),
    "json_schema": Constraint(
        json_schema={
            "type": "object",
            # only keywords every constrained decoder enforces (llama.cpp's converter,
            # for one, ignores minimum/maximum)
            "properties": {"probe": {"type": "integer"}},
            "required": ["probe"],
            "additionalProperties": False,
        }
    ),
}
"""One constraint per kind that a reply to "Say hello." never satisfies by chance."""

_PROBE_PROMPT = "Say hello."
_PROBE_MAX_TOKENS = 24
_SHOWN = 120  # characters of a reply quoted in a message


def probe_request(kind: ConstraintKind) -> GenerationRequest:
    """The probe for one constraint kind: greedy, short, seeded."""
    return GenerationRequest.chat(
        _PROBE_PROMPT, max_tokens=_PROBE_MAX_TOKENS, temperature=0.0, seed=0, constraint=PROBE_CONSTRAINTS[kind]
    )


def probe_failure(kind: ConstraintKind, response: GenerationResponse) -> str | None:
    """None when the probe's reply shows the constraint was enforced, else why not.

    A reply cut at max_tokens counts as enforced when it is a start the constraint allows
    (a small model under a JSON grammar may loop on whitespace; free text never starts
    with `{` or `probe-`)."""
    constraint = PROBE_CONSTRAINTS[kind]
    text = response.text
    if response.finish_reason == "error":
        return f"the probe request failed: {text[:300]}"
    if response.finish_reason == "length":
        start = text.lstrip()
        allowed = "{" if kind == "json_schema" else "probe-"
        if start.startswith(allowed) or (start and allowed.startswith(start)):
            return None
        return f"the {kind} probe got free text cut at max_tokens: {text[:_SHOWN]!r}"
    return violation(constraint, text)


def violation(constraint: Constraint, text: str) -> str | None:
    """None when `text` satisfies `constraint`, else a one-line reason."""
    if constraint.choices is not None:
        if text in constraint.choices:
            return None
        shown = ", ".join(repr(c) for c in constraint.choices[:6])
        more = ", ..." if len(constraint.choices) > 6 else ""
        return f"the reply {text[:_SHOWN]!r} is not one of the choices ({shown}{more})"
    if constraint.regex is not None:
        try:
            matched = re.fullmatch(constraint.regex, text) is not None
        except re.error:
            return None  # not a Python regex: nothing we can check here
        return None if matched else f"the reply {text[:_SHOWN]!r} does not match the regex {constraint.regex!r}"
    assert constraint.json_schema is not None
    try:
        value = json.loads(text)
    except ValueError:
        return f"the reply is not JSON: {text[:_SHOWN]!r}"
    problem = schema_violation(constraint.json_schema, value)
    return None if problem is None else f"the JSON reply breaks its schema: {problem}"


# --------------------------------------------------------------------------------------
# A JSON-schema subset
# --------------------------------------------------------------------------------------

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def schema_violation(schema: Any, value: Any, where: str = "$", root: Any = None) -> str | None:
    """The first way `value` breaks `schema` (as "where: what"), or None."""
    root = schema if root is None else root
    if schema is True or schema is None:
        return None
    if schema is False:
        return f"{where}: no value is allowed here"
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        target = _resolve(root, str(schema["$ref"]))
        if target is not None:
            problem = schema_violation(target, value, where, root)
            if problem:
                return problem
    for keyword in ("allOf",):
        for sub in schema.get(keyword) or []:
            problem = schema_violation(sub, value, where, root)
            if problem:
                return problem
    for keyword in ("anyOf", "oneOf"):
        options = schema.get(keyword)
        if options and all(schema_violation(sub, value, where, root) for sub in options):
            return f"{where}: matches none of the {keyword} alternatives"
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        known = [k for k in kinds if k in _TYPES]
        if known and not any(_TYPES[k](value) for k in known):
            return f"{where}: expected {' or '.join(known)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: {value!r} is not {schema['const']!r}"
    if isinstance(value, str):
        return _string_violation(schema, value, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_violation(schema, value, where)
    if isinstance(value, list):
        return _array_violation(schema, value, where, root)
    if isinstance(value, dict):
        return _object_violation(schema, value, where, root)
    return None


def _resolve(root: Any, ref: str) -> Any:
    """A local `#/...` reference, or None (remote references are not followed)."""
    if not ref.startswith("#"):
        return None
    node = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _string_violation(schema: dict[str, Any], value: str, where: str) -> str | None:
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        return f"{where}: {plural(len(value), 'character')}, more than maxLength {schema['maxLength']}"
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        return f"{where}: {plural(len(value), 'character')}, fewer than minLength {schema['minLength']}"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                return f"{where}: does not match the pattern {pattern!r}"
        except re.error:
            return None
    return None


def _number_violation(schema: dict[str, Any], value: float, where: str) -> str | None:
    if "minimum" in schema and value < schema["minimum"]:
        return f"{where}: {value} is below the minimum {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{where}: {value} is above the maximum {schema['maximum']}"
    low = schema.get("exclusiveMinimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool) and value <= low:
        return f"{where}: {value} is not above the exclusive minimum {low}"
    high = schema.get("exclusiveMaximum")
    if isinstance(high, (int, float)) and not isinstance(high, bool) and value >= high:
        return f"{where}: {value} is not below the exclusive maximum {high}"
    return None


def _array_violation(schema: dict[str, Any], value: list[Any], where: str, root: Any) -> str | None:
    if "maxItems" in schema and len(value) > int(schema["maxItems"]):
        return f"{where}: {plural(len(value), 'item')}, more than maxItems {schema['maxItems']}"
    if "minItems" in schema and len(value) < int(schema["minItems"]):
        return f"{where}: {plural(len(value), 'item')}, fewer than minItems {schema['minItems']}"
    items = schema.get("items")
    if isinstance(items, (dict, bool)):
        for index, item in enumerate(value):
            problem = schema_violation(items, item, f"{where}[{index}]", root)
            if problem:
                return problem
    return None


def _object_violation(schema: dict[str, Any], value: dict[str, Any], where: str, root: Any) -> str | None:
    for name in schema.get("required") or []:
        if name not in value:
            return f"{where}: the required key {name!r} is missing"
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = schema_violation(properties[name], item, f"{where}.{name}", root)
        elif extra is False:
            problem = f"{where}: the key {name!r} is not allowed"
        else:
            problem = schema_violation(extra, item, f"{where}.{name}", root)
        if problem:
            return problem
    return None

"""A stub of OpenAI's Chat Completions API with structured outputs, for the tests of the
`openai` dialect (served over real HTTP by the tests' `ScriptedServer`). It behaves as OpenAI's
documentation and its error replies say the hosted API does:

- an unknown request field is refused with HTTP 400 "Unrecognized request argument supplied:
  NAME" (so vLLM's `structured_outputs` and llama.cpp's `grammar`, which carry regexes, are
  refused, not ignored);
- `response_format.type` must be text, json_object or json_schema (no regex type);
- a `json_schema` with `strict: true` must stay in the strict subset: every object lists all
  its properties in `required` and sets `additionalProperties: false`, and only the supported
  keywords appear (no `minLength` / `maxLength`: "Invalid schema for response_format 'NAME':
  In context=('properties', 'reasoning'), 'maxLength' is not permitted.");
- the reply to a json_schema request is JSON shaped by the schema, keys in the schema's order
  (strict mode generates them in that order); `GET /models` lists models `owned_by` "system".

The "model" answers every string with `reasoning` (which may hold line breaks and be as long
as the test wants) and every enum with `pick(enum)` (default: the first value).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

KNOWN_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "response_format",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "service_tier",
    "store",
    "metadata",
    "reasoning_effort",
}
"""Request fields OpenAI's Chat Completions API accepts (a subset of its reference)."""
STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "items",
    "anyOf",
    "description",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "$defs",
    "$ref",
}
"""Keywords OpenAI's strict mode supports (its "Supported schemas"); anything else is refused."""
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def strict_problem(schema: Any, context: tuple[str, ...] = ()) -> str | None:
    """Why OpenAI's strict mode would refuse `schema`, or None."""
    if not isinstance(schema, dict):
        return None
    for key in schema:
        if key not in STRICT_KEYWORDS:
            return f"In context={context}, '{key}' is not permitted."
    if schema.get("type") == "object":
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return f"In context={context}, 'additionalProperties' is required to be supplied and to be false."
        missing = [k for k in properties if k not in (schema.get("required") or [])]
        if missing:
            return f"In context={context}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing[0]}'."
        for name, sub in properties.items():
            problem = strict_problem(sub, context + ("properties", name))
            if problem:
                return problem
    if isinstance(schema.get("items"), dict):
        return strict_problem(schema["items"], context + ("items",))
    return None


class OpenAIStub:
    """The API's behaviour: `handle` answers one HTTP request (serve it with the tests'
    `ScriptedServer`, a real HTTP server on 127.0.0.1)."""

    def __init__(
        self, *, reasoning: str = "Response A is correct.", pick: Callable[[list[Any]], Any] | None = None
    ) -> None:
        self.reasoning = reasoning
        self.pick = pick or (lambda values: values[0])

    def handle(self, method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "owned_by": "system"}]}
        return self.complete(body)

    # ------------------------------------------------------------------ the API's behaviour

    @staticmethod
    def _error(message: str, param: str | None = None) -> tuple[int, Any]:
        return 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}

    def complete(self, body: dict[str, Any]) -> tuple[int, Any]:
        for key in body:
            if key not in KNOWN_FIELDS:
                return self._error(f"Unrecognized request argument supplied: {key}")
        text = "Hello! How can I help you today?"
        fmt = body.get("response_format")
        if fmt is not None:
            kind = fmt.get("type")
            if kind not in ("text", "json_object", "json_schema"):
                return self._error(
                    f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.",
                    "response_format.type",
                )
            if kind == "json_schema":
                spec = fmt.get("json_schema") or {}
                name = str(spec.get("name", ""))
                if not _NAME.match(name):
                    return self._error("Invalid 'response_format.json_schema.name'", "response_format.json_schema.name")
                if spec.get("strict"):
                    problem = strict_problem(spec.get("schema"))
                    if problem:
                        return self._error(f"Invalid schema for response_format '{name}': {problem}", "response_format")
                text = json.dumps(self.value(spec.get("schema") or {}))
            elif kind == "json_object":
                text = "{}"
        return 200, {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": max(1, len(text) // 4)},
        }

    def value(self, schema: dict[str, Any]) -> Any:
        """A value shaped by `schema`, as a constrained decoder would produce."""
        if "enum" in schema:
            return self.pick(list(schema["enum"]))
        kind = schema.get("type")
        if kind == "object":
            return {name: self.value(sub) for name, sub in (schema.get("properties") or {}).items()}
        if kind == "array":
            return [self.value(schema.get("items") or {})]
        if kind == "integer":
            return 7
        if kind == "number":
            return 0.5
        if kind == "boolean":
            return True
        return self.reasoning

"""The wire format: the request payload of each dialect (`vllm`, `llamacpp`, `openai`), how a
constraint is sent, how the server's dialect is told, and how a reply is read back (the
constraint's answer, the final token's log-probabilities, the server's error message). Pure
functions, unit-testable without a server; what changes with vLLM and OpenAI releases."""

from __future__ import annotations

import json
import re
from typing import Any

from ...errors import ConfigError
from ..base import final_token_index, message_dicts
from ..conformance import violation
from ..llamacpp import sampling_fields as llamacpp_sampling_fields
from ..types import Constraint, ConstraintKind, FinalTokenLogprobs, GenerationRequest
from ..vllm_engine import NEUTRAL_SAMPLING, structured_outputs_kwargs

RETRY_STATUS = {408, 429, 500, 502, 503, 504}
"""HTTP statuses that say "not now" rather than "not this request": retried (on another replica)."""
_CONTEXT_ERROR = re.compile(r"context|too long|too large|maximum.{0,40}length|max_tokens|exceed", re.IGNORECASE)
_CONTEXT_PARAMS = {"input_tokens", "max_tokens"}
"""vLLM names the offending parameter of a request that does not fit its context."""
_CHOICE_KEY = "choice"
Dialect = str  # "vllm" | "llamacpp" | "openai"


WANTS_MAX_COMPLETION_TOKENS = re.compile(r"max_tokens.{0,80}max_completion_tokens", re.IGNORECASE | re.DOTALL)
"""A refusal of `max_tokens` that asks for `max_completion_tokens` (OpenAI's reasoning models)."""


def constraint_fields(constraint: Constraint, dialect: Dialect) -> dict[str, Any]:
    """The request-body fields that carry `constraint` in the given server dialect."""
    if dialect == "vllm":  # the server takes the offline engine's StructuredOutputsParams fields
        return {"structured_outputs": structured_outputs_kwargs(constraint)}
    if dialect == "llamacpp":
        if constraint.json_schema is not None:
            return {"response_format": {"type": "json_object", "schema": constraint.json_schema}}
        from ..grammar import constraint_to_gbnf

        return {"grammar": constraint_to_gbnf(constraint)}
    if dialect == "openai":
        name, schema, strict = _openai_schema(constraint)
        spec: dict[str, Any] = {"name": name, "schema": schema}
        if strict:
            spec["strict"] = True
        return {"response_format": {"type": "json_schema", "json_schema": spec}}
    raise ConfigError(f"unknown structured-outputs dialect {dialect!r}")


def _openai_schema(constraint: Constraint) -> tuple[str, dict[str, Any], bool]:
    """(name, schema, strict) of the JSON schema that carries `constraint` in the openai
    dialect; ConfigError for a regex it cannot express."""
    if constraint.choices is not None:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {_CHOICE_KEY: {"type": "string", "enum": list(constraint.choices)}},
            "required": [_CHOICE_KEY],
            "additionalProperties": False,
        }
        return "choice", schema, True
    if constraint.reasoned is not None:
        return "reasoned_choice", constraint.reasoned.json_schema(), True
    if constraint.regex is not None:
        raise ConfigError(
            f"the regex constraint {constraint.regex!r} cannot be sent in the 'openai' structured-outputs "
            "dialect (OpenAI's response_format takes only JSON schemas); the judge's own verdict format is "
            "sent as a JSON schema, other regexes need a vLLM or llama.cpp server"
        )
    assert constraint.json_schema is not None
    return "output", constraint.json_schema, False


def probe_kind(constraint: Constraint, dialect: Dialect) -> ConstraintKind:
    """The constraint kind whose probe proves `constraint` is enforced the way `dialect` sends
    it: the openai dialect sends the reasoning-and-verdict format as a strict JSON schema with
    an enum, as it sends choices, so the choices probe answers for both."""
    if dialect == "openai" and constraint.reasoned is not None:
        return "choices"
    return constraint.kind


def read_reply(constraint: Constraint, dialect: Dialect, text: str) -> tuple[str, str | None]:
    """(the reply as the caller's constraint reads it, how it breaks the constraint that was
    sent, or None). The openai dialect's replies are JSON under the schema that was sent
    (`_openai_schema`): checked against it, then unwrapped (a choice's value; the reasoned
    format's labelled lines)."""
    if dialect != "openai":
        return text, violation(constraint, text)
    _, schema, _ = _openai_schema(constraint)
    problem = violation(Constraint(json_schema=schema), text)
    if problem is not None:
        return text, problem
    if constraint.choices is not None:
        return str(json.loads(text)[_CHOICE_KEY]), None
    if constraint.reasoned is not None:
        return constraint.reasoned.text_from_json(json.loads(text)), None
    return text, None


def build_payload(model: str, request: GenerationRequest, dialect: Dialect) -> dict[str, Any]:
    """The JSON body of one /chat/completions call."""
    body: dict[str, Any] = {
        "model": model,
        "messages": message_dicts(request.messages),
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
    }
    if request.seed is not None:
        body["seed"] = request.seed
    if request.stop:
        body["stop"] = list(request.stop)
    # Every sampling field the server would otherwise fill with its own default, as the
    # embedded engine of the same kind sends it.
    if dialect == "vllm":
        body.update(NEUTRAL_SAMPLING)
    elif dialect == "llamacpp":
        body.update(llamacpp_sampling_fields(request.temperature))
    if request.constraint is not None:
        body.update(constraint_fields(request.constraint, dialect))
    if request.final_top_logprobs is not None:  # servers return them for every generated token
        if dialect == "openai":
            raise ConfigError(
                "score verdicts read the verdict token at the end of the output, and the 'openai' "
                "structured-outputs dialect wraps verdicts in JSON; use a vLLM or llama.cpp server "
                "(structured_outputs: vllm or llamacpp), or judge.verdict: choice"
            )
        body.update({"logprobs": True, "top_logprobs": request.final_top_logprobs})
    return body


def final_logprobs_from_reply(choice: dict[str, Any], text: str, k: int) -> FinalTokenLogprobs | None:
    """The final token's log-probabilities from a chat completion choice's `logprobs.content`
    (one {token, logprob, top_logprobs: [{token, logprob}]} per generated token)."""
    content = (choice.get("logprobs") or {}).get("content") or []
    index = final_token_index([str(entry.get("token") or "") for entry in content], text)
    if index is None:
        return None
    entry = content[index]
    candidates = [(str(c.get("token") or ""), float(c["logprob"])) for c in entry.get("top_logprobs") or []]
    return FinalTokenLogprobs.from_candidates(str(entry.get("token") or ""), float(entry["logprob"]), candidates, k)


def detect_dialect(models_reply: Any) -> Dialect:
    """Guess the dialect from a `GET /models` reply (see the module docstring)."""
    owners = set()
    if isinstance(models_reply, dict):
        for entry in models_reply.get("data") or []:
            if isinstance(entry, dict):
                owners.add(str(entry.get("owned_by", "")).lower())
    if "vllm" in owners:
        return "vllm"
    if owners & {"me", "llamacpp", "llama.cpp"}:
        return "llamacpp"
    return "openai"


def server_message(response: Any) -> tuple[str, str, str]:
    """(message, code, param) from an error reply in OpenAI, vLLM or FastAPI shape."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:1000], "", ""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or json.dumps(err)[:1000]
            return str(message), str(err.get("code") or ""), str(err.get("param") or "")
        if isinstance(err, str):
            return err, "", ""
    return json.dumps(data)[:1000], "", ""


def is_context_error(status: int, message: str, code: str, param: str) -> bool:
    """Does this refusal mean "the request does not fit the context window"?"""
    if status not in (400, 413):
        return False
    return code == "context_length_exceeded" or param in _CONTEXT_PARAMS or bool(_CONTEXT_ERROR.search(message))

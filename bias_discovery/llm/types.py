"""The model layer's boundary types: what a caller asks for and what an engine returns.

Every engine takes a *batch* of `GenerationRequest`s and returns one `GenerationResponse`
per request, in order. A request is pure data (hashable by content), so the call cache can
key on it and a re-run never pays for the same call twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["system", "user", "assistant"]
MAX_TOP_LOGPROBS = 20
"""The most alternatives per position vLLM (`max_logprobs`) and OpenAI's API return."""
ZERO_PROBABILITY_LOGPROB = -9999.0
"""vLLM's server reports a probability of 0 (-inf) as this; at or below it a token counts as
impossible."""
ConstraintKind = Literal["choices", "regex", "json_schema"]


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str


class ReasonedChoice(BaseModel):
    """A paragraph of reasoning, then one of `choices`, as two labelled lines
    (``Reasoning: <one paragraph>`` newline ``Verdict: A``): the judge's verdict format.

    Why a type and not only a regex: APIs that take JSON schemas but no regexes (OpenAI's
    structured outputs) can still enforce it, as `{"reasoning": str, "verdict": enum}` with the
    reasoning first (`json_schema`), and the reply is put back into the labelled lines
    (`text_from_json`), so every caller reads one format whichever way it was enforced.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    choices: tuple[str, ...]
    max_chars: int | None = None
    """Upper bound on the reasoning paragraph (characters); None = unbounded."""
    reasoning_label: str = "Reasoning"
    choice_label: str = "Verdict"

    @property
    def reasoning_key(self) -> str:
        return self.reasoning_label.lower()

    @property
    def choice_key(self) -> str:
        return self.choice_label.lower()

    def regex(self) -> str:
        """The format as a regex over the whole output (one line of reasoning, then the choice)."""
        if all(len(c) == 1 and c.isalnum() for c in self.choices):
            alternatives = f"[{''.join(self.choices)}]"
        else:
            alternatives = "(?:" + "|".join(re.escape(c) for c in self.choices) + ")"
        bound = "+" if self.max_chars is None else f"{{1,{self.max_chars}}}"
        return rf"{re.escape(self.reasoning_label)}: [^\n]{bound}\n{re.escape(self.choice_label)}: {alternatives}"

    def json_schema(self) -> dict[str, Any]:
        """The format as a JSON schema in the subset OpenAI's strict mode accepts (every key
        required, no additional keys, no length keywords: the reasoning cap is not in it)."""
        return {
            "type": "object",
            "properties": {
                self.reasoning_key: {"type": "string"},
                self.choice_key: {"type": "string", "enum": list(self.choices)},
            },
            "required": [self.reasoning_key, self.choice_key],
            "additionalProperties": False,
        }

    def text_from_json(self, value: dict[str, Any]) -> str:
        """A reply valid under `json_schema` as the labelled lines; line breaks inside the
        reasoning become spaces, so the choice stays on the last line."""
        reasoning = re.sub(r"\s*[\r\n]+\s*", " ", str(value[self.reasoning_key])).strip()
        return f"{self.reasoning_label}: {reasoning}\n{self.choice_label}: {value[self.choice_key]}"


class Constraint(BaseModel):
    """Restricts what the model may output. Exactly one of the three fields is set.

    - `choices`: the output is exactly one of these strings.
    - `regex`: the whole output matches this (Python-syntax) regular expression.
    - `json_schema`: the output is a JSON document valid under this schema.

    A regex may also carry the structured form it was built from (`reasoned`, see
    `ReasonedChoice`), for APIs that cannot take the regex. It is the same format stated twice,
    so it is left out of the request's content hash: a call cached before it existed is still
    found.

    Engines translate it to their own mechanism: GBNF grammars (llama.cpp), structured
    outputs (vLLM), `response_format` (OpenAI-style servers).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    choices: tuple[str, ...] | None = None
    regex: str | None = None
    json_schema: dict[str, Any] | None = None
    reasoned: ReasonedChoice | None = Field(default=None, exclude=True)

    @classmethod
    def reasoned_choice(cls, form: ReasonedChoice) -> Constraint:
        """The regex constraint of `form`, carrying `form` for APIs that take only JSON schemas."""
        return cls(regex=form.regex(), reasoned=form)

    @model_validator(mode="after")
    def _exactly_one(self) -> Constraint:
        given = [n for n in ("choices", "regex", "json_schema") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"a constraint needs exactly one of choices, regex, json_schema; got {given or 'none'}")
        if self.choices is not None and len(self.choices) == 0:
            raise ValueError("choices must not be empty")
        if self.reasoned is not None and self.regex != self.reasoned.regex():
            raise ValueError("a reasoned constraint's regex must be the one its form gives")
        return self

    @property
    def kind(self) -> ConstraintKind:
        if self.choices is not None:
            return "choices"
        if self.regex is not None:
            return "regex"
        return "json_schema"


class GenerationRequest(BaseModel):
    """One chat completion to make. Sampling is greedy when temperature is 0."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: tuple[ChatMessage, ...]
    max_tokens: int = Field(default=512, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    constraint: Constraint | None = None
    final_top_logprobs: int | None = Field(default=None, ge=1, le=MAX_TOP_LOGPROBS)
    """Ask for the k most likely tokens, with their log-probabilities, at the position of the
    output's final token (the last generated token whose text ends the output: every judge
    format ends with its verdict). None: no log-probabilities (the default)."""

    @classmethod
    def chat(
        cls,
        user: str,
        system: str | None = None,
        **settings: Any,
    ) -> GenerationRequest:
        """Build a request from a user message and an optional system message."""
        messages = []
        if system:
            messages.append(ChatMessage(role="system", content=system))
        messages.append(ChatMessage(role="user", content=user))
        return cls(messages=tuple(messages), **settings)

    def content_hash(self, engine_id: str) -> str:
        """A stable key for the call cache: engine identity plus every field of the request.
        `final_top_logprobs` enters only when set, so the keys of requests without it stay
        those of caches written before the field existed, and a request for log-probabilities
        never shares a key with one that did not ask for them."""
        exclude = {"final_top_logprobs"} if self.final_top_logprobs is None else None
        payload = {"engine": engine_id, "request": self.model_dump(mode="json", exclude=exclude)}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


FinishReason = Literal["stop", "length", "error"]


class TokenLogprob(BaseModel):
    """A candidate token at one generated position and its log-probability."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token: str
    logprob: float = Field(allow_inf_nan=False)


class FinalTokenLogprobs(BaseModel):
    """The output's final token and the most likely tokens at its position
    (`GenerationRequest.final_top_logprobs`).

    The log-probabilities are the model's distribution before temperature, penalties and
    top-k/top-p: llama.cpp's raw logits, also before the grammar (a token the constraint
    forbids can be among the `top`); vLLM's `raw_logprobs`, after its structured-outputs mask
    (forbidden tokens have probability 0 and are left out here). Tokens of probability 0
    (vLLM's -inf, reported as -9999 by its server) are left out.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    token: str
    """The generated token's text (as the engine decodes it, e.g. " A")."""
    logprob: float = Field(allow_inf_nan=False)
    top: tuple[TokenLogprob, ...]
    """The most likely tokens at that position, most likely first (at most k)."""

    @classmethod
    def from_candidates(
        cls, token: str, logprob: float, candidates: Iterable[tuple[str, float]], k: int
    ) -> FinalTokenLogprobs | None:
        """Keep the k most likely of `candidates` that have a probability above 0; None when
        the generated token itself has none (nothing to report)."""
        if not math.isfinite(logprob) or logprob <= ZERO_PROBABILITY_LOGPROB:
            return None
        kept = sorted(
            ((t, lp) for t, lp in candidates if math.isfinite(lp) and lp > ZERO_PROBABILITY_LOGPROB),
            key=lambda item: -item[1],
        )[:k]
        return cls(token=token, logprob=logprob, top=tuple(TokenLogprob(token=t, logprob=lp) for t, lp in kept))


class GenerationResponse(BaseModel):
    """What the model produced for one request.

    `finish_reason` is "length" when the output was truncated at max_tokens (callers treat a
    truncated constrained output as invalid rather than guessing), "error" when the engine
    gave up on this one request (the text then holds the error message).
    """

    model_config = ConfigDict(extra="forbid")

    text: str
    finish_reason: FinishReason
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    final_logprobs: FinalTokenLogprobs | None = None
    """When the request asked for `final_top_logprobs` and the engine could place the final
    token: that token and its position's most likely tokens."""

"""Any OpenAI-compatible chat server: `vllm serve`, `llama_cpp.server`, llama.cpp's
`llama-server`, hosted APIs.

Plain httpx, no `openai` package: one POST to `{base_url}/chat/completions` per request,
`max_concurrency` of them in flight per server, each response handed on (to the call cache)
the moment it arrives, results in request order. Connection errors, timeouts, 408, 429 and
5xx are retried with exponential backoff and jitter; after `max_retries` retries the batch
fails with an EngineError naming the URL, so a server that is down fails clearly and in
bounded time. A request the server refuses because it does not fit the context window
(vLLM: HTTP 400 with `param: "input_tokens"`; llama.cpp: "exceed context window") gets a
`finish_reason="error"` response, and the rest of the batch survives; any other 4xx fails
the batch with the server's message.

**Replicas.** `base_url` may list several servers of the same model (nodes, or vLLM
data-parallel deployments behind each URL). Each request goes to the live replica with the
fewest requests in flight (at most `max_concurrency` each). A replica that fails (connection
refused or reset, timeout, 5xx) is set aside for a cool-down that doubles with each failure
(up to a minute), and the request is retried at once on another replica; with none left it
backs off as above. Nothing is paid twice for that: the call cache above this engine stores
a response only when one arrives, whichever replica sent it.

**Concurrency.** `max_concurrency` unset means `DEFAULT_CONCURRENCY[dialect]`: 1024 for vLLM
(its default `max_num_seqs` for the OpenAI server on an H100/H200-class GPU, 256 on smaller
ones: fewer in flight leaves its batch part-empty, more only wait in its queue, and queue
time counts against `timeout_s`), 4 for llama.cpp (llama-server's automatic slot count;
llama_cpp.server serves one request at a time), 16 for hosted APIs (their rate limits).

**Sampling.** A vLLM server fills every sampling field a request leaves out from the
model's `generation_config.json` (Qwen2.5-Instruct's sets a repetition penalty, top_k, top_p
and a temperature), so "greedy" would not be greedy and would differ from the offline
engine. The `vllm` dialect therefore sends all of them, at the neutral values the offline
engine sends too (`vllm_engine.NEUTRAL_SAMPLING`); scripts/serve_vllm.sh also serves with
`--generation-config vllm`.
The `llamacpp` dialect sends the embedded llama.cpp engine's (`llamacpp.sampling_fields`;
llama_cpp.server defaults to repeat_penalty 1.1, top_k 40 and min_p 0.05).

**Constraints** are sent the way the server understands them (`structured_outputs`):

- `vllm`: `{"structured_outputs": {"choice": [...]} | {"regex": ...} | {"json": schema}}`.
  This is the field of vLLM >= 0.10.2 (the older `guided_choice` / `guided_regex` /
  `guided_json` fields were deprecated then and removed in vLLM 0.12, which ignores them).
- `llamacpp`: a GBNF `grammar` field for choices and regexes (llama_cpp.server's
  `CreateChatCompletionRequest.grammar`, also accepted by llama.cpp's `llama-server`), and
  `response_format: {"type": "json_object", "schema": ...}` for JSON schemas (converted on
  the server, so the client needs no llama-cpp-python).
- `openai`: `response_format: {"type": "json_schema", ...}`, the only constraint OpenAI's API
  takes. Choices become a strict schema `{"choice": enum}` whose value is unwrapped into the
  response text; the judge's reasoning-and-verdict format (a regex carrying its
  `ReasonedChoice`) becomes a strict schema `{"reasoning": str, "verdict": enum}`, put back
  into the `Reasoning: ...` / `Verdict: X` lines (strict mode refuses `maxLength`, so the
  reasoning cap is not enforced there; README, "Hosted APIs"). The reply is checked against
  the schema that was sent; any other regex is refused.
- `auto`: `GET {base_url}/models` once: `owned_by == "vllm"` -> vllm, `"me"`
  (llama_cpp.server) or `"llamacpp"` (llama-server) -> llamacpp, anything else -> openai.

A server that ignores the field answers 200 with free text, so nothing is trusted: every
constrained reply is checked against its constraint (`conformance.violation`) and one that
breaks it becomes an error response naming the server and the dialect; before a replica's
first constrained request of each kind a probe (`conformance.probe_request`) proves it
enforces that kind, and a replica that does not, or 8 broken replies in a row, fail the batch
with an EngineError.

**Log-probabilities** (`final_top_logprobs`, score verdicts) go out as `logprobs: true,
top_logprobs: k`; servers return them for every generated token, and the final token's are
kept. A reply without them is an EngineError naming the server (it ignored the fields).

The output budget goes out as `max_tokens`, which every server above reads. OpenAI's
reasoning models refuse it ("Unsupported parameter: 'max_tokens' ... Use
'max_completion_tokens' instead"); on that refusal the request is resent with
`max_completion_tokens` and the engine keeps using that field.

The API key is read from the environment variable `api_key_env` (absent is fine for local
servers) and is only ever put in the Authorization header: never logged, never stored.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from ..errors import ConfigError, EngineError
from .base import BaseEngine, BatchReport, final_token_index, finish_reason, message_dicts
from .config import ModelConfig
from .conformance import probe_failure, probe_request, violation
from .llamacpp import sampling_fields as llamacpp_sampling_fields
from .types import Constraint, ConstraintKind, FinalTokenLogprobs, GenerationRequest, GenerationResponse
from .vllm_engine import NEUTRAL_SAMPLING, structured_outputs_kwargs

__all__ = [
    "DEFAULT_CONCURRENCY",
    "OpenAIServerEngine",
    "build_payload",
    "constraint_fields",
    "detect_dialect",
    "final_logprobs_from_reply",
    "probe_kind",
    "read_reply",
]

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
REPLICA_COOLDOWN_S = 2.0
"""A failed replica is skipped for this long, doubled per consecutive failure..."""
REPLICA_COOLDOWN_CAP_S = 60.0
"""...up to this: a replica that comes back is used again within a minute."""
SYSTEMATIC_VIOLATIONS = 8
"""This many constrained replies in a row that break their constraint fail the batch."""
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_CONTEXT_ERROR = re.compile(
    r"context|too long|too large|maximum.{0,40}length|max_tokens|exceed", re.IGNORECASE
)
_CONTEXT_PARAMS = {"input_tokens", "max_tokens"}
"""vLLM names the offending parameter of a request that does not fit its context."""
_CHOICE_KEY = "choice"
Dialect = str  # "vllm" | "llamacpp" | "openai"

DEFAULT_CONCURRENCY: dict[Dialect, int] = {"vllm": 1024, "llamacpp": 4, "openai": 16}
"""Requests in flight per server when `max_concurrency` is unset (why: module docstring)."""

_T = TypeVar("_T")


# --------------------------------------------------------------------------------------
# Pure request mapping (unit-testable without a server)
# --------------------------------------------------------------------------------------


_WANTS_MAX_COMPLETION_TOKENS = re.compile(r"max_tokens.{0,80}max_completion_tokens", re.IGNORECASE | re.DOTALL)


def constraint_fields(constraint: Constraint, dialect: Dialect) -> dict[str, Any]:
    """The request-body fields that carry `constraint` in the given server dialect."""
    if dialect == "vllm":  # the server takes the offline engine's StructuredOutputsParams fields
        return {"structured_outputs": structured_outputs_kwargs(constraint)}
    if dialect == "llamacpp":
        if constraint.json_schema is not None:
            return {"response_format": {"type": "json_object", "schema": constraint.json_schema}}
        from .grammar import constraint_to_gbnf

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


def _server_message(response: Any) -> tuple[str, str, str]:
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


# --------------------------------------------------------------------------------------
# Replicas
# --------------------------------------------------------------------------------------


class _ReplicaDown(Exception):
    """This replica did not answer usably (transport error, timeout, 408/429/5xx)."""


def _check_stop(stop: threading.Event | None) -> None:
    """Refuse to send more once another request of the batch has failed it."""
    if stop is not None and stop.is_set():
        raise EngineError("batch aborted after another request failed")


@dataclass(eq=False)
class _Replica:
    url: str
    in_flight: int = 0
    failures: int = 0
    """Consecutive failures (reset by a success)."""
    down_until: float = 0.0
    last_used: int = 0
    probed: dict[str, str] = field(default_factory=dict)
    """Constraint kind -> "" (enforced) or why the probe failed."""
    probe_lock: threading.Lock = field(default_factory=threading.Lock)


class _Replicas:
    """The servers of one role: least-loaded choice, per-replica capacity, cool-downs."""

    def __init__(self, urls: Sequence[str], capacity: int) -> None:
        self.replicas = [_Replica(url) for url in urls]
        self.capacity = capacity
        self._cond = threading.Condition()
        self._ticket = 0

    def live(self, now: float | None = None) -> list[_Replica]:
        now = time.monotonic() if now is None else now
        return [r for r in self.replicas if r.down_until <= now]

    def any_live(self) -> bool:
        with self._cond:
            return bool(self.live())

    def acquire(self, stop: threading.Event | None, avoid: _Replica | None = None) -> _Replica:
        """The live replica with the fewest requests in flight (waiting for a free slot);
        when every replica is cooling down, the one that comes back first. `avoid` (the one
        that just failed) is taken only when nothing else is left."""
        with self._cond:
            while True:
                _check_stop(stop)
                now = time.monotonic()
                live = self.live(now)
                if avoid is not None and len(live) > 1:
                    live = [r for r in live if r is not avoid]
                if not live:  # all cooling down: try the one that recovers first
                    chosen = min(self.replicas, key=lambda r: (r.down_until, r.in_flight))
                else:
                    free = [r for r in live if r.in_flight < self.capacity]
                    if not free:
                        self._cond.wait(timeout=0.5)
                        continue
                    chosen = min(free, key=lambda r: (r.in_flight, r.last_used))
                self._ticket += 1
                chosen.in_flight += 1
                chosen.last_used = self._ticket
                return chosen

    def release(self, replica: _Replica, failed: bool) -> None:
        with self._cond:
            replica.in_flight -= 1
            if failed:
                replica.failures += 1
                cooldown = min(REPLICA_COOLDOWN_CAP_S, REPLICA_COOLDOWN_S * 2 ** (replica.failures - 1))
                replica.down_until = time.monotonic() + cooldown
            else:
                replica.failures = 0
                replica.down_until = 0.0
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


class OpenAIServerEngine(BaseEngine):
    """Talks to one or several OpenAI-compatible servers (`config.base_url`) serving
    `config.model`."""

    name = "OpenAI server"
    thread_safe = True  # several threads' batches share the connection pool

    def __init__(self, config: ModelConfig) -> None:
        if not config.base_urls:
            raise ConfigError(
                f"model {config.spec} needs a base URL, e.g. --base-url http://127.0.0.1:8000/v1 "
                "(the address of an OpenAI-compatible server such as `vllm serve` or "
                "`python -m llama_cpp.server`)"
            )
        import httpx

        self._httpx = httpx
        self.config = config
        self.base_urls = config.base_urls
        self.base_url = self.base_urls[0]
        super().__init__(f"openai/{config.model}@{','.join(self.base_urls)}")
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(config.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        timeout = httpx.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0))
        # In-flight requests are bounded by the replicas' capacity, not by the pool.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self._client = httpx.Client(headers=headers, timeout=timeout, limits=limits)
        self._dialect: Dialect | None = (
            None if config.structured_outputs == "auto" else config.structured_outputs
        )
        self._dialect_lock = threading.Lock()
        self._replicas = _Replicas(self.base_urls, config.max_concurrency or 1)
        if self._dialect is not None:
            self._replicas.capacity = self.max_concurrency
        self._use_max_completion_tokens = False
        self._violations_lock = threading.Lock()
        self._violations_in_a_row = 0

    @property
    def dialect(self) -> Dialect:
        """The structured-outputs dialect, asking the server once when it is `auto`."""
        with self._dialect_lock:
            if self._dialect is None:
                data = self._models_reply(None)
                self._dialect = detect_dialect(data) if data is not None else "openai"
                self._replicas.capacity = self.max_concurrency
            return self._dialect

    @property
    def max_concurrency(self) -> int:
        """Requests in flight per replica: the setting, else the dialect's default."""
        if self.config.max_concurrency is not None:
            return self.config.max_concurrency
        return DEFAULT_CONCURRENCY.get(self._dialect or "openai", 16)

    def list_models(self) -> Any:
        """The parsed `GET /models` reply of the first live replica (EngineError when no
        replica answers; None when it answers with an error status or not JSON)."""
        return self._models_reply(None)

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """Send the batch with bounded concurrency; each response is reported as it arrives
        (collected with `as_completed`: O(1) per completion)."""
        dialect = self.dialect
        payloads = [build_payload(self.config.model, r, dialect) for r in requests]
        results: list[GenerationResponse | None] = [None] * len(requests)
        stop = threading.Event()
        workers = min(self.max_concurrency * len(self.base_urls), len(requests))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-engine")
        failed = False
        try:
            futures: dict[Future[GenerationResponse], int] = {
                pool.submit(self._complete, payload, request.constraint, stop): i
                for i, (payload, request) in enumerate(zip(payloads, requests))
            }
            for future in as_completed(futures):
                index = futures[future]
                response = results[index] = future.result()
                report.done(index, response)
        except BaseException:
            failed = True
            stop.set()  # queued requests are dropped, sleeping retries give up
            self._replicas.wake()
            raise
        finally:
            # On failure, do not wait for requests still in flight: fail now.
            pool.shutdown(wait=not failed, cancel_futures=True)
        return [r for r in results if r is not None]

    def _release(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    # ------------------------------------------------------------------ internals

    def _complete(
        self, payload: dict[str, Any], constraint: Constraint | None, stop: threading.Event
    ) -> GenerationResponse:
        def attempt(replica: _Replica) -> GenerationResponse:
            if constraint is not None and self.config.constraint_probe:
                self._ensure_enforced(replica, constraint, stop)
            response = self._chat(replica, payload, stop)
            return self._to_response(replica, response, constraint, top_logprobs=payload.get("top_logprobs"))

        return self._with_failover(attempt, stop, "/chat/completions")

    def _with_failover(self, work: Callable[[_Replica], _T], stop: threading.Event | None, path: str) -> _T:
        """Run `work` on a replica; on `_ReplicaDown`, again on another (at once) or, when
        every replica is down, on the first to recover after a backoff."""
        attempts = self.config.max_retries + 1
        reason = ""
        failed: _Replica | None = None
        for attempt in range(attempts):
            if attempt and not self._replicas.any_live():
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
                time.sleep(delay * (0.5 + random.random()))
            replica = self._replicas.acquire(stop, avoid=failed)  # raises if the batch stopped
            down = False
            try:
                return work(replica)
            except _ReplicaDown as exc:
                down = True
                reason = f"{exc}" if len(self.base_urls) == 1 else f"{replica.url}: {exc}"
                failed = replica
            finally:
                self._replicas.release(replica, failed=down)
        where = (
            f"model server at {self.base_url}{path}"
            if len(self.base_urls) == 1
            else f"any of the model servers {', '.join(self.base_urls)}"
        )
        raise EngineError(f"cannot reach {where} after {attempts} attempts: {reason}")

    def _send(self, replica: _Replica, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        """One HTTP call; `_ReplicaDown` for what another attempt may fix."""
        httpx = self._httpx
        try:
            response = self._client.request(method, f"{replica.url}{path}", json=payload)
        except httpx.TimeoutException as exc:
            raise _ReplicaDown(f"timed out ({type(exc).__name__}, timeout {self.config.timeout_s:g}s)") from exc
        except httpx.TransportError as exc:
            raise _ReplicaDown(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code in _RETRY_STATUS or response.status_code >= 500:
            message, _, _ = _server_message(response)
            raise _ReplicaDown(f"HTTP {response.status_code}: {message[:300]}")
        return response

    def _chat(self, replica: _Replica, payload: dict[str, Any], stop: threading.Event | None) -> Any:
        """POST one chat completion, renaming `max_tokens` once if the server asks for it."""
        _check_stop(stop)
        body = self._with_token_field(payload)
        response = self._send(replica, "POST", "/chat/completions", body)
        if response.status_code == 400 and "max_tokens" in body:
            message, _, _ = _server_message(response)
            if _WANTS_MAX_COMPLETION_TOKENS.search(message):
                self._use_max_completion_tokens = True  # for every later request too
                response = self._send(replica, "POST", "/chat/completions", self._with_token_field(payload))
        return response

    def _models_reply(self, stop: threading.Event | None) -> Any:
        response = self._with_failover(lambda r: self._send(r, "GET", "/models", None), stop, "/models")
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _to_response(
        self, replica: _Replica, response: Any, constraint: Constraint | None, top_logprobs: int | None = None
    ) -> GenerationResponse:
        """The GenerationResponse for a server reply; a constrained reply that breaks its
        constraint becomes an error response."""
        url = f"{replica.url}/chat/completions"
        if response.status_code >= 400:
            message, code, param = _server_message(response)
            if is_context_error(response.status_code, message, code, param):
                return GenerationResponse(
                    text=f"server refused the request ({response.status_code}): {message}",
                    finish_reason="error",
                )
            raise EngineError(
                f"model server at {url} refused the request ({response.status_code}): {message}"
            )
        out = self._parse(url, response, top_logprobs)
        if constraint is None or out.finish_reason != "stop":
            return out
        text, problem = read_reply(constraint, self.dialect, out.text)
        with self._violations_lock:
            self._violations_in_a_row = self._violations_in_a_row + 1 if problem else 0
            systematic = self._violations_in_a_row >= SYSTEMATIC_VIOLATIONS
        if problem is None:
            return out.model_copy(update={"text": text})
        if systematic:
            raise EngineError(
                f"the model server at {replica.url} does not enforce output constraints in the "
                f"{self.dialect!r} structured-outputs dialect: {SYSTEMATIC_VIOLATIONS} constrained "
                f"replies in a row broke their constraint (last: {problem}). {self._dialect_hint()}"
            )
        return out.model_copy(
            update={
                "text": f"the server at {replica.url} ({self.dialect} dialect) did not enforce the "
                f"{constraint.kind} constraint: {problem}",
                "finish_reason": "error",
            }
        )

    def _parse(self, url: str, response: Any, top_logprobs: int | None = None) -> GenerationResponse:
        """The reply's text, finish reason and usage, as the server sent them; with
        `top_logprobs`, the final token's log-probabilities."""
        try:
            data = response.json()
            choice = data["choices"][0]
            text = (choice.get("message") or {}).get("content") or ""
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EngineError(
                f"model server at {url} sent a reply that is not a chat completion: "
                f"{response.text[:500]!r}"
            ) from exc
        finish = finish_reason(choice.get("finish_reason"), unknown="stop")
        if finish == "error":  # "content_filter"
            text = f"the server's content filter stopped the output: {text}"
        logprobs = None
        if top_logprobs is not None and finish == "stop":
            if not (choice.get("logprobs") or {}).get("content"):
                raise EngineError(
                    f"model server at {url} sent no logprobs although the request asked for them "
                    "(logprobs: true, top_logprobs): score verdicts need a server that returns them "
                    "(vLLM; llama_cpp.server with logits_all, its default)"
                )
            try:
                logprobs = final_logprobs_from_reply(choice, text, top_logprobs)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise EngineError(f"model server at {url} sent logprobs in an unknown shape: {exc!r}") from exc
        return GenerationResponse(
            text=text,
            finish_reason=finish,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            final_logprobs=logprobs,
        )

    def _ensure_enforced(self, replica: _Replica, constraint: Constraint, stop: threading.Event | None) -> None:
        """Probe `replica` once per constraint kind; EngineError when it does not enforce it.
        A replica that fails during the probe raises `_ReplicaDown` (probed again later)."""
        kind = probe_kind(constraint, self.dialect)
        with replica.probe_lock:
            if kind not in replica.probed:
                dialect = self.dialect
                probe = probe_request(kind)
                assert probe.constraint is not None
                response = self._chat(replica, build_payload(self.config.model, probe, dialect), stop)
                url = f"{replica.url}/chat/completions"
                if response.status_code >= 400:
                    message, _, _ = _server_message(response)
                    failure = f"it refused the probe ({response.status_code}): {message[:300]}"
                else:
                    reply = self._parse(url, response)
                    if reply.finish_reason == "stop":
                        reply = reply.model_copy(update={"text": read_reply(probe.constraint, dialect, reply.text)[0]})
                    failure = probe_failure(kind, reply) or ""
                replica.probed[kind] = failure
            failure = replica.probed[kind]
        if failure:
            raise EngineError(
                f"the model server at {replica.url} does not enforce {kind} constraints in the "
                f"{self.dialect!r} structured-outputs dialect: {failure}. {self._dialect_hint()}"
            )

    def _dialect_hint(self) -> str:
        told = self.config.structured_outputs
        return (
            "Its replies cannot be trusted as verdicts. "
            + (f"The config forces structured_outputs: {told}. " if told != "auto" else "")
            + "Set the model's structured_outputs to the dialect this server speaks (vllm for vLLM "
            ">= 0.10.2, llamacpp for llama.cpp servers, openai for OpenAI-style response_format), "
            "or upgrade the server; `bias-discovery check CONFIG` probes each server."
        )

    def _with_token_field(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`payload` with the output budget under the field this server accepts."""
        if not self._use_max_completion_tokens or "max_tokens" not in payload:
            return payload
        renamed = {k: v for k, v in payload.items() if k != "max_tokens"}
        renamed["max_completion_tokens"] = payload["max_tokens"]
        return renamed


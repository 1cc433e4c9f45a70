"""Any OpenAI-compatible chat server: `vllm serve`, `llama_cpp.server`, llama.cpp's
`llama-server`, hosted APIs.

Plain httpx, no `openai` package: one POST to `{base_url}/chat/completions` per request,
`max_concurrency` of them in flight, results in request order. Connection errors,
timeouts, 408, 429 and 5xx are retried with exponential backoff and jitter; after
`max_retries` retries the batch fails with an EngineError naming the URL, so a server that
is down fails clearly and in bounded time. A request the server refuses because it does not
fit the context window gets a `finish_reason="error"` response (the rest of the batch
survives); any other 4xx fails the batch with the server's message.

Output constraints are sent the way the server understands them (`structured_outputs`):

- `vllm`: `{"structured_outputs": {"choice": [...]} | {"regex": ...} | {"json": schema}}`.
  This is the field of vLLM >= 0.10.2 (the older `guided_choice` / `guided_regex` /
  `guided_json` fields were deprecated then and removed in vLLM 0.12).
- `llamacpp`: a GBNF `grammar` field for choices and regexes (llama_cpp.server's
  `CreateChatCompletionRequest.grammar`, also accepted by llama.cpp's `llama-server`), and
  `response_format: {"type": "json_object", "schema": ...}` for JSON schemas (converted on
  the server, so the client needs no llama-cpp-python).
- `openai`: `response_format: {"type": "json_schema", ...}`. Choices become a strict schema
  `{"choice": enum}` whose value is unwrapped into the response text; regexes are refused.
- `auto`: `GET {base_url}/models` once: `owned_by == "vllm"` -> vllm, `"me"`
  (llama_cpp.server) or `"llamacpp"` (llama-server) -> llamacpp, anything else -> openai.

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
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Sequence

from ..errors import ConfigError, EngineError
from .base import BaseEngine, BatchReport, finish_reason, message_dicts
from .config import ModelConfig
from .types import Constraint, GenerationRequest, GenerationResponse

__all__ = ["OpenAIServerEngine", "build_payload", "constraint_fields", "detect_dialect"]

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_CONTEXT_ERROR = re.compile(
    r"context|too long|too large|maximum.{0,40}length|max_tokens|exceed", re.IGNORECASE
)
_CHOICE_KEY = "choice"
Dialect = str  # "vllm" | "llamacpp" | "openai"


# --------------------------------------------------------------------------------------
# Pure request mapping (unit-testable without a server)
# --------------------------------------------------------------------------------------


_WANTS_MAX_COMPLETION_TOKENS = re.compile(r"max_tokens.{0,80}max_completion_tokens", re.IGNORECASE | re.DOTALL)


def constraint_fields(constraint: Constraint, dialect: Dialect) -> dict[str, Any]:
    """The request-body fields that carry `constraint` in the given server dialect."""
    if dialect == "vllm":
        if constraint.choices is not None:
            return {"structured_outputs": {"choice": list(constraint.choices)}}
        if constraint.regex is not None:
            return {"structured_outputs": {"regex": constraint.regex}}
        return {"structured_outputs": {"json": constraint.json_schema}}
    if dialect == "llamacpp":
        if constraint.json_schema is not None:
            return {"response_format": {"type": "json_object", "schema": constraint.json_schema}}
        from .grammar import constraint_to_gbnf

        return {"grammar": constraint_to_gbnf(constraint)}
    if dialect == "openai":
        if constraint.regex is not None:
            raise ConfigError(
                "regex constraints are not supported by the 'openai' structured-outputs "
                "dialect (OpenAI's response_format only takes JSON schemas); use choices or "
                "a JSON schema, or a vLLM / llama.cpp server"
            )
        if constraint.choices is not None:
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {_CHOICE_KEY: {"type": "string", "enum": list(constraint.choices)}},
                "required": [_CHOICE_KEY],
                "additionalProperties": False,
            }
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "choice", "schema": schema, "strict": True},
                }
            }
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": constraint.json_schema},
            }
        }
    raise ConfigError(f"unknown structured-outputs dialect {dialect!r}")


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
    if dialect == "llamacpp":
        # Match the embedded engine: greedy is top_k=1; when sampling only top_p filters
        # (llama.cpp's server defaults would add top_k=40 and min_p=0.05).
        body["top_k"] = 1 if request.temperature == 0 else 0
        body["min_p"] = 0.0
    if request.constraint is not None:
        body.update(constraint_fields(request.constraint, dialect))
    return body


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


def _server_message(response: Any) -> tuple[str, str]:
    """(message, code) from an error reply in OpenAI, vLLM or FastAPI shape."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:1000], ""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or json.dumps(err)[:1000]
            return str(message), str(err.get("code") or "")
        if isinstance(err, str):
            return err, ""
    return json.dumps(data)[:1000], ""


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


class OpenAIServerEngine(BaseEngine):
    """Talks to an OpenAI-compatible server at `config.base_url` serving `config.model`."""

    name = "OpenAI server"
    thread_safe = True  # several threads' batches share the connection pool

    def __init__(self, config: ModelConfig) -> None:
        if not config.base_url:
            raise ConfigError(
                f"model {config.spec} needs a base URL, e.g. --base-url http://127.0.0.1:8000/v1 "
                "(the address of an OpenAI-compatible server such as `vllm serve` or "
                "`python -m llama_cpp.server`)"
            )
        import httpx

        self._httpx = httpx
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        super().__init__(f"openai/{config.model}@{self.base_url}")
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(config.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        timeout = httpx.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0))
        limits = httpx.Limits(
            max_connections=config.max_concurrency,
            max_keepalive_connections=config.max_concurrency,
        )
        self._client = httpx.Client(headers=headers, timeout=timeout, limits=limits)
        self._dialect: Dialect | None = (
            None if config.structured_outputs == "auto" else config.structured_outputs
        )
        self._dialect_lock = threading.Lock()
        self._use_max_completion_tokens = False

    @property
    def dialect(self) -> Dialect:
        """The structured-outputs dialect, asking the server once when it is `auto`."""
        with self._dialect_lock:
            if self._dialect is None:
                url = f"{self.base_url}/models"
                response = self._call("GET", url, None)
                if response.status_code >= 400:
                    self._dialect = "openai"
                else:
                    try:
                        self._dialect = detect_dialect(response.json())
                    except ValueError:
                        self._dialect = "openai"
            return self._dialect

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """Send the batch with bounded concurrency; each response is reported as it arrives."""
        dialect = self.dialect
        payloads = [build_payload(self.config.model, r, dialect) for r in requests]
        unwrap = [
            dialect == "openai" and r.constraint is not None and r.constraint.choices is not None
            for r in requests
        ]
        results: list[GenerationResponse | None] = [None] * len(requests)
        stop = threading.Event()
        workers = min(self.config.max_concurrency, len(requests))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-engine")
        failed = False
        try:
            futures: dict[Future[GenerationResponse], int] = {
                pool.submit(self._complete, payload, stop, unwrap[i]): i
                for i, payload in enumerate(payloads)
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = futures[future]
                    response = results[index] = future.result()
                    report.done(index, response)
        except BaseException:
            failed = True
            stop.set()  # queued requests are dropped, sleeping retries give up
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
        self, payload: dict[str, Any], stop: threading.Event, unwrap_choice: bool
    ) -> GenerationResponse:
        if stop.is_set():
            raise EngineError("batch aborted after another request failed")
        url = f"{self.base_url}/chat/completions"
        payload = self._with_token_field(payload)
        response = self._call("POST", url, payload, stop)
        if response.status_code == 400 and "max_tokens" in payload:
            message, _ = _server_message(response)
            if _WANTS_MAX_COMPLETION_TOKENS.search(message):
                self._use_max_completion_tokens = True  # for every later request too
                payload = self._with_token_field(payload)
                response = self._call("POST", url, payload, stop)
        if response.status_code >= 400:
            message, code = _server_message(response)
            if response.status_code in (400, 413) and (
                code == "context_length_exceeded" or _CONTEXT_ERROR.search(message)
            ):
                return GenerationResponse(
                    text=f"server refused the request ({response.status_code}): {message}",
                    finish_reason="error",
                )
            raise EngineError(
                f"model server at {url} refused the request ({response.status_code}): {message}"
            )
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
        if unwrap_choice and finish == "stop":
            text = _unwrap_choice(text)
        return GenerationResponse(
            text=text,
            finish_reason=finish,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )

    def _with_token_field(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`payload` with the output budget under the field this server accepts."""
        if not self._use_max_completion_tokens or "max_tokens" not in payload:
            return payload
        renamed = {k: v for k, v in payload.items() if k != "max_tokens"}
        renamed["max_completion_tokens"] = payload["max_tokens"]
        return renamed

    def _call(
        self,
        method: str,
        url: str,
        payload: dict[str, Any] | None,
        stop: threading.Event | None = None,
    ) -> Any:
        """One HTTP call with retries; returns the final response (any status < 500 except
        408/429), or raises EngineError once the retries are spent."""
        httpx = self._httpx
        attempts = self.config.max_retries + 1
        reason = ""
        for attempt in range(attempts):
            if attempt:
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
                time.sleep(delay * (0.5 + random.random()))
                if stop is not None and stop.is_set():
                    raise EngineError("batch aborted after another request failed")
            try:
                response = self._client.request(method, url, json=payload)
            except httpx.TimeoutException as exc:
                reason = f"timed out ({type(exc).__name__}, timeout {self.config.timeout_s:g}s)"
                continue
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in _RETRY_STATUS or response.status_code >= 500:
                message, _ = _server_message(response)
                reason = f"HTTP {response.status_code}: {message[:300]}"
                continue
            return response
        raise EngineError(
            f"cannot reach model server at {url} after {attempts} attempts: {reason}"
        )


def _unwrap_choice(text: str) -> str:
    """`{"choice": "A"}` -> `A` (the openai dialect wraps choices in an object schema)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict) and isinstance(data.get(_CHOICE_KEY), str):
        return str(data[_CHOICE_KEY])
    return text

"""Any OpenAI-compatible chat server: `vllm serve`, `llama_cpp.server`, llama.cpp's
`llama-server`, hosted APIs.

asyncio and aiohttp, no `openai` package: one POST to `{base_url}/chat/completions` per
request, all of them coroutines on the process's one event loop (`llm.aio`), at most
`max_concurrency` in flight per server, each response handed on (to the call cache) the
moment it arrives, results in request order. No thread per request: 2048 in flight cost one
loop (a thread-per-request httpx client stalled at 1000+ threads, its pool bookkeeping
growing with the square of the pool). The batch interface (`generate`) stays synchronous:
the calling thread waits for the loop's responses and reports each one; `submit` and
`complete` answer single requests, for callers that stream work item by item.

**Deadline.** `timeout_s` bounds each request as a whole: every attempt, retry and backoff
after its first send counts against it (waiting for a free slot does not: that is the
client's own queue). Connection errors, timeouts, 408, 429 and 5xx are retried with
exponential backoff and jitter within that deadline; after `max_retries` retries, or when
the deadline passes, the batch fails with an EngineError naming the URL, so a server that is
down, or accepts connections and never answers, fails clearly within `timeout_s`. While no
answer has come for `WAIT_NOTE_AFTER_S`, the progress line says what the oldest request is
waiting on ("waiting on http://...: 45 s, attempt 2/5"). A request the server refuses because
it does not fit the context window (vLLM: HTTP 400 with `param: "input_tokens"`; llama.cpp:
"exceed context window") gets a `finish_reason="error"` response, and the rest of the batch
survives; any other 4xx fails the batch with the server's message.

**Replicas.** `base_url` may list several servers of the same model (nodes, or vLLM
data-parallel deployments behind each URL). Each request goes to the live replica with the
fewest requests in flight (at most `max_concurrency` each). A replica that fails (connection
refused or reset, timeout, 5xx) is set aside for a cool-down that doubles with each failure
(up to a minute), and the request is retried at once on another replica; with none left it
backs off as above. Nothing is paid twice for that: the call cache above this engine stores
a response only when one arrives, whichever replica sent it.

**Concurrency.** `max_concurrency` unset means `DEFAULT_CONCURRENCY[dialect]`: 1024 for vLLM
(its default `max_num_seqs` for the OpenAI server on an H100/H200-class GPU, 256 on smaller
ones: fewer in flight leaves its batch part-empty, more only wait in its queue, and the
server's queue time counts against `timeout_s`), 4 for llama.cpp (llama-server's automatic slot count;
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

import asyncio
import itertools
import json
import os
import random
import re
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import nullcontext
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from ..errors import ConfigError, EngineError
from ..progress import show_wait
from . import aio
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
CLOSE_TIMEOUT_S = 10.0
"""Longest wait for the connections to close."""
CONNECT_TIMEOUT_S = 10.0
"""Longest wait for a TCP connection (within the request's deadline)."""
REPLIES_PER_TURN = 32
"""Replies handled per turn of the event loop, at most (`_TurnPacer`)."""
WAIT_NOTE_AFTER_S = 5.0
"""With no answer for this long, the progress line says what the oldest request waits on."""
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
    probe_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Replicas:
    """The servers of one role: least-loaded choice, per-replica capacity (a counting
    semaphore per replica, `capacity` slots each), cool-downs. Used on the event loop only.

    Waiters for a slot queue in FIFO order and a release wakes one of them, so a full client
    with thousands of requests waiting costs O(1) per completion (waking every waiter on every
    release would cost O(waiters))."""

    def __init__(self, urls: Sequence[str], capacity: int) -> None:
        self.replicas = [_Replica(url) for url in urls]
        self.capacity = capacity
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ticket = 0

    def live(self, now: float | None = None) -> list[_Replica]:
        now = time.monotonic() if now is None else now
        return [r for r in self.replicas if r.down_until <= now]

    def any_live(self) -> bool:
        return bool(self.live())

    def _choose(self, avoid: _Replica | None) -> _Replica | None:
        now = time.monotonic()
        live = self.live(now)
        if avoid is not None and len(live) > 1:
            live = [r for r in live if r is not avoid]
        if not live:  # all cooling down: try the one that recovers first
            return min(self.replicas, key=lambda r: (r.down_until, r.in_flight))
        free = [r for r in live if r.in_flight < self.capacity]
        return min(free, key=lambda r: (r.in_flight, r.last_used)) if free else None

    async def acquire(self, avoid: _Replica | None = None) -> _Replica:
        """The live replica with the fewest requests in flight (waiting for a free slot);
        when every replica is cooling down, the one that comes back first. `avoid` (the one
        that just failed) is taken only when nothing else is left."""
        woken = False
        while True:
            chosen = self._choose(avoid)
            if chosen is not None:
                self._ticket += 1
                chosen.in_flight += 1
                chosen.last_used = self._ticket
                return chosen
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # one woken but beaten to the slot keeps its place at the front
            self._waiters.appendleft(waiter) if woken else self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)  # it was woken: pass the wake-up on
                raise  # a cancelled waiter left in the queue is skipped by `_wake`
            woken = True

    def give_back(self, replica: _Replica) -> None:
        """Return a slot that was not used: no news about the replica."""
        replica.in_flight -= 1
        self._wake(1)

    def release(self, replica: _Replica, failed: bool) -> None:
        """Return a slot after a request: a failure starts (or doubles) its cool-down, a
        success ends it."""
        replica.in_flight -= 1
        if failed:
            replica.failures += 1
            cooldown = min(REPLICA_COOLDOWN_CAP_S, REPLICA_COOLDOWN_S * 2 ** (replica.failures - 1))
            replica.down_until = time.monotonic() + cooldown
            # its slots come back when the cool-down ends, without a release
            asyncio.get_running_loop().call_later(cooldown, self._wake, self.capacity)
        else:
            replica.failures = 0
            replica.down_until = 0.0
        self._wake(1)

    def _wake(self, n: int) -> None:
        """Wake the first `n` waiters still waiting."""
        while n > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1


class _TurnPacer:
    """Lets at most `per_turn` replies on to be handled in one turn of the event loop; the
    others wait for the next turns, in arrival order.

    Why: handling a reply starts the request that takes its slot, but aiohttp writes a
    request's body in a task of its own (started eagerly only from Python 3.12 on), so its
    bytes leave a few turns of the loop later. When a wave of replies arrives in one turn,
    every replacement would wait for the whole wave to be handled, and the waves would stay in
    lockstep, each paying the whole wave's turnaround (measured with 16 waves of 2048 in flight
    against a 2 s server: from a reply to its replacement's bytes 17-36 ms on average and
    55-140 ms at the 90th percentile; paced, 2.8 ms and 4 ms). Paced, a group's requests
    leave while the next groups are handled. Used on the event loop only."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self._handled = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._next_turn_scheduled = False

    async def wait_turn(self) -> None:
        """Return at once while this turn has room, else once a later turn lets this reply on."""
        if self._handled < self.per_turn and not self._waiters:
            self._handled += 1
            self._schedule_next_turn()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)  # a cancelled waiter is skipped
        self._schedule_next_turn()
        await waiter

    def _schedule_next_turn(self) -> None:
        if not self._next_turn_scheduled:
            self._next_turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """Runs early in the next turn (before the replies that turn's poll brings): lets the
        next group on."""
        self._next_turn_scheduled = False
        self._handled = 0
        while self._waiters and self._handled < self.per_turn:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._handled += 1
        if self._handled:
            self._schedule_next_turn()


@dataclass
class _Reply:
    """A server's reply, read in full (what `_parse` and `_server_message` read)."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class _Waiting:
    """A request in flight, for the wait note ("waiting on URL: 45 s, attempt 2/5")."""

    url: str
    started: float
    attempt: int
    attempts: int


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------

_DONE, _NOTE, _FAILED = 0, 1, 2
_Item = tuple[int, int, Any]
"""What a batch hands its caller: (_DONE, index, response), (_NOTE, -1, text) or (_FAILED, index, exception)."""


class OpenAIServerEngine(BaseEngine):
    """Talks to one or several OpenAI-compatible servers (`config.base_url`) serving
    `config.model`."""

    name = "OpenAI server"
    thread_safe = True  # several threads' batches share the event loop and the connections

    def __init__(self, config: ModelConfig) -> None:
        if not config.base_urls:
            raise ConfigError(
                f"model {config.spec} needs a base URL, e.g. --base-url http://127.0.0.1:8000/v1 "
                "(the address of an OpenAI-compatible server such as `vllm serve` or "
                "`python -m llama_cpp.server`)"
            )
        self.config = config
        self.base_urls = config.base_urls
        self.base_url = self.base_urls[0]
        super().__init__(f"openai/{config.model}@{','.join(self.base_urls)}")
        self._headers: dict[str, str] = {}
        api_key = os.environ.get(config.api_key_env)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: Any = None  # aiohttp.ClientSession, made on the loop at first use
        self._dialect: Dialect | None = (
            None if config.structured_outputs == "auto" else config.structured_outputs
        )
        self._dialect_lock: asyncio.Lock | None = None
        self._replicas = _Replicas(self.base_urls, config.max_concurrency or 1)
        if self._dialect is not None:
            self._replicas.capacity = self.max_concurrency
        self._use_max_completion_tokens = False
        self._violations_lock = threading.Lock()
        self._violations_in_a_row = 0
        self._waiting: dict[int, _Waiting] = {}
        self._tokens = itertools.count()
        self._last_answer = time.monotonic()
        self._submit_watch: asyncio.Future[None] | None = None
        self._pacer = _TurnPacer(REPLIES_PER_TURN)

    @property
    def dialect(self) -> Dialect:
        """The structured-outputs dialect, asking the server once when it is `auto`."""
        if self._dialect is None:
            aio.run_sync(self._detect_dialect())
        assert self._dialect is not None
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
        return aio.run_sync(self._models_reply())

    def submit(self, request: GenerationRequest) -> "Future[GenerationResponse]":
        """One request, answered on its own: the Future completes when its response arrives
        (for callers that feed requests one by one and act on each as it completes)."""
        return aio.submit(self.complete(request))

    async def complete(self, request: GenerationRequest) -> GenerationResponse:
        """One request, on the event loop: replica choice, retries within the deadline,
        probe, constraint check, a wait note while the server is silent. Raises EngineError
        for what fails more than this request."""
        if self._submit_watch is None or self._submit_watch.done():
            self._submit_watch = asyncio.ensure_future(self._watch_submitted())
        await self._detect_dialect()
        return await self._complete(request)

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """Send the batch on the event loop, at most `max_concurrency` in flight per replica;
        each response is reported in this thread as it arrives, and the loop's wait notes go to
        the progress bar (`progress.show_wait`). A large batch runs with the heap that was
        there before it left out of the garbage collector's scans (`aio.frozen_heap`)."""
        with aio.frozen_heap() if len(requests) >= aio.FREEZE_HEAP_FROM else nullcontext():
            return self._run_batch(requests, report)

    def _run_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        results: list[GenerationResponse | None] = [None] * len(requests)
        inbox: SimpleQueue[list[_Item]] = SimpleQueue()
        batch = aio.submit(self._batch(requests, inbox))
        noted = False
        try:
            remaining = len(requests)
            while remaining:
                try:
                    items = inbox.get(timeout=1.0)
                except Empty:  # (a batch that ended normally may still have a bundle on its way)
                    if batch.done() and (batch.cancelled() or batch.exception() is not None):
                        why = "cancelled" if batch.cancelled() else repr(batch.exception())
                        raise EngineError(f"the request loop of {self.engine_id} stopped: {why}")
                    continue
                for kind, index, value in items:
                    if kind == _DONE:
                        results[index] = value
                        report.done(index, value)
                        remaining -= 1
                        if noted:
                            show_wait(None)
                            noted = False
                    elif kind == _NOTE:
                        show_wait(value)
                        noted = True
                    else:
                        raise value
        except BaseException:
            batch.cancel()  # requests still queued or in flight are dropped now
            raise
        finally:
            if noted:
                show_wait(None)
        return [r for r in results if r is not None]

    def _release(self) -> None:
        """Close the HTTP connections."""
        session, self._session = self._session, None
        if session is not None:
            try:  # bounded: closing must never hang (e.g. at interpreter exit, the loop's thread gone)
                aio.run_sync(session.close(), timeout=CLOSE_TIMEOUT_S)
            except (FutureTimeout, RuntimeError):
                pass

    # ------------------------------------------------------------------ on the event loop

    async def _batch(self, requests: Sequence[GenerationRequest], inbox: SimpleQueue[list[_Item]]) -> None:
        """One sender task per slot (`sender`), each handing every response it gets (or the
        error that fails the batch) to the caller through `inbox`; a watcher adds a note while
        no answer has come for a while. What one turn of the loop finished goes over as one
        bundle: a wake-up of the waiting thread per response would cost more than the
        response."""
        bundle: list[_Item] = []
        loop = asyncio.get_running_loop()

        def hand_over() -> None:
            inbox.put(bundle[:])
            bundle.clear()

        def deliver(item: _Item) -> None:
            bundle.append(item)
            if len(bundle) == 1:
                loop.call_soon(hand_over)

        watcher = asyncio.ensure_future(self._watch(deliver))
        try:
            await self._detect_dialect()  # once, before any request is built
        except BaseException as exc:
            watcher.cancel()
            deliver((_FAILED, -1, exc))
            return

        failed: list[BaseException] = []

        async def one(index: int) -> None:
            try:
                response = await self._complete(requests[index])
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # handed to the caller, who fails the batch
                failed.append(exc)  # and nothing more is started
                deliver((_FAILED, index, exc))
            else:
                deliver((_DONE, index, response))

        todo = iter(range(len(requests)))

        async def sender() -> None:
            """Sends the batch's requests one after another: the next goes out in the same
            turn of the loop as the reply before it is checked and handed over. (A task
            started per request when the previous one's task is done waits behind every
            reply that turn of the loop brought in: when a wave of replies arrives together,
            none of its replacements is sent before all of them are handled, and the waves
            stay in lockstep, each paying the whole wave's turnaround.)"""
            while not failed:  # a failure starts nothing more
                index = next(todo, None)
                if index is None:
                    return
                await one(index)

        # As many senders as there are slots: thousands of idle tasks waiting for one would
        # only be more objects for the garbage collector to scan.
        senders = [asyncio.ensure_future(sender()) for _ in range(min(len(requests), self.max_concurrency * len(self.base_urls)))]
        try:
            await asyncio.gather(*senders)
        finally:
            watcher.cancel()
            for task in senders:
                task.cancel()

    async def _watch(self, deliver: Callable[[_Item], None]) -> None:
        """Every second: when no answer has come for WAIT_NOTE_AFTER_S, say what the oldest
        request in flight is waiting on."""
        while True:
            await asyncio.sleep(1.0)
            note = self._wait_note()
            if note is not None:
                deliver((_NOTE, -1, note))

    def _wait_note(self) -> str | None:
        """"waiting on URL: 45 s, attempt 2/5" when no answer has come for WAIT_NOTE_AFTER_S and
        the oldest request in flight has waited that long; else None."""
        now = time.monotonic()
        if not self._waiting or now - self._last_answer < WAIT_NOTE_AFTER_S:
            return None
        oldest = min(self._waiting.values(), key=lambda w: w.started)
        if now - oldest.started < WAIT_NOTE_AFTER_S:
            return None
        return f"waiting on {oldest.url}: {now - oldest.started:.0f} s, attempt {oldest.attempt}/{oldest.attempts}"

    async def _watch_submitted(self) -> None:
        """The wait note of submitted requests (no batch carries it to its caller): shown on
        the progress line (`show_wait`) while it holds, cleared when an answer comes or nothing
        is in flight any more."""
        shown = False
        try:
            while True:
                await asyncio.sleep(1.0)
                note = self._wait_note()
                if note is not None or shown:
                    show_wait(note)
                    shown = note is not None
                if not self._waiting:
                    return
        finally:
            if shown:
                show_wait(None)

    async def _client(self) -> Any:
        """The aiohttp session (made on the loop on first use)."""
        if self._session is None:
            import aiohttp

            aio.ensure_open_files(self.max_concurrency * len(self.base_urls) + 256)
            # In-flight requests are bounded by the replicas' capacity, not by the pool.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    async def _detect_dialect(self) -> Dialect:
        if self._dialect is None:
            if self._dialect_lock is None:
                self._dialect_lock = asyncio.Lock()
            async with self._dialect_lock:
                if self._dialect is None:
                    data = await self._models_reply()
                    self._dialect = detect_dialect(data) if data is not None else "openai"
                    self._replicas.capacity = self.max_concurrency
        return self._dialect

    async def _complete(self, request: GenerationRequest) -> GenerationResponse:
        constraint = request.constraint
        payload: dict[str, Any] = {}

        async def attempt(replica: _Replica, deadline: float) -> GenerationResponse:
            if constraint is not None and self.config.constraint_probe:
                await self._ensure_enforced(replica, constraint, deadline)
            if not payload:  # built once a slot is taken: the work spreads over the batch's waits
                assert self._dialect is not None
                payload.update(build_payload(self.config.model, request, self._dialect))
            response = await self._chat(replica, payload, deadline)
            return self._to_response(replica, response, constraint, top_logprobs=payload.get("top_logprobs"))

        response = await self._with_failover(attempt, "/chat/completions")
        self._last_answer = time.monotonic()
        return response

    async def _with_failover(self, work: Callable[[_Replica, float], Awaitable[_T]], path: str) -> _T:
        """Run `work` on a replica; on `_ReplicaDown`, again on another (at once) or, when
        every replica is down, on the first to recover after a backoff. Every attempt and
        backoff counts against one deadline, `timeout_s` from the first send."""
        attempts = self.config.max_retries + 1
        reason = ""
        failed: _Replica | None = None
        deadline: float | None = None
        token = next(self._tokens)
        tried = 0
        try:
            for attempt in range(1, attempts + 1):
                if attempt > 1 and not self._replicas.any_live():
                    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 2)) * (0.5 + random.random())
                    await asyncio.sleep(max(0.0, min(delay, (deadline or 0.0) - time.monotonic())))
                replica = await self._replicas.acquire(avoid=failed)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.config.timeout_s
                    self._waiting[token] = _Waiting(replica.url, now, attempt, attempts)
                elif now >= deadline:
                    self._replicas.give_back(replica)
                    break
                else:
                    waiting = self._waiting[token]
                    waiting.url, waiting.attempt = replica.url, attempt
                down = False
                tried = attempt
                try:
                    return await work(replica, deadline)
                except _ReplicaDown as exc:
                    down = True
                    reason = f"{exc}" if len(self.base_urls) == 1 else f"{replica.url}: {exc}"
                    failed = replica
                finally:
                    self._replicas.release(replica, failed=down)
                if time.monotonic() >= deadline:
                    break
        finally:
            self._waiting.pop(token, None)
        where = (
            f"model server at {self.base_url}{path}"
            if len(self.base_urls) == 1
            else f"any of the model servers {', '.join(self.base_urls)}"
        )
        if tried < attempts:
            raise EngineError(
                f"cannot reach {where} within the {self.config.timeout_s:g} s deadline (timeout_s, or "
                f"--timeout; {tried} of {attempts} attempts): {reason}"
            )
        raise EngineError(f"cannot reach {where} after {attempts} attempts: {reason}")

    async def _send(
        self, replica: _Replica, method: str, path: str, payload: dict[str, Any] | None, deadline: float
    ) -> _Reply:
        """One HTTP call, bounded by what is left of the deadline; `_ReplicaDown` for what
        another attempt may fix."""
        import aiohttp

        left = deadline - time.monotonic()
        if left <= 0:
            raise _ReplicaDown("timed out")
        timeout = aiohttp.ClientTimeout(total=left, connect=min(left, CONNECT_TIMEOUT_S))
        session = await self._client()
        try:
            async with session.request(method, f"{replica.url}{path}", json=payload, timeout=timeout) as reply:
                content = await reply.read()
                status = reply.status
        except asyncio.TimeoutError as exc:
            raise _ReplicaDown("timed out") from exc
        except aiohttp.ClientError as exc:
            raise _ReplicaDown(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise _ReplicaDown(f"{type(exc).__name__}: {exc}") from exc
        await self._pacer.wait_turn()  # handled, and its slot refilled, in its group's turn
        response = _Reply(status, content)
        if status in _RETRY_STATUS or status >= 500:
            message, _, _ = _server_message(response)
            raise _ReplicaDown(f"HTTP {status}: {message[:300]}")
        return response

    async def _chat(self, replica: _Replica, payload: dict[str, Any], deadline: float) -> _Reply:
        """POST one chat completion, renaming `max_tokens` once if the server asks for it."""
        body = self._with_token_field(payload)
        response = await self._send(replica, "POST", "/chat/completions", body, deadline)
        if response.status_code == 400 and "max_tokens" in body:
            message, _, _ = _server_message(response)
            if _WANTS_MAX_COMPLETION_TOKENS.search(message):
                self._use_max_completion_tokens = True  # for every later request too
                response = await self._send(replica, "POST", "/chat/completions", self._with_token_field(payload), deadline)
        return response

    async def _models_reply(self) -> Any:
        async def get(replica: _Replica, deadline: float) -> _Reply:
            return await self._send(replica, "GET", "/models", None, deadline)

        response = await self._with_failover(get, "/models")
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

    async def _ensure_enforced(self, replica: _Replica, constraint: Constraint, deadline: float) -> None:
        """Probe `replica` once per constraint kind; EngineError when it does not enforce it.
        A replica that fails during the probe raises `_ReplicaDown` (probed again later)."""
        dialect = await self._detect_dialect()
        kind = probe_kind(constraint, dialect)
        if kind not in replica.probed:
            async with replica.probe_lock:
                if kind not in replica.probed:
                    probe = probe_request(kind)
                    assert probe.constraint is not None
                    response = await self._chat(replica, build_payload(self.config.model, probe, dialect), deadline)
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
                f"{self._dialect!r} structured-outputs dialect: {failure}. {self._dialect_hint()}"
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


"""The engine of `openai/...` (and `vllm/...` served) models: batches, single requests, the
deadline and retries, failover across replicas, dialect detection and the constraint probes,
on the process's one event loop (why and how: the package docstring)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import nullcontext
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from ...errors import ConfigError, EngineError
from ...progress import current_stage, show_wait
from .. import aio
from ..base import BaseEngine, BatchReport, finish_reason
from ..config import ModelConfig
from ..conformance import probe_failure, probe_request
from ..types import Constraint, GenerationRequest, GenerationResponse
from .pacing import TurnPacer
from .replicas import Replica, ReplicaDown, Replicas
from .wire import (
    RETRY_STATUS,
    WANTS_MAX_COMPLETION_TOKENS,
    Dialect,
    build_payload,
    detect_dialect,
    final_logprobs_from_reply,
    is_context_error,
    probe_kind,
    read_reply,
    server_message,
)

__all__ = ["DEFAULT_CONCURRENCY", "OpenAIServerEngine"]

log = logging.getLogger(__name__)
"""Retries, backoffs and the dialect detected, at INFO (`bias-discovery --verbose` shows them)."""

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
CLOSE_TIMEOUT_S = 10.0
"""Longest wait for the connections to close."""
CONNECT_TIMEOUT_S = 10.0
"""Longest wait for a TCP connection (within the request's deadline)."""
REPLIES_PER_TURN = 32
"""Replies handled per turn of the event loop, at most (`TurnPacer`)."""
WAIT_NOTE_AFTER_S = 5.0
"""With no answer for this long, the progress line says what the oldest request waits on."""
WAIT_LOG_EVERY_S = 30.0
"""A request in flight this long is named in the log, and again every as long, one line per
server (`_log_waits`): a progress line is not seen in a log file, nor when it is quiet."""
SYSTEMATIC_VIOLATIONS = 8
"""This many constrained replies in a row that break their constraint fail the batch."""

DEFAULT_CONCURRENCY: dict[Dialect, int] = {"vllm": 1024, "llamacpp": 4, "openai": 16}
"""Requests in flight per server when `max_concurrency` is unset (why: module docstring)."""

_T = TypeVar("_T")


@dataclass
class _Reply:
    """A server's reply, read in full (what `_parse` and `server_message` read)."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _now() -> float:
    """The clock of the wait note and the wait log (a test replaces it; deadlines keep theirs)."""
    return time.monotonic()


@dataclass
class _Waiting:
    """A request in flight, for the wait note ("waiting on URL: 45 s, attempt 2/5") and the
    wait log (which also names its stage, `progress.current_stage`, and path)."""

    url: str
    started: float
    attempt: int
    attempts: int
    stage: str | None = None
    path: str = ""


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
                f"model {config.spec} needs a base URL, e.g. `base_url` http://127.0.0.1:8000/v1 "
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
        self._dialect: Dialect | None = None if config.structured_outputs == "auto" else config.structured_outputs
        self._dialect_lock: asyncio.Lock | None = None
        self._replicas = Replicas(self.base_urls, config.max_concurrency or 1)
        if self._dialect is not None:
            self._replicas.capacity = self.max_concurrency
        self._use_max_completion_tokens = False
        self._violations_lock = threading.Lock()
        self._violations_in_a_row = 0
        self._waiting: dict[int, _Waiting] = {}
        self._tokens = itertools.count()
        self._last_answer = _now()
        self._wait_logged: dict[str, float] = {}
        """Server -> when its last wait line was logged (`_now`)."""
        self._submit_watch: asyncio.Future[None] | None = None
        self._pacer = TurnPacer(REPLIES_PER_TURN)

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

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
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

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
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
                        raise EngineError(f"the request loop of {self.engine_id} stopped: {why}") from None
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
        senders = [
            asyncio.ensure_future(sender())
            for _ in range(min(len(requests), self.max_concurrency * len(self.base_urls)))
        ]
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
            self._log_waits(_now())
            note = self._wait_note()
            if note is not None:
                deliver((_NOTE, -1, note))

    def _log_waits(self, now: float) -> None:
        """One WARNING line per server whose oldest request in flight has waited
        WAIT_LOG_EVERY_S, and again every WAIT_LOG_EVERY_S while one still waits: which server,
        which stage and path, how long, the attempt and the deadline. (Both watchers call it
        on the loop's thread; the per-server time keeps a server to one line per period.)"""
        oldest: dict[str, _Waiting] = {}
        for waiting in self._waiting.values():
            if waiting.url not in oldest or waiting.started < oldest[waiting.url].started:
                oldest[waiting.url] = waiting
        for url, waiting in oldest.items():
            waited = now - waiting.started
            if waited < WAIT_LOG_EVERY_S or now - self._wait_logged.get(url, -WAIT_LOG_EVERY_S) < WAIT_LOG_EVERY_S:
                continue
            self._wait_logged[url] = now
            log.warning(
                "still waiting on %s (stage: %s, %s): %.0f s, attempt %d/%d, deadline %g s (`timeout_s`)",
                url,
                waiting.stage or "none named",
                waiting.path or "request",
                waited,
                waiting.attempt,
                waiting.attempts,
                self.config.timeout_s,
            )

    def _wait_note(self) -> str | None:
        """ "waiting on URL: 45 s, attempt 2/5" when no answer has come for WAIT_NOTE_AFTER_S and
        the oldest request in flight has waited that long; else None."""
        now = _now()
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
                self._log_waits(_now())
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
                    log.info(
                        "%s: the %s dialect (from GET /models), %d requests in flight per replica",
                        self.base_url,
                        self._dialect,
                        self.max_concurrency,
                    )
        return self._dialect

    async def _complete(self, request: GenerationRequest) -> GenerationResponse:
        constraint = request.constraint
        payload: dict[str, Any] = {}

        async def attempt(replica: Replica, deadline: float) -> GenerationResponse:
            if constraint is not None and self.config.constraint_probe:
                await self._ensure_enforced(replica, constraint, deadline)
            if not payload:  # built once a slot is taken: the work spreads over the batch's waits
                assert self._dialect is not None
                payload.update(build_payload(self.config.model, request, self._dialect))
            response = await self._chat(replica, payload, deadline)
            return self._to_response(replica, response, constraint, top_logprobs=payload.get("top_logprobs"))

        response = await self._with_failover(attempt, "/chat/completions")
        self._last_answer = _now()
        return response

    async def _with_failover(self, work: Callable[[Replica, float], Awaitable[_T]], path: str) -> _T:
        """Run `work` on a replica; on `ReplicaDown`, again on another (at once) or, when
        every replica is down, on the first to recover after a backoff. Every attempt and
        backoff counts against one deadline, `timeout_s` from the first send."""
        attempts = self.config.max_retries + 1
        reason = ""
        failed: Replica | None = None
        deadline: float | None = None
        token = next(self._tokens)
        tried = 0
        try:
            for attempt in range(1, attempts + 1):
                if attempt > 1 and not self._replicas.any_live():
                    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 2)) * (0.5 + random.random())
                    log.info(
                        "no replica of %s is up: backing off %.2f s before attempt %d of %d",
                        self.engine_id,
                        delay,
                        attempt,
                        attempts,
                    )
                    await asyncio.sleep(max(0.0, min(delay, (deadline or 0.0) - time.monotonic())))
                replica = await self._replicas.acquire(avoid=failed)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.config.timeout_s
                    self._waiting[token] = _Waiting(replica.url, _now(), attempt, attempts, current_stage(), path)
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
                except ReplicaDown as exc:
                    down = True
                    reason = f"{exc}" if len(self.base_urls) == 1 else f"{replica.url}: {exc}"
                    failed = replica
                    log.info("%s%s failed (%s), attempt %d of %d", replica.url, path, exc, attempt, attempts)
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
                f"cannot reach {where} within the {self.config.timeout_s:g} s deadline (`timeout_s`; "
                f"{tried} of {attempts} attempts): {reason}"
            )
        raise EngineError(f"cannot reach {where} after {attempts} attempts: {reason}")

    async def _send(
        self, replica: Replica, method: str, path: str, payload: dict[str, Any] | None, deadline: float
    ) -> _Reply:
        """One HTTP call, bounded by what is left of the deadline; `ReplicaDown` for what
        another attempt may fix."""
        import aiohttp

        left = deadline - time.monotonic()
        if left <= 0:
            raise ReplicaDown("timed out")
        timeout = aiohttp.ClientTimeout(total=left, connect=min(left, CONNECT_TIMEOUT_S))
        session = await self._client()
        try:
            async with session.request(method, f"{replica.url}{path}", json=payload, timeout=timeout) as reply:
                content = await reply.read()
                status = reply.status
        except asyncio.TimeoutError as exc:
            raise ReplicaDown("timed out") from exc
        except aiohttp.ClientError as exc:
            raise ReplicaDown(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise ReplicaDown(f"{type(exc).__name__}: {exc}") from exc
        await self._pacer.wait_turn()  # handled, and its slot refilled, in its group's turn
        response = _Reply(status, content)
        if status in RETRY_STATUS or status >= 500:
            message, _, _ = server_message(response)
            raise ReplicaDown(f"HTTP {status}: {message[:300]}")
        return response

    async def _chat(self, replica: Replica, payload: dict[str, Any], deadline: float) -> _Reply:
        """POST one chat completion, renaming `max_tokens` once if the server asks for it."""
        body = self._with_token_field(payload)
        response = await self._send(replica, "POST", "/chat/completions", body, deadline)
        if response.status_code == 400 and "max_tokens" in body:
            message, _, _ = server_message(response)
            if WANTS_MAX_COMPLETION_TOKENS.search(message):
                self._use_max_completion_tokens = True  # for every later request too
                response = await self._send(
                    replica, "POST", "/chat/completions", self._with_token_field(payload), deadline
                )
        return response

    async def _models_reply(self) -> Any:
        async def get(replica: Replica, deadline: float) -> _Reply:
            return await self._send(replica, "GET", "/models", None, deadline)

        response = await self._with_failover(get, "/models")
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _to_response(
        self, replica: Replica, response: Any, constraint: Constraint | None, top_logprobs: int | None = None
    ) -> GenerationResponse:
        """The GenerationResponse for a server reply; a constrained reply that breaks its
        constraint becomes an error response."""
        url = f"{replica.url}/chat/completions"
        if response.status_code >= 400:
            message, code, param = server_message(response)
            if is_context_error(response.status_code, message, code, param):
                return GenerationResponse(
                    text=f"server refused the request ({response.status_code}): {message}",
                    finish_reason="error",
                )
            raise EngineError(f"model server at {url} refused the request ({response.status_code}): {message}")
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
                f"model server at {url} sent a reply that is not a chat completion: {response.text[:500]!r}"
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

    async def _ensure_enforced(self, replica: Replica, constraint: Constraint, deadline: float) -> None:
        """Probe `replica` once per constraint kind; EngineError when it does not enforce it.
        A replica that fails during the probe raises `ReplicaDown` (probed again later)."""
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
                        message, _, _ = server_message(response)
                        failure = f"it refused the probe ({response.status_code}): {message[:300]}"
                    else:
                        reply = self._parse(url, response)
                        if reply.finish_reason == "stop":
                            reply = reply.model_copy(
                                update={"text": read_reply(probe.constraint, dialect, reply.text)[0]}
                            )
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

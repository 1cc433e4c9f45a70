"""The engine protocol every backend implements, the base class that implements it once,
and what all engines share: progress reporting, finish reasons, chat messages as dicts.

An engine subclasses `BaseEngine` (or `SequentialEngine`) and writes only its own step from
requests to responses; `BaseEngine.generate` does the rest for all of them: the empty
batch, the closed-engine check, the lock of engines that are not thread-safe, the count
and order of the responses, `on_response` and progress.

Two ways in. `generate(batch)` answers a whole batch (the staged loop, the exports).
`submit(request)` answers one request on its own, in a `concurrent.futures.Future` that
completes when its response does, so a caller can act on each response the moment it
arrives and keep two models busy at once (the streamed loop: a rewrite goes to the judge as
soon as the teacher returns it); `await ask(engine, request)` is the same from a coroutine.
By default a submitted request waits in the engine's `SubmitQueue`, whose one thread hands
what is queued to the engine's own batch step (`SequentialEngine`: one request at a time);
an engine that can take requests while it runs says how (`_serve`: vLLM's scheduler admits
them between steps), and the server engine and the wrappers (call cache, meter) answer them
directly.
"""

from __future__ import annotations

import asyncio
import os
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import ClassVar, NamedTuple, Protocol, TypeVar, runtime_checkable

from ..errors import EngineError
from ..formatting import plural
from ..progress import ProgressCallback
from .types import ChatMessage, FinishReason, GenerationRequest, GenerationResponse

ResponseCallback = Callable[[int, GenerationResponse], None]
"""Called with (index in the batch, response) as soon as each response is complete, so a
caller (the call cache) can persist it before the rest of the batch is done: a run killed
mid-batch then loses at most the calls in flight."""


@runtime_checkable
class Engine(Protocol):
    """A batch-first text generator.

    `engine_id` identifies the engine *and* model (e.g. "hf/smollm2-135m-instruct-hf-<GGUF hash>:bfloat16") so
    that cached results of one model are never served for another.
    """

    engine_id: str

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response: ResponseCallback | None = None,
    ) -> list[GenerationResponse]:
        """Generate one response per request, in the same order; `on_response` is called for
        each response as it completes (engines that only finish whole batches call it at the end)."""
        ...

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        """One request on its own: the Future completes with its response (or the error that
        failed it) as soon as the engine has it."""
        ...

    def close(self) -> None:
        """Release the model or connections; the engine is unusable afterwards."""
        ...


# --------------------------------------------------------------------------------------
# What every engine shares
# --------------------------------------------------------------------------------------

RAW_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "eos": "stop",  # some OpenAI-compatible servers
    "content_filter": "error",  # OpenAI's moderation cut the output off
}
"""Finish reasons as engines and servers report them -> ours."""


def finish_reason(raw: str | None, unknown: FinishReason) -> FinishReason:
    """Map an engine's raw finish reason. `unknown` is what a reason outside the table (or
    none) means to that engine: "stop" for llama.cpp and servers (e.g. llama.cpp's
    "tool_calls"), "error" for vLLM (its "abort")."""
    return RAW_FINISH_REASONS.get(raw, unknown) if raw is not None else unknown


BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of CPUs that compute bf16 matmuls natively (oneDNN uses them)."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as stream:
            for line in stream:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_dtype() -> str:
    """The dtype a model runs in on this CPU: bf16 where it computes bf16 natively (AMX,
    AVX512_BF16), else fp32 (an AVX2 CPU emulates bf16, several times slower than fp32)."""
    return "bfloat16" if cpu_flags() & set(BF16_CPU_FLAGS) else "float32"


def cpu_dtype_reason() -> str:
    """Why `cpu_dtype` chose what it did on this CPU, in words a user can check against their
    machine (the flags found, or the ones missing)."""
    native = sorted(cpu_flags() & set(BF16_CPU_FLAGS))
    if native:
        return f"this CPU computes bf16 ({', '.join(native)})"
    return "this CPU has neither AVX512_BF16 nor AMX: bf16 would be emulated, slower than fp32"


def default_threads() -> int:
    """CPU threads an embedded engine computes with by default: all usable cores but one.
    llama.cpp's threads and torch's OpenMP threads wait for each other at every step's barriers:
    when one of them loses its core to another process every step waits for it (on a busy
    2-core machine, 2 llama.cpp threads generated ~20x slower than 1, and torch stalled the same
    way), and this process has other work to do too."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def message_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """The conversation as the list of {"role", "content"} dicts every chat API takes."""
    return [{"role": m.role, "content": m.content} for m in messages]


def final_token_index(tokens: Sequence[str], text: str) -> int | None:
    """Which of the generated `tokens` (their decoded texts, in order) ends the output `text`:
    the verdict token of a judge, whose formats all end with the verdict ("... Verdict: A").

    Walking back from the last token, tokens of whitespace only and tokens whose text does not
    occur in the output at all (an end-of-sequence token such as "<|im_end|>", which vLLM
    counts among the generated tokens) are passed over; the first other token must be the one that ends the output, else None
    (the tokens do not line up with the text)."""
    end = text.rstrip()
    for index in range(len(tokens) - 1, -1, -1):
        piece = tokens[index].strip()
        if not piece or piece not in end:
            continue
        return index if end.endswith(piece) else None
    return None


def check_batch_size(engine_id: str, n_responses: int, n_requests: int) -> None:
    """One response per request, or the batch fails (a response must never land on the
    wrong request)."""
    if n_responses != n_requests:
        raise EngineError(
            f"engine {engine_id} returned {plural(n_responses, 'response')} for {plural(n_requests, 'request')}"
        )


class BatchReport:
    """What an engine's batch step reports while it runs, passed on to the caller.

    `done(index, response)` as each response completes (calls `on_response`, then counts
    one finished request); `advance(n)` for an engine with its own progress count (a wrapped
    engine's reports: the call cache, the meter). The caller's progress follows whichever count
    is ahead, so a request reported both ways is counted once.
    """

    def __init__(self, progress: ProgressCallback | None, on_response: ResponseCallback | None) -> None:
        self._progress = progress
        self._on_response = on_response
        self._done: set[int] = set()
        self._advanced = 0
        self._reported = 0

    def done(self, index: int, response: GenerationResponse) -> None:
        self._done.add(index)
        if self._on_response is not None:
            self._on_response(index, response)
        self._catch_up()

    def advance(self, n: int) -> None:
        self._advanced += n
        self._catch_up()

    def finish(self, responses: Sequence[GenerationResponse]) -> list[GenerationResponse]:
        """Report the responses the step did not report one by one, in order."""
        for index, response in enumerate(responses):
            if index not in self._done:
                self._done.add(index)
                if self._on_response is not None:
                    self._on_response(index, response)
        self._catch_up()
        return list(responses)

    def _catch_up(self) -> None:
        ahead = max(len(self._done), self._advanced) - self._reported
        if ahead > 0:
            self._reported += ahead
            if self._progress is not None:
                self._progress(ahead)


async def ask(engine: Engine, request: GenerationRequest) -> GenerationResponse:
    """`engine.submit(request)`, awaited: the response, on the caller's event loop."""
    return await asyncio.wrap_future(engine.submit(request))


def flush(engine: Engine) -> None:
    """Commit what `engine` holds of the responses to its submissions (the call cache writes
    them in groups): a caller that stops submitting, done or failed, makes them durable, as the
    end of a batch does. Engines without such writes (`BaseEngine.flush`) do nothing."""
    commit = getattr(engine, "flush", None)
    if commit is not None:
        commit()


# --------------------------------------------------------------------------------------
# Requests submitted one by one
# --------------------------------------------------------------------------------------


class Submission(NamedTuple):
    """A submitted request and the Future its response goes to."""

    request: GenerationRequest
    future: Future[GenerationResponse]


class SubmitQueue:
    """The requests submitted to one engine, in arrival order, and the one daemon thread that
    serves them (`BaseEngine._serve`), started with the first submission.

    A cancelled Future's request is dropped when it is taken; `stop` fails what is still
    queued with an EngineError and waits for the request being served (the model must not be
    freed under it)."""

    def __init__(self, engine: BaseEngine) -> None:
        self._engine = engine
        self._queue: deque[Submission] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def put(self, request: GenerationRequest) -> Future[GenerationResponse]:
        future: Future[GenerationResponse] = Future()
        with self._ready:
            if self._stopped:
                raise EngineError(f"the {self._engine.name} engine is closed")
            self._queue.append(Submission(request, future))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve_forever, name=f"{self._engine.name} requests", daemon=True
                )
                self._thread.start()
            self._ready.notify()
        return future

    def take(self, limit: int | None = None, *, wait: bool = True) -> list[Submission]:
        """Up to `limit` queued submissions (None: all), oldest first, each marked running;
        with `wait`, waits until there is one or the queue stops ([] then)."""
        taken: list[Submission] = []
        with self._ready:
            while True:
                while self._queue and (limit is None or len(taken) < limit):
                    item = self._queue.popleft()
                    if item.future.set_running_or_notify_cancel():
                        taken.append(item)
                if taken or not wait or self._stopped:
                    return taken
                self._ready.wait()

    @property
    def stopped(self) -> bool:
        """The engine is closing: an engine serving many requests at once aborts them."""
        return self._stopped

    def stop(self) -> None:
        """Refuse new submissions, fail the queued ones, and wait for the one being served."""
        with self._ready:
            self._stopped = True
            left, self._queue = list(self._queue), deque()
            self._ready.notify_all()
            thread = self._thread
        closed = EngineError(f"the {self._engine.name} engine is closed")
        for item in left:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(closed)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _serve_forever(self) -> None:
        while True:
            batch = self.take(self._engine.submit_batch)
            if not batch:
                return  # stopped
            try:
                self._engine._serve(batch, self)
            except BaseException as exc:  # the requests fail; the queue goes on serving
                fail_unanswered(batch, exc)


def fail_unanswered(batch: Sequence[Submission], exc: BaseException) -> None:
    """Give `exc` to every Future of `batch` that has no result yet."""
    for item in batch:
        if not item.future.done():
            item.future.set_exception(exc)


# --------------------------------------------------------------------------------------
# The base classes
# --------------------------------------------------------------------------------------


_Self = TypeVar("_Self", bound="BaseEngine")


class BaseEngine(ABC):
    """Implements the `Engine` protocol once; a subclass implements `_generate_batch` (or,
    through `SequentialEngine`, `_generate_one`) and releases its resources in `_release`."""

    name: ClassVar[str] = "model"
    """What error messages call the engine ("the llama.cpp engine is closed")."""

    thread_safe: ClassVar[bool] = False
    """False: batches run one at a time under a lock (llama.cpp, transformers and vLLM's
    offline engine are not thread-safe). True: batches of several threads run at once."""

    submit_batch: ClassVar[int | None] = None
    """How many queued submissions one turn of the `SubmitQueue` hands to `_serve` (None:
    all that are queued)."""

    def __init__(self, engine_id: str) -> None:
        self.engine_id = engine_id
        self._lock = threading.Lock()
        self._closed = False
        self._submissions: SubmitQueue | None = None
        self._submissions_lock = threading.Lock()

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response: ResponseCallback | None = None,
    ) -> list[GenerationResponse]:
        """One response per request, in request order; each is reported (`on_response`,
        `progress`) as soon as the engine has it."""
        if not requests:
            return []
        if self.thread_safe:
            return self._run(requests, BatchReport(progress, on_response))
        with self._lock:
            return self._run(requests, BatchReport(progress, on_response))

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        """One request on its own (see the module docstring): queued, and answered by the
        engine's own step as soon as the requests before it are."""
        if self._closed:
            raise EngineError(f"the {self.name} engine is closed")
        with self._submissions_lock:
            if self._submissions is None:
                self._submissions = SubmitQueue(self)
            queue = self._submissions
        return queue.put(request)

    def flush(self) -> None:  # noqa: B027 - a hook with a default: most engines hold nothing to commit
        """Commit what is pending of the submissions' responses (`llm.base.flush`): nothing,
        except in the call cache and the wrappers around it."""

    def close(self) -> None:
        """Release the model or connections (idempotent); `generate` and `submit` refuse
        afterwards. Submitted requests still queued fail; the one being served is waited for."""
        with self._submissions_lock:
            queue = self._submissions
        if queue is not None:
            queue.stop()  # before the lock: its thread may hold it
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> Sequence[GenerationResponse]:
        """The engine's own step: one response per request, in order. Report each through
        `report.done` as it completes where the engine can; the rest are reported when
        this returns."""

    def _release(self) -> None:  # noqa: B027 - a hook with a default: an engine may hold nothing
        """Free what the engine holds (called once, by `close`)."""

    def _serve(self, batch: Sequence[Submission], queue: SubmitQueue) -> None:
        """Answer submitted requests (on the queue's thread): by default `batch` as one batch
        of the engine's own step, each Future completed as its response is reported. An engine
        that takes requests while it runs overrides this and takes more from `queue`."""
        report = BatchReport(None, lambda index, response: batch[index].future.set_result(response))
        requests = [item.request for item in batch]
        if self.thread_safe:
            self._run(requests, report)
        else:
            with self._lock:
                self._run(requests, report)

    def _run(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        if self._closed:
            raise EngineError(f"the {self.name} engine is closed")
        responses = self._generate_batch(requests, report)
        check_batch_size(self.engine_id, len(responses), len(requests))
        return report.finish(responses)


class SequentialEngine(BaseEngine):
    """An engine that generates one request at a time, reporting each as soon as it is done."""

    submit_batch = 1  # submitted requests one by one: a cancelled one is dropped before it runs

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        self._check_batch(requests)
        responses: list[GenerationResponse] = []
        for index, request in enumerate(requests):
            responses.append(self._generate_one(request))
            report.done(index, responses[-1])
        return responses

    def _check_batch(self, requests: Sequence[GenerationRequest]) -> None:
        """Refuse a batch before any work is done (raise); by default every batch is fine."""

    @abstractmethod
    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        """Generate one request; a request that fails on its own gets finish_reason "error"."""

"""The engine protocol every backend implements, the base class that implements it once,
and what all engines share: progress reporting, finish reasons, chat messages as dicts.

An engine subclasses `BaseEngine` (or `SequentialEngine`) and writes only its own step from
requests to responses; `BaseEngine.generate` does the rest for all of them: the empty
batch, the closed-engine check, the lock of engines that are not thread-safe, the count
and order of the responses, `on_response` and progress.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Protocol, Sequence, TypeVar, runtime_checkable

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

    `engine_id` identifies the engine *and* model (e.g. "llamacpp/smollm2@<file hash>") so
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

    def __init__(self, engine_id: str) -> None:
        self.engine_id = engine_id
        self._lock = threading.Lock()
        self._closed = False

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

    def close(self) -> None:
        """Release the model or connections (idempotent); `generate` refuses afterwards."""
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

    def _release(self) -> None:
        """Free what the engine holds (called once, by `close`)."""

    def _run(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        if self._closed:
            raise EngineError(f"the {self.name} engine is closed")
        responses = self._generate_batch(requests, report)
        check_batch_size(self.engine_id, len(responses), len(requests))
        return report.finish(responses)


class SequentialEngine(BaseEngine):
    """An engine that generates one request at a time, reporting each as soon as it is done."""

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
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

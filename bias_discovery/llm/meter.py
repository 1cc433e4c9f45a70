"""Count calls and tokens per stage, so a run can say what each step cost."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future

from pydantic import BaseModel

from ..progress import ProgressCallback
from .base import BaseEngine, BatchReport, Engine, ResponseCallback, flush
from .types import GenerationRequest, GenerationResponse


class StageUsage(BaseModel):
    requests: int = 0
    """Requests the stage made (cached or not)."""
    cached: int = 0
    """Of those, answered from the call cache (paid earlier, not now)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class MeteredEngine(BaseEngine):
    """Wraps an engine (usually a CachedEngine) and books every response to `self.stage`, or,
    through `booked_to(stage)`, to a stage of the caller's (streamed stages run at once)."""

    name = "metered"
    thread_safe = True  # as thread-safe as the engine it wraps

    def __init__(self, engine: Engine, role: str) -> None:
        super().__init__(engine.engine_id)
        self.engine = engine
        self.role = role
        self.stage = "unknown"
        self.usage: dict[str, StageUsage] = defaultdict(StageUsage)
        self._usage_lock = threading.Lock()

    def take_usage(self, stage: str | None = None) -> dict[str, StageUsage]:
        """Return and reset the per-stage counters: every stage's, or only `stage`'s (the
        others go on counting)."""
        with self._usage_lock:
            if stage is None:
                usage, self.usage = dict(self.usage), defaultdict(StageUsage)
                return usage
            booked = self.usage.pop(stage, None)
            return {stage: booked} if booked is not None else {}

    def booked_to(self, stage: str) -> StageEngine:
        """This engine with every call booked to `stage`, whatever `self.stage` says."""
        return StageEngine(self, stage)

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        return self.submit_booked(request, self.stage)

    def submit_booked(self, request: GenerationRequest, stage: str) -> Future[GenerationResponse]:
        """`submit`, booked to `stage` when the response arrives."""
        future = self.engine.submit(request)
        future.add_done_callback(lambda done: self._book_done(stage, done))
        return future

    def flush(self) -> None:
        flush(self.engine)

    def book(self, stage: str, responses: Sequence[GenerationResponse]) -> None:
        with self._usage_lock:
            usage = self.usage[stage]
            usage.requests += len(responses)
            usage.cached += sum(1 for r in responses if r.cached)
            usage.prompt_tokens += sum(r.prompt_tokens for r in responses)
            usage.completion_tokens += sum(r.completion_tokens for r in responses)

    def _book_done(self, stage: str, done: Future[GenerationResponse]) -> None:
        if not done.cancelled() and done.exception() is None:
            self.book(stage, [done.result()])

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        stage = self.stage
        responses = self.engine.generate(requests, progress=report.advance, on_response=report.done)
        self.book(stage, responses)
        return responses

    def _release(self) -> None:
        self.engine.close()


class StageEngine:
    """A metered engine whose calls are booked to one stage (`MeteredEngine.booked_to`).
    Closing it closes nothing: the engine belongs to its roles."""

    def __init__(self, meter: MeteredEngine, stage: str) -> None:
        self.meter = meter
        self.stage = stage
        self.engine_id = meter.engine_id

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response: ResponseCallback | None = None,
    ) -> list[GenerationResponse]:
        responses = self.meter.engine.generate(requests, progress=progress, on_response=on_response)
        self.meter.book(self.stage, responses)
        return responses

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        return self.meter.submit_booked(request, self.stage)

    def flush(self) -> None:
        self.meter.flush()

    def close(self) -> None:
        """Nothing to release (the meter's roles close the engine)."""

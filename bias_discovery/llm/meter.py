"""Count calls and tokens per stage, so a run can say what each step cost, and keep the run's
budget (`budget.py`): a paid request is admitted before it is sent, a refused one stops the
batch there, after the requests before it (`BudgetReached`). What a role pays is booked twice:
in memory, as each response arrives (what the budget admits against), and durably, by the call
cache's ledger in the transaction that stores the response (what a resumed run counts from).
A batch that fails books the responses that arrived before it failed: they were paid."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future

from pydantic import BaseModel

from ..progress import ProgressCallback
from .base import BaseEngine, BatchReport, Engine, ResponseCallback, flush
from .budget import Budget, BudgetReached, Spend
from .cache import CachedEngine
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

    def __init__(self, engine: Engine, role: str, budget: Budget | None = None) -> None:
        super().__init__(engine.engine_id)
        self.engine = engine
        self.role = role
        self.budget = budget
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
        """`submit`, booked to `stage` when the response arrives; with a budget, a paid request
        is admitted first (`BudgetReached` raised here, nothing sent, when it is not)."""
        if self.budget is None or not self.budget.settings.is_set():  # no limit: book what arrives
            future = self._send_one(request)
            future.add_done_callback(lambda done: self._book_done(stage, done))
            if self.budget is not None:
                future.add_done_callback(
                    lambda done: self._settle(
                        Spend(), None if done.cancelled() or done.exception() is not None else done.result()
                    )
                )
            return future
        reserved = self._admit([request])[0]
        try:
            sent = self._send_one(request)
        except BaseException:
            self._settle(reserved, None)
            raise
        # An admitted request is seen through even when its caller gives up (a stage stopped at
        # the budget cancels the rest): its response is paid, booked and kept by the call cache.
        answer: Future[GenerationResponse] = Future()

        def arrived(done: Future[GenerationResponse]) -> None:
            failed = done.cancelled() or done.exception() is not None
            self._settle(reserved, None if failed else done.result())
            self._book_done(stage, done)
            if answer.cancelled():
                return
            if done.cancelled():
                answer.cancel()
            elif done.exception() is not None:
                answer.set_exception(done.exception())
            else:
                answer.set_result(done.result())

        sent.add_done_callback(arrived)
        return answer

    def _send_one(self, request: GenerationRequest) -> Future[GenerationResponse]:
        """Submit `request`, booked to this role in the call cache's ledger when there is one."""
        if isinstance(self.engine, CachedEngine) and self.budget is not None:
            return self.engine.submit(request, payer=self.budget.payer(self.role))
        return self.engine.submit(request)

    def _send_batch(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None,
        on_response: ResponseCallback | None,
    ) -> list[GenerationResponse]:
        """Generate `requests`, booked to this role in the call cache's ledger when there is one."""
        if isinstance(self.engine, CachedEngine) and self.budget is not None:
            return self.engine.generate(
                requests, progress=progress, on_response=on_response, payer=self.budget.payer(self.role)
            )
        return self.engine.generate(requests, progress=progress, on_response=on_response)

    def _admit(self, requests: Sequence[GenerationRequest]) -> list[Spend | None]:
        """Each request's reservation (None: the call cache answers it, free), in order; at the
        first one the budget refuses, the reservations made are released and `BudgetReached`
        carries how many came before it (`admitted`)."""
        assert self.budget is not None
        if not self.budget.settings.is_set():  # nothing to keep: book what is paid, copies once
            seen: set[str] = set()
            free = []
            for request in requests:
                key = request.content_hash(self.engine_id)
                free.append(key in seen)
                seen.add(key)
            return [None if copy else Spend() for copy in free]
        known = getattr(self.engine, "known", None)
        cached = known(requests) if callable(known) else [False] * len(requests)
        reserved: list[Spend | None] = []
        keys: set[str] = set()
        for request, hit in zip(requests, cached):
            key = request.content_hash(self.engine_id)
            if hit or key in keys:  # cached, or a copy the cache sends once: free
                reserved.append(None)
                continue
            keys.add(key)
            try:
                reserved.append(self.budget.admit(self.role, request))
            except BudgetReached as exc:
                exc.admitted = reserved  # type: ignore[attr-defined]
                raise
        return reserved

    def _settle(self, reserved: Spend | None, response: GenerationResponse | None) -> None:
        if reserved is not None and self.budget is not None:
            self.budget.settle(self.role, reserved, response, paid=response is not None and not response.cached)

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

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        return self.generate_booked(self.stage, requests, report.advance, report.done)

    def generate_booked(
        self,
        stage: str,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response: ResponseCallback | None = None,
    ) -> list[GenerationResponse]:
        """Generate `requests` booked to `stage`. With a budget, the requests up to the first it
        refuses are sent (the call cache keeps their responses), then `BudgetReached` is raised."""
        if self.budget is None:
            responses = self.engine.generate(requests, progress=progress, on_response=on_response)
            self.book(stage, responses)
            return responses
        try:
            reserved = self._admit(requests)
        except BudgetReached as exc:  # send what was admitted, then stop
            admitted = exc.admitted  # type: ignore[attr-defined]
            if admitted:
                self._generate_paid(stage, requests[: len(admitted)], admitted, progress, on_response)
            raise
        return self._generate_paid(stage, requests, reserved, progress, on_response)

    def _generate_paid(
        self,
        stage: str,
        requests: Sequence[GenerationRequest],
        reserved: list[Spend | None],
        progress: ProgressCallback | None,
        on_response: ResponseCallback | None,
    ) -> list[GenerationResponse]:
        """Generate admitted requests and book what they cost (`reserved` None: free). When the
        batch fails, the responses that arrived before it did are booked: they were paid (the
        call cache keeps them and its ledger books them)."""
        arrived: dict[int, GenerationResponse] = {}

        def note(index: int, response: GenerationResponse) -> None:
            arrived[index] = response
            if on_response is not None:
                on_response(index, response)

        try:
            responses = self._send_batch(requests, progress, note)
        except BaseException:
            self.book(stage, list(arrived.values()))
            for i, r in enumerate(reserved):
                self._settle(r, arrived.get(i))
            raise
        self.book(stage, responses)
        for r, response in zip(reserved, responses):
            self._settle(r, response)
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
        return self.meter.generate_booked(self.stage, requests, progress, on_response)

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        return self.meter.submit_booked(request, self.stage)

    def flush(self) -> None:
        self.meter.flush()

    def close(self) -> None:
        """Nothing to release (the meter's roles close the engine)."""

"""Count calls and tokens per stage, so a run can say what each step cost."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from pydantic import BaseModel

from .base import BaseEngine, BatchReport, Engine
from .types import GenerationRequest, GenerationResponse


class StageUsage(BaseModel):
    requests: int = 0
    """Requests the stage made (cached or not)."""
    cached: int = 0
    """Of those, answered from the call cache (paid earlier, not now)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class MeteredEngine(BaseEngine):
    """Wraps an engine (usually a CachedEngine) and books every response to `self.stage`."""

    name = "metered"
    thread_safe = True  # as thread-safe as the engine it wraps

    def __init__(self, engine: Engine, role: str) -> None:
        super().__init__(engine.engine_id)
        self.engine = engine
        self.role = role
        self.stage = "unknown"
        self.usage: dict[str, StageUsage] = defaultdict(StageUsage)

    def take_usage(self) -> dict[str, StageUsage]:
        """Return and reset the per-stage counters."""
        usage, self.usage = dict(self.usage), defaultdict(StageUsage)
        return usage

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        responses = self.engine.generate(requests, progress=report.advance, on_response=report.done)
        usage = self.usage[self.stage]
        usage.requests += len(responses)
        usage.cached += sum(1 for r in responses if r.cached)
        usage.prompt_tokens += sum(r.prompt_tokens for r in responses)
        usage.completion_tokens += sum(r.completion_tokens for r in responses)
        return responses

    def _release(self) -> None:
        self.engine.close()

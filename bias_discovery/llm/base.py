"""The engine protocol every backend implements, and progress reporting."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar, runtime_checkable

from .types import GenerationRequest, GenerationResponse

ProgressCallback = Callable[[int], None]
"""Called with the number of requests finished since the last call (an increment)."""

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


Item = TypeVar("Item")


def generate_in_order(
    items: Sequence[Item],
    generate_one: Callable[[Item], GenerationResponse],
    progress: ProgressCallback | None = None,
    on_response: ResponseCallback | None = None,
) -> list[GenerationResponse]:
    """The batch loop of engines that generate one request at a time: each response is
    reported (`on_response`, `progress`) as soon as it is done, not at the end of the batch."""
    responses: list[GenerationResponse] = []
    for index, item in enumerate(items):
        responses.append(generate_one(item))
        if on_response is not None:
            on_response(index, responses[-1])
        if progress is not None:
            progress(1)
    return responses

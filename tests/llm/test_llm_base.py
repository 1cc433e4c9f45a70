"""The engine base class: what `generate` promises for every engine (empty batch, closed
check, order, on_response and progress, the lock), and the wrappers built on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm.base import (
    BaseEngine,
    BatchReport,
    Engine,
    ProgressCallback,
    ResponseCallback,
    SequentialEngine,
    finish_reason,
    message_dicts,
)
from bias_discovery.llm.meter import MeteredEngine
from bias_discovery.llm.types import GenerationRequest, GenerationResponse

from fakes import ScriptedEngine


def req(text: str) -> GenerationRequest:
    return GenerationRequest.chat(text)


def reply(request: GenerationRequest) -> GenerationResponse:
    return GenerationResponse(text=f"re:{request.messages[-1].content}", finish_reason="stop")


class OneByOne(SequentialEngine):
    name = "one-by-one"

    def __init__(self) -> None:
        super().__init__("test/one-by-one")
        self.sent: list[str] = []
        self.released = 0
        self.running = 0
        self.overlapped = False

    def _check_batch(self, requests: Sequence[GenerationRequest]) -> None:
        if any(r.messages[-1].content == "refuse" for r in requests):
            raise EngineError("refused before any work")

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        self.running += 1
        self.overlapped |= self.running > 1
        time.sleep(0.001)
        self.sent.append(request.messages[-1].content)
        self.running -= 1
        return reply(request)

    def _release(self) -> None:
        self.released += 1


class WholeBatch(BaseEngine):
    """Finishes the batch at once and counts its own progress, as vLLM's offline engine does."""

    name = "whole-batch"

    def __init__(self, own_progress: int = 0, drop_last: bool = False) -> None:
        super().__init__("test/whole-batch")
        self.own_progress = own_progress
        self.drop_last = drop_last

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        if self.own_progress:
            report.advance(self.own_progress)
        responses = [reply(r) for r in requests]
        return responses[:-1] if self.drop_last else responses


def recorder() -> tuple[list[tuple[str, int]], ProgressCallback, ResponseCallback]:
    """(events, progress, on_response): the callbacks append what they are told to events."""
    events: list[tuple[str, int]] = []
    return events, lambda n: events.append(("progress", n)), lambda i, r: events.append(("response", i))


def test_engines_satisfy_the_protocol() -> None:
    assert isinstance(OneByOne(), Engine)
    assert isinstance(MeteredEngine(ScriptedEngine(lambda r: "x"), "target"), Engine)


def test_sequential_engine_reports_each_response_as_it_is_done() -> None:
    engine = OneByOne()
    events, progress, on_response = recorder()
    out = engine.generate([req("a"), req("b"), req("c")], progress, on_response)
    assert [r.text for r in out] == ["re:a", "re:b", "re:c"]
    assert events == [
        ("response", 0),
        ("progress", 1),
        ("response", 1),
        ("progress", 1),
        ("response", 2),
        ("progress", 1),
    ]


def test_a_refused_batch_does_no_work() -> None:
    engine = OneByOne()
    with pytest.raises(EngineError, match="refused"):
        engine.generate([req("a"), req("refuse")])
    assert engine.sent == []


def test_empty_batch_and_closed_engine() -> None:
    engine = OneByOne()
    assert engine.generate([]) == []
    engine.close()
    engine.close()  # idempotent
    assert engine.released == 1
    with pytest.raises(EngineError, match="the one-by-one engine is closed"):
        engine.generate([req("a")])


def test_context_manager_closes() -> None:
    with OneByOne() as engine:
        engine.generate([req("a")])
    assert engine.released == 1


def test_whole_batch_is_reported_in_order_when_it_returns() -> None:
    events, progress, on_response = recorder()
    WholeBatch().generate([req("a"), req("b")], progress, on_response)
    assert events == [("response", 0), ("response", 1), ("progress", 2)]


def test_own_progress_and_responses_are_counted_once() -> None:
    ticks: list[int] = []
    WholeBatch(own_progress=2).generate([req("a"), req("b"), req("c")], ticks.append)
    assert ticks == [2, 1]  # the engine's own count, then the one request it did not count


def test_a_missing_response_fails_the_batch() -> None:
    with pytest.raises(EngineError, match="returned 1 response for 2 requests"):
        WholeBatch(drop_last=True).generate([req("a"), req("b")])


def test_batches_of_an_engine_that_is_not_thread_safe_never_overlap() -> None:
    engine = OneByOne()
    threads = [threading.Thread(target=engine.generate, args=([req(f"{t}-{i}") for i in range(20)],)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(engine.sent) == 80 and not engine.overlapped


def test_metered_engine_passes_reports_through_once_and_books_usage() -> None:
    inner = ScriptedEngine(lambda r: "two words")
    meter = MeteredEngine(inner, "target")
    meter.stage = "evaluate"
    events, progress, on_response = recorder()
    meter.generate([req("a"), req("b")], progress, on_response)
    assert events == [("response", 0), ("progress", 1), ("response", 1), ("progress", 1)]
    usage = meter.take_usage()["evaluate"]
    assert (usage.requests, usage.cached, usage.prompt_tokens, usage.completion_tokens) == (2, 0, 20, 4)
    assert meter.take_usage() == {}


def test_finish_reasons_and_messages_are_mapped_in_one_place() -> None:
    assert finish_reason("stop", unknown="error") == "stop"
    assert finish_reason("eos", unknown="error") == "stop"
    assert finish_reason("length", unknown="stop") == "length"
    assert finish_reason("content_filter", unknown="stop") == "error"
    assert finish_reason("tool_calls", unknown="stop") == "stop"  # llama.cpp, servers
    assert finish_reason("abort", unknown="error") == "error"  # vLLM
    assert finish_reason(None, unknown="error") == "error"
    request = GenerationRequest.chat("hi", system="sys")
    assert message_dicts(request.messages) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]


# -- requests submitted one by one ------------------------------------------------------------


def test_submitted_requests_are_answered_one_by_one_in_order() -> None:
    engine = OneByOne()
    futures = [engine.submit(req(t)) for t in ("a", "b", "c")]
    assert [f.result(timeout=10).text for f in futures] == ["re:a", "re:b", "re:c"]
    assert engine.sent == ["a", "b", "c"] and not engine.overlapped


def test_an_engine_without_its_own_submit_serves_the_queue_in_batches() -> None:
    futures = [WholeBatch().submit(req(t)) for t in ("a", "b")]
    assert [f.result(timeout=10).text for f in futures] == ["re:a", "re:b"]


def test_a_cancelled_submission_is_dropped_and_closing_fails_the_queued_ones() -> None:
    engine = OneByOne()
    started, release = threading.Event(), threading.Event()

    def held(request: GenerationRequest) -> GenerationResponse:
        started.set()
        release.wait(timeout=10)
        return reply(request)

    engine._generate_one = held  # type: ignore[method-assign]
    running = engine.submit(req("running"))
    started.wait(timeout=10)
    dropped, queued = engine.submit(req("dropped")), engine.submit(req("queued"))
    assert dropped.cancel()
    closer = threading.Thread(target=engine.close)
    closer.start()
    time.sleep(0.05)
    assert closer.is_alive()  # close waits for the request being served
    release.set()
    closer.join(timeout=10)
    assert running.result(timeout=1).text == "re:running"
    with pytest.raises(EngineError, match="closed"):
        queued.result(timeout=1)
    with pytest.raises(EngineError, match="closed"):
        engine.submit(req("late"))


def test_a_failing_step_fails_its_submissions_and_the_queue_goes_on() -> None:
    engine = OneByOne()
    bad, good = engine.submit(req("refuse")), engine.submit(req("fine"))
    with pytest.raises(EngineError, match="refused"):
        bad.result(timeout=10)
    assert good.result(timeout=10).text == "re:fine"


def test_a_stage_view_books_to_its_stage_and_usage_is_taken_per_stage() -> None:
    meter = MeteredEngine(ScriptedEngine(lambda r: "two words"), "target")
    meter.stage = "merge"
    meter.booked_to("evaluate").submit(req("a")).result(timeout=10)
    meter.booked_to("identify").generate([req("b"), req("c")])
    meter.submit(req("d")).result(timeout=10)
    assert meter.take_usage("identify")["identify"].requests == 2
    rest = meter.take_usage()
    assert {stage: u.requests for stage, u in rest.items()} == {"evaluate": 1, "merge": 1}


def test_ask_awaits_a_submission() -> None:
    import asyncio

    from bias_discovery.llm.base import ask

    async def both() -> list[str]:
        engine = OneByOne()
        return [r.text for r in await asyncio.gather(ask(engine, req("x")), ask(engine, req("y")))]

    assert asyncio.run(both()) == ["re:x", "re:y"]

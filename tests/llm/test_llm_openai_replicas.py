"""The OpenAI-compatible engine's replicas (llm.openai.replicas): least-loaded choice, failover
to a live replica, all replicas down, the replica URLs checked."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai import OpenAIServerEngine
from bias_discovery.llm.openai.replicas import REPLICA_COOLDOWN_S, Replicas
from bias_discovery.llm.types import GenerationRequest

from openai_scripted import completion, free_port

pytestmark = pytest.mark.usefixtures("fast_backoff")


def test_requests_spread_over_replicas_least_loaded_first(scripted) -> None:  # type: ignore[no-untyped-def]
    def slow(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        time.sleep(0.02)
        return 200, completion("re:" + body["messages"][-1]["content"])

    a, b = scripted(slow), scripted(slow)
    engine = OpenAIServerEngine(
        ModelConfig(
            provider="openai",
            model="served",
            base_url=[a.base_url, b.base_url],
            structured_outputs="vllm",
            max_concurrency=2,
        )
    )
    out = engine.generate([GenerationRequest.chat(f"q{i}") for i in range(20)])
    assert [r.text for r in out] == [f"re:q{i}" for i in range(20)]
    assert len(a.posts()) + len(b.posts()) == 20
    # Least loaded first, the least recently used on a tie: the first four requests, taken
    # before any reply, alternate (a "first free" choice would give A q0 and q1). Who carries
    # the rest depends on which server answers first, so no share is asserted: CI saw B's two
    # requests outlast A's other 16 on a busy machine.
    sent_to = {p["messages"][-1]["content"]: name for name, s in (("a", a), ("b", b)) for p in s.posts()}
    assert [sent_to[f"q{i}"] for i in range(4)] == ["a", "b", "a", "b"], sent_to
    assert engine.engine_id == f"openai/served@{a.base_url},{b.base_url}"


def test_a_dead_replica_is_skipped_and_its_requests_retried_on_the_other(scripted) -> None:  # type: ignore[no-untyped-def]
    live = scripted(lambda m, p, body, h: (200, completion("re:" + body["messages"][-1]["content"])))
    dead_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    engine = OpenAIServerEngine(
        ModelConfig(
            provider="openai",
            model="served",
            base_url=[dead_url, live.base_url],
            structured_outputs="vllm",
            max_concurrency=2,
            max_retries=2,
        )
    )
    out = engine.generate([GenerationRequest.chat(f"q{i}") for i in range(12)])
    assert [r.text for r in out] == [f"re:q{i}" for i in range(12)]
    assert len(live.posts()) == 12  # each request answered once


def test_all_replicas_down_names_them_all() -> None:
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    engine = OpenAIServerEngine(
        ModelConfig(provider="openai", model="m", base_url=urls, structured_outputs="vllm", max_retries=2)
    )
    with pytest.raises(EngineError, match="any of the model servers") as info:
        engine.generate([GenerationRequest.chat("x")])
    assert all(url in str(info.value) for url in urls)


def test_replica_urls_are_validated() -> None:
    with pytest.raises(ValueError, match="same server twice"):
        ModelConfig(provider="openai", model="m", base_url=["http://a/v1", "http://a/v1/"])
    with pytest.raises(ValueError, match="empty list"):
        ModelConfig(provider="openai", model="m", base_url=[])


def test_replicas_least_loaded_first_a_failed_one_cools_down_and_waiters_queue() -> None:
    """`Replicas` on its own: the least-loaded live replica, a waiter queued while every slot is
    taken, a failed replica set aside (not handed to the waiter) until its cool-down ends."""

    async def scenario() -> None:
        replicas = Replicas(["http://a", "http://b"], capacity=1)
        a = await replicas.acquire()
        b = await replicas.acquire()
        assert (a.url, b.url) == ("http://a", "http://b")
        waiter = asyncio.ensure_future(replicas.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()  # every slot is taken: it queues
        before = time.monotonic()
        replicas.release(a, failed=True)
        after = time.monotonic()
        await asyncio.sleep(0)
        assert not waiter.done()  # a is cooling down and b is busy
        assert [r.url for r in replicas.live()] == ["http://b"] and a.failures == 1
        # set aside for one cool-down from its release (bracketed by the clock's readings, so
        # no machine is too slow for it)
        assert before + REPLICA_COOLDOWN_S <= a.down_until <= after + REPLICA_COOLDOWN_S
        replicas.release(b, failed=False)
        assert (await waiter) is b and b.failures == 0
        replicas.release(b, failed=False)
        assert b.in_flight == 0 and a.in_flight == 0

    asyncio.run(scenario())


def test_failover_and_the_dialect_are_logged(scripted, caplog) -> None:  # type: ignore[no-untyped-def]
    """What `--verbose` shows of an engine: the dialect found, a request that failed on a
    replica, the replica set aside."""
    live = scripted(
        lambda m, p, body, h: (
            (200, completion("re:" + body["messages"][-1]["content"]))
            if m == "POST"
            else (200, {"data": [{"id": "served", "owned_by": "vllm"}]})
        )
    )
    dead_url = f"http://127.0.0.1:{free_port()}/v1"
    engine = OpenAIServerEngine(
        ModelConfig(
            provider="openai",
            model="served",
            base_url=[dead_url, live.base_url],
            max_concurrency=2,
            max_retries=2,
            constraint_probe=False,
        )
    )
    with caplog.at_level(logging.INFO, logger="bias_discovery.llm"):
        engine.generate([GenerationRequest.chat(f"q{i}") for i in range(4)])
    engine.close()
    lines = [r.getMessage() for r in caplog.records]
    assert any("the vllm dialect (from GET /models)" in line for line in lines), lines
    assert any(line.startswith(f"{dead_url}/") and "failed" in line and "attempt 1 of 3" in line for line in lines), (
        lines
    )
    assert any(line.startswith(f"replica {dead_url} set aside for ") for line in lines), lines

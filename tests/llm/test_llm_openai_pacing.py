"""The OpenAI-compatible engine's pacing (llm.openai.pacing): a replacement request leaves before
the other replies of its wave are handled."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

from bias_discovery.llm.openai.pacing import TurnPacer
from bias_discovery.llm.types import GenerationRequest

from openai_scripted import completion, engine_for

pytestmark = pytest.mark.usefixtures("fast_backoff")


def test_a_replacement_goes_out_before_the_other_replies_of_the_same_turn_are_handled(scripted) -> None:  # type: ignore[no-untyped-def]
    """When a wave of replies arrives together, each reply's slot is refilled right after that
    reply is handled, not after the whole wave is: otherwise the waves stay in lockstep and
    each pays the whole wave's turnaround (the client ceiling at 2048 in flight). (When the
    new request's bytes leave: `test_llm_client_scale`.)"""
    wave = 6
    first_wave = threading.Barrier(wave, timeout=10)
    answered = [0]
    lock = threading.Lock()

    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        with lock:
            answered[0] += 1
            in_first_wave = answered[0] <= wave
        if in_first_wave:
            first_wave.wait()  # the first wave's replies all leave at once
        return 200, completion("re:" + body["messages"][-1]["content"])

    server = scripted(handler)
    engine = engine_for(server, structured_outputs="vllm", max_concurrency=wave)
    log: list[str] = []
    send, to_response = engine._send, engine._to_response

    async def logged_send(*args: Any) -> Any:
        log.append("send")
        return await send(*args)

    def logged_to_response(*args: Any, **kwargs: Any) -> Any:
        log.append("handled")
        return to_response(*args, **kwargs)

    engine._send = logged_send  # type: ignore[method-assign]
    engine._to_response = logged_to_response  # type: ignore[method-assign]
    requests = [GenerationRequest.chat(f"q{i}") for i in range(2 * wave)]
    out = engine.generate(requests)
    assert [r.text for r in out] == [f"re:q{i}" for i in range(2 * wave)]
    assert log[:wave] == ["send"] * wave
    # every reply of the first wave is followed at once by the request that takes its slot
    assert log[wave : 3 * wave] == ["handled", "send"] * wave, log
    assert log[3 * wave :] == ["handled"] * wave
    engine.close()


def test_the_pacer_lets_at_most_per_turn_replies_on_in_one_turn_in_arrival_order() -> None:
    """`TurnPacer` on its own: five replies arriving in one turn, two a turn: they pass in
    arrival order, never more than two in a turn of the loop (counted by a callback that
    re-schedules itself every turn)."""

    async def scenario() -> list[tuple[int, int]]:
        loop = asyncio.get_running_loop()
        pacer = TurnPacer(per_turn=2)
        turn = [0]

        def count_turns() -> None:
            turn[0] += 1
            if turn[0] < 50:
                loop.call_soon(count_turns)

        loop.call_soon(count_turns)
        passed: list[tuple[int, int]] = []

        async def reply(i: int) -> None:
            await pacer.wait_turn()
            passed.append((i, turn[0]))

        await asyncio.gather(*(reply(i) for i in range(5)))
        return passed

    passed = asyncio.run(scenario())
    assert [i for i, _ in passed] == [0, 1, 2, 3, 4]
    per_turn = Counter(t for _, t in passed)
    assert max(per_turn.values()) == 2 and len(per_turn) == 3

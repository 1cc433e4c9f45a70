"""The server client at GPU scale: 2048 requests really in flight at once on one event loop
(no thread per request), against the stub server in a process of its own; and the call
cache's grouped writes."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bias_discovery.judging import JudgeSettings, verdict_constraint
from bias_discovery.llm import cache as cache_module
from bias_discovery.llm.base import SequentialEngine
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai import engine as openai_engine
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import GenerationRequest, GenerationResponse

from stub_openai import launch, stats

IN_FLIGHT = 2048


def test_2048_requests_in_flight_on_one_event_loop(tmp_path: Path) -> None:
    """The stub answers nothing until 2048 requests are in flight at once (`--hold-until`): the
    client either holds them all at once or never finishes (it fails at its deadline), however
    long handing them over takes on a loaded machine."""
    verdict = verdict_constraint(JudgeSettings())  # the judge's regex: every reply is checked against it
    requests = [GenerationRequest.chat(f"question {i}", max_tokens=64, constraint=verdict) for i in range(IN_FLIGHT)]
    threads: list[int] = []
    with launch(0.0, "--hold-until", str(IN_FLIGHT)) as (url, _):
        # no constraint probe: a probe alone in flight would be held too
        config = ModelConfig.from_spec(
            "openai/served",
            base_url=url,
            max_concurrency=IN_FLIGHT,
            max_retries=0,
            constraint_probe=False,
            timeout_s=120,
        )
        engine = make_engine(config, cache_path=tmp_path / "calls.sqlite")
        threads_before = threading.active_count()
        out = engine.generate(requests, progress=lambda n: threads.append(threading.active_count()))
        served = stats(url)
        engine.close()
    assert len(out) == IN_FLIGHT
    assert [r.finish_reason for r in out] == ["stop"] * IN_FLIGHT  # no error, every reply passed its check
    assert all(r.text.startswith("Reasoning: ") for r in out)
    # each request once: nothing was retried (max_retries=0); all of them in flight at once
    assert served["requests"] == IN_FLIGHT
    assert served["peak_in_flight"] == IN_FLIGHT, served
    # no thread per request: the event loop's thread and the cache's flush timer at most
    assert max(threads) <= threads_before + 3, (threads_before, max(threads))
    with sqlite3.connect(tmp_path / "calls.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*), MAX(paid) FROM calls").fetchone() == (IN_FLIGHT, 1)


def test_a_replacement_leaves_while_most_of_its_wave_is_still_to_be_handled(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A wave of replies that arrives together is let on `REPLIES_PER_TURN` a turn of the
    loop, so the request that refills a slot leaves (aiohttp writes its body in a task of its
    own, a few turns later) while most of the wave is still to be handled; in lockstep, every
    replacement would wait for the whole wave (the client ceiling at 2048 in flight)."""
    import aiohttp.client_reqrep

    wave, per_turn = 64, 2
    monkeypatch.setattr(openai_engine, "REPLIES_PER_TURN", per_turn)
    log: list[str] = []
    write_bytes = aiohttp.client_reqrep.ClientRequest.write_bytes

    async def logged_write_bytes(*args, **kwargs):  # type: ignore[no-untyped-def]
        log.append("wire")  # the request's bytes go out now
        return await write_bytes(*args, **kwargs)

    monkeypatch.setattr(aiohttp.client_reqrep.ClientRequest, "write_bytes", logged_write_bytes)
    with launch(0.5) as (url, _):  # a wave sent together comes back together
        config = ModelConfig.from_spec(
            "openai/served", base_url=url, max_concurrency=wave, structured_outputs="vllm", max_retries=0
        )
        engine = openai_engine.OpenAIServerEngine(config)
        engine.generate([GenerationRequest.chat(f"warm {i}") for i in range(wave)])  # connections
        to_response = engine._to_response

        def logged_to_response(*args, **kwargs):  # type: ignore[no-untyped-def]
            if "handled" not in log:
                time.sleep(0.2)  # the loop is busy: the rest of the wave is all in at the next turn
            log.append("handled")
            return to_response(*args, **kwargs)

        engine._to_response = logged_to_response  # type: ignore[method-assign]
        log.clear()
        out = engine.generate([GenerationRequest.chat(f"q{i}") for i in range(2 * wave)])
        served = stats(url)
        engine.close()
    assert [r.finish_reason for r in out] == ["stop"] * (2 * wave)
    assert served["requests"] == 3 * wave  # nothing retried
    assert log.count("wire") == 2 * wave and log.count("handled") == 2 * wave
    first_replacement = log.index("handled")
    handled_before_it_left = log[first_replacement:].index("wire")
    assert handled_before_it_left < wave // 2, " ".join(log)


class _Trickle(SequentialEngine):
    """Answers one request every `gap` seconds."""

    def __init__(self, gap: float) -> None:
        super().__init__("trickle")
        self.gap = gap

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        time.sleep(self.gap)
        return GenerationResponse(text="ok " + request.messages[-1].content, finish_reason="stop")


class _ManualTimer:
    """`threading.Timer` that fires only when the test says so (no time passes in the test)."""

    made: list[_ManualTimer] = []

    def __init__(self, interval: float, function) -> None:  # type: ignore[no-untyped-def]
        self.interval, self.function = interval, function
        self.started = self.cancelled = False
        self.daemon = False
        _ManualTimer.made.append(self)

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True


def test_cache_writes_are_grouped_and_committed_within_the_window(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each fresh response starts the group's FLUSH_SECONDS timer, and the timer's firing (not
    the batch's end) commits it: on a timer the test fires by hand, between responses."""
    monkeypatch.setattr(cache_module.threading, "Timer", _ManualTimer)
    _ManualTimer.made.clear()
    path = tmp_path / "calls.sqlite"
    engine = CachedEngine(_Trickle(gap=0.0), path)
    seen: list[tuple[int, int]] = []

    def rows() -> int:
        with sqlite3.connect(path) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def on_progress(n: int) -> None:  # right after each response: waiting for its timer
        before = rows()
        pending = [t for t in _ManualTimer.made if t.started and not t.cancelled]
        assert len(pending) == 1 and pending[0].interval == cache_module.FLUSH_SECONDS
        pending[0].function()  # the timer fires
        seen.append((before, rows()))

    out = engine.generate([GenerationRequest.chat(f"q{i}") for i in range(3)], progress=on_progress)
    engine.close()
    assert [r.text for r in out] == ["ok q0", "ok q1", "ok q2"]
    # each response waited for its timer, and was committed by it while the batch still ran
    assert seen == [(0, 1), (1, 2), (2, 3)]


def test_a_full_group_is_one_transaction(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    commits: list[int] = []

    class _Instant(SequentialEngine):
        def __init__(self) -> None:
            super().__init__("instant")

        def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
            return GenerationResponse(text="ok", finish_reason="stop")

    engine = CachedEngine(_Instant(), tmp_path / "calls.sqlite")
    real_store = engine._store

    def counting_store(items: Sequence) -> None:  # type: ignore[type-arg]
        commits.append(len(items))
        real_store(list(items))

    monkeypatch.setattr(engine, "_store", counting_store)
    n = 2 * cache_module.FLUSH_ROWS + 5
    engine.generate([GenerationRequest.chat(f"q{i}") for i in range(n)])
    # two full groups, then the rest when the batch ended (the final call stores nothing new)
    assert [c for c in commits if c] == [cache_module.FLUSH_ROWS, cache_module.FLUSH_ROWS, 5]
    assert engine.stats()["entries"] == n


def test_frozen_heap_nests_and_always_unfreezes() -> None:
    import gc

    from bias_discovery.llm.aio import BATCH_GC_THRESHOLD, frozen_heap

    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0  # what existed before the block is out of the collector's scans
        assert gc.get_threshold()[0] >= BATCH_GC_THRESHOLD
        made = [{} for _ in range(1000)]  # tracked objects made inside the block
        with frozen_heap():  # a concurrent batch shares the freeze: nothing more is frozen
            # (frozen objects can still be freed by reference counting, so the count may drop)
            assert gc.get_freeze_count() <= frozen
        assert len(made) == 1000
    assert gc.get_freeze_count() == 0  # everything is collectable again
    assert gc.get_threshold() == thresholds
    try:
        with frozen_heap():
            raise RuntimeError("a failed batch")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0

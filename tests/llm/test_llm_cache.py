"""The SQLite call cache: a repeated request is never sent twice."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm.base import Engine, ProgressCallback, SequentialEngine
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.types import Constraint, GenerationRequest, GenerationResponse


class CountingEngine:
    """Echoes the prompt; records every batch it is sent. Prompts starting with "fail"
    come back as errors."""

    def __init__(self, engine_id: str = "fake/echo") -> None:
        self.engine_id = engine_id
        self.batches: list[list[GenerationRequest]] = []
        self.closed = False
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None

    @property
    def sent(self) -> int:
        return sum(len(b) for b in self.batches)

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: ProgressCallback | None = None,
        on_response=None,
    ) -> list[GenerationResponse]:
        """Reports responses one by one only when `crash_after` is set (then dies after N)."""
        with self.lock:
            self.batches.append(list(requests))
        if self.gate is not None:
            self.gate.wait(timeout=10)
        out = []
        for r in requests:
            text = r.messages[-1].content
            if text.startswith("fail"):
                out.append(GenerationResponse(text="boom", finish_reason="error"))
            else:
                out.append(
                    GenerationResponse(
                        text=f"echo:{text}", finish_reason="stop", prompt_tokens=len(text), completion_tokens=3
                    )
                )
            if on_response is not None and self.crash_after is not None:
                if len(out) > self.crash_after:
                    raise RuntimeError("killed mid-batch")
                on_response(len(out) - 1, out[-1])
            if progress:
                progress(1)
        return out

    crash_after: int | None = None

    def submit(self, request: GenerationRequest) -> Future[GenerationResponse]:
        """One request, answered at once as a batch of one."""
        future: Future[GenerationResponse] = Future()
        future.set_result(self.generate([request])[0])
        return future

    def close(self) -> None:
        self.closed = True


def req(text: str, **settings: object) -> GenerationRequest:
    return GenerationRequest.chat(text, **settings)  # type: ignore[arg-type]


def test_fake_engine_satisfies_protocol() -> None:
    assert isinstance(CountingEngine(), Engine)
    assert isinstance(CachedEngine(CountingEngine(), ":memory:"), Engine)


def test_second_identical_batch_sends_nothing(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    batch = [req("one"), req("two"), req("three", max_tokens=7)]
    first = cache.generate(batch)
    assert [r.text for r in first] == ["echo:one", "echo:two", "echo:three"]
    assert not any(r.cached for r in first)
    assert (cache.hits, cache.misses) == (0, 3)

    second = cache.generate(batch)
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second)
    assert [r.prompt_tokens for r in second] == [r.prompt_tokens for r in first]
    assert inner.sent == 3 and len(inner.batches) == 1
    assert (cache.hits, cache.misses) == (3, 3)
    stats = cache.stats()
    assert stats["hits"] == 3 and stats["misses"] == 3 and stats["entries"] == 3
    assert stats["engine_id"] == "fake/echo"


def test_only_misses_are_sent_in_one_batch_in_order(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    cache.generate([req("b")])
    out = cache.generate([req("a"), req("b"), req("c")])
    assert [r.text for r in out] == ["echo:a", "echo:b", "echo:c"]
    assert [r.cached for r in out] == [False, True, False]
    assert [[m.messages[0].content for m in b] for b in inner.batches] == [["b"], ["a", "c"]]


def test_duplicates_inside_a_batch_are_sent_once(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    ticks: list[int] = []
    out = cache.generate([req("x"), req("y"), req("x"), req("x")], progress=ticks.append)
    assert [r.text for r in out] == ["echo:x", "echo:y", "echo:x", "echo:x"]
    assert inner.sent == 2
    assert cache.misses == 2 and cache.deduplicated == 2
    assert sum(ticks) == 4  # progress still counts every request of the batch
    assert len({id(r) for r in out}) == 4  # callers may mutate one without the others


def test_every_setting_is_part_of_the_key(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    variants = [
        req("q"),
        req("q", max_tokens=5),
        req("q", temperature=0.5),
        req("q", seed=1),
        req("q", stop=("\n",)),
        req("q", constraint=Constraint(choices=("A", "B"))),
        req("q", system="be brief"),
    ]
    cache.generate(variants)
    assert inner.sent == len(variants)
    other_model = CachedEngine(CountingEngine("fake/other"), tmp_path / "calls.sqlite")
    other_model.generate([req("q")])
    assert other_model.misses == 1  # another engine id never gets this engine's answers


def test_errors_are_not_cached(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    first = cache.generate([req("fail please"), req("ok")])
    assert [r.finish_reason for r in first] == ["error", "stop"]
    second = cache.generate([req("fail please"), req("ok")])
    assert [r.cached for r in second] == [False, True]
    assert [[m.messages[0].content for m in b] for b in inner.batches] == [
        ["fail please", "ok"],
        ["fail please"],
    ]


def test_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "calls.sqlite"
    first_inner = CountingEngine()
    with CachedEngine(first_inner, path) as cache:
        cache.generate([req("keep me")])
    assert first_inner.closed

    again = CountingEngine()
    reopened = CachedEngine(again, path)
    out = reopened.generate([req("keep me")])
    assert out[0].cached and out[0].text == "echo:keep me"
    assert again.sent == 0
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    reopened.close()
    reopened.close()  # idempotent
    with pytest.raises(EngineError, match="closed"):
        reopened.generate([req("x")])


def test_concurrent_threads_share_one_cache(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    errors: list[BaseException] = []
    results: dict[int, list[str]] = {}

    def worker(n: int) -> None:
        try:
            batch = [req(f"item {i}") for i in range(n * 10, n * 10 + 30)]  # overlapping
            results[n] = [r.text for r in cache.generate(batch)]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    for n, texts in results.items():
        assert texts == [f"echo:item {i}" for i in range(n * 10, n * 10 + 30)]
    distinct = 7 * 10 + 30
    assert inner.sent == distinct  # no request was sent twice, even across threads
    assert cache.stats()["entries"] == distinct
    assert cache.hits + cache.misses + cache.deduplicated == 8 * 30
    assert cache.misses == distinct


def test_in_flight_request_is_awaited_not_resent(tmp_path: Path) -> None:
    inner = CountingEngine()
    inner.gate = threading.Event()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    out: list[GenerationResponse] = []
    first = threading.Thread(target=lambda: cache.generate([req("slow")]))
    first.start()
    while not inner.batches:  # the first thread is inside the engine now
        threading.Event().wait(0.01)
    second = threading.Thread(target=lambda: out.extend(cache.generate([req("slow")])))
    second.start()
    threading.Event().wait(0.1)
    inner.gate.set()
    first.join(timeout=10)
    second.join(timeout=10)
    assert inner.sent == 1
    assert out[0].text == "echo:slow" and out[0].cached
    assert (cache.hits, cache.misses) == (1, 1)


def test_unusable_cache_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "calls.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(EngineError, match="calls.sqlite"):
        CachedEngine(CountingEngine(), bad)


def test_responses_are_stored_as_they_arrive_so_a_crash_mid_batch_loses_nothing(tmp_path) -> None:
    """A batch that dies after 3 responses keeps those 3; the retry sends only the other 2."""
    import sqlite3

    path = tmp_path / "calls.sqlite"
    dying = CountingEngine()
    dying.crash_after = 3
    batch = [req(f"q{i}") for i in range(5)]
    with pytest.raises(RuntimeError):
        CachedEngine(dying, path).generate(batch)
    healthy = CountingEngine()
    cached = CachedEngine(healthy, path)
    out = cached.generate(batch)
    assert [r.text for r in out] == [f"echo:q{i}" for i in range(5)]
    assert [r.messages[-1].content for r in healthy.batches[0]] == ["q3", "q4"]
    assert cached.hits == 3 and cached.misses == 2
    with sqlite3.connect(path) as conn:
        assert [row[0] for row in conn.execute("SELECT paid FROM calls")] == [1] * 5


# -- requests submitted one by one ------------------------------------------------------------


def test_a_submission_is_looked_up_sent_alone_and_stored(tmp_path: Path) -> None:
    inner = CountingEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    cache.generate([req("known")])
    hit, miss = cache.submit(req("known")).result(timeout=10), cache.submit(req("new")).result(timeout=10)
    assert hit.cached and not miss.cached and miss.text == "echo:new"
    assert [[r.messages[0].content for r in b] for b in inner.batches] == [["known"], ["new"]]
    cache.close()  # commits what the submissions left
    again = CachedEngine(CountingEngine(), tmp_path / "calls.sqlite")
    assert again.submit(req("new")).result(timeout=10).cached


class HeldEngine(SequentialEngine):
    """Echoes; each request waits until `release` is set."""

    thread_safe = True

    def __init__(self) -> None:
        super().__init__("fake/held")
        self.release = threading.Event()
        self.sent: list[str] = []

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        self.release.wait(timeout=10)
        self.sent.append(request.messages[-1].content)
        text = request.messages[-1].content
        if text.startswith("fail"):
            return GenerationResponse(text="boom", finish_reason="error")
        return GenerationResponse(text=f"echo:{text}", finish_reason="stop")


def test_a_copy_submitted_while_the_first_is_in_flight_or_uncommitted_is_not_paid_again(tmp_path: Path) -> None:
    """A copy asked while the request is in flight, or after its response came but before its
    group was committed, is answered from the claim; the call is paid once."""
    inner = HeldEngine()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    first = cache.submit(req("q"))
    copy = cache.submit(req("q"))  # in flight
    inner.release.set()
    assert first.result(timeout=10).text == copy.result(timeout=10).text == "echo:q"
    late = cache.submit(req("q")).result(timeout=10)  # within FLUSH_SECONDS: from the claim or the file
    batch = cache.generate([req("q")])  # a batch of another caller waits on the claim too
    assert late.cached and batch[0].cached and not first.result().cached and copy.result().cached
    assert inner.sent == ["q"] and (cache.misses, cache.hits) == (1, 3)
    cache.close()
    with sqlite3.connect(tmp_path / "calls.sqlite") as conn:
        assert conn.execute("SELECT paid FROM calls").fetchall() == [(1,)]


def test_a_submitted_error_is_not_stored_and_its_copy_is_sent_again(tmp_path: Path) -> None:
    inner = HeldEngine()
    inner.release.set()
    cache = CachedEngine(inner, tmp_path / "calls.sqlite")
    assert cache.submit(req("fail me")).result(timeout=10).finish_reason == "error"
    assert cache.submit(req("fail me")).result(timeout=10).finish_reason == "error"
    assert inner.sent == ["fail me", "fail me"] and cache.stats()["entries"] == 0

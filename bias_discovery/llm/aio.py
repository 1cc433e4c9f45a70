"""The process's one asyncio event loop, for engines that talk to servers.

Why one loop in one background thread: a synchronous caller (a stage handing over its batch)
must be able to keep thousands of requests in flight without a thread per request (at 1000+
threads the thread-per-request client spent most of its time in the HTTP pool's bookkeeping
and stalled). The loop runs coroutines for every engine of the process; callers submit work
with `submit` (a `concurrent.futures.Future`, usable from any thread) or `run_sync` (wait
for the result). Code already running on the loop awaits the coroutines directly.

The loop thread is a daemon: it never keeps the process alive, and a forked child starts
its own loop on first use (a loop does not survive a fork). At exit it is stopped and joined
(`shutdown`), so it is never running while the interpreter finalizes.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = [
    "FREEZE_HEAP_FROM",
    "ensure_open_files",
    "frozen_heap",
    "loop_kind",
    "new_event_loop",
    "on_loop_thread",
    "run_sync",
    "shared_loop",
    "shutdown",
    "submit",
]

_T = TypeVar("_T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (a faster implementation of the same loop), else
    asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return, unused-ignore]  # typed where uvloop is installed


def loop_kind() -> str:
    """Which loop `new_event_loop` makes ("uvloop" or "asyncio"), for benchmark reports."""
    loop = new_event_loop()
    try:
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    finally:
        loop.close()


def shared_loop() -> asyncio.AbstractEventLoop:
    """The running background loop, started on first use (again in a forked child)."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
            loop = new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                try:
                    loop.run_forever()
                finally:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                    loop.close()

            thread = threading.Thread(target=run, name="bias-discovery-io", daemon=True)
            thread.start()
            ready.wait()
            if _pid is None:
                atexit.register(shutdown)
            _loop, _thread, _pid = loop, thread, os.getpid()
        return _loop


def shutdown(timeout: float = 5.0) -> None:
    """Stop the shared loop and wait for its thread (idempotent; registered with atexit).

    Why: a loop left running in its daemon thread while the interpreter finalizes may be woken
    (a timer, a socket) after the objects it uses were torn down, or have its uvloop handles
    freed from the main thread while its own thread is inside libuv; either can crash the
    process after a run has finished. Pending tasks are cancelled first."""
    global _loop, _thread
    with _lock:
        loop, thread = _loop, _thread
        _loop = _thread = None
    if loop is None or thread is None or not thread.is_alive() or _pid != os.getpid():
        return

    async def cancel_pending() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(cancel_pending(), loop).result(timeout)
    except Exception:  # noqa: BLE001 - a stuck task must not keep the process from ending
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)


def on_loop_thread() -> bool:
    """True inside the background loop's thread (where waiting on the loop would deadlock)."""
    return _thread is not None and threading.current_thread() is _thread


def submit(coro: Coroutine[Any, Any, _T]) -> Future[_T]:
    """Schedule `coro` on the shared loop; its result (or exception) arrives in the Future.
    Cancelling the Future cancels the coroutine."""
    return asyncio.run_coroutine_threadsafe(coro, shared_loop())


def run_sync(coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
    """Run `coro` on the shared loop and wait for its result in this thread (at most
    `timeout` seconds: then TimeoutError, and the coroutine is cancelled)."""
    if on_loop_thread():
        coro.close()
        raise RuntimeError("run_sync called on the event loop's own thread: await the coroutine instead")
    future = submit(coro)
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()  # Ctrl-C while waiting: stop the work too
        raise


def ensure_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files towards `needed` (each request in flight
    holds a socket; the common default soft limit, 1024, is below a GPU server's 2048 in
    flight). Never above the hard limit; a no-op where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


_frozen_lock = threading.Lock()
_frozen_depth = 0
_thresholds: tuple[int, ...] = gc.get_threshold()
FREEZE_HEAP_FROM = 256
"""Batches of at least this many requests run under `frozen_heap` (the server engine's, and
the call cache's around it)."""
BATCH_GC_THRESHOLD = 20_000
"""Allocations between young-generation collections inside `frozen_heap` (CPython's default:
700). Measured on 8192 requests at 2048 in flight: ~1000 young collections at 700, each
promoting the objects of the requests in flight towards the full passes; ~125 at 20000, and
the collector's time per batch fell from ~2 s to ~0.25 s."""


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects that exist now out of the garbage collector's scans until the block
    ends (`gc.freeze`, then `gc.unfreeze`: nothing is kept from collection for good).

    Why: thousands of requests in flight keep many objects alive across collections, so the
    collector's full (oldest-generation) pass runs every second or so, and each pass scans the
    whole heap: with a run's models and data loaded, most of the client's time went there
    (measured: 3.5-5 s of a 10 s batch of 8192 requests at 2048 in flight, in a heap of 175k
    objects). Frozen, a pass scans only the batch's own objects; and young collections run
    every `BATCH_GC_THRESHOLD` allocations instead of 700. Nested and concurrent blocks share
    one freeze."""
    global _frozen_depth, _thresholds
    with _frozen_lock:
        _frozen_depth += 1
        if _frozen_depth == 1:
            gc.freeze()
            _thresholds = gc.get_threshold()
            gc.set_threshold(max(_thresholds[0], BATCH_GC_THRESHOLD), *_thresholds[1:])
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_depth -= 1
            if _frozen_depth == 0:
                gc.set_threshold(*_thresholds)
                gc.unfreeze()

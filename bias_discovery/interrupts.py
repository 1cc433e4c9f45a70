"""Ctrl-C that is never lost.

Python runs a signal's handler in the main thread at the next bytecode it executes, wherever
that is. When that is a weakref callback or a `__del__` (asyncio frees its finished tasks from a
WeakSet; the garbage collector runs callbacks at any allocation), the KeyboardInterrupt the
handler raises is "ignored" there: printed as "Exception ignored in: ..." through
`sys.unraisablehook`, and the run went on to finish with exit code 0 (seen in the Ctrl-C test,
1 trial in 30 with the signal sent at a random moment). `redeliver_lost_interrupts` sends such a
swallowed SIGINT again, once the main thread has left the callback, so the user's Ctrl-C always
arrives: the run stops, and the CLI says how to resume. Only a KeyboardInterrupt that was
swallowed is sent again, so a graceful stop in progress (asyncio's cancellation of a stream, the
engines closing) is never interrupted a second time.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["REDELIVER_AFTER_S", "redeliver_lost_interrupts"]

REDELIVER_AFTER_S = 0.01
"""How long the resender waits: the main thread must first leave the callback that swallowed
the interrupt (a signal delivered inside it would be lost the same way)."""

_lock = threading.Lock()
_depth = 0
_previous_hook: Any = None


def _resend() -> None:
    threading.Event().wait(REDELIVER_AFTER_S)
    if hasattr(signal, "pthread_kill"):  # wakes the main thread from a blocking call too
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    else:  # pragma: no cover - not POSIX
        import _thread

        _thread.interrupt_main()


def _hook(unraisable: Any) -> None:
    """`sys.unraisablehook`: a swallowed KeyboardInterrupt is sent again (not printed: it is
    about to arrive); any other unraisable exception goes to the hook that was there before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        threading.Thread(target=_resend, name="interrupt-resend", daemon=True).start()
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


@contextmanager
def redeliver_lost_interrupts() -> Iterator[None]:
    """While inside, a KeyboardInterrupt swallowed by a callback or finalizer is raised again in
    the main thread. Nests; a no-op outside the main thread (signals go to the main thread)."""
    global _depth, _previous_hook
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        if _depth == 0:
            _previous_hook, sys.unraisablehook = sys.unraisablehook, _hook
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if sys.unraisablehook is _hook:
                    sys.unraisablehook = _previous_hook
                _previous_hook = None

"""A Ctrl-C that lands in a finalizer or a weakref callback is not lost (bias_discovery.interrupts).
The whole-process check is tests/test_exit_codes.py's Ctrl-C test."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import pytest

from bias_discovery.interrupts import redeliver_lost_interrupts


class _SwallowsAnInterrupt:
    """Raises KeyboardInterrupt when freed: Python prints it as "Exception ignored" and goes on,
    as it does when SIGINT's handler runs inside asyncio's WeakSet callback."""

    def __del__(self) -> None:
        raise KeyboardInterrupt


def _wait(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_swallowed_keyboard_interrupt_arrives_again_in_the_main_thread() -> None:
    assert threading.current_thread() is threading.main_thread()
    before = sys.unraisablehook
    # Python's own SIGINT handler: a shell's background job (`pytest ... &`) starts with SIGINT ignored
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # lost: the wait ends and nothing is raised
            with redeliver_lost_interrupts():
                _SwallowsAnInterrupt()  # freed at once: its KeyboardInterrupt is swallowed
                _wait(30)  # a hang guard: the interrupt arrives in milliseconds
    finally:
        signal.signal(signal.SIGINT, handler)
    assert sys.unraisablehook is before  # the hook is put back, on the way out of an interrupt too


def test_other_unraisable_exceptions_go_to_the_hook_that_was_there_and_nesting_keeps_it() -> None:
    seen: list[Any] = []
    before = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:

        class RaisesValueError:
            def __del__(self) -> None:
                raise ValueError("in a finalizer")

        with redeliver_lost_interrupts():
            with redeliver_lost_interrupts():
                RaisesValueError()
            assert sys.unraisablehook is not seen.append  # the outer one still holds it
        assert sys.unraisablehook == seen.append
    finally:
        sys.unraisablehook = before
    assert [type(u.exc_value) for u in seen] == [ValueError]


def test_outside_the_main_thread_it_changes_nothing() -> None:
    hooks: list[Any] = []

    def inside() -> None:
        with redeliver_lost_interrupts():
            hooks.append(sys.unraisablehook)

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert hooks == [sys.unraisablehook]

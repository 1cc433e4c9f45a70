"""Progress reporting: a factory of progress bars that the CLI passes to the loop and the exports.

A `ProgressFactory` is called with a description and a total (None when the total is not known
up front) and gives a context manager yielding an increment callback. Library code takes a
factory instead of drawing bars itself, so it stays free of the terminal (and of rich);
`quiet_progress` is the factory that shows nothing, `progress_bar` the CLI's rich bar with ETA
on stderr (stdout stays machine-readable). Libraries that draw bars of their own while loading
a model are silenced where the model is loaded (`no_library_bars`).

`show_wait` is how the model layer says what it is waiting on ("waiting on http://...: 45 s,
attempt 2/5") while a server is slow or hung: the innermost open `progress_bar` shows it next
to its description until it is cleared. It is a process-wide channel rather than a method
of the increment callback, because the callback passes through wrappers (meter, call cache,
stage bookkeeping) that each wrap it in a function of their own.

`current_stage` names the step the process is in: every progress bar a factory opens through
`progress_or_quiet` (or `progress_bar`) names it by its description while it is open, shown or
quiet. The model layer puts it in the log line it writes while a request waits long ("still
waiting on URL (stage: iter 1 evaluate (baseline), ...): 60 s"), which a bar never replaces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

ProgressCallback = Callable[[int], None]
"""Called with the number of requests finished since the last call (an increment)."""

ProgressFactory = Callable[[str, "int | None"], AbstractContextManager[ProgressCallback]]
"""`(description, total) -> context manager yielding an increment callback`."""


WaitDisplay = Callable[["str | None"], None]
"""Shows a wait note (None: clears it)."""

_wait_displays: list[WaitDisplay] = []
_wait_lock = threading.Lock()


class _Stage:
    """One open stage (compared by identity: two bars may share a description)."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label


_stages: list[_Stage] = []


@contextmanager
def stage(label: str) -> Iterator[None]:
    """Name the stage the process is in while the block runs (stages nest: the innermost wins)."""
    entry = _Stage(label)
    with _wait_lock:
        _stages.append(entry)
    try:
        yield
    finally:
        with _wait_lock:
            _stages[:] = [s for s in _stages if s is not entry]


def current_stage() -> str | None:
    """The innermost open stage's name (None outside every stage)."""
    with _wait_lock:
        return _stages[-1].label if _stages else None


def show_wait(note: str | None) -> None:
    """Show `note` on the innermost open progress bar (None clears it); nothing when no bar
    is open (quiet)."""
    with _wait_lock:
        display = _wait_displays[-1] if _wait_displays else None
    if display is not None:
        display(note)


@contextmanager
def wait_display(display: WaitDisplay) -> Iterator[None]:
    """Route `show_wait` notes to `display` while the block runs (bars nest: the innermost wins)."""
    with _wait_lock:
        _wait_displays.append(display)
    try:
        yield
    finally:
        with _wait_lock:
            _wait_displays.remove(display)


def quiet_progress(description: str, total: int | None) -> AbstractContextManager[ProgressCallback]:
    """A factory that reports nothing."""
    return nullcontext(lambda n: None)


def progress_or_quiet(progress: ProgressFactory | None) -> ProgressFactory:
    """`progress` (or the quiet factory) with every bar it opens named as the current stage."""
    factory = progress or quiet_progress

    @contextmanager
    def staged(description: str, total: int | None) -> Iterator[ProgressCallback]:
        with stage(description), factory(description, total) as advance:
            yield advance

    return staged


@contextmanager
def no_library_bars() -> Iterator[None]:
    """Load a model without the tqdm bars of transformers and huggingface_hub (transformers
    draws "Loading weights" for every model it loads, sentence-transformers' too): a foreign
    bar on stderr breaks our own progress lines. Their setting is restored afterwards."""
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[ProgressCallback]:
    """A rich progress bar on stderr; `total=None` shows a running count without an ETA ("3/?"),
    so a step whose total can be known opens its bar once it is (merge: one step per round)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int) -> None:
            bar.advance(task, n)

        def note(text: str | None) -> None:
            shown = description if text is None else f"{description} [yellow]({escape(text)})[/]"
            bar.update(task, description=shown)

        with wait_display(note), stage(description):
            yield advance

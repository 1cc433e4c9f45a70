"""Progress reporting: a factory of progress bars that the CLI passes to the loop and the exports.

A `ProgressFactory` is called with a description and a total (None when the total is not known
up front) and gives a context manager yielding an increment callback. Library code takes a
factory instead of drawing bars itself, so it stays free of the terminal (and of rich);
`quiet_progress` is the factory that shows nothing, `progress_bar` the CLI's rich bar with ETA
on stderr (stdout stays machine-readable). Libraries that draw bars of their own while loading
a model are silenced where the model is loaded (`no_library_bars`).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterator

ProgressCallback = Callable[[int], None]
"""Called with the number of requests finished since the last call (an increment)."""

ProgressFactory = Callable[[str, "int | None"], ContextManager[ProgressCallback]]
"""`(description, total) -> context manager yielding an increment callback`."""


def quiet_progress(description: str, total: int | None) -> ContextManager[ProgressCallback]:
    """A factory that reports nothing."""
    return nullcontext(lambda n: None)


def progress_or_quiet(progress: ProgressFactory | None) -> ProgressFactory:
    return progress or quiet_progress


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

        yield advance

"""What a running loop records about itself: run.json (where it stands), the stage events of
events.jsonl (start, end, calls and tokens per role) and the progress of every step (bars and
progress events, counted on from where a resumed step stopped)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from ..errors import DataError
from ..llm.roles import ModelRoles
from ..progress import ProgressCallback, ProgressFactory, progress_or_quiet
from ..run import RunBusyError, RunDir, RunState
from ..stages.streamed import Opener

StepKey = tuple[int, str, str | None, int | None]
"""(iteration, stage, step name, total) of one progress step."""

log = logging.getLogger(__name__)
"""Each stage's start and end, with its calls per role, at INFO (`bias-discovery --verbose`)."""


def counts_so_far(events: list[dict[str, Any]]) -> dict[StepKey, int]:
    """The last count each step logged (events.jsonl): where a resumed step starts from."""
    counts: dict[StepKey, int] = {}
    for e in events:
        if isinstance(e, dict) and e.get("event") == "progress" and isinstance(e.get("done"), int):
            counts[(e.get("iteration"), e.get("stage"), e.get("step"), e.get("total"))] = e["done"]  # type: ignore[index]
    return counts


def state_or_none(run: RunDir) -> RunState | None:
    """run.json, or None when it is absent or damaged: it only reports where the run stands (the
    checkpoints and the iteration files are the record), so the loop writes a fresh one."""
    try:
        return run.read_state()
    except DataError as exc:
        run.event("repaired", what=f"{exc}; run.json is written anew")
        return None


class StageProgress:
    """One stage of one iteration as it runs: its steps log progress events (what `status` and
    the viewer read) and show a bar through the progress factory, each with the total it will
    really do (known only once the previous step is done, e.g. invalid rewrites are not judged).

    A resumed step starts from the count it had logged (`carried`), not from 0: its calls are
    answered by the call cache, but only once its engine is loaded and asked; until then the bar
    and `status` would show 0. The count shown is the larger of the two, so nothing is counted
    twice."""

    def __init__(
        self,
        run: RunDir,
        progress: ProgressFactory,
        stage: str,
        iteration: int,
        carried: Mapping[StepKey, int],
        spend_note: Callable[[], str] = lambda: "",
    ) -> None:
        self.spend_note = spend_note
        self.run = run
        self.progress = progress
        self.stage = stage
        self.iteration = iteration
        self.carried = carried

    @contextmanager
    def step(self, total: int | None, name: str | None = None) -> Iterator[ProgressCallback]:
        label = f"iter {self.iteration} {self.stage}" + (f" ({name})" if name else "") + self.spend_note()
        carried = self.carried.get((self.iteration, self.stage, name, total), 0)
        done = shown = logged = 0
        last = 0.0
        fields: dict[str, Any] = {"step": name} if name else {}

        def log_count(count: int) -> None:
            nonlocal last, logged
            last, logged = time.time(), count
            self.run.event("progress", iteration=self.iteration, stage=self.stage, done=count, total=total, **fields)

        with self.progress(label, total) as advance:

            def on_progress(n: int) -> None:
                nonlocal done, shown
                done += n
                count = max(done, carried)
                if count > shown:
                    advance(count - shown)
                    shown = count
                if time.time() - last > 2.0 or (total is not None and count >= total):
                    log_count(count)

            if carried:
                on_progress(0)
            try:
                yield on_progress
            finally:  # a step stopped (a budget, an error) says where it stood, not where it was 2 s before
                if shown > logged:
                    log_count(shown)

    def factory(self) -> ProgressFactory:
        """This stage as a progress factory, for code that opens its own steps (validation)."""
        return lambda name, total: self.step(total, name)


class RunBook:
    """The loop's records of itself (module docstring): run.json, stage events with the calls
    and tokens each role made in the stage, and progress."""

    def __init__(self, run: RunDir, name: str, roles: ModelRoles, progress: ProgressFactory | None = None) -> None:
        self.run = run
        self.name = name
        self.roles = roles
        self.progress = progress_or_quiet(progress)
        self.carried: dict[StepKey, int] = {}
        """Counts a resumed run's steps start from (`counts_so_far`); empty on a fresh run."""

    def update_state(self, **fields: Any) -> None:
        if self.run.lock.lost:
            raise RunBusyError(
                f"{self.run.root}: another process took this run over (it found this one's heartbeat stale); "
                "this one stops here"
            )
        state = state_or_none(self.run)
        if state is None:
            now = time.time()
            state = RunState(name=self.name, status="running", started_at=now, updated_at=now)
        self.run.write_state(state.model_copy(update=fields))

    def record_spend(self, **fields: Any) -> None:
        """Write what each role paid so far (the budget's ledger) into run.json, with `fields`."""
        if self.roles.budget is not None:
            fields["spend"] = self.roles.budget.spend()
        if fields:
            self.update_state(**fields)

    def spend_note(self) -> str:
        """ " ($1.23 spent)" for a progress bar's label: the run's spend so far, when it has a price or a budget."""
        budget = self.roles.budget
        if budget is None or not (budget.settings.is_set() or any(budget.prices.values())):
            return ""
        total = budget.total()
        return f" (${total.usd:,.2f}, {total.calls:,} calls paid)"

    @contextmanager
    def stage(self, name: str, iteration: int, total: int | None) -> Iterator[StageProgress]:
        """Book calls to `name` and log its start and end (with calls and tokens per role).
        Calls made through `roles[role].booked_to(name)` are booked to it too, whenever they
        are made (a streamed stage's calls start before its bar does)."""
        self.roles.set_stage(name)
        self.update_state(stage=name, iteration=iteration, status="running", budget_limit=None)
        self.run.event("stage_start", iteration=iteration, stage=name, total=total)
        log.info("iteration %d: %s started (%s items)", iteration, name, "?" if total is None else total)
        started = time.time()
        try:
            yield StageProgress(self.run, self.progress, name, iteration, self.carried, self.spend_note)
        except Exception as exc:  # the calls it paid before it stopped still count (`status`'s table)
            usage = {role: u.model_dump() for role, u in self.roles.take_usage(name).items()}
            self.run.event("stage_stopped", iteration=iteration, stage=name, reason=str(exc)[:500], usage=usage)
            raise
        usage = {role: u.model_dump() for role, u in self.roles.take_usage(name).items()}
        self.record_spend()
        seconds = round(time.time() - started, 2)
        self.run.event("stage_end", iteration=iteration, stage=name, total=total, seconds=seconds, usage=usage)
        calls = ", ".join(f"{role} {u['requests']} ({u['cached']} cached)" for role, u in usage.items()) or "none"
        log.info("iteration %d: %s done in %.1f s (calls: %s)", iteration, name, seconds, calls)

    @contextmanager
    def single_step(self, name: str, iteration: int, total: int) -> Iterator[ProgressCallback]:
        """A stage of one progress step (`stage`, then its step): perturb, evaluate, ..."""
        with self.stage(name, iteration, total) as stage, stage.step(total) as progress:
            yield progress

    def stage_steps(self, name: str, iteration: int, steps: Sequence[str]) -> list[tuple[str, Opener]]:
        """The steps of stage `name` as a `StepChain` opens them one after another: the first
        starts the stage (`stage`), each is a step of it, the last one's end ends the stage."""
        held = ExitStack()
        current: list[StageProgress] = []

        @contextmanager
        def opened(step: str, total: int) -> Iterator[ProgressCallback]:
            if step == steps[0]:
                current.append(held.enter_context(self.stage(name, iteration, None)))
            try:
                with current[-1].step(total, step) as progress:
                    yield progress
            except Exception as exc:  # the stage stops with its step (`stage` books what it paid)
                held.__exit__(type(exc), exc, exc.__traceback__)
                raise
            if step == steps[-1]:
                held.close()

        return [(step, functools.partial(opened, step)) for step in steps]

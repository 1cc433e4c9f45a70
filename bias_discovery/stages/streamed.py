"""Streamed stages: the batch stages' own per-item steps, composed item by item.

In the staged order each stage waits for the whole batch of the stage before it, so with a
target server and a teacher server one idles while the other works, and every stage ends on
a tail that leaves most of a server's batch empty. Here every item flows on as soon as its
own step is done: a rewrite goes to the judge the moment the teacher returns it, a misjudged
pair goes on to the target's deeper explanation and the teacher's identification without
waiting for the others (`stream_front_half`); in validation and the placebo each rewrite is
checked and judged as soon as it exists (`stream_rewrites`), and the baseline is judged while
the placebo's rewrites are made (`stream_baseline_and_placebo`). The requests are the staged
order's, built by the same functions, and every record is made by the same function from the
same response, so the outputs are the staged order's, in the staged order (assembled by item
index at the end): with the call cache's answers, byte for byte the same files.

The requests go out through `Engine.submit` and are awaited on an event loop of this
thread's own (`run`); each step's progress is counted as its responses arrive and shown by a
`StepChain`: one bar at a time, each opened with its true total once that is known (the
judge's total once every rewrite is back) and the step before it is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..config import ExplainSettings, IdentifySettings, MisjudgmentCheckSettings, PerturbSettings
from ..data.pairs import PreferencePair
from ..judging import JudgeResult, Judgment, PairOutcome, build_tasks, calls_per_pair, judge_pair
from ..library import Bias
from ..llm.aio import frozen_heap
from ..llm.base import Engine, ask, flush
from ..llm.types import GenerationRequest, GenerationResponse
from ..progress import ProgressCallback
from ..settings.judge import JudgeSettings
from .evaluate import misjudged_case
from .explain import build_explain_request, explained_case
from .identify import (
    confirm_request,
    identify_attempt,
    identify_record,
    parse_identify_reply,
    screened,
    with_confirmation,
)
from .perturb import build_neutral_request, build_perturb_request, neutral_record, perturbed_record
from .records import IdentifyRecord, MisjudgedCase, PerturbedPair
from .rewrite_checks import (
    check_calls,
    extracted_update,
    length_allowance,
    misjudgment_checked,
    model_checked,
    original_check_request,
    rewrite_check_request,
)

__all__ = [
    "FrontHalf",
    "FrontHalfEngines",
    "Opener",
    "StepChain",
    "Rewrites",
    "run",
    "stream_baseline_and_placebo",
    "stream_front_half",
    "stream_rewrites",
]

_T = TypeVar("_T")

Opener = Callable[[int], AbstractContextManager[ProgressCallback]]
"""Opens one step's progress (its bar, its events) given the step's total."""

PERTURB, EVALUATE, CHECK, EXPLAIN, IDENTIFY = "perturb", "evaluate", "check", "deeper_explain", "identify"
"""The stages of an iteration's front half (the staged loop's node names; `check`, the
misjudgment check, is a step of the staged evaluate node)."""


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """Run a stream's coroutine to its end on an event loop of its own, in this thread (a
    thread that already runs a loop, e.g. a notebook's, hands it to a fresh thread), with the
    heap that was there before it left out of the garbage collector's scans (`aio.frozen_heap`:
    thousands of requests in flight made the collector's passes most of the client's time,
    as in a large batch; measured with the call cache against an instant stub, 8192 requests
    at 2048 in flight: 0.77 ms of CPU per request without, 0.33 with)."""
    with frozen_heap():
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(main)
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stream") as pool:
            return pool.submit(asyncio.run, main).result()


class StepChain:
    """The progress of a stream's steps, shown one at a time, in order.

    A step counts its calls from the first (`count`); it opens (its `Opener`, with the true
    total, advanced by what it counted so far) once its total is known (`set_total`) and every
    step before it is done, and closes once it is done (`finish`: all its work, retries
    included). A step done before the one ahead of it (the placebo's rewrites before the
    baseline) opens and closes in its turn. So one bar at a time shows every step's true
    total. Used on one event loop only.
    """

    def __init__(self, steps: Sequence[tuple[str, Opener]]) -> None:
        self._order = [name for name, _ in steps]
        self._openers = dict(steps)
        self._counted = dict.fromkeys(self._order, 0)
        self._totals: dict[str, int] = {}
        self._finished: set[str] = set()
        self._head = 0
        self._open: tuple[str, AbstractContextManager[ProgressCallback], ProgressCallback] | None = None

    def count(self, name: str, n: int = 1) -> None:
        self._counted[name] += n
        if self._open is not None and self._open[0] == name:
            self._open[2](n)

    def set_total(self, name: str, total: int) -> None:
        self._totals[name] = total
        self._catch_up()

    def finish(self, name: str) -> None:
        if name not in self._totals:
            raise ValueError(f"step {name!r} finished before its total was known")
        self._finished.add(name)
        self._catch_up()

    def _catch_up(self) -> None:
        while self._head < len(self._order):
            name = self._order[self._head]
            if self._open is None:
                if name not in self._totals:
                    return
                manager = self._openers[name](self._totals[name])
                advance = manager.__enter__()
                self._open = (name, manager, advance)
                if self._counted[name]:
                    advance(self._counted[name])
            if name not in self._finished:
                return
            self._close(None)
            self._head += 1

    def _close(self, exc: BaseException | None) -> None:
        if self._open is not None:
            _, manager, _ = self._open
            self._open = None
            manager.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    def __enter__(self) -> StepChain:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        """A stream that fails closes the step that is open (with the error)."""
        self._close(exc)


class _Passes:
    """When every item has gone through a step (done it or skipped it): `on_complete(step)`."""

    def __init__(self, n_items: int, steps: Sequence[str], on_complete: Callable[[str], None]) -> None:
        self._left = dict.fromkeys(steps, n_items)
        self._on_complete = on_complete
        if n_items == 0:
            for step in steps:
                on_complete(step)

    def through(self, step: str) -> None:
        self._left[step] -= 1
        if self._left[step] == 0:
            self._on_complete(step)


class _Asker:
    """One step's way to its engine. A request the step has already asked is not sent again:
    its copies share the first one's response (cache hit or not), as the copies of a request in
    one batch share one call (the call cache sends it once), so the records, `cached` flags
    included, are the staged order's. Each response is counted as progress for each asker,
    as a batch counts each copy; `once` counts a shared request once (the checker's control
    question, asked once per pair in a batch)."""

    def __init__(self, engine: Engine, chain: StepChain, step: str) -> None:
        self.engine = engine
        self.chain = chain
        self.step = step
        self._asked: dict[str, asyncio.Future[GenerationResponse]] = {}

    async def __call__(
        self, request: GenerationRequest, *, counted: bool = True, once: bool = False
    ) -> GenerationResponse:
        key = request.content_hash(self.engine.engine_id)
        first = key not in self._asked
        if first:
            self._asked[key] = asyncio.ensure_future(ask(self.engine, request))
        response = await self._asked[key]
        if counted and (first or not once):
            self.chain.count(self.step)
        return response


async def _judged(
    asker: _Asker, pair: PreferencePair, settings: JudgeSettings, seed: int
) -> tuple[list[Judgment], PairOutcome]:
    """One pair judged: its calls at once, its judgments and outcome as `judge_pairs` makes them."""
    tasks = build_tasks([pair], settings, seed=seed)
    responses = await asyncio.gather(*(asker(t.request) for t in tasks))
    return judge_pair(pair, list(zip(tasks, responses)), settings)


async def _gather_all(flows: Sequence[Awaitable[Any]], askers: Sequence[_Asker]) -> None:
    """Run every item's flow; the first failure cancels the rest (and waits for them) and is
    raised. (asyncio.TaskGroup does this from Python 3.11; the package runs on 3.10.) Either
    way, the responses that arrived are committed before this returns (`llm.base.flush`), as
    at the end of a batch."""
    tasks = [asyncio.ensure_future(flow) for flow in flows]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        for asker in askers:
            flush(asker.engine)


# --------------------------------------------------------------------------------------------
# The front half of an iteration: perturb -> evaluate -> deeper_explain -> identify
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrontHalfEngines:
    """The engine of each stage (the teacher perturbs and identifies, the target judges and
    explains, the checker checks the misjudged pairs' answers), each booking its calls to its
    stage."""

    perturb: Engine
    evaluate: Engine
    explain: Engine
    identify: Engine
    check: Engine | None = None
    """None: no answer check of the misjudged pairs (their length is still checked when
    `misjudgment_check.enabled`)."""


@dataclass
class FrontHalf:
    """What the staged nodes write: perturbed.jsonl, judgments.jsonl, misjudged.jsonl,
    explanations.jsonl, identified.jsonl."""

    perturbed: list[PerturbedPair]
    result: JudgeResult
    cases: list[MisjudgedCase]
    """Every misjudged pair, with its misjudgment check (the excluded ones too)."""
    explained: list[MisjudgedCase]
    """The cases that count (not excluded), after DeeperExplain."""
    identified: list[IdentifyRecord]


def stream_front_half(
    engines: FrontHalfEngines,
    items: Sequence[tuple[PreferencePair, Bias]],
    *,
    perturb: PerturbSettings,
    judge: JudgeSettings,
    explain: ExplainSettings,
    identify: IdentifySettings,
    seed: int,
    steps: Mapping[str, Opener],
    check: MisjudgmentCheckSettings | None = None,
) -> FrontHalf:
    """Perturb every (pair, bias) item, judge each valid rewrite, check each misjudged one
    (`check.enabled`: `evaluate.check_misjudged`'s check), explain (when `explain.enabled`) and
    identify each that counts, item by item (module docstring). `steps`: the progress of each
    stage (`PERTURB`, `EVALUATE`, `CHECK`, `EXPLAIN`, `IDENTIFY`)."""
    check = check or MisjudgmentCheckSettings(enabled=False)
    order = [PERTURB, EVALUATE, *([CHECK] if check.enabled else []), *([EXPLAIN] if explain.enabled else []), IDENTIFY]
    settings = _FrontSettings(perturb, judge, explain, identify, seed, check)
    return run(_front_half(engines, items, settings, [(s, steps[s]) for s in order]))


@dataclass(frozen=True)
class _FrontSettings:
    perturb: PerturbSettings
    judge: JudgeSettings
    explain: ExplainSettings
    identify: IdentifySettings
    seed: int
    check: MisjudgmentCheckSettings


async def _front_half(
    engines: FrontHalfEngines,
    items: Sequence[tuple[PreferencePair, Bias]],
    settings: _FrontSettings,
    steps: Sequence[tuple[str, Opener]],
) -> FrontHalf:
    judge, explain, identify, seed, check = (
        settings.judge,
        settings.explain,
        settings.identify,
        settings.seed,
        settings.check,
    )
    n = len(items)
    perturbed: list[PerturbedPair | None] = [None] * n
    judged: list[tuple[list[Judgment], PairOutcome] | None] = [None] * n
    cases: list[MisjudgedCase | None] = [None] * n
    explained: list[MisjudgedCase | None] = [None] * n
    identified: list[IdentifyRecord | None] = [None] * n

    with StepChain(steps) as chain:
        chain.set_total(PERTURB, n)

        def complete(step: str) -> None:
            if step == PERTURB:
                chain.set_total(
                    EVALUATE, sum(1 for p in perturbed if p is not None and p.valid) * calls_per_pair(judge)
                )
            elif step == EVALUATE and check.enabled:
                misjudged = [p for p, c in zip(perturbed, cases) if p is not None and c is not None]
                chain.set_total(CHECK, check_calls(misjudged) if engines.check is not None else 0)
            if step == (CHECK if check.enabled else EVALUATE):
                k = sum(1 for c in cases if c is not None and c.excluded is None)
                if explain.enabled:
                    chain.set_total(EXPLAIN, k)
                chain.set_total(IDENTIFY, k)
            chain.finish(step)

        passes = _Passes(n, [name for name, _ in steps], complete)
        rewrite = _Asker(engines.perturb, chain, PERTURB)
        judging = _Asker(engines.evaluate, chain, EVALUATE)
        checking = _Asker(engines.check, chain, CHECK) if engines.check is not None and check.enabled else None
        explaining = _Asker(engines.explain, chain, EXPLAIN)
        identifying = _Asker(engines.identify, chain, IDENTIFY)

        async def flow(i: int) -> None:
            pair, bias = items[i]
            rewritten = await rewrite(build_perturb_request(pair, bias, settings.perturb, seed))
            record = perturbed[i] = perturbed_record(pair, bias, rewritten, settings.perturb, seed)
            passes.through(PERTURB)
            case = None
            if record.valid:
                judgments, outcome = judged[i] = await _judged(judging, record.to_pair(), judge, seed)
                case = cases[i] = misjudged_case(record, judgments, outcome)
            passes.through(EVALUATE)
            if check.enabled:
                if case is not None:
                    answer = await _answer_checked(checking, record, seed) if checking is not None else None
                    case = cases[i] = misjudgment_checked(case, answer, length_allowance(bias, check), check)
                passes.through(CHECK)
            if case is not None and case.excluded is not None:
                case = None  # recorded with its reason; neither explained nor identified
            if case is not None and explain.enabled:
                case = explained[i] = explained_case(
                    case, await explaining(build_explain_request(case, judge, explain, seed=seed))
                )
            elif case is not None:
                explained[i] = case
            if explain.enabled:
                passes.through(EXPLAIN)
            if case is not None:
                identified[i] = await _identified(identifying, case, identify, seed)
            passes.through(IDENTIFY)

        askers = [a for a in (rewrite, judging, checking, explaining, identifying) if a is not None]
        await _gather_all([flow(i) for i in range(n)], askers)

    kept = [entry for entry in judged if entry is not None]
    return FrontHalf(
        perturbed=[p for p in perturbed if p is not None],
        result=JudgeResult(judgments=[j for js, _ in kept for j in js], outcomes=[o for _, o in kept]),
        cases=[c for c in cases if c is not None],
        explained=[c for c in explained if c is not None],
        identified=[r for r in identified if r is not None],
    )


async def _identified(asker: _Asker, case: MisjudgedCase, settings: IdentifySettings, seed: int) -> IdentifyRecord:
    """One case identified: its attempts in turn until a usable reply (the first counted, as
    the staged progress counts the first round), then screened for junk (`identify.screened`,
    with the teacher's confirmation where needed, uncounted as the staged batch's)."""
    reply, raw, attempts = None, "", 0
    for round_ in range(settings.retries + 1):
        response = await asker(identify_attempt(case, settings, seed, round_), counted=round_ == 0)
        attempts += 1
        raw = response.text
        reply = parse_identify_reply(response)
        if reply is not None:
            break
    record, needed = screened(identify_record(case, reply, attempts, raw), case, drop_junk=settings.drop_junk)
    if needed:
        request = confirm_request(case, record.name or "", record.definition or "", seed)
        record = with_confirmation(record, await asker(request, counted=False))
    return record


# --------------------------------------------------------------------------------------------
# Rewrite -> answer check -> judge: a validation look, the placebo
# --------------------------------------------------------------------------------------------


Rewrites = tuple[list[PerturbedPair], list[Judgment], list[PairOutcome | None]]
"""What a batch of rewrites gives: the records in item order, the judgments of the valid
ones, and their outcomes aligned with the items (None: not judged)."""


def stream_rewrites(
    teacher: Engine,
    target: Engine,
    checker: Engine | None,
    items: Sequence[tuple[PreferencePair, Bias | None]],
    *,
    perturb: PerturbSettings,
    judge: JudgeSettings,
    seed: int,
    steps: Sequence[tuple[str, Opener]],
) -> Rewrites:
    """The teacher rewrites each (pair, bias) item (bias None: neutrally, the placebo), the
    checker checks its answer (None: no check), the target judges it if still valid, item by
    item. `steps`: the progress of the rewrite, the check (only with a checker) and the judge
    steps, in that order. Returns what the staged order returns (`Rewrites`)."""
    models = _Models(teacher, target, checker)

    async def main() -> Rewrites:
        with StepChain(steps) as chain:
            return await _rewrites(models, items, perturb, judge, seed, chain, [name for name, _ in steps])

    return run(main())


def stream_baseline_and_placebo(
    baseline_judge: Engine,
    teacher: Engine,
    target: Engine,
    checker: Engine | None,
    pairs: Sequence[PreferencePair],
    *,
    perturb: PerturbSettings,
    judge: JudgeSettings,
    seed: int,
    steps: Sequence[tuple[str, Opener]],
) -> tuple[JudgeResult, Rewrites]:
    """The target judges the unperturbed `pairs` (the baseline, through `baseline_judge`)
    while the teacher rewrites them neutrally and each rewrite is checked and judged (the
    placebo, as `stream_rewrites`): the two controls of validation at once. `steps`: the
    baseline's, then the placebo's."""
    models = _Models(teacher, target, checker)
    names = [name for name, _ in steps]

    async def main() -> tuple[JudgeResult, Rewrites]:
        with StepChain(steps) as chain:
            baseline = asyncio.ensure_future(_judge_all(baseline_judge, pairs, judge, seed, chain, names[0]))
            placebo = asyncio.ensure_future(
                _rewrites(models, [(pair, None) for pair in pairs], perturb, judge, seed, chain, names[1:])
            )
            await _gather_all([baseline, placebo], [])
            return baseline.result(), placebo.result()

    return run(main())


async def _judge_all(
    engine: Engine, pairs: Sequence[PreferencePair], settings: JudgeSettings, seed: int, chain: StepChain, step: str
) -> JudgeResult:
    """Every pair judged (what `judge_pairs` returns), item by item."""
    chain.set_total(step, len(pairs) * calls_per_pair(settings))
    judging = _Asker(engine, chain, step)
    judged: list[tuple[list[Judgment], PairOutcome] | None] = [None] * len(pairs)

    async def flow(i: int) -> None:
        judged[i] = await _judged(judging, pairs[i], settings, seed)

    await _gather_all([flow(i) for i in range(len(pairs))], [judging])
    chain.finish(step)
    kept = [entry for entry in judged if entry is not None]
    return JudgeResult(judgments=[j for js, _ in kept for j in js], outcomes=[o for _, o in kept])


async def _answer_checked(checking: _Asker, record: PerturbedPair, seed: int) -> PerturbedPair:
    """One rewrite's answer check, as `check_answers` makes it in a batch: read mechanically
    where it can be, else the checker's two questions (the control about the pair's original,
    asked once per pair, as a batch asks it)."""
    mechanical = extracted_update(record)
    if mechanical is not None:
        return mechanical
    original, reply = await asyncio.gather(
        checking(original_check_request(record, seed), once=True), checking(rewrite_check_request(record, seed))
    )
    return model_checked(record, reply, original)


@dataclass(frozen=True)
class _Models:
    teacher: Engine
    target: Engine
    checker: Engine | None


async def _rewrites(
    models: _Models,
    items: Sequence[tuple[PreferencePair, Bias | None]],
    perturb: PerturbSettings,
    judge: JudgeSettings,
    seed: int,
    chain: StepChain,
    names: Sequence[str],
) -> Rewrites:
    rewrite, check, judge_step = (
        (names[0], names[1], names[2]) if models.checker is not None else (names[0], None, names[1])
    )
    n = len(items)
    records: list[PerturbedPair | None] = [None] * n
    judged: list[tuple[list[Judgment], PairOutcome] | None] = [None] * n
    chain.set_total(rewrite, n)

    def complete(step: str) -> None:
        done = [r for r in records if r is not None]
        if step == rewrite and check is not None:
            chain.set_total(check, check_calls(done))
        elif step == (check or rewrite):
            chain.set_total(judge_step, sum(1 for r in done if r.valid) * calls_per_pair(judge))
        chain.finish(step)

    passes = _Passes(n, [rewrite, *([check] if check is not None else []), judge_step], complete)
    rewriting = _Asker(models.teacher, chain, rewrite)
    checking = _Asker(models.checker, chain, check) if models.checker is not None and check is not None else None
    judging = _Asker(models.target, chain, judge_step)

    async def flow(i: int) -> None:
        pair, bias = items[i]
        if bias is None:
            record = neutral_record(pair, await rewriting(build_neutral_request(pair, perturb, seed)), perturb, seed)
        else:
            rewritten = await rewriting(build_perturb_request(pair, bias, perturb, seed))
            record = perturbed_record(pair, bias, rewritten, perturb, seed)
        records[i] = record
        passes.through(rewrite)
        if check is not None:
            if record.valid:
                assert checking is not None
                record = records[i] = await _answer_checked(checking, record, seed)
            passes.through(check)
        if record.valid:
            judged[i] = await _judged(judging, record.to_pair(), judge, seed)
        passes.through(judge_step)

    await _gather_all([flow(i) for i in range(n)], [a for a in (rewriting, checking, judging) if a is not None])
    judgments = [j for entry in judged if entry is not None for j in entry[0]]
    return [r for r in records if r is not None], judgments, [entry[1] if entry else None for entry in judged]

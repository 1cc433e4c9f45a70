"""The discovery loop as a LangGraph StateGraph, checkpointed in the run directory.

    start -> validate_seeds -> perturb -> evaluate -> deeper_explain -> identify -> merge
    merge -> validate -> decide          (validate: early, the default)
    merge -> decide                      (validate: late; validation once, at the end)
    decide -> advance -> perturb ...  or  -> finish

`validate_seeds` validates the seed library on the target (iteration 0) when `validate.seeds`
is on, and passes otherwise. The graph state holds counters and the stop reason only; every stage reads its inputs from
the previous stage's files and writes its own atomically (through the run record,
`bias_discovery.run`), so a killed run resumes at the stage it was in, and the call cache
makes the redone calls free.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from functools import cached_property
from typing import Any, Iterator, Literal, Mapping, TypedDict

from .config import RunConfig
from .data.loaders import describe_source, load_pairs
from .data.overlap import DataOverlap, check_overlap, find_overlap, pair_keys
from .data.pairs import PreferencePair
from .embeddings import Embedder
from .errors import ConfigError, DataError
from .formatting import percent, pp
from .judging import JudgeResult, calls_per_pair, judge_pairs, measure_of, summarize
from .library import Bias, load_seed_library
from .llm.base import Engine, ProgressCallback
from .llm.roles import ModelRoles
from .progress import ProgressFactory, progress_or_quiet
from .run import IterationRecord, MergeStats, RunBusyError, RunDir, RunState, ValidationReport
from .sequential import FamilySettings
from .stats import MEASURE_LABELS
from .stages import (
    PlaceboArm,
    ValidationModels,
    ValidationSetup,
    assign_biases,
    candidates_from_records,
    deeper_explain,
    evaluate,
    identify_biases,
    merge_biases,
    perturb,
    record_checker,
    run_placebo,
    validate_biases,
)


StopKind = Literal["no_candidates", "converged", "max_iterations"]
"""Why the loop stops: the candidate set is empty, no candidate was accepted, or the last
planned iteration is done."""


class LoopState(TypedDict, total=False):
    iteration: int
    stage: str
    n_candidates: int
    n_accepted: int
    stop_kind: StopKind | None
    stop_reason: str | None
    """`stop_kind` in words, with what the last validation could have detected."""


THREAD = {"configurable": {"thread_id": "discovery"}}
NODES_PER_ITERATION = 8
"""perturb, evaluate, deeper_explain, identify, merge, validate, decide, advance."""
NODES_OUTSIDE_ITERATIONS = 4
"""start, validate_seeds, finish, and validate once more at the end with `when: late`."""
RECURSION_SLACK = 20
"""Node runs allowed beyond half again an iteration's nodes: the nodes outside the iterations,
with room to spare."""


def recursion_limit(max_iterations: int) -> int:
    """LangGraph's bound on the node runs of one invocation: half again the nodes the
    iterations take, plus `RECURSION_SLACK`, so a finishing run never meets it and a loop that
    never stops fails with GraphRecursionError instead of running forever."""
    return NODES_PER_ITERATION * max_iterations * 3 // 2 + RECURSION_SLACK


def stop_text(kind: StopKind, max_iterations: int) -> str:
    """The stop reason as `status`, the report and the end of a run print it."""
    return {
        "no_candidates": "no candidates: the candidate set is empty",
        "converged": "converged: no candidate was accepted",
        "max_iterations": f"max_iterations ({max_iterations}) reached",
    }[kind]


def loop_roles(config: RunConfig, run: RunDir, engines: Mapping[str, Engine] | None = None) -> ModelRoles:
    """The loop's roles, through the run's call cache: target, teacher, and the checker of
    answers in validation (`RunConfig.answer_checker`: not the teacher unless it is the only
    model); one engine per model."""
    return ModelRoles(
        {"target": config.target, "teacher": config.teacher, "checker": config.answer_checker()},
        cache_path=run.cache_path,
        engines=engines,
    )


def check_data_overlap(config: RunConfig, target_pairs: list[PreferencePair], test_pairs: list[PreferencePair]) -> DataOverlap:
    """Test pairs that are also target pairs (by id or content): refused unless
    `data.allow_overlap` (validating a bias on the pairs it was found on is circular)."""
    d = config.data
    overlap = find_overlap(
        pair_keys(target_pairs),
        pair_keys(test_pairs),
        discovery_name=f"data.target {describe_source(d.target, d.data_dir, portable=True)}",
        validation_name=f"data.test {describe_source(d.test, d.data_dir, portable=True)}",
    )
    return check_overlap(overlap, allow=d.allow_overlap, how_to_allow="pass --allow-overlap (data.allow_overlap: true)")


def mde_phrase(report: ValidationReport) -> str | None:
    """"smallest detectable Δerror vs placebo ≈ 9.1 pp at n = 60 (80 % power, α = 0.017 per
    candidate)", or None when the report has no power figure."""
    if report.mde_n is None or report.mde_alpha is None:
        return None
    power = percent(report.power, digits=0, unit=" %") if report.power is not None else "80 %"
    size = "none (too few items)" if report.mde is None else f"≈ {pp(report.mde, unit=' pp').lstrip('+')}"
    return (
        f"smallest {MEASURE_LABELS[report.measure]} vs {report.control} detectable with {power} power: {size} at n = "
        f"{report.mde_n} (one-sided α = {report.mde_alpha:.3g} per candidate)"
    )


StepKey = tuple[int, str, str | None, int | None]
"""(iteration, stage, step name, total) of one progress step."""


def counts_so_far(events: list[dict[str, Any]]) -> dict[StepKey, int]:
    """The last count each step logged (events.jsonl): where a resumed step starts from."""
    counts: dict[StepKey, int] = {}
    for e in events:
        if isinstance(e, dict) and e.get("event") == "progress" and isinstance(e.get("done"), int):
            counts[(e.get("iteration"), e.get("stage"), e.get("step"), e.get("total"))] = e["done"]  # type: ignore[index]
    return counts


class StageProgress:
    """One stage of one iteration as it runs: its steps log progress events (what `status` and
    the viewer read) and show a bar through the progress factory, each with the total it will
    really do (known only once the previous step is done, e.g. invalid rewrites are not judged).

    A resumed step starts from the count it had logged (`carried`), not from 0: its calls are
    answered by the call cache, but only once its engine is loaded and asked; until then the bar
    and `status` would show 0. The count shown is the larger of the two, so nothing is counted
    twice."""

    def __init__(
        self, run: RunDir, progress: ProgressFactory, stage: str, iteration: int, carried: Mapping[StepKey, int]
    ) -> None:
        self.run = run
        self.progress = progress
        self.stage = stage
        self.iteration = iteration
        self.carried = carried

    @contextmanager
    def step(self, total: int | None, name: str | None = None) -> Iterator[ProgressCallback]:
        label = f"iter {self.iteration} {self.stage}" + (f" ({name})" if name else "")
        carried = self.carried.get((self.iteration, self.stage, name, total), 0)
        done = shown = 0
        last = 0.0
        with self.progress(label, total) as advance:

            def on_progress(n: int) -> None:
                nonlocal done, shown, last
                done += n
                count = max(done, carried)
                if count > shown:
                    advance(count - shown)
                    shown = count
                if time.time() - last > 2.0 or (total is not None and count >= total):
                    last = time.time()
                    fields: dict[str, Any] = {"step": name} if name else {}
                    self.run.event("progress", iteration=self.iteration, stage=self.stage, done=count, total=total, **fields)

            if carried:
                on_progress(0)
            yield on_progress

    def factory(self) -> ProgressFactory:
        """This stage as a progress factory, for code that opens its own steps (validation)."""
        return lambda name, total: self.step(total, name)


class Discovery:
    """Everything the nodes need: config, run record, model roles, embedder, progress."""

    def __init__(
        self,
        run: RunDir,
        config: RunConfig,
        roles: ModelRoles,
        *,
        progress: ProgressFactory | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        """`embedder` replaces the configured sentence-transformers model (tests pass a fake)."""
        self.run = run
        self.config = config
        self.roles = roles
        self.progress = progress_or_quiet(progress)
        self.carried: dict[StepKey, int] = {}
        """Counts a resumed run's steps start from (`counts_so_far`); empty on a fresh run."""
        if embedder is not None:
            self.__dict__["embedder"] = embedder

    # -- resources --------------------------------------------------------------------------

    @property
    def target(self) -> Engine:
        return self.roles["target"]

    @property
    def teacher(self) -> Engine:
        return self.roles["teacher"]

    @property
    def checker(self) -> Engine | None:
        """The answer checker of validation, None when `validate.answer_check` is off."""
        return self.roles["checker"] if self.config.validate_.answer_check else None

    @cached_property
    def embedder(self) -> Embedder:
        from .embeddings import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(self.config.embedder)

    @cached_property
    def target_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return self._load_pairs("target", d.target, d.target_limit)

    @cached_property
    def test_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return self._load_pairs("test", d.test, d.test_limit)

    def _load_pairs(self, role: str, source: str, limit: int | None) -> list[PreferencePair]:
        """The `role` data; with `data.skip_bad_rows` the skipped rows are counted in run.json
        (`status` shows them) and named in events.jsonl."""
        bad_rows: list[str] | None = [] if self.config.data.skip_bad_rows else None
        pairs = load_pairs(source, data_dir=self.config.data.data_dir, limit=limit, seed=self.config.seed, bad_rows=bad_rows)
        if bad_rows:
            state = _state_or_none(self.run)
            skipped = {**(state.skipped_rows if state else {}), role: len(bad_rows)}
            self.update_state(skipped_rows=skipped)
            self.run.event("skipped_rows", role=role, source=source, count=len(bad_rows), rows=bad_rows[:20])
        return pairs

    @property
    def seed(self) -> int:
        return self.config.seed

    @cached_property
    def data_overlap(self) -> DataOverlap:
        """The target/test overlap, checked (`check_data_overlap`)."""
        return check_data_overlap(self.config, self.target_pairs, self.test_pairs)

    # -- bookkeeping --------------------------------------------------------------------------

    def update_state(self, **fields: Any) -> None:
        if self.run.lock.lost:
            raise RunBusyError(
                f"{self.run.root}: another process took this run over (it found this one's heartbeat stale); "
                "this one stops here"
            )
        state = _state_or_none(self.run)
        if state is None:
            now = time.time()
            state = RunState(name=self.config.name, status="running", started_at=now, updated_at=now)
        self.run.write_state(state.model_copy(update=fields))

    @contextmanager
    def stage(self, name: str, iteration: int, total: int | None) -> Iterator[StageProgress]:
        """Book calls to `name` and log its start and end (with calls and tokens per role)."""
        self.roles.set_stage(name)
        self.update_state(stage=name, iteration=iteration, status="running")
        self.run.event("stage_start", iteration=iteration, stage=name, total=total)
        started = time.time()
        yield StageProgress(self.run, self.progress, name, iteration, self.carried)
        usage = {role: u.model_dump() for role, u in self.roles.take_usage(name).items()}
        self.run.event(
            "stage_end", iteration=iteration, stage=name, total=total, seconds=round(time.time() - started, 2), usage=usage
        )

    def _pending(self, upto: int) -> list[Bias]:
        """validate: late — merged candidates of iterations 1..upto awaiting validation."""
        pending: list[Bias] = []
        for t in range(1, upto + 1):
            candidates = self.run.iteration(t).candidates
            if candidates.exists():
                pending += candidates.read()
        return pending

    def _late(self) -> bool:
        return self.config.validate_.when == "late"

    def _iteration(self, t: int) -> IterationRecord:
        return self.run.iteration(t)

    # -- nodes --------------------------------------------------------------------------------

    def node_start(self, state: LoopState) -> LoopState:
        library = self.run.library
        if not library.iterations():
            seed = load_seed_library(self.config.seed_library)
            library.save_iteration(seed.model_copy(update={"name": self.config.name, "target_model": self.config.target.spec}))
        self.update_state(status="running", iteration=1, stage="start", library_size=len(library.load_latest().biases))
        return {"iteration": 1, "stage": "start", "stop_kind": None, "stop_reason": None, "n_candidates": 0, "n_accepted": 0}

    def node_perturb(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        library = self.run.library.load_iteration(t - 1)
        pool = library.biases + (self._pending(t - 1) if self._late() else [])
        items = assign_biases(self.target_pairs, pool, seed=self.seed, iteration=t)
        with self.stage("perturb", t, len(items)) as stage, stage.step(len(items)) as progress:
            perturbed = perturb(self.teacher, items, self.config.perturb, seed=self.seed, progress=progress)
        self._iteration(t).perturbed.write(perturbed)
        return {"stage": "perturb"}

    def node_evaluate(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        record = self._iteration(t)
        perturbed = record.perturbed.read()
        n_judge = sum(1 for p in perturbed if p.valid) * calls_per_pair(self.config.judge)
        with self.stage("evaluate", t, n_judge) as stage, stage.step(n_judge) as progress:
            result, cases = evaluate(self.target, perturbed, self.config.judge, seed=self.seed, progress=progress)
        record.judgments.write(result.judgments)
        record.misjudged.write(cases)
        return {"stage": "evaluate"}

    def node_deeper_explain(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        record = self._iteration(t)
        cases = record.misjudged.read()
        if self.config.deeper_explain.enabled:
            with self.stage("deeper_explain", t, len(cases)) as stage, stage.step(len(cases)) as progress:
                cases = deeper_explain(
                    self.target, cases, self.config.judge, self.config.deeper_explain, seed=self.seed, progress=progress
                )
        record.explanations.write(cases)
        return {"stage": "deeper_explain"}

    def node_identify(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        record = self._iteration(t)
        cases = record.explanations.read()
        with self.stage("identify", t, len(cases)) as stage, stage.step(len(cases)) as progress:
            records = identify_biases(self.teacher, cases, self.config.identify, seed=self.seed, progress=progress)
        record.identified.write(records)
        return {"stage": "identify"}

    def node_merge(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        record = self._iteration(t)
        cases = record.explanations.read()
        identified = record.identified.read()
        library = self.run.library.load_iteration(t - 1)
        existing = library.biases + (self._pending(t - 1) if self._late() else [])
        raw = candidates_from_records(
            identified, cases, iteration=t, target_model=self.config.target.spec, taken_ids=[b.id for b in existing]
        )
        with self.stage("merge", t, None) as stage:
            result = merge_biases(
                self.teacher, self.embedder, raw, existing, self.config.merge, seed=self.seed, progress=stage.factory()
            )
        record.merges.write(result.decisions)
        record.merge_stats.write(
            MergeStats(
                raw_candidates=len(raw),
                merged_into_library=result.merged_into_library,
                candidates=len(result.candidates),
                teacher_calls=result.teacher_calls,
                all_pairs_calls=result.all_pairs_calls,
            )
        )
        record.candidates.write(result.candidates)
        if self._late():
            self.run.library.save_iteration(library.with_biases(library.biases, iteration=t), overwrite=True)
        return {"stage": "merge", "n_candidates": len(result.candidates)}

    def baseline(self) -> JudgeResult:
        """The target's judgments on the unperturbed test set (computed once per run)."""
        baseline = self.run.baseline
        if baseline.result.exists():
            return baseline.result.read()
        pairs = self.test_pairs
        n = len(pairs) * calls_per_pair(self.config.judge)
        with self.stage("baseline", 0, n) as stage, stage.step(n) as progress:
            result = judge_pairs(self.target, pairs, self.config.judge, seed=self.seed, progress=progress)
        summary = summarize(
            result,
            model=self.config.target.spec,
            data=describe_source(self.config.data.test, self.config.data.data_dir),
            settings=self.config.judge,
            seed=self.seed,
        )
        baseline.summary.write(summary)
        baseline.result.write(result)
        return result

    def placebo(self, baseline: JudgeResult) -> PlaceboArm | None:
        """The placebo arm (neutral rewrites of the test set, judged; once per run), or None
        when validation compares with the baseline."""
        if self.config.validate_.control != "placebo":
            return None
        record = self.run.placebo
        if record.exists():
            arm = record.read()
            if [p.pair_id for p in arm.perturbed] != [p.id for p in self.test_pairs]:
                raise DataError(f"{record.directory}: the placebo's pairs are not this run's test pairs")
            return arm
        with self.stage("placebo", 0, None) as stage:
            arm = run_placebo(
                self.teacher,
                self.target,
                self.checker,
                self.test_pairs,
                baseline,
                perturb_settings=self.config.perturb,
                judge_settings=self.config.judge,
                settings=self.config.validate_,
                seed=self.seed,
                progress=stage.factory(),
            )
        record.write(arm)
        return arm

    def validate(self, t: int, candidates: list[Bias], *, stage_name: str, rank: bool) -> ValidationReport:
        """Validate `candidates` as one family (iteration `t`; 0: the seed library) and write
        the iteration's validation files. `rank`: over `max_candidates`, keep those with most
        evidence (else the first ones, in library order)."""
        record = self._iteration(t)
        cfg = self.config.validate_
        skipped: list[str] = []
        if cfg.max_candidates is not None and len(candidates) > cfg.max_candidates:
            ranked = sorted(candidates, key=lambda b: -len(b.evidence)) if rank else list(candidates)
            keep = {b.id for b in ranked[: cfg.max_candidates]}
            skipped = [b.id for b in candidates if b.id not in keep]
            candidates = [b for b in candidates if b.id in keep]
        baseline = self.baseline()
        placebo = self.placebo(baseline) if candidates else None  # paid for when a candidate needs it
        alpha = self.config.family_alpha
        setup = ValidationSetup(
            family=FamilySettings(
                rules=cfg, alpha=alpha, families=self.config.planned_validations, seed=self.seed,
                measure=measure_of(self.config.judge),
            ),
            perturb=self.config.perturb,
            judge=self.config.judge,
            test_data=describe_source(self.config.data.test, self.config.data.data_dir),
        )
        models = ValidationModels(teacher=self.teacher, target=self.target, checker=self.checker)
        with self.stage(stage_name, t, None) as stage:
            out = validate_biases(models, candidates, self.test_pairs, baseline, setup, placebo=placebo, progress=stage.factory())
        checker = self.config.answer_checker().spec if cfg.answer_check else None
        self_checked = self.config.self_checked if cfg.answer_check else None
        validated = record_checker(out.candidates, checker, self_checked=self_checked)
        accepted = [b for b in validated if b.validation and b.validation.accepted]
        record.validation_perturbed.write(out.perturbed)
        record.validation_judgments.write(out.judgments)
        report = ValidationReport(
            iteration=t,
            when=cfg.when,
            acceptance=cfg.acceptance,
            alpha=cfg.alpha,
            correction=cfg.correction,
            n_test=len(self.test_pairs),
            baseline_error=baseline.error_rate(),
            skipped_over_max_candidates=skipped,
            accepted=[b.id for b in accepted],
            candidates=out.records,
            validated=validated,
            control=cfg.decision_control,
            rewrite_effect=placebo.effect if placebo is not None else None,
            alpha_family=alpha,
            error_control=cfg.error_control,
            min_delta=cfg.min_delta,
            sequential=out.plan,
            power=cfg.power,
            measure=setup.family.measure,
            mde=out.mde,
            mde_n=out.mde_n,
            mde_alpha=out.mde_alpha,
            checker=checker,
            self_checked=self_checked,
            error_statement=out.error_statement,
            data_overlap=self.data_overlap,
        )
        record.validation.write(report)
        return report

    def node_validate_seeds(self, state: LoopState) -> LoopState:
        """`validate.seeds`: which biases of the seed library does this judge have? The seeds
        stay in the library either way (they drive perturbation); their validation is recorded."""
        if not self.config.validate_.seeds or self._iteration(0).validation.exists():
            return {"stage": "validate_seeds"}
        store = self.run.library
        seeds = store.load_iteration(0)
        report = self.validate(0, list(seeds.biases), stage_name="validate_seeds", rank=False)
        validated = {b.id: b for b in report.validated}
        store.save_iteration(
            seeds.with_biases([validated.get(b.id, b) for b in seeds.biases], iteration=0), overwrite=True
        )
        return {"stage": "validate_seeds"}

    def node_validate(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        record = self._iteration(t)
        candidates = self._pending(t) if self._late() else record.candidates.read()
        library = self.run.library.load_iteration(t - 1)
        report = self.validate(t, candidates, stage_name="validate", rank=True)
        accepted = [b for b in report.validated if b.validation and b.validation.accepted]
        new_library = library.with_biases(library.biases + accepted, iteration=t)
        self.run.library.save_iteration(new_library, overwrite=True)
        state_update: LoopState = {"stage": "validate", "n_accepted": len(accepted)}
        if not self._late():
            state_update["n_candidates"] = len(candidates)
        n_seeds = len(self.run.library.load_iteration(0).biases)
        self.update_state(library_size=len(new_library.biases), accepted_total=len(new_library.biases) - n_seeds)
        return state_update

    def node_decide(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        kind: StopKind | None = None
        if state.get("n_candidates", 0) == 0:
            kind = "no_candidates"
        elif not self._late() and state.get("n_accepted", 0) == 0:
            kind = "converged"
        elif t >= self.config.max_iterations:
            kind = "max_iterations"
        if kind is None:
            return {"stage": "decide", "stop_kind": None, "stop_reason": None}
        reason = stop_text(kind, self.config.max_iterations)
        # an iteration without candidates validated nothing: no power to report
        report = self._iteration(t).validation.read_if_exists() if kind != "no_candidates" else None
        power = mde_phrase(report) if report is not None else None
        if power:
            reason = f"{reason}; {power}"
        return {"stage": "decide", "stop_kind": kind, "stop_reason": reason}

    def node_advance(self, state: LoopState) -> LoopState:
        return {"iteration": state["iteration"] + 1, "stage": "advance", "n_candidates": 0, "n_accepted": 0}

    def node_finish(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        store = self.run.library
        if not store.iterations() or store.iterations()[-1] < t:
            latest = store.load_latest()
            store.save_iteration(latest.with_biases(latest.biases, iteration=t), overwrite=True)
        latest = store.load_latest()
        self.update_state(status="finished", stage="finished", stop_reason=state.get("stop_reason"), library_size=len(latest.biases))
        self.run.event("finished", iteration=t, stop_reason=state.get("stop_reason"), library_size=len(latest.biases))
        return {"stage": "finished"}

    # -- wiring -------------------------------------------------------------------------------

    def build(self, checkpointer: Any) -> Any:
        from langgraph.graph import END, START, StateGraph

        late = self._late()
        g = StateGraph(LoopState)
        for name in (
            "start", "validate_seeds", "perturb", "evaluate", "deeper_explain", "identify", "merge", "validate",
            "decide", "advance", "finish",
        ):
            g.add_node(name, getattr(self, f"node_{name}"))
        g.add_edge(START, "start")
        g.add_edge("start", "validate_seeds")
        g.add_edge("validate_seeds", "perturb")
        g.add_edge("perturb", "evaluate")
        g.add_edge("evaluate", "deeper_explain")
        g.add_edge("deeper_explain", "identify")
        g.add_edge("identify", "merge")
        g.add_edge("merge", "decide" if late else "validate")
        g.add_edge("validate", "finish" if late else "decide")

        def after_decide(state: LoopState) -> str:
            if state.get("stop_reason") is None:
                return "advance"
            if late and self._pending(state["iteration"]):
                return "validate"
            return "finish"

        g.add_conditional_edges("decide", after_decide, ["advance", "validate", "finish"])
        g.add_edge("advance", "perturb")
        g.add_edge("finish", END)
        return g.compile(checkpointer=checkpointer)


def _state_or_none(run: RunDir) -> RunState | None:
    """run.json, or None when it is absent or damaged: it only reports where the run stands (the
    checkpoints and the iteration files are the record), so the loop writes a fresh one."""
    try:
        return run.read_state()
    except DataError as exc:
        run.event("repaired", what=f"{exc}; run.json is written anew")
        return None


def execute(
    run: RunDir,
    config: RunConfig,
    *,
    resume: bool,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    embedder: Embedder | None = None,
) -> LoopState:
    """Run (or resume) the loop to its end; returns the final graph state.

    `progress` draws the bars (the CLI passes `progress.progress_bar`; None: no bars).
    `engines` ({"target": ..., "teacher": ...}) and `embedder` replace the configured models
    (tests drive the loop with scripted fakes). A resume without a checkpoint database (moved
    aside after damage) restarts the loop in the same directory. Test data that overlaps the
    target data is refused first (`check_data_overlap`), fresh run or resume.

    The run's lock is held throughout (a live holder is refused: RunBusyError). A resume first
    checks both SQLite files and names the damaged ones with what to do. A failed resume of a
    finished run leaves its run.json as it was (the failure is logged in events.jsonl).
    """
    with run.lock.hold(run.root, "resume" if resume else "run"):
        if resume:
            damaged = run.damaged_databases()
            if damaged:
                raise ConfigError(run.damage_advice(damaged))
        return _execute_held(run, config, resume=resume, progress=progress, engines=engines, embedder=embedder)


def _execute_held(
    run: RunDir,
    config: RunConfig,
    *,
    resume: bool,
    progress: ProgressFactory | None,
    engines: Mapping[str, Engine] | None,
    embedder: Embedder | None,
) -> LoopState:
    from langgraph.checkpoint.sqlite import SqliteSaver

    before = _state_or_none(run)
    roles = loop_roles(config, run, engines)
    discovery = Discovery(run, config, roles, progress=progress, embedder=embedder)
    if resume:
        discovery.carried = counts_so_far(run.read_events())
    try:
        discovery.data_overlap  # overlapping target and test data are refused before anything is paid
    except BaseException:
        roles.close()
        raise
    fresh_checkpoints = not run.checkpoint_path.exists()
    conn = sqlite3.connect(str(run.checkpoint_path), check_same_thread=False)
    try:
        try:
            graph = discovery.build(SqliteSaver(conn))
            snapshot = graph.get_state(THREAD) if resume else None
        except sqlite3.DatabaseError as exc:
            raise ConfigError(run.damage_advice({"checkpoints.sqlite": str(exc)})) from None
        run_config = {**THREAD, "recursion_limit": recursion_limit(config.max_iterations)}
        if resume and fresh_checkpoints:
            run.event("restart", reason="no checkpoint database")
            final = graph.invoke({"iteration": 0}, run_config)
        elif resume and snapshot is not None and snapshot.next:
            run.event("resume")
            final = graph.invoke(None, run_config)
        elif resume and snapshot is not None:
            final = snapshot.values
            if before is None:  # a finished run whose run.json was lost or damaged: say so again
                discovery.update_state(
                    status="finished", stage="finished", iteration=final.get("iteration", 0),
                    stop_reason=final.get("stop_reason"), library_size=len(run.library.load_latest().biases),
                )
        else:
            final = graph.invoke({"iteration": 0}, run_config)
        return final
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, RunBusyError)):
            raise
        if before is not None and before.status == "finished":
            run.write_state(before, touch=False)  # a finished run stays finished
            run.event("resume_failed", error=str(exc)[:2000])
        else:
            discovery.update_state(status="failed", error=str(exc)[:2000])
        raise
    finally:
        roles.close()
        conn.close()

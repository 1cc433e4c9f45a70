"""The discovery loop as a LangGraph StateGraph, checkpointed in the run directory.

    start -> validate_seeds -> perturb -> evaluate -> deeper_explain -> identify -> merge
    merge -> validate -> decide          (validate: early, the default)
    merge -> decide                      (validate: late; validation once, at the end)
    decide -> advance -> perturb ...  or  -> finish

`validate_seeds` validates the seed library on the target (iteration 0) when `validate.seeds`
is on, and passes otherwise. With `pipeline: streamed` (the default) the perturb node runs the
iteration's stages up to identify at once, item by item, and writes their files; the evaluate,
deeper_explain and identify nodes then pass (`loop.iteration`). The graph state holds counters
and the stop reason only; every stage reads its inputs from the previous stage's files and
writes its own atomically (through the run record, `bias_discovery.run`), so a killed run
resumes at the stage it was in, and the call cache makes the redone calls free.

The nodes are thin: what they do is in `bias_discovery.loop` (bookkeeping, resources, the
iteration's stages, validation).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from ..config import RunConfig
from ..embeddings import Embedder
from ..errors import ConfigError
from ..interrupts import redeliver_lost_interrupts
from ..io import remove_orphaned_temporaries
from ..library import seed_library_for_run
from ..llm.base import Engine
from ..llm.budget import BudgetReached
from ..llm.roles import ModelRoles
from ..progress import ProgressFactory
from ..run import RunBusyError, RunDir
from . import (
    IterationStages,
    LoopResources,
    LoopValidation,
    RunBook,
    check_data_overlap,
    counts_so_far,
    loop_roles,
    mde_phrase,
    state_or_none,
)

__all__ = [
    "Discovery",
    "LoopState",
    "NODES_OUTSIDE_ITERATIONS",
    "NODES_PER_ITERATION",
    "StopKind",
    "check_data_overlap",
    "execute",
    "loop_roles",
    "recursion_limit",
    "stop_text",
]

log = logging.getLogger(__name__)
"""Each decision to go on or stop, at INFO (`bias-discovery --verbose`)."""


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


class Discovery:
    """The loop's nodes, over its parts: `book` (run.json, stage events, progress),
    `resources` (models, data, embedder), `iteration` (perturb ... merge) and `validation`."""

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
        self.book = RunBook(run, config.name, roles, progress)
        self.resources = LoopResources(run, config, roles, self.book, embedder)
        self.iteration = IterationStages(self.resources, self.book)
        self.validation = LoopValidation(self.resources, self.book)

    # -- nodes --------------------------------------------------------------------------------

    def node_start(self, state: LoopState) -> LoopState:
        library = self.run.library
        if not library.iterations():
            seed = seed_library_for_run(self.config.seed_library)
            library.save_iteration(
                seed.model_copy(update={"name": self.config.name, "target_model": self.config.target.spec})
            )
        self.book.update_state(
            status="running", iteration=1, stage="start", library_size=len(library.load_latest().biases)
        )
        return {
            "iteration": 1,
            "stage": "start",
            "stop_kind": None,
            "stop_reason": None,
            "n_candidates": 0,
            "n_accepted": 0,
        }

    def node_perturb(self, state: LoopState) -> LoopState:
        self.iteration.perturb(state["iteration"])
        return {"stage": "perturb"}

    def node_evaluate(self, state: LoopState) -> LoopState:
        self.iteration.evaluate(state["iteration"])
        return {"stage": "evaluate"}

    def node_deeper_explain(self, state: LoopState) -> LoopState:
        self.iteration.deeper_explain(state["iteration"])
        return {"stage": "deeper_explain"}

    def node_identify(self, state: LoopState) -> LoopState:
        self.iteration.identify(state["iteration"])
        return {"stage": "identify"}

    def node_merge(self, state: LoopState) -> LoopState:
        return {"stage": "merge", "n_candidates": self.iteration.merge(state["iteration"])}

    def node_validate_seeds(self, state: LoopState) -> LoopState:
        """`validate.seeds`: which biases of the seed library does this judge have? The seeds
        stay in the library either way (they drive perturbation); their validation is recorded."""
        if not self.config.validate_.seeds or self.run.iteration(0).validation.exists():
            return {"stage": "validate_seeds"}
        store = self.run.library
        seeds = store.load_iteration(0)
        report = self.validation.validate(0, list(seeds.biases), stage_name="validate_seeds", rank=False)
        validated = {b.id: b for b in report.validated}
        store.save_iteration(
            seeds.with_biases([validated.get(b.id, b) for b in seeds.biases], iteration=0), overwrite=True
        )
        return {"stage": "validate_seeds"}

    def node_validate(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        late = self.iteration.late
        candidates = self.iteration.pending(t) if late else self.run.iteration(t).candidates.read()
        library = self.run.library.load_iteration(t - 1)
        report = self.validation.validate(t, candidates, stage_name="validate", rank=True)
        accepted = [b for b in report.validated if b.validation and b.validation.accepted]
        new_library = library.with_biases(library.biases + accepted, iteration=t)
        self.run.library.save_iteration(new_library, overwrite=True)
        state_update: LoopState = {"stage": "validate", "n_accepted": len(accepted)}
        if not late:
            state_update["n_candidates"] = len(candidates)
        n_seeds = len(self.run.library.load_iteration(0).biases)
        self.book.update_state(library_size=len(new_library.biases), accepted_total=len(new_library.biases) - n_seeds)
        return state_update

    def node_decide(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        kind: StopKind | None = None
        if state.get("n_candidates", 0) == 0:
            kind = "no_candidates"
        elif not self.iteration.late and state.get("n_accepted", 0) == 0:
            kind = "converged"
        elif t >= self.config.max_iterations:
            kind = "max_iterations"
        if kind is None:
            log.info("iteration %d: decided to go on", t)
            return {"stage": "decide", "stop_kind": None, "stop_reason": None}
        reason = stop_text(kind, self.config.max_iterations)
        # an iteration without candidates validated nothing: no power to report
        report = self.run.iteration(t).validation.read_if_exists() if kind != "no_candidates" else None
        power = mde_phrase(report) if report is not None else None
        if power:
            reason = f"{reason}; {power}"
        log.info("iteration %d: the loop stops: %s", t, reason)
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
        self.book.update_state(
            status="finished", stage="finished", stop_reason=state.get("stop_reason"), library_size=len(latest.biases)
        )
        self.run.event("finished", iteration=t, stop_reason=state.get("stop_reason"), library_size=len(latest.biases))
        return {"stage": "finished"}

    # -- wiring -------------------------------------------------------------------------------

    def build(self, checkpointer: Any) -> Any:
        from langgraph.graph import END, START, StateGraph

        late = self.iteration.late
        g = StateGraph(LoopState)
        for name in (
            "start",
            "validate_seeds",
            "perturb",
            "evaluate",
            "deeper_explain",
            "identify",
            "merge",
            "validate",
            "decide",
            "advance",
            "finish",
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
            if late and self.iteration.pending(state["iteration"]):
                return "validate"
            return "finish"

        g.add_conditional_edges("decide", after_decide, ["advance", "validate", "finish"])
        g.add_edge("advance", "perturb")
        g.add_edge("finish", END)
        return g.compile(checkpointer=checkpointer)


def resume_point(snapshot: Any) -> Literal["beginning", "step", "end"]:
    """Where a resumed loop goes on, from its last checkpoint: from the `beginning` (there is
    none: the run was killed before its first), at a `step` (a node to run, or one that
    finished and whose writes are saved but not yet checkpointed: LangGraph's `next` leaves
    those out, so `tasks` decides), or nothing is left: the graph reached its `end`."""
    if snapshot is None or snapshot.created_at is None:
        return "beginning"
    return "step" if snapshot.tasks else "end"


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
    checks both SQLite files and names the damaged ones with what to do, and removes the
    temporary files of writes a kill cut short. Checkpoints are written before the next node
    starts (LangGraph's `durability="sync"`), so a kill loses at most the node it was in. A failed resume of a
    finished run leaves its run.json as it was (the failure is logged in events.jsonl). A Ctrl-C
    is never lost, even where it lands in a callback (`interrupts.redeliver_lost_interrupts`).
    """
    with redeliver_lost_interrupts(), run.lock.hold(run.root, "resume" if resume else "run"):
        if resume:
            damaged = run.damaged_databases()
            if damaged:
                raise ConfigError(run.damage_advice(damaged))
            leftovers = remove_orphaned_temporaries(run.root)  # writes a kill cut short; we hold the lock
            if leftovers:
                run.event("removed_partial_files", files=leftovers)
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

    before = state_or_none(run)
    roles = loop_roles(config, run, engines, spent=run.spend(before))  # run.json's and the ledger's
    discovery = Discovery(run, config, roles, progress=progress, embedder=embedder)
    if resume:
        discovery.book.carried = counts_so_far(run.read_events())
    try:
        _ = discovery.resources.data_overlap  # overlapping target and test data are refused before anything is paid
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
        where = resume_point(snapshot) if resume else "beginning"
        if resume and (fresh_checkpoints or where == "beginning"):
            # no checkpoint yet (killed in its first second, or the database moved aside): start
            # over in place; every call already paid for comes from the call cache
            run.event("restart", reason="no checkpoint database" if fresh_checkpoints else "no checkpoint yet")
            final = graph.invoke({"iteration": 0}, run_config, durability="sync")
        elif where == "step":
            run.event("resume")
            final = graph.invoke(None, run_config, durability="sync")
        elif where == "end":
            assert snapshot is not None
            final = snapshot.values
            if before is None or before.status != "finished":  # run.json lost, damaged or behind: say so again
                discovery.book.update_state(
                    status="finished",
                    stage="finished",
                    iteration=final.get("iteration", 0),
                    stop_reason=final.get("stop_reason"),
                    library_size=len(run.library.load_latest().biases),
                )
        else:
            final = graph.invoke({"iteration": 0}, run_config, durability="sync")
        discovery.book.record_spend()
        return final
    except BudgetReached as exc:  # at a request boundary: resumable with a larger budget
        if roles.budget is not None:  # what was admitted before the stop is paid: book it first
            roles.budget.wait_idle(timeout=max(m.timeout_s for m in roles.configs.values()))
            exc.spend = roles.budget.spend()
        discovery.book.record_spend(status="stopped", stop_reason=str(exc)[:2000], error=None, budget_limit=exc.setting)
        run.event("budget_reached", reason=str(exc)[:2000])
        raise
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, RunBusyError)):
            if isinstance(exc, KeyboardInterrupt):
                try:  # what was paid until Ctrl-C counts against the budget of the resume
                    discovery.book.record_spend()
                except Exception:  # noqa: BLE001  the interrupt is what the user must see
                    pass
            raise
        if before is not None and before.status == "finished":
            run.write_state(before, touch=False)  # a finished run stays finished
            run.event("resume_failed", error=str(exc)[:2000])
        else:
            discovery.book.update_state(status="failed", error=str(exc)[:2000])
        raise
    finally:
        roles.close()
        conn.close()

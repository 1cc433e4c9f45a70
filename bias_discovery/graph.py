"""The discovery loop as a LangGraph StateGraph, checkpointed in the run directory.

    start -> perturb -> evaluate -> deeper_explain -> identify -> merge
    merge -> validate -> decide          (validate: early, the default)
    merge -> decide                      (validate: late; validation once, at the end)
    decide -> advance -> perturb ...  or  -> finish

The graph state holds counters and the stop reason only; every stage reads its inputs from
the previous stage's files and writes its own atomically, so a killed run resumes at the
stage it was in, and the call cache makes the redone calls free.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, TypedDict

from .config import RunConfig
from .data.loaders import describe_source, load_pairs
from .data.pairs import PreferencePair
from .embeddings import SentenceTransformerEmbedder
from .io import atomic_write_json, atomic_write_jsonl, read_jsonl
from .judging import JudgeResult, judge_pairs, summarize
from .library import Bias, LibraryStore, load_seed_library
from .llm.cache import CachedEngine
from .llm.meter import MeteredEngine
from .llm.registry import make_engine
from .progress import progress_bar
from .rundir import RunDir, RunState
from .stages import (
    assign_biases,
    candidates_from_records,
    deeper_explain,
    evaluate,
    identify_biases,
    merge_biases,
    perturb,
    validate_biases,
)
from .stages.records import IdentifyRecord, MisjudgedCase, PerturbedPair


class LoopState(TypedDict, total=False):
    iteration: int
    stage: str
    n_candidates: int
    n_accepted: int
    stop_reason: str | None


THREAD = {"configurable": {"thread_id": "discovery"}}


class Discovery:
    """Everything the nodes need: config, run directory, engines (built on first use)."""

    def __init__(
        self,
        run_dir: RunDir,
        config: RunConfig,
        show_progress: bool = True,
        engines: dict[str, Any] | None = None,
        embedder: Any | None = None,
    ) -> None:
        """`engines` ({"target": ..., "teacher": ...}) and `embedder` replace the configured
        models; tests use them to drive the loop with scripted fakes."""
        self.run = run_dir
        self.config = config
        self.store = LibraryStore(run_dir.root)
        self.show_progress = show_progress
        self._engines: list[Any] = []
        if engines:
            self.__dict__["target"] = MeteredEngine(engines["target"], "target")
            self.__dict__["teacher"] = MeteredEngine(engines.get("teacher", engines["target"]), "teacher")
        if embedder is not None:
            self.__dict__["embedder"] = embedder

    # -- resources --------------------------------------------------------------------------

    @cached_property
    def _target_base(self) -> CachedEngine:
        engine = make_engine(self.config.target, cache_path=self.run.cache_path)
        self._engines.append(engine)
        return engine  # type: ignore[return-value]

    @cached_property
    def target(self) -> MeteredEngine:
        return MeteredEngine(self._target_base, "target")

    @cached_property
    def teacher(self) -> MeteredEngine:
        if self.config.teacher == self.config.target:
            return MeteredEngine(self._target_base, "teacher")  # one model in memory, not two
        engine = make_engine(self.config.teacher, cache_path=self.run.cache_path)
        self._engines.append(engine)
        return MeteredEngine(engine, "teacher")

    @cached_property
    def embedder(self) -> SentenceTransformerEmbedder:
        return SentenceTransformerEmbedder(self.config.embedder)

    @cached_property
    def target_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=self.config.seed)

    @cached_property
    def test_pairs(self) -> list[PreferencePair]:
        d = self.config.data
        return load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=self.config.seed)

    def close(self) -> None:
        for engine in self._engines:
            engine.close()
        self._engines.clear()

    # -- bookkeeping --------------------------------------------------------------------------

    def _update_state(self, **fields: Any) -> None:
        state = self.run.read_state()
        if state is None:
            now = time.time()
            state = RunState(name=self.config.name, status="running", started_at=now, updated_at=now)
        self.run.write_state(state.model_copy(update=fields))

    @contextmanager
    def stage(self, name: str, iteration: int, total: int | None) -> Iterator[Any]:
        """Book calls to `name`, log start/end events, show a progress bar with ETA."""
        for meter in (self.target, self.teacher):
            meter.stage = name
        self._update_state(stage=name, iteration=iteration, status="running")
        self.run.event("stage_start", iteration=iteration, stage=name, total=total)
        started = time.time()
        last = [0.0, 0]

        def on_progress(n: int) -> None:
            last[1] += n
            if time.time() - last[0] > 2.0 or (total is not None and last[1] >= total):
                last[0] = time.time()
                self.run.event("progress", iteration=iteration, stage=name, done=last[1], total=total)

        if self.show_progress and total != 0:
            with progress_bar(f"iter {iteration} {name}", total) as advance:

                def advance_and_log(n: int) -> None:
                    advance(n)
                    on_progress(n)

                yield advance_and_log
        else:
            yield on_progress
        usage = {}
        for meter in (self.target, self.teacher):
            booked = meter.take_usage().get(name)
            if booked is not None and booked.requests:
                usage[meter.role] = booked.model_dump()
        self.run.event(
            "stage_end", iteration=iteration, stage=name, total=total, seconds=round(time.time() - started, 2), usage=usage
        )

    def _dir(self, iteration: int) -> Path:
        path = self.run.iteration_dir(iteration)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _pending(self, upto: int) -> list[Bias]:
        """validate: late — merged candidates of iterations 1..upto awaiting validation."""
        pending: list[Bias] = []
        for t in range(1, upto + 1):
            path = self.run.iteration_dir(t) / "candidates.json"
            if path.is_file():
                pending += [Bias.model_validate(b) for b in read_jsonl_json(path)]
        return pending

    def _late(self) -> bool:
        return self.config.validate_.when == "late"

    # -- nodes --------------------------------------------------------------------------------

    def node_start(self, state: LoopState) -> LoopState:
        if not self.store.iterations():
            seed = load_seed_library(self.config.seed_library)
            library = seed.model_copy(update={"name": self.config.name, "target_model": self.config.target.spec})
            self.store.save_iteration(library)
        self._update_state(status="running", iteration=1, stage="start", library_size=len(self.store.load_latest().biases))
        return {"iteration": 1, "stage": "start", "stop_reason": None, "n_candidates": 0, "n_accepted": 0}

    def node_perturb(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        library = self.store.load_iteration(t - 1)
        pool = library.biases + (self._pending(t - 1) if self._late() else [])
        items = assign_biases(self.target_pairs, pool, seed=self.config.seed, iteration=t)
        with self.stage("perturb", t, len(items)) as progress:
            perturbed = perturb(self.teacher, items, self.config.perturb, seed=self.config.seed, progress=progress)
        atomic_write_jsonl(self._dir(t) / "perturbed.jsonl", perturbed)
        return {"stage": "perturb"}

    def node_evaluate(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        perturbed = [PerturbedPair.model_validate(r) for r in read_jsonl(self._dir(t) / "perturbed.jsonl")]
        n_judge = sum(1 for p in perturbed if p.valid) * (2 if self.config.judge.positions == "both" else 1)
        with self.stage("evaluate", t, n_judge) as progress:
            result, cases = evaluate(self.target, perturbed, self.config.judge, progress=progress)
        atomic_write_jsonl(self._dir(t) / "judgments.jsonl", result.judgments)
        atomic_write_jsonl(self._dir(t) / "misjudged.jsonl", cases)
        return {"stage": "evaluate"}

    def node_deeper_explain(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        cases = [MisjudgedCase.model_validate(r) for r in read_jsonl(self._dir(t) / "misjudged.jsonl")]
        if self.config.deeper_explain.enabled:
            with self.stage("deeper_explain", t, len(cases)) as progress:
                cases = deeper_explain(self.target, cases, self.config.judge, self.config.deeper_explain, progress=progress)
        atomic_write_jsonl(self._dir(t) / "explanations.jsonl", cases)
        return {"stage": "deeper_explain"}

    def node_identify(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        cases = [MisjudgedCase.model_validate(r) for r in read_jsonl(self._dir(t) / "explanations.jsonl")]
        with self.stage("identify", t, len(cases)) as progress:
            records = identify_biases(self.teacher, cases, self.config.identify, seed=self.config.seed, progress=progress)
        atomic_write_jsonl(self._dir(t) / "identified.jsonl", records)
        return {"stage": "identify"}

    def node_merge(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        cases = [MisjudgedCase.model_validate(r) for r in read_jsonl(self._dir(t) / "explanations.jsonl")]
        records = [IdentifyRecord.model_validate(r) for r in read_jsonl(self._dir(t) / "identified.jsonl")]
        library = self.store.load_iteration(t - 1)
        existing = library.biases + (self._pending(t - 1) if self._late() else [])
        raw = candidates_from_records(
            records, cases, iteration=t, target_model=self.config.target.spec, taken_ids=[b.id for b in existing]
        )
        with self.stage("merge", t, None) as progress:
            result = merge_biases(
                self.teacher, self.embedder, raw, existing, self.config.merge, seed=self.config.seed, progress=progress
            )
        atomic_write_jsonl(self._dir(t) / "merges.jsonl", result.decisions)
        atomic_write_json(
            self._dir(t) / "merge_stats.json",
            {
                "raw_candidates": len(raw),
                "merged_into_library": result.merged_into_library,
                "candidates": len(result.candidates),
                "teacher_calls": result.teacher_calls,
                "all_pairs_calls": result.all_pairs_calls,
            },
        )
        atomic_write_json(self._dir(t) / "candidates.json", [b.model_dump(mode="json") for b in result.candidates])
        if self._late():
            self.store.save_iteration(library.with_biases(library.biases, iteration=t), overwrite=True)
        return {"stage": "merge", "n_candidates": len(result.candidates)}

    def baseline(self) -> JudgeResult:
        """The target's judgments on the unperturbed test set (computed once per run)."""
        path = self.run.baseline_dir / "result.json"
        if path.is_file():
            return JudgeResult.model_validate_json(path.read_text(encoding="utf-8"))
        pairs = self.test_pairs
        n = len(pairs) * (2 if self.config.judge.positions == "both" else 1)
        with self.stage("baseline", 0, n) as progress:
            result = judge_pairs(self.target, pairs, self.config.judge, progress=progress)
        summary = summarize(
            result, model=self.config.target.spec, data=describe_source(self.config.data.test, self.config.data.data_dir), settings=self.config.judge
        )
        atomic_write_json(self.run.baseline_dir / "summary.json", summary)
        atomic_write_json(path, result)
        return result

    def node_validate(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        if self._late():
            candidates = self._pending(t)
            library = self.store.load_iteration(t - 1)
        else:
            candidates = [Bias.model_validate(b) for b in read_jsonl_json(self._dir(t) / "candidates.json")]
            library = self.store.load_iteration(t - 1)
        cfg = self.config.validate_
        skipped: list[str] = []
        if cfg.max_candidates is not None and len(candidates) > cfg.max_candidates:
            ranked = sorted(candidates, key=lambda b: -len(b.evidence))
            keep = {b.id for b in ranked[: cfg.max_candidates]}
            skipped = [b.id for b in candidates if b.id not in keep]
            candidates = [b for b in candidates if b.id in keep]
        baseline = self.baseline()
        n = len(candidates) * len(self.test_pairs)
        n_judge = n * (2 if self.config.judge.positions == "both" else 1)
        with self.stage("validate", t, n + n_judge) as progress:
            out = validate_biases(
                self.teacher,
                self.target,
                candidates,
                self.test_pairs,
                baseline,
                perturb_settings=self.config.perturb,
                judge_settings=self.config.judge,
                settings=cfg,
                seed=self.config.seed,
                test_data=describe_source(self.config.data.test, self.config.data.data_dir),
                perturb_progress=progress,
                judge_progress=progress,
            )
        accepted = [b for b in out.candidates if b.validation and b.validation.accepted]
        d = self._dir(t)
        atomic_write_jsonl(d / "validation_perturbed.jsonl", out.perturbed)
        atomic_write_jsonl(d / "validation_judgments.jsonl", out.judgments)
        baseline_errors = [o for o in baseline.outcomes if o.correct is not None]
        atomic_write_json(
            d / "validation.json",
            {
                "iteration": t,
                "when": cfg.when,
                "acceptance": cfg.acceptance,
                "alpha": cfg.alpha,
                "correction": cfg.correction,
                "n_test": len(self.test_pairs),
                "baseline_error": (
                    sum(1 for o in baseline_errors if not o.correct) / len(baseline_errors) if baseline_errors else None
                ),
                "skipped_over_max_candidates": skipped,
                "accepted": [b.id for b in accepted],
                "candidates": [r.model_dump(mode="json") for r in out.records],
                "validated": [b.model_dump(mode="json") for b in out.candidates],
            },
        )
        new_library = library.with_biases(library.biases + accepted, iteration=t)
        self.store.save_iteration(new_library, overwrite=True)
        state_update: LoopState = {"stage": "validate", "n_accepted": len(accepted)}
        if not self._late():
            state_update["n_candidates"] = len(candidates) + len(skipped)
        self._update_state(library_size=len(new_library.biases), accepted_total=len(new_library.biases) - len(self.store.load_iteration(0).biases))
        return state_update

    def node_decide(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        reason = None
        if state.get("n_candidates", 0) == 0:
            reason = "no candidates: the candidate set is empty"
        elif not self._late() and state.get("n_accepted", 0) == 0:
            reason = "converged: no candidate was accepted"
        elif t >= self.config.max_iterations:
            reason = f"max_iterations ({self.config.max_iterations}) reached"
        return {"stage": "decide", "stop_reason": reason}

    def node_advance(self, state: LoopState) -> LoopState:
        return {"iteration": state["iteration"] + 1, "stage": "advance", "n_candidates": 0, "n_accepted": 0}

    def node_finish(self, state: LoopState) -> LoopState:
        t = state["iteration"]
        if not self.store.iterations() or self.store.iterations()[-1] < t:
            latest = self.store.load_latest()
            self.store.save_iteration(latest.with_biases(latest.biases, iteration=t), overwrite=True)
        latest = self.store.load_latest()
        self._update_state(status="finished", stage="finished", stop_reason=state.get("stop_reason"), library_size=len(latest.biases))
        self.run.event("finished", iteration=t, stop_reason=state.get("stop_reason"), library_size=len(latest.biases))
        return {"stage": "finished"}

    # -- wiring -------------------------------------------------------------------------------

    def build(self, checkpointer: Any) -> Any:
        from langgraph.graph import END, START, StateGraph

        late = self._late()
        g = StateGraph(LoopState)
        for name in ("start", "perturb", "evaluate", "deeper_explain", "identify", "merge", "validate", "decide", "advance", "finish"):
            g.add_node(name, getattr(self, f"node_{name}"))
        g.add_edge(START, "start")
        g.add_edge("start", "perturb")
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


def read_jsonl_json(path: Path) -> list[dict[str, Any]]:
    """candidates.json is a JSON list (easier to read for people than JSONL)."""
    import json

    from .errors import DataError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list")
    return data


def execute(
    run_dir: RunDir,
    config: RunConfig,
    *,
    resume: bool,
    show_progress: bool = True,
    engines: dict[str, Any] | None = None,
    embedder: Any | None = None,
) -> LoopState:
    """Run (or resume) the loop to its end; returns the final graph state."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    discovery = Discovery(run_dir, config, show_progress=show_progress, engines=engines, embedder=embedder)
    conn = sqlite3.connect(str(run_dir.checkpoint_path), check_same_thread=False)
    try:
        graph = discovery.build(SqliteSaver(conn))
        limit = 12 * config.max_iterations + 20
        run_config = {**THREAD, "recursion_limit": limit}
        if resume and graph.get_state(THREAD).next:
            run_dir.event("resume")
            final = graph.invoke(None, run_config)
        elif resume:
            final = graph.get_state(THREAD).values
        else:
            final = graph.invoke({"iteration": 0}, run_config)
        return final
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt):
            discovery._update_state(status="failed", error=str(exc)[:2000])
        raise
    finally:
        discovery.close()
        conn.close()

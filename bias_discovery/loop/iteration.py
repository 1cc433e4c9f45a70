"""An iteration's stages up to merge: perturb -> evaluate -> deeper_explain -> identify -> merge.

Staged (`pipeline: staged`), each stage reads the previous stage's file, runs over the whole
batch and writes its own, one graph node each. Streamed (the default), the perturb node runs
the four stages at once, item by item (`stages.stream_front_half`), and writes the same five
files in the same order; the evaluate, deeper_explain and identify nodes then find their files
written and pass. A run killed mid-stream redoes the perturb node, its calls answered by the
call cache.
"""

from __future__ import annotations

import functools
from collections import Counter

from ..data.pairs import PreferencePair
from ..judging import calls_per_pair
from ..library import Bias
from ..llm.base import Engine
from ..run import IterationRecord, MergeStats, MisjudgmentStats
from ..stages import (
    assign_biases,
    candidates_from_records,
    deeper_explain,
    evaluate,
    identify_biases,
    merge_biases,
    perturb,
)
from ..stages.evaluate import check_misjudged, misjudgment_check_calls
from ..stages.rewrite_checks import length_allowances
from ..stages.streamed import CHECK, EVALUATE, EXPLAIN, IDENTIFY, PERTURB, FrontHalfEngines, stream_front_half
from .bookkeeping import RunBook
from .resources import LoopResources


class IterationStages:
    """The stages of iteration `t` up to merge (module docstring), each reading and writing
    its files in the run record."""

    def __init__(self, resources: LoopResources, book: RunBook) -> None:
        self.resources = resources
        self.book = book
        self.config = resources.config
        self.run = resources.run

    @property
    def streamed(self) -> bool:
        return self.config.pipeline == "streamed"

    @property
    def late(self) -> bool:
        """`validate.when: late`: candidates wait for one validation at the end."""
        return self.config.validate_.when == "late"

    def record(self, t: int) -> IterationRecord:
        return self.run.iteration(t)

    def pending(self, upto: int) -> list[Bias]:
        """validate: late — merged candidates of iterations 1..upto awaiting validation."""
        found: list[Bias] = []
        for t in range(1, upto + 1):
            candidates = self.record(t).candidates
            if candidates.exists():
                found += candidates.read()
        return found

    def written_by_stream(self, t: int) -> bool:
        """Whether the streamed perturb node wrote iteration `t`'s files up to identify (the
        staged nodes after it then have nothing to do)."""
        return self.streamed and self.record(t).identified.exists()

    # -- the stages -----------------------------------------------------------------------------

    def pool(self, t: int) -> list[Bias]:
        """The biases iteration `t` perturbs with: the library of `t - 1` (and with
        `validate: late` the candidates pending)."""
        library = self.run.library.load_iteration(t - 1)
        return library.biases + (self.pending(t - 1) if self.late else [])

    @property
    def checker(self) -> Engine | None:
        """The misjudgment check's answer checker (validation's checker role), None when
        `misjudgment_check` is off."""
        return self.resources.roles["checker"] if self.config.misjudgment_check.enabled else None

    def perturb(self, t: int) -> None:
        """Rewrite each target pair to carry a bias sampled from the library of `t - 1`;
        streamed, also judge, check, explain and identify each (`front_half`)."""
        items = assign_biases(self.resources.target_pairs, self.pool(t), seed=self.config.seed, iteration=t)
        if self.streamed:
            self._front_half(t, items)
            return
        with self.book.single_step("perturb", t, len(items)) as progress:
            perturbed = perturb(
                self.resources.teacher, items, self.config.perturb, seed=self.config.seed, progress=progress
            )
        self.record(t).perturbed.write(perturbed)

    def _front_half(self, t: int, items: list[tuple[PreferencePair, Bias]]) -> None:
        """The streamed perturb -> identify, each stage booked and shown as its own."""
        c = self.config
        engines = FrontHalfEngines(
            perturb=self.resources.booked("teacher", PERTURB),
            evaluate=self.resources.booked("target", EVALUATE),
            explain=self.resources.booked("target", EXPLAIN),
            identify=self.resources.booked("teacher", IDENTIFY),
            check=self.resources.booked("checker", CHECK) if self.checker is not None else None,
        )
        out = stream_front_half(
            engines,
            items,
            perturb=c.perturb,
            judge=c.judge,
            explain=c.deeper_explain,
            identify=c.identify,
            seed=c.seed,
            steps={
                name: functools.partial(self.book.single_step, name, t)
                for name in (PERTURB, EVALUATE, CHECK, EXPLAIN, IDENTIFY)
            },
            check=c.misjudgment_check,
        )
        record = self.record(t)
        record.perturbed.write(out.perturbed)
        record.judgments.write(out.result.judgments)
        record.misjudged.write(out.cases)
        record.misjudgments.write(MisjudgmentStats.of(out.cases, checked=c.misjudgment_check.enabled))
        record.explanations.write(out.explained)
        record.identified.write(out.identified)  # last: `written_by_stream` reads it

    def evaluate(self, t: int) -> None:
        if self.written_by_stream(t):
            return
        record = self.record(t)
        perturbed = record.perturbed.read()
        n_judge = sum(1 for p in perturbed if p.valid) * calls_per_pair(self.config.judge)
        with self.book.single_step("evaluate", t, n_judge) as progress:
            result, cases = evaluate(
                self.resources.target, perturbed, self.config.judge, seed=self.config.seed, progress=progress
            )
        check = self.config.misjudgment_check
        if check.enabled:
            checker = self.checker
            n_check = misjudgment_check_calls(perturbed, cases) if checker is not None else 0
            with self.book.single_step(CHECK, t, n_check) as progress:
                cases = check_misjudged(
                    checker,
                    perturbed,
                    cases,
                    length_allowances(self.pool(t), check),
                    check,
                    seed=self.config.seed,
                    progress=progress,
                )
        record.judgments.write(result.judgments)
        record.misjudged.write(cases)
        record.misjudgments.write(MisjudgmentStats.of(cases, checked=check.enabled))

    def deeper_explain(self, t: int) -> None:
        if self.written_by_stream(t):
            return
        record = self.record(t)
        cases = [c for c in record.misjudged.read() if c.excluded is None]  # an excluded misjudgment is not explained
        if self.config.deeper_explain.enabled:
            with self.book.single_step("deeper_explain", t, len(cases)) as progress:
                cases = deeper_explain(
                    self.resources.target,
                    cases,
                    self.config.judge,
                    self.config.deeper_explain,
                    seed=self.config.seed,
                    progress=progress,
                )
        record.explanations.write(cases)

    def identify(self, t: int) -> None:
        if self.written_by_stream(t):
            return
        record = self.record(t)
        cases = record.explanations.read()
        with self.book.single_step("identify", t, len(cases)) as progress:
            records = identify_biases(
                self.resources.teacher, cases, self.config.identify, seed=self.config.seed, progress=progress
            )
        record.identified.write(records)

    def merge(self, t: int) -> int:
        """Merge the identified biases into candidates (against the library and each other);
        returns how many candidates there are."""
        record = self.record(t)
        cases = record.explanations.read()
        identified = record.identified.read()
        library = self.run.library.load_iteration(t - 1)
        existing = library.biases + (self.pending(t - 1) if self.late else [])
        raw = candidates_from_records(
            identified, cases, iteration=t, target_model=self.config.target.spec, taken_ids=[b.id for b in existing]
        )
        with self.book.stage("merge", t, None) as stage:
            result = merge_biases(
                self.resources.teacher,
                self.resources.embedder,
                raw,
                existing,
                self.config.merge,
                seed=self.config.seed,
                progress=stage.factory(),
            )
        record.merges.write(result.decisions)
        record.merge_stats.write(
            MergeStats(
                raw_candidates=len(raw),
                dropped_identifications=dict(sorted(Counter(r.dropped for r in identified if r.dropped).items())),
                merged_into_library=result.merged_into_library,
                candidates=len(result.candidates),
                teacher_calls=result.teacher_calls,
                all_pairs_calls=result.all_pairs_calls,
            )
        )
        record.candidates.write(result.candidates)
        if self.late:
            self.run.library.save_iteration(library.with_biases(library.biases, iteration=t), overwrite=True)
        return len(result.candidates)

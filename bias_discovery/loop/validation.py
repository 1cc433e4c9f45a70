"""The loop's validations: the baseline and the placebo (once per run) and a family of
candidates validated against them (each iteration, or the seed library at iteration 0)."""

from __future__ import annotations

import functools

from ..data.loaders import describe_source
from ..errors import DataError
from ..formatting import percent, pp
from ..judging import (
    JudgeResult,
    calls_per_pair,
    judge_pairs,
    judge_tasks,
    measure_of,
    mirror_tasks,
    orders_by_pair,
    summarize,
)
from ..library import Bias
from ..metrics import PositionProfile, position_profile
from ..run import ValidationReport
from ..stages import PlaceboArm, ValidationModels, ValidationSetup, record_checker, run_placebo, validate_biases
from ..stages.family import FamilySettings
from ..stages.streamed import Opener
from ..stages.validate import baseline_and_placebo
from ..stats import MEASURE_LABELS
from .bookkeeping import RunBook
from .resources import LoopResources


def mde_phrase(report: ValidationReport) -> str | None:
    """ "smallest detectable Δerror vs placebo ≈ 9.1 pp at n = 60 (80 % power, α = 0.017 per
    candidate)", or None when the report has no power figure."""
    if report.mde_n is None or report.mde_alpha is None:
        return None
    power = percent(report.power, digits=0, unit=" %") if report.power is not None else "80 %"
    size = "none (too few items)" if report.mde is None else f"≈ {pp(report.mde, unit=' pp').lstrip('+')}"
    return (
        f"smallest {MEASURE_LABELS[report.measure]} vs {report.control} detectable with {power} power: {size} at n = "
        f"{report.mde_n} (one-sided α = {report.mde_alpha:.3g} per candidate)"
    )


class LoopValidation:
    """Validation in the loop: its controls, paid for once per run and kept in the run record,
    and each family's validation files."""

    def __init__(self, resources: LoopResources, book: RunBook) -> None:
        self.resources = resources
        self.book = book
        self.config = resources.config
        self.run = resources.run

    def controls(self, with_placebo: bool) -> tuple[JudgeResult, PlaceboArm | None]:
        """The baseline, and the placebo (`with_placebo`, and `validate.control: placebo`), each
        computed once per run. Streamed, when neither is on file yet, both at once: the target
        judges the test set while the teacher rewrites it (`stages.baseline_and_placebo`)."""
        run, r, c = self.run, self.resources, self.config
        both = with_placebo and c.validate_.control == "placebo"
        if not (both and c.pipeline == "streamed" and not run.baseline.result.exists() and not run.placebo.exists()):
            baseline = self.baseline()
            return baseline, self.placebo(baseline) if with_placebo else None
        checker = r.booked("checker", "placebo") if r.checker is not None else None
        models = ValidationModels(
            teacher=r.booked("teacher", "placebo"), target=r.booked("target", "placebo"), checker=checker
        )
        steps: list[tuple[str, Opener]] = [
            ("baseline", functools.partial(self.book.single_step, "baseline", 0)),
            *self.book.stage_steps("placebo", 0, ["rewrite", *(["check"] if checker is not None else []), "judge"]),
        ]
        baseline, arm = baseline_and_placebo(
            r.booked("target", "baseline"),
            models,
            r.test_pairs,
            perturb_settings=c.perturb,
            judge_settings=c.judge,
            settings=c.validate_,
            seed=c.seed,
            steps=steps,
        )
        self._write_baseline(baseline)
        run.placebo.write(arm)
        return baseline, arm

    def baseline(self) -> JudgeResult:
        """The target's judgments on the unperturbed test set (computed once per run)."""
        baseline = self.run.baseline
        if baseline.result.exists():
            return baseline.result.read()
        pairs = self.resources.test_pairs
        n = len(pairs) * calls_per_pair(self.config.judge)
        with self.book.single_step("baseline", 0, n) as progress:
            result = judge_pairs(
                self.resources.target, pairs, self.config.judge, seed=self.config.seed, progress=progress
            )
        self._write_baseline(result)
        return result

    def position_profile(self, baseline: JudgeResult) -> PositionProfile | None:
        """The target's position preference on the test pairs (`validate.position_profile`;
        once per run): from the baseline's two orders with `positions: both`, else from the
        baseline and the other order of each pair, judged here (`baseline/mirror.json`). None
        for a pointwise judge: pointwise judges have no position."""
        config = self.config
        if config.judge.mode == "pointwise":  # NO_POSITION: each response is scored alone
            return None
        if not config.validate_.position_profile or config.judge.mitigation != "none":
            return None
        record = self.run.baseline
        if record.positions.exists():
            return record.positions.read()
        pairs = self.resources.test_pairs
        judgments = list(baseline.judgments)
        extra = 0
        if config.judge.positions != "both":
            if record.mirror.exists():
                mirror = record.mirror.read()
            else:
                tasks = mirror_tasks(pairs, baseline, config.judge, seed=config.seed)
                with self.book.single_step("positions", 0, len(tasks)) as progress:
                    mirror = judge_tasks(
                        self.resources.booked("target", "positions"), pairs, tasks, config.judge, progress=progress
                    )
                record.mirror.write(mirror)
            judgments += mirror.judgments
            extra = len(mirror.judgments)
        y_cr, y_rc = orders_by_pair(pairs, judgments)
        profile = position_profile(y_cr, y_rc, extra_calls=extra)
        record.positions.write(profile)
        return profile

    def _write_baseline(self, result: JudgeResult) -> None:
        summary = summarize(
            result,
            model=self.config.target.spec,
            data=describe_source(self.config.data.test, self.config.data.data_dir),
            settings=self.config.judge,
            seed=self.config.seed,
        )
        self.run.baseline.summary.write(summary)
        self.run.baseline.result.write(result)

    def placebo(self, baseline: JudgeResult) -> PlaceboArm | None:
        """The placebo arm (neutral rewrites of the test set, judged; once per run), or None
        when validation compares with the baseline."""
        if self.config.validate_.control != "placebo":
            return None
        record = self.run.placebo
        test_pairs = self.resources.test_pairs
        if record.exists():
            arm = record.read()
            if [p.pair_id for p in arm.perturbed] != [p.id for p in test_pairs]:
                raise DataError(f"{record.directory}: the placebo's pairs are not this run's test pairs")
            return arm
        with self.book.stage("placebo", 0, None) as stage:
            arm = run_placebo(
                self.resources.teacher,
                self.resources.target,
                self.resources.checker,
                test_pairs,
                baseline,
                perturb_settings=self.config.perturb,
                judge_settings=self.config.judge,
                settings=self.config.validate_,
                seed=self.config.seed,
                progress=stage.factory(),
                pipeline=self.config.pipeline,
            )
        record.write(arm)
        return arm

    def rejected_before(self, t: int, candidates: list[Bias]) -> dict[str, str]:
        """The candidates an earlier iteration (1 .. t-1) of this run rejected with the same
        name and definition: candidate id -> the rejected candidate's id."""
        rejected: dict[tuple[str, str], str] = {}
        for u in range(1, t):
            report = self.run.iteration(u).validation.read_if_exists()
            for b in report.validated if report is not None else []:
                if b.validation is not None and not b.validation.accepted:
                    rejected.setdefault((b.name.strip().lower(), b.definition.strip().lower()), b.id)
        found = {b.id: rejected.get((b.name.strip().lower(), b.definition.strip().lower())) for b in candidates}
        return {k: v for k, v in found.items() if v is not None}

    def validate(self, t: int, candidates: list[Bias], *, stage_name: str, rank: bool) -> ValidationReport:
        """Validate `candidates` as one family (iteration `t`; 0: the seed library) and write
        the iteration's validation files. `rank`: over `max_candidates`, keep those with most
        evidence (else the first ones, in library order)."""
        record = self.run.iteration(t)
        config = self.config
        cfg = config.validate_
        already = self.rejected_before(t, candidates) if rank else {}
        candidates = [b for b in candidates if b.id not in already]
        skipped: list[str] = []
        if cfg.max_candidates is not None and len(candidates) > cfg.max_candidates:
            ranked = sorted(candidates, key=lambda b: -len(b.evidence)) if rank else list(candidates)
            keep = {b.id for b in ranked[: cfg.max_candidates]}
            skipped = [b.id for b in candidates if b.id not in keep]
            candidates = [b for b in candidates if b.id in keep]
        baseline, placebo = self.controls(
            with_placebo=bool(candidates)
        )  # the placebo: paid for when a candidate needs it
        self.position_profile(baseline)
        setup = ValidationSetup(
            family=FamilySettings.planned(
                cfg,
                config.planned_validations,
                seed=config.seed,
                measure=measure_of(config.judge),
            ),
            perturb=config.perturb,
            judge=config.judge,
            test_data=describe_source(config.data.test, config.data.data_dir),
            pipeline=config.pipeline,
        )
        resources = self.resources
        models = ValidationModels(teacher=resources.teacher, target=resources.target, checker=resources.checker)
        with self.book.stage(stage_name, t, None) as stage:
            out = validate_biases(
                models, candidates, resources.test_pairs, baseline, setup, placebo=placebo, progress=stage.factory()
            )
        checker = config.answer_checker().spec if cfg.answer_check else None
        self_checked = config.self_checked if cfg.answer_check else None
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
            n_test=len(resources.test_pairs),
            baseline_error=baseline.error_rate(),
            skipped_over_max_candidates=skipped,
            skipped_already_rejected=already,
            accepted=[b.id for b in accepted],
            candidates=out.records,
            validated=validated,
            control=cfg.decision_control,
            rewrite_effect=placebo.effect if placebo is not None else None,
            alpha_family=setup.family.family_alpha,
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
            data_overlap=resources.data_overlap,
        )
        record.validation.write(report)
        return report

"""Run a bias matrix: every bias of a library validated against every judge, on the *same*
perturbed and placebo items.

The teacher rewrites each test pair's rejected response once per bias and once neutrally
(the placebo); one checker checks every rewrite's final answer; then each judge judges the
unchanged pairs, the placebo and every biased rewrite in one batch. Every call goes through
the matrix directory's call cache (``DIR/calls.sqlite``), so the rewrites are written once
and shared by all judges; a rerun after a kill, or with a judge added, pays only the calls
not made yet (a judge added later pays its own calls and no teacher call).

Per judge and bias the numbers are the loop's validation test: Δerror against the control
(the placebo by default) on the items valid in both arms, exact one-sided McNemar, a paired
bootstrap CI, and one correction across the whole matrix (every judge x bias cell, and the
jury row). Every cell sees every test item (no sequential looks): judges are compared on the
same items. The jury is the judges' majority verdict per item and order (a tie of votes is
invalid), tested the same way. Per bias, each pair of judges is compared on the items valid
for both (`stats.compare_effects`), with a correction of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..config import ValidateSettings
from ..data.loaders import bad_rows_for, describe_source, load_pairs
from ..data.overlap import DataOverlap
from ..data.pairs import Order, PreferencePair
from ..errors import ConfigError, DataError
from ..formatting import plural
from ..judging import calls_per_pair, judge_pairs, order_for
from ..library import Bias, utc_now_iso
from ..llm.base import Engine
from ..llm.cache import CachedEngine
from ..llm.meter import MeteredEngine
from ..llm.roles import ModelRoles
from ..metrics import Preference
from ..mitigation import jury_verdict
from ..progress import ProgressFactory, progress_or_quiet
from ..run.reviews import Review
from ..settings.judge import JudgeSettings
from ..stages.family import (
    FamilySettings,
    acceptance_thresholds,
    compare_arms,
    decide,
    effects,
    run_looks,
    smallest_detectable,
    with_decision,
)
from ..stages.perturb import PLACEBO_ID, perturb, rewrite_neutrally
from ..stages.records import PerturbedPair
from ..stages.rewrite_checks import (
    answer_changes,
    check_answers,
    check_calls,
    extracted_checks,
    length_ratio,
    unverifiable,
)
from ..stats import compare_effects, compare_paired, decide_differences
from ._config import JURY, MatrixConfig, MatrixJudge, load_matrix_library, selected_biases
from ._output import prepare_matrix_dir, write_matrix
from ._records import (
    JudgeComparison,
    JudgeRecord,
    MatrixCalls,
    MatrixCell,
    MatrixJudgment,
    MatrixResult,
    MatrixSettingsRecord,
    RewriteSummary,
)

__all__ = ["BASELINE", "judge_role", "run_matrix"]

BASELINE = "baseline"
"""The arm of the unchanged test pairs."""


def judge_role(name: str) -> str:
    """The model role of judge `name` (roles with equal model configs share one engine)."""
    return f"judge:{name}"


@dataclass
class _Arm:
    """One judge's verdicts on one arm, aligned with the test items."""

    errors: list[bool | None]
    """True wrong, False right, None invalid or not judged (the rewrite was invalid)."""
    votes: list[dict[Order, Preference | None] | None]
    """Per item, the judge's verdict in each order the matrix shows it (None: not judged).
    A mitigated judge votes its combined verdict in every order."""


class _PaidCalls:
    """Calls each role sent to its model, as its call cache counted them (steps run one at a
    time, so a cache shared by two roles books each step to the role that made it)."""

    def __init__(self, roles: ModelRoles) -> None:
        self.roles = roles
        self.paid: dict[str, int] = {}

    @contextmanager
    def booked(self, role: str) -> Iterator[MeteredEngine]:
        engine = self.roles[role]
        cache = engine.engine
        if not isinstance(cache, CachedEngine):
            raise RuntimeError(f"the {role} engine does not go through the call cache")
        before = cache.misses
        try:
            yield engine
        finally:
            self.paid[role] = self.paid.get(role, 0) + cache.misses - before


def _split(rewrites: Sequence[PerturbedPair], n: int) -> list[list[PerturbedPair]]:
    return [list(rewrites[start : start + n]) for start in range(0, len(rewrites), n)]


def _as_items(rewrites: Sequence[PerturbedPair]) -> list[PreferencePair | None]:
    return [r.to_pair() if r.valid else None for r in rewrites]


def _judge_arms(
    engine: Engine,
    judge_name: str,
    arms: Mapping[str, Sequence[PreferencePair | None]],
    settings: JudgeSettings,
    orders: Sequence[Sequence[Order]],
    *,
    seed: int,
    progress: ProgressFactory,
) -> tuple[dict[str, _Arm], list[MatrixJudgment]]:
    """One judge on every arm, in one batch; each arm's verdicts aligned with the test items."""
    flat = [(arm, i, pair) for arm, items in arms.items() for i, pair in enumerate(items) if pair is not None]
    with progress(f"judge {judge_name}", len(flat) * calls_per_pair(settings)) as advance:
        result = judge_pairs(engine, [pair for _, _, pair in flat], settings, seed=seed, progress=advance)
    n = len(orders)
    out = {arm: _Arm(errors=[None] * n, votes=[None] * n) for arm in arms}
    judgments: list[MatrixJudgment] = []
    start = 0
    for (arm, i, _), outcome in zip(flat, result.outcomes):
        mine = result.judgments[start : start + len(outcome.orders)]
        start += len(outcome.orders)
        out[arm].errors[i] = None if outcome.correct is None else not outcome.correct
        if settings.mitigation == "none" and settings.mode == "pairwise":
            out[arm].votes[i] = {cast(Order, j.order): j.picked for j in mine}
        else:  # a mitigation's combined verdict, or a pointwise judge's (higher score) in every order
            out[arm].votes[i] = {order: outcome.preference for order in orders[i]}
        judgments += [MatrixJudgment(**j.model_dump(), judge=judge_name, arm=arm) for j in mine]
    return out, judgments


def jury_errors(arms: Sequence[_Arm], orders: Sequence[Sequence[Order]]) -> list[bool | None]:
    """The jury's error per item: in each order the judges' majority verdict (`jury_verdict`:
    a tie of votes is invalid); right only when every order's verdict is the chosen response,
    invalid when any order's is."""
    errors: list[bool | None] = []
    for i, item_orders in enumerate(orders):
        votes = [arm.votes[i] for arm in arms]
        if any(v is None for v in votes):
            errors.append(None)
            continue
        verdicts = [jury_verdict([v.get(order) for v in votes if v is not None]) for order in item_orders]
        errors.append(None if any(x is None for x in verdicts) else not all(x == "chosen" for x in verdicts))
    return errors


def _shared_rewrites(
    paid: _PaidCalls,
    config: MatrixConfig,
    biases: Sequence[Bias],
    pairs: Sequence[PreferencePair],
    *,
    checked: bool,
    bar: ProgressFactory,
) -> tuple[list[PerturbedPair], list[list[PerturbedPair]]]:
    """The rewrites every judge sees: the teacher's, one per pair and bias (and one neutral per
    pair with the placebo control), each answer checked by the one checker; returns (placebo,
    per bias)."""
    seed, n = config.seed, len(pairs)
    with paid.booked("teacher") as teacher:
        work = [(pair, bias) for bias in biases for pair in pairs]
        with bar("teacher: rewrite with each bias", len(work)) as advance:
            rewrites = perturb(teacher, work, config.perturb, seed=seed, progress=advance)
        placebo: list[PerturbedPair] = []
        if config.validate_.control == "placebo":
            with bar("teacher: placebo (neutral rewrite)", n) as advance:
                placebo = rewrite_neutrally(teacher, pairs, config.perturb, seed=seed, progress=advance)
    if checked:
        with paid.booked("checker") as checker:
            everything = placebo + rewrites
            with bar("checker: answers", check_calls(everything)) as advance:
                everything = check_answers(checker, everything, seed=seed, progress=advance)
        placebo, rewrites = everything[: len(placebo)], everything[len(placebo) :]
    return placebo, _split(rewrites, n)


def _judge_record(judge: MatrixJudge, arms: Mapping[str, _Arm], rules: ValidateSettings, seed: int) -> JudgeRecord:
    """A judge's configuration, its error on the unchanged items and its rewrite effect."""
    base = arms[BASELINE].errors
    valid = [e for e in base if e is not None]
    placebo = arms.get(PLACEBO_ID)
    return JudgeRecord(
        name=judge.name,
        model=judge.spec,
        prompt=judge.judge.prompt,
        mitigation=judge.judge.mitigation,
        calls_per_item=calls_per_pair(judge.judge),
        baseline_error=sum(valid) / len(valid) if valid else None,
        n_baseline_valid=len(valid),
        rewrite_effect=compare_paired(
            base, placebo.errors, n_boot=rules.n_boot, confidence=rules.confidence, seed=seed, control=BASELINE
        )
        if placebo is not None
        else None,
    )


def _rewrite_summary(arm: str, rewrites: Sequence[PerturbedPair], checked: bool) -> RewriteSummary:
    reasons: dict[str, int] = {}
    for r in rewrites:
        if not r.valid:
            reasons[r.invalid_reason or "invalid"] = reasons.get(r.invalid_reason or "invalid", 0) + 1
    n_checked, n_changed = answer_changes(rewrites)
    return RewriteSummary(
        bias=arm,
        n=len(rewrites),
        n_valid=sum(1 for r in rewrites if r.valid),
        invalid_reasons=dict(sorted(reasons.items())),
        n_answer_checked=n_checked if checked else None,
        n_answer_changed=n_changed if checked else None,
        n_answer_unverifiable=unverifiable(rewrites) if checked else None,
        n_answer_extracted=extracted_checks(rewrites) if checked else None,
        answer_change_rate=n_changed / n_checked if n_checked else None,
        length_ratio=length_ratio(rewrites),
    )


def _data_description(config: MatrixConfig, n: int) -> str:
    where = describe_source(config.data.test, config.data.data_dir, portable=True)
    return where if config.data.limit is None or n < config.data.limit else f"{where}, a seeded sample"


def _discovery_overlap(run_dir: Path, pairs: Sequence[PreferencePair], data_name: str, *, allow: bool) -> DataOverlap:
    """A run's biases measured on its own discovery items would be circular: refused unless
    `data.allow_overlap` (`--allow-overlap`), recorded either way."""
    from ..config import load_run_config
    from ..run import RunDir
    from ..run.overlap import check_run_overlap

    run = RunDir(run_dir)
    if not run.config_path.is_file():
        raise ConfigError(
            f"library {run_dir}: the run has no config.yaml, so the items its biases were discovered on are unknown; "
            "give the library file (RUN_DIR/library/latest.json) to validate its biases anyway"
        )
    how = "pass `allow_overlap` (data.allow_overlap: true)"
    try:
        return check_run_overlap(
            run, load_run_config(run.config_path), pairs, data_name=f"the matrix's test data {data_name}", allow=allow
        )
    except DataError as exc:
        raise DataError(str(exc).replace("pass `allow_overlap`", how)) from None


def matrix_family(config: MatrixConfig, *, n_judges: int, n_biases: int, jury: bool) -> FamilySettings:
    """The matrix as one validation family: every judge x bias cell and the jury row, at the
    configured alpha, correction and min_delta, with one look (every cell sees every item)."""
    rows = plural(n_judges, "judge") + (" and the jury" if jury else "")
    m = (n_judges + (1 if jury else 0)) * n_biases
    return FamilySettings.planned(
        config.validate_.model_copy(update={"error_control": "run"}),
        1,
        seed=config.seed,
        scope="matrix",
        unit="cell",
        members=f"{plural(m, 'cell')}: {rows} × {plural(n_biases, 'bias')}",
    )


def _decide_cells(
    rows: Sequence[str],
    biases: Sequence[Bias],
    verdicts: Mapping[str, Mapping[str, _Arm]],
    control_arms: Mapping[str, str],
    family: FamilySettings,
    n: int,
    measures: Mapping[str, str] | None = None,
) -> list[MatrixCell]:
    """Each row (a judge, the jury) against its own controls, the whole matrix decided as one
    family (`sequential.run_looks`, `compare_arms`, `decide`, `effects`, `smallest_detectable`);
    `measures` names each judge's measure (`MatrixCell.measure`; the jury's is its own)."""
    measures = measures or {}
    decisive = family.rules.decision_control
    size = len(rows) * len(biases)
    looks, comparisons = [], []
    for row in rows:
        arm_errors = [verdicts[row][bias.id].errors for bias in biases]

        def fetch(
            look: int, active: Sequence[int], items: Sequence[int], arm_errors: list[list[bool | None]] = arm_errors
        ) -> list[list[bool | None]]:
            return [[arm_errors[k][i] for i in items] for k in active]

        controls = {name: verdicts[row][arm].errors for name, arm in control_arms.items()}
        row_looks = run_looks(controls[decisive], len(biases), fetch, family, list(range(n)), family_size=size)
        looks.append(row_looks)
        comparisons.append(compare_arms(row_looks, controls, family))
    decided = decide(looks, [c[decisive] for row in comparisons for c in row], family, decisive)
    thresholds = acceptance_thresholds(looks, decided, family)
    cells = []
    for r, (row, row_looks, row_comparisons) in enumerate(zip(rows, looks, comparisons)):
        row_decided = decided[r * len(biases) : (r + 1) * len(biases)]
        row_thresholds = thresholds[r * len(biases) : (r + 1) * len(biases)]
        for k, (bias, d, effect) in enumerate(
            zip(biases, row_decided, effects(row_looks, row_decided, family, row_thresholds))
        ):
            mde, _ = smallest_detectable(row_looks, k, d, family)
            cells.append(
                MatrixCell(
                    judge=row,
                    bias=bias.id,
                    bias_name=bias.name,
                    control=decisive,
                    delta=effect.delta,
                    ci_low=effect.ci_low,
                    ci_high=effect.ci_high,
                    effect_method=effect.method,
                    p_value=d.p_value,
                    p_adjusted=d.p_adjusted,
                    accepted=bool(d.accepted),
                    n=d.n,
                    n_excluded_invalid=d.n_excluded_invalid,
                    mde=mde,
                    control_error=d.control_error,
                    arm_error=d.arm_error,
                    comparisons=with_decision(row_comparisons[k], d, decisive),
                    measure=measures.get(row, "jury pair error"),
                )
            )
    return cells


def _compare_judges(
    names: Sequence[str],
    biases: Sequence[Bias],
    verdicts: Mapping[str, Mapping[str, _Arm]],
    control_arm: str,
    family: FamilySettings,
) -> list[JudgeComparison]:
    """Per bias, every pair of judges on the items valid for both (`stats.compare_effects`),
    all pairs of all biases one family of their own."""
    rules = family.rules
    raw = [
        (
            bias,
            a,
            b,
            compare_effects(
                verdicts[a][control_arm].errors,
                verdicts[a][bias.id].errors,
                verdicts[b][control_arm].errors,
                verdicts[b][bias.id].errors,
                n_boot=rules.n_boot,
                confidence=rules.confidence,
                seed=family.seed,
            ),
        )
        for bias in biases
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    ]
    decided = decide_differences([r[3] for r in raw], alpha=family.family_alpha, correction=rules.correction)
    return [
        JudgeComparison(
            **d.model_dump(),
            bias=bias.id,
            judge_a=a,
            judge_b=b,
            larger=(a if d.difference > 0 else b) if d.significant and d.difference != 0 else None,
        )
        for (bias, a, b, _), d in zip(raw, decided)
    ]


def comparison_statement(config: MatrixConfig, n_comparisons: int, n_biases: int, n_pairs: int) -> str:
    """What the judge comparisons control (a family of their own)."""
    rules = config.validate_
    what = (
        f"the {plural(n_comparisons, 'judge comparison')} ({plural(n_biases, 'bias')} × "
        f"{plural(n_pairs, 'pair')} of judges; two-sided exact sign-flip test of the difference in Δerror over the "
        f"{rules.decision_control}, on the items valid for both judges)"
    )
    if rules.correction == "holm":
        return f"Family-wise error over {what}: the chance of calling any two judges different when they are not is at most α = {rules.alpha:g} (Holm)."
    if rules.correction == "bh":
        return f"False-discovery rate over {what}: among the differences called, the expected share of false ones is at most {rules.alpha:g} (Benjamini-Hochberg)."
    return f"No multiplicity control over {what}: each is tested alone at α = {rules.alpha:g}."


def _run_reviews(run_dir: Path) -> dict[str, Review]:
    """The newest review of each bias of the run the library comes from (a reviews file that
    does not parse is an error naming it, before any model is called)."""
    from ..run import RunDir

    return RunDir(run_dir).reviews.decisions()


def _matrix_biases(config: MatrixConfig) -> tuple[list[Bias], str, Path | None]:
    """The biases of the matrix: the library's selected ones, its description and its run."""
    library, library_desc, library_run = load_matrix_library(config.library, config.seed_library)
    biases: list[Bias] = selected_biases(library, config.biases, library_desc)
    if not biases:
        raise ConfigError(f"library {library_desc} holds no bias")
    return biases, library_desc, library_run


def _matrix_pairs(config: MatrixConfig) -> tuple[list[PreferencePair], int]:
    """The test pairs of the matrix and how many bad rows were skipped loading them."""
    bad_rows = bad_rows_for(config.data.test, config.data.skip_bad_rows)
    pairs = load_pairs(
        config.data.test, data_dir=config.data.data_dir, limit=config.data.limit, seed=config.seed, bad_rows=bad_rows
    )
    if not pairs:
        raise DataError(f"test data {config.data.test!r} has no pairs")
    return pairs, len(bad_rows or [])


@dataclass
class _MatrixInputs:
    """What the matrix runs on, loaded and checked before any model is called or the directory
    is touched (a bad library, empty data or an overlap with the discovery items costs
    nothing)."""

    biases: list[Bias]
    library_desc: str
    pairs: list[PreferencePair]
    skipped_rows: int
    data_name: str
    overlap: DataOverlap | None
    reviews: dict[str, Review]


def _matrix_inputs(config: MatrixConfig) -> _MatrixInputs:
    """The biases, the test pairs and, for a library from a run, the overlap with its discovery
    items and its reviews."""
    biases, library_desc, library_run = _matrix_biases(config)
    pairs, skipped_rows = _matrix_pairs(config)
    data_name = _data_description(config, len(pairs))
    overlap = (
        _discovery_overlap(library_run, pairs, data_name, allow=config.data.allow_overlap) if library_run else None
    )
    return _MatrixInputs(
        biases=biases,
        library_desc=library_desc,
        pairs=pairs,
        skipped_rows=skipped_rows,
        data_name=data_name,
        overlap=overlap,
        reviews=_run_reviews(library_run) if library_run else {},
    )


@dataclass
class _ModelOutputs:
    """What the models gave: the shared rewrites, each judge's verdicts per arm, their
    judgments and the calls each role paid (cache misses)."""

    placebo: list[PerturbedPair]
    by_bias: list[list[PerturbedPair]]
    arms: list[str]
    verdicts: dict[str, dict[str, _Arm]]
    judgments: list[MatrixJudgment]
    paid: dict[str, int]


def _call_models(
    config: MatrixConfig,
    inputs: _MatrixInputs,
    orders: Sequence[Sequence[Order]],
    cache_path: Path,
    engines: Mapping[str, Engine] | None,
    bar: ProgressFactory,
) -> _ModelOutputs:
    """Every model call of the matrix, through the directory's call cache: the teacher's and
    checker's shared rewrites, then each judge on every arm in one batch."""
    checker_config = config.answer_checker()
    configs = {"teacher": config.teacher, **{judge_role(j.name): j.model for j in config.judges}}
    if checker_config is not None:
        configs["checker"] = checker_config
    injected = {
        role: e if isinstance(e, CachedEngine) else CachedEngine(e, cache_path) for role, e in (engines or {}).items()
    }
    pairs, biases = inputs.pairs, inputs.biases
    with ModelRoles(configs, cache_path=cache_path, engines=injected) as roles:
        paid = _PaidCalls(roles)
        placebo, by_bias = _shared_rewrites(paid, config, biases, pairs, checked=checker_config is not None, bar=bar)
        arms: dict[str, list[PreferencePair | None]] = {BASELINE: list(pairs)}
        if placebo:
            arms[PLACEBO_ID] = _as_items(placebo)
        arms.update({bias.id: _as_items(r) for bias, r in zip(biases, by_bias)})
        verdicts: dict[str, dict[str, _Arm]] = {}
        judgments: list[MatrixJudgment] = []
        for judge in config.judges:
            with paid.booked(judge_role(judge.name)) as engine:
                verdicts[judge.name], mine = _judge_arms(
                    engine, judge.name, arms, judge.judge, orders, seed=config.seed, progress=bar
                )
            judgments += mine
    return _ModelOutputs(
        placebo=placebo, by_bias=by_bias, arms=list(arms), verdicts=verdicts, judgments=judgments, paid=paid.paid
    )


@dataclass
class _MatrixDecisions:
    """The matrix's statistics: its cells (judges and jury), the judge comparisons and the
    family they were decided in."""

    cells: list[MatrixCell]
    differences: list[JudgeComparison]
    family: FamilySettings


def _decide_matrix(
    config: MatrixConfig, biases: Sequence[Bias], outputs: _ModelOutputs, orders: Sequence[Sequence[Order]]
) -> _MatrixDecisions:
    """Adds the jury row (with two judges or more) to `outputs.verdicts`, decides every cell as one
    family and compares the judges per bias."""
    names = [j.name for j in config.judges]
    rows = list(names)
    if len(names) >= 2:
        rows.append(JURY)
        outputs.verdicts[JURY] = {
            arm: _Arm(
                errors=jury_errors([outputs.verdicts[name][arm] for name in names], orders), votes=[None] * len(orders)
            )
            for arm in outputs.arms
        }
    control_arms = {BASELINE: BASELINE, **({"placebo": PLACEBO_ID} if outputs.placebo else {})}
    family = matrix_family(config, n_judges=len(names), n_biases=len(biases), jury=JURY in rows)
    measures = {j.name: "pointwise pair error" if j.judge.mode == "pointwise" else "pair error" for j in config.judges}
    cells = _decide_cells(rows, biases, outputs.verdicts, control_arms, family, len(orders), measures)
    differences = _compare_judges(
        names, biases, outputs.verdicts, control_arms[config.validate_.decision_control], family
    )
    return _MatrixDecisions(cells=cells, differences=differences, family=family)


def _matrix_result(
    config: MatrixConfig, inputs: _MatrixInputs, outputs: _ModelOutputs, decided: _MatrixDecisions
) -> MatrixResult:
    """matrix.json's record: the inputs, settings, per-judge records, rewrite summaries, cells,
    comparisons and paid outputs."""
    rules, biases, names = config.validate_, inputs.biases, [j.name for j in config.judges]
    checker_config = config.answer_checker()
    checked = checker_config is not None
    summaries = ([_rewrite_summary(PLACEBO_ID, outputs.placebo, checked)] if outputs.placebo else []) + [
        _rewrite_summary(bias.id, r, checked) for bias, r in zip(biases, outputs.by_bias)
    ]
    differences = decided.differences
    return MatrixResult(
        name=config.name,
        created_at=utc_now_iso(),
        seed=config.seed,
        data=inputs.data_name,
        data_overlap=inputs.overlap,
        n_test=len(inputs.pairs),
        skipped_rows=inputs.skipped_rows,
        library=inputs.library_desc,
        reviews={b.id: r for b in biases if (r := inputs.reviews.get(b.id)) is not None},
        teacher=config.teacher.spec,
        checker=checker_config.spec if checker_config is not None else None,
        self_checked=config.self_checked,
        settings=MatrixSettingsRecord(
            acceptance=rules.acceptance,
            control=rules.decision_control,
            alpha=rules.alpha,
            correction=rules.correction,
            min_delta=rules.min_delta,
            confidence=rules.confidence,
            power=rules.power,
            n_boot=rules.n_boot,
            positions=config.judge.positions,
        ),
        judges=names,
        biases=[b.id for b in biases],
        bias_names={b.id: b.name for b in biases},
        judge_details=[
            _judge_record(judge, outputs.verdicts[judge.name], rules, config.seed) for judge in config.judges
        ],
        rewrites=summaries,
        cells=[c for c in decided.cells if c.judge != JURY],
        jury=[c for c in decided.cells if c.judge == JURY],
        family_statement=decided.family.error_statement(rules.decision_control),
        judge_comparisons=differences,
        comparison_statement=comparison_statement(
            config, len(differences), len(biases), len(names) * (len(names) - 1) // 2
        )
        if differences
        else "",
        calls=MatrixCalls(
            teacher=outputs.paid.get("teacher", 0),
            checker=outputs.paid.get("checker", 0),
            judges={name: outputs.paid.get(judge_role(name), 0) for name in names},
        ),
    )


def run_matrix(
    config: MatrixConfig,
    out_dir: Path | str,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
) -> MatrixResult:
    """Validate every bias of `config`'s library against every judge on the same items and
    write matrix.json, matrix.csv and matrix.html (and the rewrites and judgments) into
    `out_dir`, which keeps the call cache: a rerun (after a kill, with a judge added) pays
    only the calls not made yet.

    `engines` replaces models by role (`teacher`, `checker`, `judge:NAME`; tests use scripted
    fakes); each is put behind the directory's call cache.
    """
    out = Path(out_dir)
    inputs = _matrix_inputs(config)
    cache_path = prepare_matrix_dir(out, config)
    orders = [order_for(pair, config.judge.positions, config.seed) for pair in inputs.pairs]
    outputs = _call_models(config, inputs, orders, cache_path, engines, progress_or_quiet(progress))
    decided = _decide_matrix(config, inputs.biases, outputs, orders)
    result = _matrix_result(config, inputs, outputs, decided)
    write_matrix(
        out, result, [*outputs.placebo, *(r for rewrites in outputs.by_bias for r in rewrites)], outputs.judgments
    )
    return result

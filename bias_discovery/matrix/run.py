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

from ..data.loaders import describe_source, load_pairs
from ..data.pairs import Order, PreferencePair
from ..errors import ConfigError, DataError
from ..formatting import plural
from ..judging import JudgeSettings, calls_per_pair, judge_pairs, order_for
from ..library import Bias, utc_now_iso
from ..llm.base import Engine
from ..llm.cache import CachedEngine
from ..llm.meter import MeteredEngine
from ..llm.roles import ModelRoles
from ..metrics import Preference
from ..mitigation import jury_verdict
from ..progress import ProgressFactory, progress_or_quiet
from ..stages.perturb import PLACEBO_ID, perturb, rewrite_neutrally
from ..stages.records import PerturbedPair
from ..stages.rewrite_checks import answer_changes, check_answers, check_calls, extracted_checks, length_ratio, unverifiable
from ..stats import (
    PairedComparison,
    compare_effects,
    compare_paired,
    decide_acceptance,
    decide_differences,
    min_detectable_delta,
    null_discordance,
)
from .config import JURY, MatrixConfig, load_matrix_library, selected_biases
from .output import prepare_matrix_dir, write_matrix
from .records import (
    JudgeComparison,
    JudgeRecord,
    MatrixCalls,
    MatrixCell,
    MatrixJudgment,
    MatrixResult,
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
        if settings.mitigation == "none":
            out[arm].votes[i] = {j.order: j.picked for j in mine}
        else:
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
    return where if config.data.limit is None else f"{where}, seeded sample of {plural(n, 'pair')}"


def family_statement(config: MatrixConfig, n_judges: int, n_biases: int, jury: bool) -> str:
    """What the cells' decisions control: the family is the whole matrix."""
    rules = config.validate_
    control = rules.decision_control
    m = (n_judges + (1 if jury else 0)) * n_biases
    rows = plural(n_judges, "judge") + (" and the jury" if jury else "")
    family = f"the matrix's {plural(m, 'cell')} ({rows} x {plural(n_biases, 'bias', 'biases')})"
    if rules.acceptance == "paper":
        return (
            "No error control: the paper's rule (error with the bias > error on the unchanged items) accepts "
            "without a test; a cell with no effect is accepted about half of the time."
        )
    null = f"a cell whose judge's error does not rise over the {control}"
    if rules.min_delta > 0:
        null = f"a cell whose Δerror over the {control} is at most {rules.min_delta:g}"
    if rules.correction == "holm":
        return f"Family-wise error over {family}: the chance that any {null} is accepted is at most α = {rules.alpha:g} (Holm across all cells)."
    if rules.correction == "bh":
        return (
            f"False-discovery rate over {family}: among the accepted cells, the expected share of cells whose judge's "
            f"error does not rise over the {control} is at most {rules.alpha:g} (Benjamini-Hochberg across all cells)."
        )
    return (
        f"No multiplicity control: each of {family} is tested alone at α = {rules.alpha:g}; the chance of some false "
        f"acceptance can reach {m} x {rules.alpha:g}."
    )


def comparison_statement(config: MatrixConfig, n_comparisons: int, n_biases: int, n_pairs: int) -> str:
    """What the judge comparisons control (a family of their own)."""
    rules = config.validate_
    what = (
        f"the {plural(n_comparisons, 'judge comparison')} ({plural(n_biases, 'bias', 'biases')} x "
        f"{plural(n_pairs, 'pair')} of judges; two-sided exact sign-flip test of the difference in Δerror over the "
        f"{rules.decision_control}, on the items valid for both judges)"
    )
    if rules.correction == "holm":
        return f"Family-wise error over {what}: the chance of calling any two judges different when they are not is at most α = {rules.alpha:g} (Holm)."
    if rules.correction == "bh":
        return f"False-discovery rate over {what}: among the differences called, the expected share of false ones is at most {rules.alpha:g} (Benjamini-Hochberg)."
    return f"No multiplicity control over {what}: each is tested alone at α = {rules.alpha:g}."


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
    bar = progress_or_quiet(progress)
    rules = config.validate_
    library, library_desc, _ = load_matrix_library(config.library, config.seed_library)
    biases: list[Bias] = selected_biases(library, config.biases, library_desc)
    if not biases:
        raise ConfigError(f"library {library_desc} holds no bias")
    pairs = load_pairs(config.data.test, data_dir=config.data.data_dir, limit=config.data.limit, seed=config.seed)
    if not pairs:
        raise DataError(f"test data {config.data.test!r} has no pairs")
    cache_path = prepare_matrix_dir(out, config)
    seed = config.seed
    n = len(pairs)
    checker_config = config.answer_checker()
    configs = {"teacher": config.teacher, **{judge_role(j.name): j.model for j in config.judges}}
    if checker_config is not None:
        configs["checker"] = checker_config
    injected = {role: e if isinstance(e, CachedEngine) else CachedEngine(e, cache_path) for role, e in (engines or {}).items()}
    with ModelRoles(configs, cache_path=cache_path, engines=injected) as roles:
        paid = _PaidCalls(roles)
        with paid.booked("teacher") as teacher:
            work = [(pair, bias) for bias in biases for pair in pairs]
            with bar("teacher: rewrite with each bias", len(work)) as advance:
                rewrites = perturb(teacher, work, config.perturb, seed=seed, progress=advance)
            placebo: list[PerturbedPair] = []
            if rules.control == "placebo":
                with bar("teacher: placebo (neutral rewrite)", n) as advance:
                    placebo = rewrite_neutrally(teacher, pairs, config.perturb, seed=seed, progress=advance)
        if checker_config is not None:
            with paid.booked("checker") as checker:
                everything = placebo + rewrites
                with bar("checker: answers", check_calls(everything)) as advance:
                    everything = check_answers(checker, everything, seed=seed, progress=advance)
            placebo, rewrites = everything[: len(placebo)], everything[len(placebo) :]
        by_bias = _split(rewrites, n)
        arms: dict[str, list[PreferencePair | None]] = {BASELINE: list(pairs)}
        if placebo:
            arms[PLACEBO_ID] = _as_items(placebo)
        arms.update({bias.id: _as_items(r) for bias, r in zip(biases, by_bias)})
        orders = [order_for(pair, config.judge.positions, seed) for pair in pairs]
        verdicts: dict[str, dict[str, _Arm]] = {}
        judgments: list[MatrixJudgment] = []
        for judge in config.judges:
            role = judge_role(judge.name)
            with paid.booked(role) as engine:
                verdicts[judge.name], mine = _judge_arms(engine, judge.name, arms, judge.judge, orders, seed=seed, progress=bar)
            judgments += mine

    names = [j.name for j in config.judges]
    with_jury = len(names) >= 2
    rows = list(names) + ([JURY] if with_jury else [])
    if with_jury:
        verdicts[JURY] = {
            arm: _Arm(errors=jury_errors([verdicts[name][arm] for name in names], orders), votes=[None] * n) for arm in arms
        }
    decisive = rules.decision_control
    control_arms = {BASELINE: BASELINE, **({"placebo": PLACEBO_ID} if placebo else {})}

    def compared(row: str, bias: Bias) -> dict[str, PairedComparison]:
        return {
            name: compare_paired(
                verdicts[row][arm].errors, verdicts[row][bias.id].errors, n_boot=rules.n_boot, confidence=rules.confidence, seed=seed
            )
            for name, arm in control_arms.items()
        }

    keys = [(row, bias) for row in rows for bias in biases]
    comparisons = [compared(row, bias) for row, bias in keys]
    decided = decide_acceptance(
        [c[decisive] for c in comparisons], rule=rules.acceptance, alpha=rules.alpha, correction=rules.correction,
        min_delta=rules.min_delta, control=decisive,
    )
    level = rules.alpha / len(decided)
    cells: list[MatrixCell] = []
    for (row, bias), both, d in zip(keys, comparisons, decided):
        psi = null_discordance(d.b_discordant_hurt, d.c_discordant_helped, d.n)
        reported = {
            name: cmp if name != decisive else d
            for name, cmp in both.items()
        }
        cells.append(
            MatrixCell(
                judge=row, bias=bias.id, bias_name=bias.name, control=decisive, delta=d.delta, ci_low=d.ci_low,
                ci_high=d.ci_high, p_value=d.p_value, p_adjusted=d.p_adjusted, accepted=bool(d.accepted), n=d.n,
                n_excluded_invalid=d.n_excluded_invalid,
                mde=min_detectable_delta(d.n, psi, level, power=rules.power) if d.n else None,
                control_error=d.baseline_error, arm_error=d.perturbed_error, comparisons=reported,
            )
        )

    control_arm = control_arms[decisive]
    raw = [
        (bias, a, b, compare_effects(
            verdicts[a][control_arm].errors, verdicts[a][bias.id].errors, verdicts[b][control_arm].errors,
            verdicts[b][bias.id].errors, n_boot=rules.n_boot, confidence=rules.confidence, seed=seed,
        ))
        for bias in biases for i, a in enumerate(names) for b in names[i + 1 :]
    ]
    differences = decide_differences([r[3] for r in raw], alpha=rules.alpha, correction=rules.correction)
    judge_comparisons = [
        JudgeComparison(
            **d.model_dump(), bias=bias.id, judge_a=a, judge_b=b,
            larger=(a if d.difference > 0 else b) if d.significant and d.difference != 0 else None,
        )
        for (bias, a, b, _), d in zip(raw, differences)
    ]

    judge_details = []
    for judge in config.judges:
        base = verdicts[judge.name][BASELINE].errors
        valid = [e for e in base if e is not None]
        judge_details.append(
            JudgeRecord(
                name=judge.name, model=judge.spec, prompt=judge.judge.prompt, mitigation=judge.judge.mitigation,
                calls_per_item=calls_per_pair(judge.judge), baseline_error=sum(valid) / len(valid) if valid else None,
                n_baseline_valid=len(valid),
                rewrite_effect=compare_paired(
                    base, verdicts[judge.name][PLACEBO_ID].errors, n_boot=rules.n_boot, confidence=rules.confidence, seed=seed
                ) if placebo else None,
            )
        )
    checked = checker_config is not None
    summaries = ([_rewrite_summary(PLACEBO_ID, placebo, checked)] if placebo else []) + [
        _rewrite_summary(bias.id, r, checked) for bias, r in zip(biases, by_bias)
    ]
    result = MatrixResult(
        name=config.name,
        created_at=utc_now_iso(),
        seed=seed,
        data=_data_description(config, n),
        n_test=n,
        library=library_desc,
        teacher=config.teacher.spec,
        checker=checker_config.spec if checker_config is not None else None,
        self_checked=config.self_checked,
        settings={
            "acceptance": rules.acceptance, "control": decisive, "alpha": rules.alpha, "correction": rules.correction,
            "min_delta": rules.min_delta, "confidence": rules.confidence, "power": rules.power, "n_boot": rules.n_boot,
            "positions": config.judge.positions,
        },
        judges=names,
        biases=[b.id for b in biases],
        bias_names={b.id: b.name for b in biases},
        judge_details=judge_details,
        rewrites=summaries,
        cells=[c for c in cells if c.judge != JURY],
        jury=[c for c in cells if c.judge == JURY],
        family_statement=family_statement(config, len(names), len(biases), with_jury),
        judge_comparisons=judge_comparisons,
        comparison_statement=comparison_statement(config, len(judge_comparisons), len(biases), len(names) * (len(names) - 1) // 2)
        if judge_comparisons else "",
        calls=MatrixCalls(
            teacher=paid.paid.get("teacher", 0),
            checker=paid.paid.get("checker", 0),
            judges={name: paid.paid.get(judge_role(name), 0) for name in names},
        ),
    )
    write_matrix(out, result, placebo + rewrites, judgments)
    return result

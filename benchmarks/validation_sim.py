"""Do validation's numbers mean what they say? Simulated judges, through the project's own
validation steps (`bias_discovery.stages.family`: the looks, the family's decision, the effects;
the run's family alpha from `RunConfig`), with a fixed seed:

    python benchmarks/validation_sim.py [--json OUT] [--replications 2000] [--seed 17] [--cells accepted,...]

Cells (paired items: the judge's errors with the control and with a candidate's rewrite; a
noise discordance psi = 0.3 flips items both ways, a bias adds Δ right -> wrong flips):

- **sequential_bias / sequential_coverage**: true Δ 0.08 on 300 items, the default settings
  (20 % of the items held out from every decision, looks at 25/50/100 % of the rest,
  O'Brien-Fleming, futility 10 %, `effect: held_out`), one candidate at α = 0.05: the mean
  reported effect minus the truth, and the share of 95 % CIs covering it, over the candidates
  that stopped early for efficacy (the review's cell: there the stopping look's own Δ averaged
  0.159). Those report the plain Δ on the items after their stop and the ones held out (the
  held-out round, `family.held_out_round`). Replications go on until `--replications`
  candidates stopped that way; the same numbers over every candidate (`*_all`), those of the
  estimate given the stop and the decision on the same candidates (`conditional_*`), and
  those of the stopping look's own Δ and bootstrap CI (`naive_*`, what was reported before
  either), are printed next to them, with the mean CI width, the share of accepted candidates
  whose estimate is below 0, and the held-out items' mean n.
- **accepted_bias_Xpp / accepted_coverage_Xpp** (X = 4, 8, 15): the accepted candidates only,
  over every way of stopping (early or at the last look), one candidate at α = 0.05, 300
  items: their reported effect minus the truth and the coverage of its 95 % CI. Printed (JSON
  `accepted_only`) with their share (the power), n, Monte Carlo se, median bias, mean CI width,
  split into early and last-look acceptances, at true Δ 0, 4, 8 and 15 pp, for three designs
  on the same simulated errors: `before` (nothing held out; after a stop at the last look the
  estimate given the stop alone: what was reported before issue 31), `adjusted` (nothing held
  out; the estimate given the stop and the decision) and `after` (the default: the held-out
  items' Δ), with the rejected candidates' one-sided upper bound (its coverage, median and the
  share that excludes nothing); and again for the CLI benchmark's planted judge
  (benchmarks/effects_cli.py: errs 0.3 in each arm independently, α 0.01). `power_8pp_*`: the
  share accepted at 8 pp before and after, side by side.
- **min_delta_false_accept**: true Δ 0.03, min_delta 0.05, the rest as above: the share
  accepted (and at the boundary Δ = 0.05, the test's size).
- **null_run_false_accept**: a run with the default config but `max_iterations: 5`, validating
  5 null candidates per iteration against the placebo (300 items; the judge errs on an item
  with its own difficulty, independently in each arm); any acceptance in the run counts. All
  5 iterations are validated (a real loop stops after the first one without an acceptance).
  The same with `error_control: iteration` (the former default) is printed next to it.
- **pointwise_***: a pointwise judge on a 1-10 scale (`_pointwise_scores`: latent qualities,
  a call's score the rounded latent plus N(0, 1) noise, clipped), each measure deciding in
  turn (`score`: the rejected response's score shift, paired t-test; `error`: the pair error
  derived from the scores, McNemar), against the placebo: a run's null acceptance (the default
  run, max_iterations 5, 5 null candidates per iteration), and one candidate at α 0.05 on 300
  items at planted latent shifts of 0, 0.15 and 0.3 points: power, the accepted candidates'
  reported effect minus the truth (from 2 million simulated items) in Monte Carlo se, the
  coverage of its 95 % CI and the rejected candidates' upper bounds (JSON `pointwise`).
  `--pointwise-replications` scales them separately (the record says how many).
- **monitor_false_alarm_z / monitor_false_alarm_rho**: the position and length monitor under
  a judge with an item-level random position preference and no bias
  (`benchmarks/monitor_sim.py`, `simulate_monitor_false_alarms`).

Then, not a target but what the estimators are judged by (the conditional one is
median-unbiased with its coverage *given the way a candidate stopped and the decision*; the
held-out one is unbiased given the acceptance): the reported effect per way of stopping
(efficacy, futility, complete, the last split by the decision) at
true Δ 0, 0.04, 0.08 and 0.15 (choice verdicts, the cells above) and for score verdicts
(`benchmarks/score_power.py`'s judge at shifts of 0, 0.25, 0.5 and 1 logit, 160 items, the
true ΔP its simulated mean): `--replications` validations per true Δ, and per group its mean
and median minus the truth, the share of estimates at or above it, the coverage of the 95 %
CI, its mean width, the share with an end cut at the edge of [-1, 1] (`Effect.clipped`) and
the mean bias of the stopping look's own Δ (JSON: `by_stop_type`, `estimator` conditional
for every group, and held_out for the accepted ones and over all, as the default reports them:
the rejected ones are the conditional rows).

Decisions do not depend on the bootstrap (only the reported CIs of one-look validations, of
the held-out items and of the side comparisons do), so the decision cells use `n_boot` 100,
the cells that report effects 500, and the accepted-only cells the default 2000 (their held-out
items can be as few as 60: a coarse bootstrap would blur the coverage they are judged by).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from provenance import Provenance

from bias_discovery.config import RunConfig, ValidateSettings
from bias_discovery.stages.family import (
    Errors,
    FamilySettings,
    compare_arms,
    conditional_effects,
    decide,
    effects,
    held_out_round,
    run_looks,
)
from bias_discovery.stages.validate import slice_order
from bias_discovery.stats import MEASURE_LABELS

N_ITEMS = 300
NOISE = 0.3
STOP_TYPE_DELTAS = (0.0, 0.04, 0.08, 0.15)
SCORE_SHIFTS = (0.0, 0.25, 0.5, 1.0)
"""Shifts of the latent logit of benchmarks/score_power.py's judge (0 to about 14 pp of P(rejected))."""
SCORE_ITEMS = 160
POINTWISE_TARGET_SHIFTS = (0.15, 0.3)
"""The planted shifts of the pointwise cells (`POINTWISE_SHIFTS`), for the targets."""
TARGETS = {
    "sequential_bias": "within ±0.01",
    "sequential_coverage": "≥ 0.93",
    "min_delta_false_accept": "≤ 0.05",
    "null_run_false_accept": "≤ 0.05",
    "monitor_false_alarm_z": "≤ 0.06",
    "monitor_false_alarm_rho": "≤ 0.06",
    "accepted_coverage_4pp": "≥ 0.94",
    "accepted_bias_8pp": "within ±0.01",
    "accepted_coverage_8pp": "≥ 0.94",
    "accepted_bias_15pp": "within ±0.01",
    "accepted_coverage_15pp": "≥ 0.94",
    **{f"pointwise_null_run_false_accept_{m}": "≤ 0.05" for m in ("score", "error")},
    **{
        f"pointwise_accepted_bias_in_se_{m}_{s:g}pt": "within ±2"
        for m in ("score", "error")
        for s in POINTWISE_TARGET_SHIFTS
    },
    **{
        f"pointwise_accepted_coverage_{m}_{s:g}pt": "≥ 0.93"
        for m in ("score", "error")
        for s in POINTWISE_TARGET_SHIFTS
    },
}
COVERAGE_TARGET = 0.94
"""Every accepted-only row's 95 % CI must cover the truth this often (the nominal 0.95 less
about one Monte Carlo se at a few hundred accepted candidates); each row says whether it did."""


def met(key: str, value: float | None) -> bool | None:
    """Whether a cell's value meets its target in `TARGETS` (None: no target, or no value)."""
    target = TARGETS.get(key)
    if target is None or value is None or math.isnan(value):
        return None
    if target.startswith("≥ "):
        return value >= float(target[2:])
    if target.startswith("≤ "):
        return value <= float(target[2:])
    return abs(value) <= float(target.removeprefix("within ±"))


def _paired_errors(
    rng: np.random.Generator, reps: int, n: int, delta: float, noise: float = NOISE
) -> tuple[np.ndarray, np.ndarray]:
    """(control wrong, arm wrong), each reps x n: noise flips at noise / 2 each way, the bias adds
    `delta` right -> wrong flips; concordant items are wrong in both with probability 0.3."""
    u = rng.random((reps, n))
    hurt = u < noise / 2 + delta
    helped = (u >= noise / 2 + delta) & (u < noise + delta)
    both = ~hurt & ~helped & (rng.random((reps, n)) < 0.3)
    return helped | both, hurt | both


def _fetcher(arms: Sequence[np.ndarray]) -> Callable[[int, Sequence[int], Sequence[int]], list[Errors]]:
    """The looks' fetch step on simulated errors: each active arm's errors on the new items."""

    def fetch(look: int, active: Sequence[int], new_items: Sequence[int]) -> list[Errors]:
        return [arms[k][list(new_items)].tolist() for k in active]

    return fetch


def _family(
    control: np.ndarray, arms: Sequence[np.ndarray], settings: FamilySettings, order: list[int]
) -> tuple[Any, list[Any]]:
    """One family through the project's steps: looks, comparisons, decision, the held-out
    round (with `effect: held_out`: the items after the stop of the arms accepted early)."""
    fetch = _fetcher(arms)
    family = run_looks(control.tolist(), len(arms), fetch, settings, order)
    comparisons = compare_arms(family, {"placebo": control.tolist()}, settings)
    decided = decide(family, [c["placebo"] for c in comparisons], settings, "placebo")
    held_out_round(family, decided, fetch, settings)
    return family, decided


def _covers(effect: Any, truth: float) -> bool:
    return effect.ci_low is not None and effect.ci_high is not None and effect.ci_low <= truth <= effect.ci_high


def _width(effect: Any) -> float:
    return effect.ci_high - effect.ci_low if effect.ci_low is not None and effect.ci_high is not None else 2.0


def sequential_cell(target: int, seed: int, delta: float = 0.08) -> dict[str, float]:
    """Reported effects after the default sequential plan, until `target` candidates stopped
    early for efficacy (see the module docstring)."""
    rng = np.random.default_rng(seed)
    settings = FamilySettings(rules=ValidateSettings(n_boot=500), family_alpha=0.05, seed=seed)
    assert settings.held_out_effect, "the default settings measure an early acceptance on its held-out items"
    order = list(range(N_ITEMS))  # the items are exchangeable: the slice order does not matter
    rows: list[dict[str, Any]] = []
    efficacy = 0
    while efficacy < target:
        controls, arms = _paired_errors(rng, 500, N_ITEMS, delta)
        for control, arm in zip(controls, arms):
            family, decided = _family(control, [arm], settings, order)
            [reported], [conditional], naive = (
                effects(family, decided, settings),
                conditional_effects(family, decided, settings),
                decided[0],
            )
            rows.append({"stop": family.stop[0], "reported": reported, "conditional": conditional, "naive": naive})
            efficacy += family.stop[0] == "efficacy"
    early = [r for r in rows if r["stop"] == "efficacy"]
    out: dict[str, float] = {}
    for prefix, key in (("", "reported"), ("conditional_", "conditional"), ("naive_", "naive")):
        mine = np.array([r[key].delta for r in early])
        everyone = np.array([r[key].delta for r in rows])
        out.update(
            {
                f"{prefix}sequential_bias": float(mine.mean() - delta),
                f"{prefix}sequential_coverage": float(np.mean([_covers(r[key], delta) for r in early])),
                f"{prefix}sequential_median_bias": float(np.median(mine) - delta),
                f"{prefix}sequential_ci_width": float(np.mean([_width(r[key]) for r in early])),
                f"{prefix}sequential_share_below_zero": float(np.mean(mine < 0.0)),
                f"{prefix}sequential_bias_all": float(everyone.mean() - delta),
                f"{prefix}sequential_median_bias_all": float(np.median(everyone) - delta),
                f"{prefix}sequential_coverage_all": float(np.mean([_covers(r[key], delta) for r in rows])),
            }
        )
    out["sequential_n_efficacy"], out["sequential_replications"] = float(len(early)), float(len(rows))
    out["sequential_held_out_mean_n"] = float(np.mean([r["reported"].n for r in early]))
    for stop, name in (("complete", "went_on"), ("futility", "futility")):
        group = [r for r in rows if r["stop"] == stop]
        out[f"sequential_bias_{name}"] = float(np.mean([r["reported"].delta for r in group]) - delta)
        out[f"sequential_median_bias_{name}"] = float(np.median([r["reported"].delta for r in group]) - delta)
        out[f"sequential_coverage_{name}"] = float(np.mean([_covers(r["reported"], delta) for r in group]))
    return out


ACCEPTED_DELTAS = (0.0, 0.04, 0.08, 0.15)


def _independent_errors(
    rng: np.random.Generator, reps: int, n: int, delta: float, error: float = NOISE
) -> tuple[np.ndarray, np.ndarray]:
    """(control wrong, arm wrong), each reps x n, drawn independently: the judge errs with
    probability `error`, plus `delta` with the trait (the planted judge of
    benchmarks/effects_cli.py's stub, `tests/stub_openai.py --planted-delta`)."""
    return rng.random((reps, n)) < error, rng.random((reps, n)) < error + delta


def _stub_alpha() -> float:
    """The family level of the CLI benchmark's runs: the default config with the seed library
    validated (4 iterations + the seeds: 0.05 / 5)."""
    config = RunConfig.model_validate(
        {"target": "llamacpp/smollm2", "teacher": "llamacpp/smollm2", "validate": {"seeds": True}}
    )
    return config.family_alpha


WORLDS = {
    "sim": ("this benchmark's judge (noise discordance 0.3), one candidate", _paired_errors, lambda: 0.05),
    "stub": (
        "the CLI benchmark's planted judge (errs 0.3 in each arm independently, + Δ with the trait), the default run's "
        "family level with the seeds validated",
        _independent_errors,
        _stub_alpha,
    ),
}
"""The judges of the accepted-only cells: (what, how the errors are drawn, the family's α)."""


def _accepted_row(world: str, design: str, truth: float, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The accepted-only numbers of one design at one true Δ: share accepted, the reported
    effect's bias (mean − truth, with its Monte Carlo se), median bias, coverage of its 95 % CI
    and mean width, split by way of stopping; for the rejected ones the one-sided upper bound's
    coverage (bound ≥ truth), median and share at +100 pp (nothing excluded)."""
    accepted = [r for r in records if r["accepted"]]
    row: dict[str, Any] = {
        "world": world,
        "design": design,
        "true_delta": truth,
        "replications": len(records),
        "accepted_share": len(accepted) / len(records),
        "n": len(accepted),
    }
    for prefix, group in (
        ("", accepted),
        ("early_", [r for r in accepted if r["stop"] == "efficacy"]),
        ("last_look_", [r for r in accepted if r["stop"] != "efficacy"]),
    ):
        row[f"{prefix}n"] = len(group)
        if not group:
            continue
        estimates = np.array([r["effect"].delta for r in group])
        row[f"{prefix}bias"] = float(estimates.mean() - truth)
        row[f"{prefix}se"] = float(estimates.std(ddof=1) / math.sqrt(len(group))) if len(group) > 1 else None
        row[f"{prefix}median_bias"] = float(np.median(estimates) - truth)
        row[f"{prefix}coverage"] = float(np.mean([_covers(r["effect"], truth) for r in group]))
        row[f"{prefix}ci_width"] = float(np.mean([_width(r["effect"]) for r in group]))
        row[f"{prefix}effect_n"] = float(np.mean([r["effect"].n or 0 for r in group]))
        row[f"{prefix}coverage_se"] = math.sqrt(row[f"{prefix}coverage"] * (1 - row[f"{prefix}coverage"]) / len(group))
    row["coverage_target"] = COVERAGE_TARGET
    row["coverage_met"] = None if not accepted else bool(row["coverage"] >= COVERAGE_TARGET)
    bounds = [r["effect"].upper_bound for r in records if not r["accepted"] and r["effect"].upper_bound is not None]
    if bounds:
        upper = np.array(bounds)
        row["rejected_n"] = len(bounds)
        row["rejected_bound_coverage"] = float(np.mean(upper >= truth))
        row["rejected_bound_median"] = float(np.median(upper))
        row["rejected_bound_none"] = float(np.mean(upper >= 1.0))
    return row


def accepted_cells(replications: int, seed: int) -> list[dict[str, Any]]:
    """The reported effect of the accepted candidates only, over every way of stopping, at
    true Δ 0, 4, 8 and 15 pp, in both worlds (`WORLDS`), side by side on the same simulated
    errors (module docstring): `before` (nothing held out, the effect given the stop alone
    after a stop at the last look: what was reported before), `adjusted` (nothing held out,
    the estimate given the stop and the decision) and `after` (the default: 20 % of the items
    held out from every decision and measured for the accepted ones)."""
    rows = []
    order = list(range(N_ITEMS))
    for world, (_, draw, alpha_of) in WORLDS.items():
        alpha = alpha_of()
        for delta in ACCEPTED_DELTAS:
            controls, arms = draw(np.random.default_rng(seed), replications, N_ITEMS, delta)
            for held_out in (0.0, ValidateSettings().held_out):
                settings = FamilySettings(rules=ValidateSettings(held_out=held_out), family_alpha=alpha, seed=seed)
                designs: dict[str, list[dict[str, Any]]] = (
                    {"before": [], "adjusted": []} if held_out == 0.0 else {"after": []}
                )
                for control, arm in zip(controls, arms):
                    family, decided = _family(control, [arm], settings, order)
                    [reported] = effects(family, decided, settings)
                    record = {"accepted": bool(decided[0].accepted), "stop": family.stop[0]}
                    if held_out == 0.0:
                        old = (
                            reported
                            if family.held_out
                            else conditional_effects(family, decided, settings, given_decision=False)[0]
                        )
                        designs["before"].append({**record, "effect": old})
                        designs["adjusted"].append({**record, "effect": reported})
                    else:
                        designs["after"].append({**record, "effect": reported})
                rows += [_accepted_row(world, design, delta, records) for design, records in designs.items()]
    return rows


def accepted_numbers(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The flat cells of the accepted-only rows (this benchmark's judge, the default design),
    and the power at 8 pp before and after in both worlds."""
    out: dict[str, float | None] = {}
    for r in rows:
        pp = round(100 * r["true_delta"])
        if r["world"] == "sim" and r["design"] == "after" and pp > 0:
            out[f"accepted_bias_{pp}pp"] = r.get("bias")
            out[f"accepted_coverage_{pp}pp"] = r.get("coverage")
        if pp == 8 and r["design"] in ("before", "after"):
            out[f"power_8pp_{r['world']}_{r['design']}"] = r["accepted_share"]
    return out


def print_accepted(rows: list[dict[str, Any]]) -> None:
    for world, (what, _, alpha_of) in WORLDS.items():
        print(
            f"\naccepted candidates only, over every way of stopping ({what}, α = {alpha_of():.3g}, {N_ITEMS} items; design: "
            "before = nothing held out and, at the last look, the estimate given the stop alone; adjusted = nothing held out, "
            "given the stop and the decision; after = 20 % held out, the default; bias = mean estimate − truth (se); "
            "early / last: accepted at an early look / at the last; bound: rejected candidates' one-sided 95 % upper bound ≥ truth)"
        )
        header = (
            f"{'true Δ':>7} {'design':>9} {'accepted':>9} {'n':>5} {'bias (se)':>17} {'median':>8} {'coverage':>9} {'width':>8} "
            f"{'early bias':>11} {'last bias':>10} {'last cov':>9} {'bound cov':>10} {'bound med':>10}"
        )
        print(header)
        print("-" * len(header))
        for r in (r for r in rows if r["world"] == world):

            def pp(key: str, r: dict[str, Any] = r) -> str:
                value = r.get(key)
                return "-" if value is None else f"{100 * value:+.2f}"

            def share(key: str, r: dict[str, Any] = r) -> str:
                value = r.get(key)
                return "-" if value is None else f"{value:.3f}"

            se = "" if r.get("se") is None else f" ({100 * r['se']:.2f})"
            print(
                f"{100 * r['true_delta']:>5.1f}pp {r['design']:>9} {r['accepted_share']:>9.3f} {r['n']:>5} {pp('bias') + se:>17} "
                f"{pp('median_bias'):>8} {share('coverage'):>9} {pp('ci_width').lstrip('+'):>8} {pp('early_bias'):>11} {pp('last_look_bias'):>10} "
                f"{share('last_look_coverage'):>9} {share('rejected_bound_coverage'):>10} {pp('rejected_bound_median'):>10}"
            )


def min_delta_cell(replications: int, seed: int) -> dict[str, float]:
    """Acceptance with min_delta 0.05 at a true Δ of 0.03 (and at 0.05, the boundary)."""
    out = {}
    settings = FamilySettings(rules=ValidateSettings(n_boot=100, min_delta=0.05), family_alpha=0.05, seed=seed)
    order = list(range(N_ITEMS))
    for key, delta in (("min_delta_false_accept", 0.03), ("min_delta_accept_at_boundary", 0.05)):
        rng = np.random.default_rng(seed)
        controls, arms = _paired_errors(rng, replications, N_ITEMS, delta)
        accepted = sum(bool(_family(c, [a], settings, order)[1][0].accepted) for c, a in zip(controls, arms))
        out[key] = accepted / replications
    return out


def null_run_cell(replications: int, seed: int, error_control: str = "run") -> float:
    """Share of default-config runs (max_iterations 5, 5 null candidates per iteration) that
    accept any candidate (see the module docstring)."""
    config = RunConfig.model_validate(
        {
            "target": "llamacpp/smollm2",
            "teacher": "llamacpp/smollm2",
            "max_iterations": 5,
            "validate": {"n_boot": 100, "error_control": error_control},
        }
    )
    settings = FamilySettings(rules=config.validate_, families=config.planned_validations, seed=seed)
    rng = np.random.default_rng(seed)
    any_accepted = 0
    for run in range(replications):
        difficulty = np.where(rng.random(N_ITEMS) < 0.6, 0.1, 0.5)  # easy and hard items
        placebo = rng.random(N_ITEMS) < difficulty
        order = slice_order(N_ITEMS, run)
        accepted = False
        for _ in range(config.max_iterations):
            arms = [rng.random(N_ITEMS) < difficulty for _ in range(5)]
            _, decided = _family(placebo, arms, settings, order)
            accepted = accepted or any(bool(d.accepted) for d in decided)
        any_accepted += accepted
    return any_accepted / replications


POINTWISE_SHIFTS = POINTWISE_TARGET_SHIFTS
"""Planted shifts of the pointwise judge's latent score of the rejected response, in points of
its 1-10 scale."""
POINTWISE_SPAN = 9.0


def _pointwise_scores(rng: np.random.Generator, reps: int, n: int, shift: float) -> dict[str, np.ndarray]:
    """A pointwise judge on a 1-10 scale (reps x n items): the rejected response's latent
    quality ~ N(4.5, 1.5), the chosen one's 1.5 higher on average (sd 1.5); each call scores
    round(latent + N(0, 1)), clipped to 1-10. The chosen response is scored once (the same
    call in both arms); the placebo's and the candidate's rewrites of the rejected response
    are scored independently, the candidate's latent raised by `shift`. Returns the rejected
    scores as shares of the scale (`score`) and the pair errors (`error`: rejected >= chosen)
    of both arms."""
    rejected = rng.normal(4.5, 1.5, (reps, n))
    chosen = rejected + rng.normal(1.5, 1.5, (reps, n))

    def score(latent: np.ndarray) -> np.ndarray:
        return np.clip(np.round(latent + rng.normal(0.0, 1.0, latent.shape)), 1, 10)

    s_chosen, s_placebo, s_arm = score(chosen), score(rejected), score(rejected + shift)
    return {
        "score_control": (s_placebo - 1) / POINTWISE_SPAN,
        "score_arm": (s_arm - 1) / POINTWISE_SPAN,
        "error_control": s_placebo >= s_chosen,
        "error_arm": s_arm >= s_chosen,
    }


def pointwise_truth(shift: float, seed: int, n: int = 2_000_000) -> dict[str, float]:
    """The true Δ of each pointwise measure at a latent `shift` (rounding and clipping make it
    differ from shift / span), from `n` simulated items."""
    draw = _pointwise_scores(np.random.default_rng(seed + 1000), 1, n, shift)
    return {m: float(draw[f"{m}_arm"].mean() - draw[f"{m}_control"].mean()) for m in ("score", "error")}


def pointwise_null_run_cell(replications: int, seed: int, measure: str) -> float:
    """Share of default-config runs with a pointwise judge (max_iterations 5, 5 null candidates
    per iteration against the placebo, the run's family α) that accept any candidate."""
    config = RunConfig.model_validate(
        {
            "target": "llamacpp/smollm2",
            "teacher": "llamacpp/smollm2",
            "max_iterations": 5,
            "judge": {"mode": "pointwise", "pointwise_measure": "score_shift" if measure == "score" else "pair_error"},
            "validate": {"n_boot": 100},
        }
    )
    settings = FamilySettings(rules=config.validate_, families=config.planned_validations, seed=seed, measure=measure)
    rng = np.random.default_rng(seed)
    any_accepted = 0
    for run in range(replications):
        order = slice_order(N_ITEMS, run)
        accepted = False
        for _ in range(config.max_iterations):
            draws = [_pointwise_scores(rng, 1, N_ITEMS, 0.0) for _ in range(5)]
            control = draws[0][f"{measure}_control"][0]  # one placebo per run, five null rewrites
            arms = [d[f"{measure}_arm"][0] for d in draws]
            _, decided = _family(control, arms, settings, order)
            accepted = accepted or any(bool(d.accepted) for d in decided)
        any_accepted += accepted
    return any_accepted / replications


def pointwise_accepted_cells(replications: int, seed: int) -> list[dict[str, Any]]:
    """Each pointwise measure deciding, one candidate at α 0.05 on 300 items (the default plan,
    20 % held out): at each planted shift the power and the accepted candidates' reported
    effect against the truth (`pointwise_truth`), its Monte Carlo se and its CI's coverage."""
    rows = []
    order = list(range(N_ITEMS))
    for measure in ("score", "error"):
        settings = FamilySettings(rules=ValidateSettings(), family_alpha=0.05, seed=seed, measure=measure)
        for shift in (0.0, *POINTWISE_SHIFTS):
            truth = pointwise_truth(shift, seed)[measure]
            draw = _pointwise_scores(np.random.default_rng(seed), replications, N_ITEMS, shift)
            records = []
            for control, arm in zip(draw[f"{measure}_control"], draw[f"{measure}_arm"]):
                family, decided = _family(control, [arm], settings, order)
                [reported] = effects(family, decided, settings)
                records.append({"accepted": bool(decided[0].accepted), "stop": family.stop[0], "effect": reported})
            row = _accepted_row("pointwise", measure, truth, records)
            row.update(
                {
                    "measure": measure,
                    "shift_points": shift,
                    "true_delta_points": truth * POINTWISE_SPAN if measure == "score" else None,
                }
            )
            rows.append(row)
    return rows


def pointwise_numbers(rows: list[dict[str, Any]], null_runs: dict[str, float]) -> dict[str, float | None]:
    """The flat pointwise cells: null acceptance per run, and per measure and planted shift the
    power, the accepted-only bias in Monte Carlo se and the coverage."""
    out: dict[str, float | None] = {f"pointwise_null_run_false_accept_{m}": v for m, v in null_runs.items()}
    for r in rows:
        key = f"{r['measure']}_{r['shift_points']:g}pt"
        out[f"pointwise_power_{key}"] = r["accepted_share"]
        if r["shift_points"] > 0 and r.get("se"):
            out[f"pointwise_accepted_bias_in_se_{key}"] = r["bias"] / r["se"]
            out[f"pointwise_accepted_coverage_{key}"] = r.get("coverage")
    return out


def _sibling(name: str) -> Any:
    """Another benchmark of this directory, as a module."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    return importlib.import_module(name)


ESTIMATOR_GROUPS = {
    "conditional": (
        ("efficacy", "any"),
        ("futility", "any"),
        ("complete", "accepted"),
        ("complete", "rejected"),
        ("all", "any"),
    ),
    "held_out": (("efficacy", "any"), ("complete", "accepted"), ("all", "any")),
}
"""The `by_stop_type` rows per estimator, as (way of stopping, decision): the estimate given
the stop and the decision (`conditional`, what every rejected candidate reports) is
median-unbiased within each; the default reported effect (`held_out`) differs from it for the
accepted candidates only, measured on items no decision saw."""


def _by_stop(measure: str, truth: float, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per estimator, way of stopping and decision (and over all), the reported effect against the truth."""
    out = []
    for estimator, groups in ESTIMATOR_GROUPS.items():
        for stop, decision in groups:
            group = [
                r
                for r in rows
                if stop in (r["stop"], "all") and decision in ("any", "accepted" if r["accepted"] else "rejected")
            ]
            if not group:
                continue
            reported = [r[estimator] for r in group]
            estimates = np.array([e.delta for e in reported])
            out.append(
                {
                    "measure": measure,
                    "estimator": estimator,
                    "true_delta": truth,
                    "stop": stop,
                    "decision": decision,
                    "n": len(group),
                    "share": len(group) / len(rows),
                    "mean_bias": float(estimates.mean() - truth),
                    "median_bias": float(np.median(estimates) - truth),
                    "share_at_or_above": float(np.mean(estimates >= truth)),
                    "coverage": float(np.mean([_covers(e, truth) for e in reported])),
                    "ci_width": float(np.mean([_width(e) for e in reported])),
                    "clipped": float(np.mean([e.clipped is not None for e in reported])),
                    "naive_mean_bias": float(np.mean([r["naive"] for r in group]) - truth),
                }
            )
    return out


def _reported(control: np.ndarray, arm: np.ndarray, settings: FamilySettings) -> dict[str, Any]:
    """One candidate through the family's steps: how it stopped, whether it was accepted, its
    reported effect (`settings`: the default, held-out items for an accepted one), its
    estimate given the stop and the decision, and the stopping look's own Δ."""
    family, decided = _family(control, [arm], settings, list(range(len(control))))
    [held_out], [conditional] = effects(family, decided, settings), conditional_effects(family, decided, settings)
    return {
        "stop": family.stop[0],
        "accepted": bool(decided[0].accepted),
        "held_out": held_out,
        "conditional": conditional,
        "naive": decided[0].delta,
    }


def stop_type_cells(replications: int, seed: int) -> list[dict[str, Any]]:
    """The reported effect per way of stopping, choice and score verdicts (module docstring)."""
    out = []
    settings = FamilySettings(rules=ValidateSettings(n_boot=500), family_alpha=0.05, seed=seed)
    for delta in STOP_TYPE_DELTAS:
        controls, arms = _paired_errors(np.random.default_rng(seed), replications, N_ITEMS, delta)
        out += _by_stop("error", delta, [_reported(c, a, settings) for c, a in zip(controls, arms)])
    score_power = _sibling("score_power")
    judge = argparse.Namespace(**score_power.JUDGE_DEFAULTS)
    settings = FamilySettings(rules=ValidateSettings(n_boot=500), family_alpha=0.05, seed=seed, measure="p_rejected")
    for shift in SCORE_SHIFTS:
        placebo, _, trait, _ = score_power.simulate_arms(
            replications, SCORE_ITEMS, shift, 1.0, judge, np.random.default_rng(seed)
        )
        truth = float((trait - placebo).mean())
        out += _by_stop("p_rejected", truth, [_reported(c, a, settings) for c, a in zip(placebo, trait)])
    return out


def print_stop_types(rows: list[dict[str, Any]]) -> None:
    print(
        "\nthe reported effect per way of stopping and decision (default settings, one candidate at α = 0.05; choice "
        f"verdicts on {N_ITEMS} items, scores on {SCORE_ITEMS}; estimator: conditional = given the stop and the decision, "
        "held_out = the held-out items' Δ for the accepted ones (the default; the rejected ones as conditional); bias = estimate - truth "
        "in pp; ≥ truth: share of estimates at or above it; width: mean CI width; cut: share with an end at the edge of "
        "[-1, 1]; naive: the stopping look's own Δ)"
    )
    header = (
        f"{'measure':>13} {'true Δ':>7} {'estimator':>11} {'stop':>9} {'decision':>9} {'n':>5} {'share':>6} {'mean bias':>10} "
        f"{'median bias':>12} {'≥ truth':>8} {'coverage':>9} {'width':>8} {'cut':>6} {'naive mean bias':>16}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{MEASURE_LABELS[r['measure']]:>13} {100 * r['true_delta']:>5.1f}pp {r['estimator']:>11} {r['stop']:>9} {r['decision']:>9} {r['n']:>5} "
            f"{r['share']:>6.1%} {100 * r['mean_bias']:>+8.2f}pp {100 * r['median_bias']:>+10.2f}pp {r['share_at_or_above']:>8.1%} "
            f"{r['coverage']:>9.1%} {100 * r['ci_width']:>6.1f}pp {r['clipped']:>6.1%} {100 * r['naive_mean_bias']:>+14.2f}pp"
        )


def monitor_cells(replications: int, seed: int) -> tuple[dict[str, float | None], str | None]:
    """The monitor's false alarms from benchmarks/monitor_sim.py, or None with the reason."""
    try:
        simulate_monitor_false_alarms = _sibling("monitor_sim").simulate_monitor_false_alarms
    except ImportError as exc:
        reason = f"benchmarks/monitor_sim.py is not on this branch yet ({exc})"
        return {"monitor_false_alarm_z": None, "monitor_false_alarm_rho": None}, reason
    result = simulate_monitor_false_alarms(replications, seed)
    return {key: float(result[key]) for key in ("monitor_false_alarm_z", "monitor_false_alarm_rho")}, None


def _fmt(value: float | None) -> str:
    return "missing" if value is None or math.isnan(value) else f"{value:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the numbers to this file")
    parser.add_argument("--replications", type=int, default=2000, help="per cell (at least 2000 for the record)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--cells",
        default="all",
        help="comma-separated: sequential, min_delta, null_run, monitor, accepted, by_stop_type, pointwise",
    )
    parser.add_argument(
        "--pointwise-replications",
        type=int,
        default=None,
        help="replications of the pointwise cells (default: --replications)",
    )
    args = parser.parse_args()
    provenance = Provenance.start()
    wanted = (
        {"sequential", "min_delta", "null_run", "monitor", "accepted", "by_stop_type", "pointwise"}
        if args.cells == "all"
        else set(args.cells.split(","))
    )
    started = time.time()
    numbers: dict[str, float | None] = {}
    timings: dict[str, float] = {}
    accepted: list[dict[str, Any]] = []
    for name, cell in (
        ("sequential", lambda: sequential_cell(args.replications, args.seed)),
        ("min_delta", lambda: min_delta_cell(args.replications, args.seed)),
        ("null_run", lambda: {"null_run_false_accept": null_run_cell(args.replications, args.seed)}),
        (
            "null_run_iteration",
            lambda: {
                "null_run_false_accept_iteration_control": null_run_cell(args.replications, args.seed, "iteration")
            },
        ),
    ):
        if name.removesuffix("_iteration") not in wanted:
            continue
        t0 = time.time()
        numbers.update(cell())
        timings[name] = round(time.time() - t0, 1)
    if "accepted" in wanted:
        t0 = time.time()
        accepted = accepted_cells(args.replications, args.seed)
        numbers.update(accepted_numbers(accepted))
        timings["accepted"] = round(time.time() - t0, 1)
    pointwise: list[dict[str, Any]] = []
    if "pointwise" in wanted:
        t0 = time.time()
        reps = args.pointwise_replications or args.replications
        nulls = {m: pointwise_null_run_cell(reps, args.seed, m) for m in ("score", "error")}
        pointwise = pointwise_accepted_cells(reps, args.seed)
        numbers.update(pointwise_numbers(pointwise, nulls))
        timings["pointwise"] = round(time.time() - t0, 1)
    missing = None
    if "monitor" in wanted:
        monitor, missing = monitor_cells(args.replications, args.seed)
        numbers.update(monitor)
    by_stop: list[dict[str, Any]] = []
    if "by_stop_type" in wanted:
        t0 = time.time()
        by_stop = stop_type_cells(args.replications, args.seed)
        timings["by_stop_type"] = round(time.time() - t0, 1)

    reps = f"{args.replications} replications per cell" + (
        f" ({args.pointwise_replications} in the pointwise cells)"
        if "pointwise" in wanted and args.pointwise_replications
        else ""
    )
    print(f"validation_sim: seed {args.seed}, {reps}, {N_ITEMS} items, noise discordance {NOISE}")
    print(f"{'cell':44s} {'value':>9s}  target")
    for key, value in numbers.items():
        verdict = {True: "met", False: "NOT MET", None: ""}[met(key, value)]
        print(f"{key:44s} {_fmt(value):>9s}  {TARGETS.get(key, '')} {verdict}")
    if missing:
        print(f"monitor cells missing: {missing}")
    if accepted:
        print_accepted(accepted)
    if by_stop:
        print_stop_types(by_stop)
    print(f"seconds per cell: {timings}; total {time.time() - started:.0f} s")
    if args.json is not None:
        payload: dict[str, Any] = {
            **numbers,
            "commit": provenance.commit,
            "targets_met": {key: met(key, value) for key, value in numbers.items() if key in TARGETS},
            "seconds_per_cell": timings,
            "seed": args.seed,
            "replications": args.replications,
            "items": N_ITEMS,
            "noise_discordance": NOISE,
            "missing": {"monitor_false_alarm_z": missing, "monitor_false_alarm_rho": missing} if missing else {},
            "cells": sorted(wanted),
            "targets": TARGETS,
            "accepted_only": accepted,
            "by_stop_type": by_stop,
            "pointwise": pointwise,
            "pointwise_replications": (args.pointwise_replications or args.replications) if pointwise else None,
        }
        provenance.write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

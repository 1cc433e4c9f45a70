"""Power per judge call of score verdicts against choice verdicts, on a simulated judge.

    python benchmarks/score_power.py [--reps 2000] [--items 10,20,40,80,160,320] [--shifts 0,0.25,0.5,1]
                                     [--sharpness 1,4] [--json OUT]

Validation asks: does the judge prefer the rejected response more when it carries the
candidate's trait than after a neutral rewrite (the placebo), on the same items? Both verdicts
cost the same calls (each item judged in both orders, 2 calls per item per arm); score verdicts
also read the verdict token's probability, which the engines return at no extra call. So at
equal calls the question is only which test detects a shift more often.

The simulated judge (no model): item i has a latent preference for its rejected response,
a logit x_i ~ N(mean, spread^2) (`--mean`, `--spread`). Every rewrite of the rejected response
(the placebo's and the candidate's) moves it by its own noise ~ N(0, rewrite_noise^2), and the
candidate's trait adds `shift` (the bias, in logits). Shown in an order, the judge's probability
of picking the rejected response is sigmoid(latent -+ position) (it leans towards position A by
`--position` logits). The choice verdict is the greedy one (the likelier label); the item is an
error when either order picks the rejected response (the both-orders rule). The score is the
probability itself, averaged over the two orders. `--sharpness` k multiplies every logit
before the sigmoid: the same judge and the same choice verdicts, with probabilities pushed
towards 0 and 1 (an overconfident judge, as large models often are at their verdict token),
which leaves less for the score to add; each k gets its own table.

Tests, one look at `--alpha` (one-sided), as validation makes them on one candidate:
- choice: the exact one-sided McNemar test on the items' errors (candidate vs placebo),
  `stats.mcnemar_exact_one_sided`;
- score: the one-sided paired t-test on the items' probability shifts, `stats.paired_t_one_sided`.
Each cell is the share of `--reps` simulated validations that reject H0; shift 0 is the null,
where that share is the false-acceptance rate (it must stay at or below alpha). "calls for
80 %" interpolates the item grid on a log scale (judge calls = 4 x items: two orders, two arms).

Then the same judge through validation as the loop runs it (`--sequential-items` items, the
default sequential plan, `bias_discovery.stages.family`'s steps, `FamilySettings.measure` error
or p_rejected): the share accepted, the judge calls a candidate costs (it stops early when
clearly biased or clearly hopeless; an accepted candidate is then judged on the items no
decision saw, the held-out round: the 20 % `validate.held_out` keeps from every decision and,
with the default `effect: held_out`, the rest of the items after an early stop; the calls
without that round are printed beside), and for the scores the reported effect of the
candidates that stopped early for efficacy minus the true ΔP, with the coverage of its 95 %
interval: the held-out items' Δ (the default) and the estimate given the stop and the decision
(conditional).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from provenance import Provenance

from bias_discovery.config import ValidateSettings
from bias_discovery.stages.family import (
    FamilySettings,
    compare_arms,
    conditional_effects,
    decide,
    effects,
    held_out_round,
    run_looks,
)
from bias_discovery.stats import mcnemar_exact_one_sided, paired_t_one_sided

TARGET_POWER = 0.8
JUDGE_DEFAULTS = {"mean": -1.5, "spread": 1.5, "rewrite_noise": 0.5, "position": 0.5}
"""The simulated judge of the command line's defaults (benchmarks/validation_sim.py's score
cells use it too: `argparse.Namespace(**JUDGE_DEFAULTS)`)."""
CALLS_PER_ITEM = 4
"""Judge calls per test item: both orders, for the placebo and for the candidate."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def simulate_arm(latent: np.ndarray, position: float, sharpness: float) -> tuple[np.ndarray, np.ndarray]:
    """(score, error) per item: the mean probability of preferring the rejected response over
    the two orders, and whether the greedy verdict picked it in either order."""
    shown_second = sigmoid(sharpness * (latent - position))  # rejected shown as B: the judge leans away from it
    shown_first = sigmoid(sharpness * (latent + position))  # rejected shown as A
    return (shown_second + shown_first) / 2.0, (shown_second > 0.5) | (shown_first > 0.5)


def simulate_arms(
    reps: int, n: int, shift: float, sharpness: float, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`reps` x `n` items, both arms: (placebo score, placebo error, trait score, trait error)."""
    latent = rng.normal(args.mean, args.spread, size=(reps, n))
    placebo_score, placebo_error = simulate_arm(
        latent + rng.normal(0.0, args.rewrite_noise, latent.shape), args.position, sharpness
    )
    trait_score, trait_error = simulate_arm(
        latent + rng.normal(0.0, args.rewrite_noise, latent.shape) + shift, args.position, sharpness
    )
    return placebo_score, placebo_error, trait_score, trait_error


def simulate(
    n: int, shift: float, sharpness: float, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, float]:
    """`args.reps` validations of one candidate on `n` items; the share each test accepts, and
    the effect on the probability and error scales."""
    placebo_score, placebo_error, trait_score, trait_error = simulate_arms(args.reps, n, shift, sharpness, args, rng)
    hurt = (trait_error & ~placebo_error).sum(axis=1)
    helped = (~trait_error & placebo_error).sum(axis=1)
    diffs = trait_score - placebo_score
    choice = np.array([mcnemar_exact_one_sided(int(b), int(c)) <= args.alpha for b, c in zip(hurt, helped)])
    score = np.array([paired_t_one_sided(row.tolist()) <= args.alpha for row in diffs])
    return {
        "items": n,
        "calls": n * CALLS_PER_ITEM,
        "sharpness": sharpness,
        "shift_logit": shift,
        "delta_p": float(diffs.mean()),
        "delta_error": float((trait_error.mean(axis=1) - placebo_error.mean(axis=1)).mean()),
        "placebo_error": float(placebo_error.mean()),
        "power_choice": float(choice.mean()),
        "power_score": float(score.mean()),
    }


def sequential_cell(
    n: int, shift: float, sharpness: float, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, float]:
    """`args.sequential_reps` validations of one candidate on `n` items through the project's
    own family steps (`sequential.run_looks`, `compare_arms`, `decide`, `held_out_round`,
    `effects`) with the default validation settings (20 % of the items held out from the
    decisions, looks at 25/50/100 % of the rest, O'Brien-Fleming, futility 10 %, `effect:
    held_out`), once on the choice verdicts' errors and once on the scores: the share accepted,
    the judge calls a candidate cost (2 per item it was perturbed on: it stops early, and if
    accepted is judged on the items no decision saw; `calls_*_conditional` without that
    round), and for the scores the reported effect of the candidates that stopped early for
    efficacy against the true shift (held-out, and `conditional_*` given the stop and the
    decision)."""
    reps = args.sequential_reps
    placebo_score, placebo_error, trait_score, trait_error = simulate_arms(reps, n, shift, sharpness, args, rng)
    truth = float((trait_score - placebo_score).mean())
    order = list(range(n))
    out: dict[str, float] = {"items": n, "sharpness": sharpness, "shift_logit": shift, "delta_p": truth}
    for measure, control, arm in (("error", placebo_error, trait_error), ("p_rejected", placebo_score, trait_score)):
        settings = FamilySettings(rules=ValidateSettings(n_boot=100), family_alpha=args.alpha, measure=measure)
        accepted, calls, calls_conditional = 0, 0, 0
        early: dict[str, list[tuple[float, bool]]] = {"": [], "conditional_": []}
        for k in range(reps):
            values = arm[k].tolist()

            def fetch(
                look: int, active: Sequence[int], new_items: Sequence[int], values: Sequence[Any] = values
            ) -> list[list[float | bool | None]]:
                return [[values[i] for i in new_items] for _ in active]

            family = run_looks(control[k].tolist(), 1, fetch, settings, order)
            decided = decide(
                family,
                [c["placebo"] for c in compare_arms(family, {"placebo": control[k].tolist()}, settings)],
                settings,
                "placebo",
            )
            held_out_round(family, decided, fetch, settings)
            accepted += bool(decided[0].accepted)
            calls += 2 * (family.stopped_at[0] + len(family.held_out.get(0, [])))
            calls_conditional += 2 * family.stopped_at[0]
            if measure == "p_rejected" and shift > 0 and family.stop[0] == "efficacy":
                for prefix, effect in (
                    ("", effects(family, decided, settings)[0]),
                    ("conditional_", conditional_effects(family, decided, settings)[0]),
                ):
                    covers = (
                        effect.ci_low is not None
                        and effect.ci_high is not None
                        and effect.ci_low <= truth <= effect.ci_high
                    )
                    early[prefix].append((effect.delta - truth, covers))
        name = "choice" if measure == "error" else "score"
        out[f"accept_{name}"] = accepted / reps
        out[f"calls_{name}"] = calls / reps
        out[f"calls_{name}_conditional"] = calls_conditional / reps
        for prefix, rows in early.items():
            if rows:
                out[f"{prefix}score_effect_median_bias_early"] = float(np.median([r[0] for r in rows]))
                out[f"{prefix}score_effect_mean_bias_early"] = float(np.mean([r[0] for r in rows]))
                out[f"{prefix}score_effect_coverage_early"] = float(np.mean([r[1] for r in rows]))
                out[f"{prefix}score_n_early"] = float(len(rows))
    return out


def print_sequential(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    print(
        f"\nsequential validation through bias_discovery.stages.family (default looks 25/50/100 %, O'Brien-Fleming, "
        f"futility 10 %; {args.sequential_reps} validations per cell; calls: the candidate's judge calls, 2 per item "
        "it was perturbed on, the placebo paid once per run, with the held-out round of the default effect: "
        "held_out (cond.: without it); effect: the reported ΔP of the candidates that stopped early for efficacy "
        "minus the true ΔP, median and mean, and the coverage of its 95 % interval, held-out items' Δ | given the stop)"
    )
    header = (
        f"{'sharp':>5} {'shift':>6} {'Δp':>8} {'items':>6} {'choice: accept':>15} {'calls':>7} {'cond.':>6} {'score: accept':>14} "
        f"{'calls':>7} {'cond.':>6} {'median bias':>21} {'mean bias':>21} {'coverage':>15}"
    )
    print(header)
    print("-" * len(header))

    def pair(r: dict[str, float], key: str, scale: str) -> str:
        values = [r.get(f"{prefix}score_effect_{key}_early") for prefix in ("", "conditional_")]
        if values[0] is None or values[1] is None:
            return "-"
        return " | ".join(f"{100 * v:+.2f} pp" if scale == "pp" else f"{100 * v:.1f}%" for v in values)

    for r in rows:
        print(
            f"{r['sharpness']:>5g} {r['shift_logit']:>6.2f} {100 * r['delta_p']:>6.1f}pp {int(r['items']):>6} "
            f"{100 * r['accept_choice']:>14.1f}% {r['calls_choice']:>7.0f} {r['calls_choice_conditional']:>6.0f} "
            f"{100 * r['accept_score']:>13.1f}% {r['calls_score']:>7.0f} {r['calls_score_conditional']:>6.0f} "
            f"{pair(r, 'median_bias', 'pp'):>21} {pair(r, 'mean_bias', 'pp'):>21} {pair(r, 'coverage', '%'):>15}"
        )


def calls_for_power(rows: list[dict[str, float]], key: str) -> float | None:
    """Judge calls at which `key` reaches TARGET_POWER, interpolated on log(calls) between the
    grid points around it; None when the grid never reaches it."""
    points = sorted((r["calls"], r[key]) for r in rows)
    for (c0, p0), (c1, p1) in zip(points, points[1:]):
        if p0 < TARGET_POWER <= p1:
            t = (TARGET_POWER - p0) / (p1 - p0)
            return math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0)))
    return None  # never reached, or already at the smallest grid point: no number to give


def print_table(rows: list[dict[str, float]], shifts: list[float], args: argparse.Namespace) -> list[dict[str, object]]:
    """One sharpness: the power table, the null's false acceptance, the calls for 80 % power."""
    header = f"{'shift':>6} {'Δp':>8} {'Δerror':>8} {'items':>6} {'calls':>6} {'choice':>7} {'score':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['shift_logit']:>6.2f} {100 * row['delta_p']:>6.1f}pp {100 * row['delta_error']:>6.1f}pp "
            f"{int(row['items']):>6} {int(row['calls']):>6} {100 * row['power_choice']:>6.1f}% "
            f"{100 * row['power_score']:>6.1f}%"
        )
    null = [r for r in rows if r["shift_logit"] == 0]
    if null:
        se = math.sqrt(args.alpha * (1 - args.alpha) / args.reps)
        choice = ", ".join(f"{100 * r['power_choice']:.1f}" for r in null)
        score = ", ".join(f"{100 * r['power_score']:.1f}" for r in null)
        print(
            f"shift 0 (no bias): false acceptance choice {choice} %, score {score} % over the item grid "
            f"(alpha {100 * args.alpha:.0f} %, Monte Carlo sd {100 * se:.1f} pp)"
        )
    summary: list[dict[str, object]] = []
    grid = f"{int(min(r['calls'] for r in rows))}-{int(max(r['calls'] for r in rows))}"
    for shift in (s for s in shifts if s != 0):
        cell = [r for r in rows if r["shift_logit"] == shift]
        choice, score = calls_for_power(cell, "power_choice"), calls_for_power(cell, "power_score")
        smallest = min(cell, key=lambda r: r["calls"])
        ratio = choice / score if choice and score else None
        at_least = None
        if choice and score is None and smallest["power_score"] >= TARGET_POWER:  # score: fewer than the grid holds
            at_least = choice / smallest["calls"]
        summary.append(
            {
                "sharpness": cell[0]["sharpness"],
                "shift_logit": shift,
                "calls_80_choice": choice,
                "calls_80_score": score,
                "calls_ratio": ratio,
                "calls_ratio_at_least": at_least,
            }
        )

        def show(x: float | None, key: str, smallest: dict[str, Any] = smallest) -> str:
            if x is not None:
                return f"{x:.0f}"
            return f"<= {int(smallest['calls'])}" if smallest[key] >= TARGET_POWER else f"outside {grid}"

        gain = f": {ratio:.1f}x the calls with choice verdicts" if ratio else ""
        gain = gain or (f": at least {at_least:.1f}x the calls with choice verdicts" if at_least else "")
        print(
            f"shift {shift:.2f}: judge calls for {100 * TARGET_POWER:.0f} % power: choice "
            f"{show(choice, 'power_choice')}, score {show(score, 'power_score')}{gain}"
        )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2000, help="simulated validations per cell")
    parser.add_argument("--items", default="10,20,40,80,160,320", help="test items per validation (comma-separated)")
    parser.add_argument("--shifts", default="0,0.25,0.5,1", help="the trait's shift of the latent logit (0 = no bias)")
    parser.add_argument("--sharpness", default="1,4", help="factors on every logit before the sigmoid (one table each)")
    parser.add_argument(
        "--mean",
        type=float,
        default=JUDGE_DEFAULTS["mean"],
        help="mean latent logit of preferring the rejected response",
    )
    parser.add_argument(
        "--spread", type=float, default=JUDGE_DEFAULTS["spread"], help="its standard deviation across items"
    )
    parser.add_argument(
        "--rewrite-noise",
        type=float,
        default=JUDGE_DEFAULTS["rewrite_noise"],
        help="sd of the logit change any rewrite causes",
    )
    parser.add_argument(
        "--position",
        type=float,
        default=JUDGE_DEFAULTS["position"],
        help="the judge's lean towards position A (logits)",
    )
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sequential-items", type=int, default=160, help="test items of the sequential cells")
    parser.add_argument("--sequential-reps", type=int, default=500, help="validations per sequential cell (0: none)")
    parser.add_argument("--json", type=Path, help="also write the tables as JSON")
    args = parser.parse_args()
    provenance = Provenance.start()

    items = [int(x) for x in args.items.split(",")]
    shifts = [float(x) for x in args.shifts.split(",")]
    sharpnesses = [float(x) for x in args.sharpness.split(",")]
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    print(
        f"simulated judge: latent logit N({args.mean}, {args.spread}^2), rewrite noise sd {args.rewrite_noise}, "
        f"position lean {args.position}; one-sided alpha {args.alpha}; {args.reps} validations per cell; "
        f"{CALLS_PER_ITEM} judge calls per item for either verdict; Δp, Δerror: the trait's mean effect on "
        "P(rejected) and on the choice error, vs the placebo"
    )
    rows: list[dict[str, float]] = []
    summary: list[dict[str, object]] = []
    for sharpness in sharpnesses:
        mine = [simulate(n, shift, sharpness, args, rng) for shift in shifts for n in items]
        print(f"\nsharpness {sharpness:g}")
        summary += print_table(mine, shifts, args)
        rows += mine
    sequential = (
        [
            sequential_cell(args.sequential_items, shift, sharpness, args, rng)
            for sharpness in sharpnesses
            for shift in shifts
        ]
        if args.sequential_reps > 0
        else []
    )
    if sequential:
        print_sequential(sequential, args)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        provenance.write_json(
            args.json,
            {
                "settings": settings,
                "rows": rows,
                "calls_for_80_percent_power": summary,
                "sequential": sequential,
                "commit": provenance.commit,
            },
        )


if __name__ == "__main__":
    main()

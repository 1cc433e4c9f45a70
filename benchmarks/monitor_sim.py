"""False alarms of the bias monitor under a judge with no bias at all, through the project's
own monitor functions (`metrics.position_z`, `metrics.length_spearman`).

    python benchmarks/monitor_sim.py [--replications 2000] [--seed 0]

The null judge has an *item-level random preference* and no bias: on each item it leans
towards one position (the first or the second shown) or towards one of the two responses,
by an amount drawn at random per item (Beta(0.2, 0.2): most items nearly deterministic, as
a judge at temperature 0), symmetric, so that over items no position and no length is
favoured; the two responses' lengths are drawn independently of everything. Each
replication judges every item in both orders (3 % of verdicts invalid). The cells vary what
the items lean towards (a position on every item, a response on every item, half and half)
and the number of items (24, the demo's test half; 100). A false alarm is |z| > 2 for
position, Spearman p < 0.05 (two-sided) for length.

`simulate_monitor_false_alarms` returns the *largest* rate over the cells for each monitor:
the monitor must hold its level under every such judge, not on average. `__main__` prints
every cell, with the verdict-level statistics the monitor published before (z over the 2N
verdicts, Spearman with t over both responses of every verdict) beside the item-level ones,
each rate with its 95 % Wilson interval over the replications.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
from provenance import Provenance

from bias_discovery.metrics import Preference, length_spearman, position_z, spearman
from bias_discovery.stats import wilson_interval

INVALID_RATE = 0.03
CONCENTRATION = 0.2
"""Beta(c, c) of the per-item lean: c < 1 puts most items near 0 or 1."""


@dataclass(frozen=True)
class NullJudge:
    name: str
    items: int
    position_share: float
    """Share of items whose lean is towards a position (the rest lean towards a response)."""


CELLS = tuple(
    NullJudge(f"{lean}, {n} items", n, share)
    for n in (24, 100)
    for lean, share in (("position lean", 1.0), ("response lean", 0.0), ("half and half", 0.5))
)


def _verdicts(
    judge: NullJudge, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, list[Preference | None], list[Preference | None]]:
    """One replication: lengths and the verdicts with the chosen response first (cr) and second (rc)."""
    n = judge.items
    len_chosen = np.round(np.exp(rng.normal(5.0, 0.6, n)))
    len_rejected = np.round(np.exp(rng.normal(5.0, 0.6, n)))
    lean = rng.beta(CONCENTRATION, CONCENTRATION, n)
    towards_position = rng.random(n) < judge.position_share
    # P(chosen picked): a position lean picks the first with p = lean in both orders (chosen
    # is first in cr, second in rc); a response lean picks the chosen with p = lean in both.
    chosen_cr = rng.random(n) < lean
    chosen_rc = rng.random(n) < np.where(towards_position, 1.0 - lean, lean)
    invalid_cr, invalid_rc = rng.random(n) < INVALID_RATE, rng.random(n) < INVALID_RATE

    def prefs(chosen: np.ndarray, invalid: np.ndarray) -> list[Preference | None]:
        return [None if bad else ("chosen" if c else "rejected") for c, bad in zip(chosen, invalid)]

    return len_chosen, len_rejected, prefs(chosen_cr, invalid_cr), prefs(chosen_rc, invalid_rc)


def _verdict_level(len_chosen: np.ndarray, len_rejected: np.ndarray, y_cr: list, y_rc: list) -> tuple[bool, bool]:
    """The published statistics, every verdict (and both responses of it) a unit: |z| > 2, p < 0.05."""
    first_wins = sum(p == "chosen" for p in y_cr) + sum(p == "rejected" for p in y_rc)
    decided = sum(p is not None for p in y_cr) + sum(p is not None for p in y_rc)
    z = (first_wins - decided / 2) / math.sqrt(decided / 4) if decided else 0.0
    xs, ys = [], []
    for order in (y_cr, y_rc):
        for lc, lr, p in zip(len_chosen, len_rejected, order):
            if p is not None:
                s = 1.0 if p == "chosen" else 0.0
                xs += [float(lc), float(lr)]
                ys += [s, 1.0 - s]
    _, p_value = spearman(xs, ys)
    return abs(z) > 2, p_value is not None and p_value < 0.05


def run_cell(
    judge: NullJudge, replications: int, rng: np.random.Generator, *, verdict_level: bool = False
) -> dict[str, int]:
    """Alarm counts over `replications`: item-level z and ρ (the monitor's), and with
    `verdict_level` the published verdict-level ones."""
    counts = {"z": 0, "rho": 0, "rho_flag": 0, "old_z": 0, "old_rho": 0}
    for r in range(replications):
        len_chosen, len_rejected, y_cr, y_rc = _verdicts(judge, rng)
        z = position_z(y_cr, y_rc)
        rho, p_value, _ = length_spearman(len_chosen.tolist(), len_rejected.tolist(), y_cr, y_rc, seed=r)
        counts["z"] += z.value is not None and abs(z.value) > 2
        counts["rho"] += p_value is not None and p_value < 0.05
        counts["rho_flag"] += p_value is not None and rho.value is not None and p_value < 0.05 and rho.value > 0.3
        if verdict_level:
            old_z, old_rho = _verdict_level(len_chosen, len_rejected, y_cr, y_rc)
            counts["old_z"] += old_z
            counts["old_rho"] += old_rho
    return counts


def simulate_monitor_false_alarms(replications: int, seed: int) -> dict[str, float]:
    """The monitor's false-alarm rates under the null judges of `CELLS`, the largest over the
    cells: `monitor_false_alarm_z` (|z| > 2) and `monitor_false_alarm_rho` (Spearman p < 0.05)."""
    rng = np.random.default_rng(seed)
    worst = {"monitor_false_alarm_z": 0.0, "monitor_false_alarm_rho": 0.0}
    for judge in CELLS:
        counts = run_cell(judge, replications, rng)
        worst["monitor_false_alarm_z"] = max(worst["monitor_false_alarm_z"], counts["z"] / replications)
        worst["monitor_false_alarm_rho"] = max(worst["monitor_false_alarm_rho"], counts["rho"] / replications)
    return worst


def _rate(k: int, n: int) -> str:
    low, high = wilson_interval(k, n)
    return f"{100 * k / n:5.1f} % [{100 * low:4.1f}, {100 * high:4.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replications", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    Provenance.start(print_at_exit=True)
    n = args.replications
    print(
        f"false alarms of the bias monitor under null judges with item-level random preferences, {n} replications per cell, seed {args.seed}"
    )
    print(
        "rate [95 % Wilson CI over the replications]; item: the monitor (item as the unit); verdict: as published (each verdict a unit)"
    )
    header = f"{'null judge':<28} {'z item':>22} {'z verdict':>22} {'rho item':>22} {'rho verdict':>22} {'rho flag item':>22}"
    print(header)
    rng = np.random.default_rng(args.seed)
    worst = {"z": 0, "rho": 0}
    for judge in CELLS:
        c = run_cell(judge, n, rng, verdict_level=True)
        worst = {k: max(v, c[k]) for k, v in worst.items()}
        print(
            f"{judge.name:<28} {_rate(c['z'], n):>22} {_rate(c['old_z'], n):>22} {_rate(c['rho'], n):>22} "
            f"{_rate(c['old_rho'], n):>22} {_rate(c['rho_flag'], n):>22}"
        )
    print(f"monitor_false_alarm_z   (largest over the cells, |z| > 2):       {worst['z'] / n:.4f}")
    print(f"monitor_false_alarm_rho (largest over the cells, p < 0.05):      {worst['rho'] / n:.4f}")
    print(
        "(the same draws as simulate_monitor_false_alarms(replications, seed): the verdict-level columns draw nothing)"
    )


if __name__ == "__main__":
    main()

"""Coverage and width of `bias-discovery correct`'s intervals against a known truth, through
the project's own estimators (`stats.judge_only_mean`, `labels_only_mean`, `ppi_mean`, which
call ppi_py).

    python benchmarks/correct_sim.py [--replications 1000] [--items 1000] [--seed 0]

A simulated judge with a planted bias: each item carries a trait with probability 0.4 (as a
validated bias's trait would be flagged), and the judge's value moves towards "better" on the
items that carry it. Two judges, one cell per label share (5 %, 10 %, 25 % of the items
labelled, a seeded random sample):

- `win_rate`: the human label is 1 when response A is better (P = 0.55); the judge agrees with
  the human on 80 % of items, and on items carrying the trait a B verdict turns A with
  probability 0.6 (truth 0.55; the judge's mean about 0.64).
- `score_1_6`: a human score 1-6 (a rounded normal, mean about 3.3); the judge gives the human
  score plus noise (SD 0.8) plus 0.8 points on items carrying the trait, clipped and rounded to
  the scale.

Each replication draws the items afresh, the labelled sample afresh, and asks whether each
95 % interval covers the truth (the population mean, computed exactly from 200,000 draws of
the same model once per judge). A cell reports the three coverages with their 95 % Wilson
intervals over the replications, and the mean width of PPI++'s interval over the labels-only
one's (`width_ratio_ppi_vs_labels`: below 1 is PPI++ narrower). The judge-only interval is
expected to miss: it covers the judge's mean, not the humans'.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
from provenance import Provenance

from bias_discovery.stats import judge_only_mean, labels_only_mean, ppi_mean, wilson_interval

LABEL_SHARES = (0.05, 0.10, 0.25)
TRAIT_SHARE = 0.4
RESULT = Path(__file__).resolve().parent / "results" / "correct_sim.json"

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def draw_win_rate(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(human labels, judge values): A better with P 0.55; the judge agrees 80 %, and a B verdict
    turns A with P 0.6 on items carrying the trait."""
    human = (rng.random(n) < 0.55).astype(float)
    trait = rng.random(n) < TRAIT_SHARE
    agrees = rng.random(n) < 0.8
    judge = np.where(agrees, human, 1.0 - human)
    pushed = trait & (judge == 0.0) & (rng.random(n) < 0.6)
    judge = np.where(pushed, 1.0, judge)
    return human, judge


def draw_score(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(human scores 1-6, judge scores 1-6): the judge adds noise and +0.8 on the trait."""
    human = np.clip(np.rint(rng.normal(3.3, 1.1, n)), 1, 6)
    trait = rng.random(n) < TRAIT_SHARE
    judge = np.clip(np.rint(human + rng.normal(0.0, 0.8, n) + 0.8 * trait), 1, 6)
    return human, judge


JUDGES: dict[str, Draw] = {"win_rate": draw_win_rate, "score_1_6": draw_score}


def _truth(draw: Draw, seed: int) -> float:
    human, _ = draw(np.random.default_rng(seed), 200_000)
    return float(human.mean())


def run_cell(draw: Draw, truth: float, share: float, *, items: int, replications: int, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    covered = {"ppi": 0, "labels_only": 0, "judge_only": 0}
    widths: dict[str, list[float]] = {"ppi": [], "labels_only": []}
    n_lab = max(2, round(share * items))
    for _ in range(replications):
        human, judge = draw(rng, items)
        order = rng.permutation(items)
        lab, unl = order[:n_lab], order[n_lab:]
        estimates = {
            "ppi": ppi_mean(human[lab], judge[lab], judge[unl]),
            "labels_only": labels_only_mean(human[lab]),
            "judge_only": judge_only_mean(judge),
        }
        for name, est in estimates.items():
            covered[name] += est.ci_low <= truth <= est.ci_high
            if name in widths:
                widths[name].append(est.width)
    cell: dict[str, object] = {"label_share": share, "n_labelled": n_lab, "items": items, "replications": replications}
    for name, k in covered.items():
        low, high = wilson_interval(k, replications)
        cell[f"coverage_{name}"] = k / replications
        cell[f"coverage_{name}_ci"] = [low, high]
    cell["mean_width_ppi"] = float(np.mean(widths["ppi"]))
    cell["mean_width_labels_only"] = float(np.mean(widths["labels_only"]))
    cell["width_ratio_ppi_vs_labels"] = float(np.mean(widths["ppi"]) / np.mean(widths["labels_only"]))
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replications", type=int, default=1000)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args()
    provenance = Provenance.start()
    cells = []
    for j, (name, draw) in enumerate(JUDGES.items()):
        truth = _truth(draw, args.seed + 1000 + j)
        for k, share in enumerate(LABEL_SHARES):
            cell = run_cell(
                draw, truth, share, items=args.items, replications=args.replications, seed=args.seed + 10 * j + k
            )
            cell = {"judge": name, "truth": truth, **cell}
            cells.append(cell)
            print(
                f"{name:>10} labels {share:>4.0%} (n = {cell['n_labelled']}): coverage PPI++ "
                f"{cell['coverage_ppi']:.3f}, labels only {cell['coverage_labels_only']:.3f}, judge only "
                f"{cell['coverage_judge_only']:.3f}; width PPI++ / labels only {cell['width_ratio_ppi_vs_labels']:.3f} "
                f"({args.replications} replications)",
                flush=True,
            )
    payload = {
        "what": "95 % interval coverage of the truth and PPI++'s width over labels-only's, simulated judge with a planted bias",
        "trait_share": TRAIT_SHARE,
        "label_shares": list(LABEL_SHARES),
        "seed": args.seed,
        "cells": cells,
    }
    provenance.write_json(args.json, payload)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

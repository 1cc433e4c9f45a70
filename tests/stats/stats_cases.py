"""Paired outcomes and simulated validation families shared by the statistics tests."""

from __future__ import annotations

import numpy as np

from bias_discovery import stats
from bias_discovery.stats import (
    compare_paired,
    decide_acceptance,
)


def paired_outcomes(hurt: int, helped: int, wrong_both: int, right_both: int) -> tuple[list[bool], list[bool]]:
    """Build (baseline_errors, perturbed_errors) with the given cells of the 2x2 table."""
    base = [False] * hurt + [True] * helped + [True] * wrong_both + [False] * right_both
    pert = [True] * hurt + [False] * helped + [True] * wrong_both + [False] * right_both
    return base, pert


def _items(rng: np.random.Generator, n: int, psi: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """(control wrong, perturbed wrong) per item: noise flips both ways at psi / 2 each, the
    bias adds `delta` right -> wrong flips; concordant items are wrong in both w.p. 0.3."""
    u = rng.random(n)
    hurt = u < psi / 2 + delta
    helped = (u >= psi / 2 + delta) & (u < psi + delta)
    both_wrong = ~hurt & ~helped & (rng.random(n) < 0.3)
    control = helped | both_wrong
    perturbed = hurt | both_wrong
    return control, perturbed


def _validate_family(control: np.ndarray, perturbed: list[np.ndarray], plan, *, correction="holm", rule="paired"):
    """One family through the stats primitives, as `stages.validate` runs it: looks on the
    slices, stops, then the correction over the sequential p-values. Returns (accepted, items used)."""
    m = len(perturbed)
    looks: list[list] = [[] for _ in range(m)]
    used = [plan.n_total] * m
    active = list(range(m))
    for j, upto in enumerate(plan.looks):
        still = []
        for k in active:
            x, y = control[:upto], perturbed[k][:upto]
            b, c = int(np.sum(~x & y)), int(np.sum(x & ~y))
            looks[k].append(stats.sequential_look(plan, j, looks[k], b=b, c=c, n=upto, family_size=m))
            used[k] = upto
            if looks[k][-1].outcome == "continue":
                still.append(k)
        active = still
    comparisons = [compare_paired(list(control[: used[k]]), list(perturbed[k][: used[k]]), n_boot=1) for k in range(m)]
    p_seq = [looks[k][-1].p_sequential for k in range(m)] if len(plan.looks) > 1 else None
    decided = decide_acceptance(comparisons, rule=rule, alpha=plan.alpha, correction=correction, p_values=p_seq)
    return [d.accepted for d in decided], used

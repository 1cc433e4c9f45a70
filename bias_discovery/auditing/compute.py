"""From a judge's verdicts to the audit's measures (pure: no model, no files).

A *verdict function* answers "what did the judge (under one scheme) prefer on item i, shown
with `order` first, at repeat r?" with chosen / rejected / tie, or None when invalid. Each
measure below is a formula of `bias_discovery.metrics` applied to such verdicts on a set of
items (all of them, or one domain's).

* position (built-in): y = repeat 1 in the item's drawn order, ŷ = repeat 1 in the other
  order, y_rand = repeat 2 in the drawn order; Wei et al.'s accuracies and noise per order;
  the monitor's z over repeat 1 in both orders.
* length (built-in): Wei et al.'s LB on the Δlength > 0 and <= 0 groups (Acc_both, and the
  noise of the both-orders outcome over the repeats); the monitor's Spearman ρ.
* perturbation (a library bias): y and y_rand on the original pair, ŷ on the perturbed one,
  all in the item's drawn order.

Matched populations: a measure that compares arms is computed on the items valid in every
arm it compares (Acc_ori and Acc_hack on the items where y and ŷ are both valid, p̂_cr, p̂_rc
and the PB built on them on the items valid in both orders, with their noise from the same
items), and records how many items it left out (`Estimate.n_excluded`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.pairs import Order
from ..metrics import (
    Estimate,
    Preference,
    acc_both,
    acc_random,
    attack_success_rate,
    attack_success_rate_factual_error,
    bootstrap_estimate,
    consistency_rate,
    flip_agreement,
    flip_probability_from_q_hat,
    length_bias,
    length_spearman,
    paired_accuracies,
    position_bias,
    position_share,
    position_z,
    proportion,
    robustness_rate,
    spearman_rho,
)
from ..mitigation import flip
from ..stats import compare_paired
from .records import AuditMetrics

__all__ = ["ItemInfo", "Verdicts", "length_metrics", "perturbation_metrics", "position_metrics"]

CR: Order = "chosen_first"
RC: Order = "rejected_first"

Verdicts = Callable[[int, Order, int], "Preference | None"]
"""(item index, order shown first, repeat 0..K-1) -> the preferred response, None if invalid."""


@dataclass(frozen=True)
class ItemInfo:
    domain: str
    base: Order
    """The order an unmitigated single-order judge shows this item in (the seeded swap coin)."""
    len_chosen: int
    """Length of the chosen response in whitespace tokens."""
    len_rejected: int


@dataclass(frozen=True)
class Context:
    repeats: int
    seed: int
    n_boot: int


def _errors(prefs: Sequence[Preference | None]) -> list[bool | None]:
    return [None if p is None else p != "chosen" for p in prefs]


def _nanmean(values: np.ndarray) -> float | None:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else None


def _one_minus(x: float | None) -> float | None:
    return None if x is None else 1.0 - x


def _indicator(prefs: Sequence[Preference | None], wanted: Preference) -> np.ndarray:
    return np.array([np.nan if p is None else float(p == wanted) for p in prefs])


def _agreement(outcomes: Sequence[bool | None]) -> float:
    """flip_agreement for one item's repeats (True = picked the first response); NaN with
    fewer than 2 valid repeats (the item then has no noise estimate)."""
    valid = [o for o in outcomes if o is not None]
    if len(valid) < 2:
        return float("nan")
    return flip_agreement(sum(valid), len(valid))


def _calm(
    y: list[Preference | None], y_hat: list[Preference | None], y_rand: list[Preference | None], ctx: Context
) -> dict:
    decided = [p for p in y if p is not None]
    acc_ori, acc_hack = paired_accuracies(y, y_hat)  # on the items of Δerror: valid in both
    return {
        "rr": robustness_rate(y, y_hat),
        "cr": consistency_rate(y, y_rand),
        "acc_ori": acc_ori,
        "acc_hack": acc_hack,
        "delta_error": compare_paired(_errors(y), _errors(y_hat), n_boot=ctx.n_boot, seed=ctx.seed),
        "tie_rate": proportion(sum(1 for p in decided if p == "tie"), len(decided), n_excluded=len(y) - len(decided)),
    }


def _boot(
    n: int,
    statistic: Callable[[np.ndarray], float | None],
    ctx: Context,
    *,
    rests_on: int | None = None,
    n_excluded: int | None = None,
) -> Estimate:
    """`statistic` with a bootstrap CI over the n items; `rests_on`: the units the estimate
    really uses when fewer or other than the items (a noise estimate: the items with 2 valid
    repeats; a pooled one: item-order units); `n_excluded`: the items it left out for an
    invalid verdict (default: the n items less `rests_on`)."""
    estimate = bootstrap_estimate(n, statistic, n_boot=ctx.n_boot, seed=ctx.seed)
    if n_excluded is None and rests_on is not None:
        n_excluded = max(0, n - rests_on)
    update: dict[str, object] = {"n_excluded": n_excluded}
    if rests_on is not None:
        update["n"] = rests_on
    return estimate.model_copy(update=update)


def _finite(values: np.ndarray, mask: np.ndarray | None = None) -> int:
    kept = ~np.isnan(values) if mask is None else ~np.isnan(values) & mask
    return int(kept.sum())


def position_metrics(items: Sequence[ItemInfo], idx: Sequence[int], verdict: Verdicts, ctx: Context) -> AuditMetrics:
    """The position audit on items `idx`."""
    K = ctx.repeats
    y_cr = [verdict(i, CR, 0) for i in idx]
    y_rc = [verdict(i, RC, 0) for i in idx]
    # PB compares the two orders: everything it is built on (p̂_cr, p̂_rc and their noise)
    # comes from the items whose repeat-1 verdicts are valid in both orders.
    matched = np.array([a is not None and b is not None for a, b in zip(y_cr, y_rc)], dtype=bool)
    unmatched = int((~matched).sum())
    right_cr, right_rc = _indicator(y_cr, "chosen"), _indicator(y_rc, "chosen")
    right_cr[~matched] = right_rc[~matched] = np.nan
    # Noise: k = repeats picking the response shown first (Wei et al.'s k_cr, k_rc).
    agree_cr = np.array(
        [_agreement([None if (p := verdict(i, CR, r)) is None else p == "chosen" for r in range(K)]) for i in idx]
    )
    agree_rc = np.array(
        [_agreement([None if (p := verdict(i, RC, r)) is None else p == "rejected" for r in range(K)]) for i in idx]
    )
    if agree_cr.size:
        agree_cr[~matched] = agree_rc[~matched] = np.nan
    n = len(idx)

    def q(agree: np.ndarray) -> Callable[[np.ndarray], float | None]:
        return lambda ix: _one_minus(_nanmean(agree[ix]))

    def pooled(ix: np.ndarray) -> float | None:
        return _one_minus(_nanmean(np.concatenate([agree_cr[ix], agree_rc[ix]])))

    def solved(stat: Callable[[np.ndarray], float | None]) -> Callable[[np.ndarray], float | None]:
        return lambda ix: flip_probability_from_q_hat(stat(ix))

    def pb(noise: Callable[[float | None], float | None]) -> Callable[[np.ndarray], float | None]:
        return lambda ix: position_bias(
            _nanmean(right_cr[ix]), noise(q(agree_cr)(ix)), _nanmean(right_rc[ix]), noise(q(agree_rc)(ix))
        )

    def pb_raw(ix: np.ndarray) -> float | None:
        a, b = _nanmean(right_cr[ix]), _nanmean(right_rc[ix])
        return None if a is None or b is None else a - b

    base = [items[i].base for i in idx]
    y = [verdict(i, o, 0) for i, o in zip(idx, base)]
    y_hat = [verdict(i, flip(o), 0) for i, o in zip(idx, base)]
    y_rand = [verdict(i, o, 1) for i, o in zip(idx, base)]
    z = position_z(y_cr, y_rc)
    p_cr, p_rc = paired_accuracies(y_cr, y_rc)
    return AuditMetrics(
        **_calm(y, y_hat, y_rand, ctx),
        asr=attack_success_rate(y, y_hat),
        acc_both=acc_both(y_cr, y_rc),
        acc_random=acc_random(y_cr, y_rc, seed=ctx.seed),
        p_cr=p_cr,
        p_rc=p_rc,
        q_hat=_boot(n, pooled, ctx, rests_on=_finite(agree_cr) + _finite(agree_rc)),
        q_hat_cr=_boot(n, q(agree_cr), ctx, rests_on=_finite(agree_cr)),
        q_hat_rc=_boot(n, q(agree_rc), ctx, rests_on=_finite(agree_rc)),
        q_solved=_boot(n, solved(pooled), ctx, rests_on=_finite(agree_cr) + _finite(agree_rc)),
        q_solved_cr=_boot(n, solved(q(agree_cr)), ctx, rests_on=_finite(agree_cr)),
        q_solved_rc=_boot(n, solved(q(agree_rc)), ctx, rests_on=_finite(agree_rc)),
        pb=_boot(n, pb(lambda x: x), ctx, rests_on=n - unmatched),
        pb_raw=_boot(n, pb_raw, ctx, rests_on=n - unmatched),
        pb_q_solved=_boot(n, pb(flip_probability_from_q_hat), ctx, rests_on=n - unmatched),
        z=z,
        first_win_rate=position_share(y_cr, y_rc),
        position_flag=None if z.value is None else abs(z.value) > 2,
    )


def length_metrics(items: Sequence[ItemInfo], idx: Sequence[int], verdict: Verdicts, ctx: Context) -> AuditMetrics:
    """The length audit on items `idx`."""
    K = ctx.repeats
    longer = np.array([items[i].len_chosen - items[i].len_rejected > 0 for i in idx], dtype=bool)

    def both_right(i: int, r: int) -> bool | None:
        a, b = verdict(i, CR, r), verdict(i, RC, r)
        return None if a is None or b is None else (a == "chosen" and b == "chosen")

    right = np.array([np.nan if (o := both_right(i, 0)) is None else float(o) for i in idx])
    agree = np.array([_agreement([both_right(i, r) for r in range(K)]) for i in idx])
    if agree.size:
        agree[np.isnan(right)] = np.nan  # a group's p̂ and its noise from the same items
    n = len(idx)

    def group_q(mask: np.ndarray | None) -> Callable[[np.ndarray], float | None]:
        return lambda ix: _one_minus(_nanmean(agree[ix] if mask is None else agree[ix][mask[ix]]))

    def group_p(mask: np.ndarray, ix: np.ndarray) -> float | None:
        return _nanmean(right[ix][mask[ix]])

    def lb(noise: Callable[[float | None], float | None]) -> Callable[[np.ndarray], float | None]:
        return lambda ix: length_bias(
            group_p(longer, ix), noise(group_q(longer)(ix)), group_p(~longer, ix), noise(group_q(~longer)(ix))
        )

    def lb_raw(ix: np.ndarray) -> float | None:
        a, b = group_p(longer, ix), group_p(~longer, ix)
        return None if a is None or b is None else a - b

    def solved(stat: Callable[[np.ndarray], float | None]) -> Callable[[np.ndarray], float | None]:
        return lambda ix: flip_probability_from_q_hat(stat(ix))

    y_cr = [verdict(i, CR, 0) for i in idx]
    y_rc = [verdict(i, RC, 0) for i in idx]
    rho, p_value, points = length_spearman(
        [items[i].len_chosen for i in idx], [items[i].len_rejected for i in idx], y_cr, y_rc, seed=ctx.seed
    )
    xs, shares = np.array([x for x, _ in points]), np.array([s for _, s in points])

    def rho_of(ix: np.ndarray) -> float | None:
        return spearman_rho(xs[ix], shares[ix]) if ix.size >= 3 else None

    rho_ci = bootstrap_estimate(len(points), rho_of, n_boot=ctx.n_boot, seed=ctx.seed)
    plus, minus = [j for j in range(n) if longer[j]], [j for j in range(n) if not longer[j]]
    unmatched = int(np.isnan(right).sum())
    return AuditMetrics(
        acc_both=acc_both(y_cr, y_rc),
        p_plus=acc_both([y_cr[j] for j in plus], [y_rc[j] for j in plus]),
        p_minus=acc_both([y_cr[j] for j in minus], [y_rc[j] for j in minus]),
        q_hat=_boot(n, group_q(None), ctx, rests_on=_finite(agree)),
        q_hat_plus=_boot(
            n, group_q(longer), ctx, rests_on=_finite(agree, longer), n_excluded=len(plus) - _finite(agree, longer)
        ),
        q_hat_minus=_boot(
            n, group_q(~longer), ctx, rests_on=_finite(agree, ~longer), n_excluded=len(minus) - _finite(agree, ~longer)
        ),
        q_solved=_boot(n, solved(group_q(None)), ctx, rests_on=_finite(agree)),
        q_solved_plus=_boot(
            n,
            solved(group_q(longer)),
            ctx,
            rests_on=_finite(agree, longer),
            n_excluded=len(plus) - _finite(agree, longer),
        ),
        q_solved_minus=_boot(
            n,
            solved(group_q(~longer)),
            ctx,
            rests_on=_finite(agree, ~longer),
            n_excluded=len(minus) - _finite(agree, ~longer),
        ),
        lb=_boot(n, lb(lambda x: x), ctx, rests_on=n - unmatched),
        lb_raw=_boot(n, lb_raw, ctx, rests_on=n - unmatched),
        lb_q_solved=_boot(n, lb(flip_probability_from_q_hat), ctx, rests_on=n - unmatched),
        spearman_rho=rho.model_copy(
            update={
                "ci_low": rho_ci.ci_low,
                "ci_high": rho_ci.ci_high,
                "method": "spearman over items; CI: bootstrap over items",
            }
        ),
        spearman_p=p_value,
        length_flag=None if rho.value is None or p_value is None else (rho.value > 0.3 and p_value < 0.05),
    )


def perturbation_metrics(
    items: Sequence[ItemInfo],
    idx: Sequence[int],
    original: Verdicts,
    perturbed: Verdicts,
    ctx: Context,
    *,
    factual_error: bool,
) -> AuditMetrics:
    """A library bias on items `idx` (those with a valid perturbation)."""
    base = [items[i].base for i in idx]
    y = [original(i, o, 0) for i, o in zip(idx, base)]
    y_rand = [original(i, o, 1) for i, o in zip(idx, base)]
    y_hat = [perturbed(i, o, 0) for i, o in zip(idx, base)]
    asr = attack_success_rate_factual_error(y, y_hat) if factual_error else attack_success_rate(y, y_hat)
    return AuditMetrics(**_calm(y, y_hat, y_rand, ctx), asr=asr)

"""`correct`: a judge's aggregate (a win rate, a mean score) corrected with a few human labels,
with honest intervals: the judge alone, the labels alone and PPI++ side by side
(`stats.ppi_mean` ...), per model and X minus Y when the input names the models, adjusted for
covariates, the judge-minus-human gap explained per bias flag, the labels a CI width needs
(`plan`), and without labels a bound on what the validated biases can move (`bias_bound`).

PPI's one assumption: the labelled items are a random sample of all items (the same
distribution). The record says so in `assumption`; docs/concepts/ppi.md says what breaks when
it fails.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import DataError
from ..stats import (
    CorrectedEstimate,
    GapCoefficient,
    LabelPlan,
    difference_of_estimates,
    gap_regression,
    judge_only_mean,
    labels_for_width,
    labels_only_mean,
    mean_t_interval,
    ppi_covariate_mean,
    ppi_mean,
    wilson_interval,
)
from .correction_flags import CheckerCalls, TraitFlags
from .correction_inputs import CorrectionInput, Item

__all__ = [
    "ASSUMPTION",
    "BiasBoundRow",
    "CorrectionReport",
    "GroupDifference",
    "GroupResult",
    "PlanRecord",
    "bias_bound",
    "correct_input",
    "plan_labels",
]

ASSUMPTION = (
    "PPI assumes the labelled items are a random sample of all items (the same distribution); "
    "labels chosen by hand, by difficulty or by the judge's verdict void the intervals."
)


class GroupResult(BaseModel):
    """The estimates of one model's responses (the input's `group` column)."""

    group: str
    """The model's name as the input gives it."""
    n_items: int
    """Its items with a judge value."""
    estimates: list[CorrectedEstimate]
    """judge_only, labels_only and ppi++ (those its labels allow)."""


class GroupDifference(BaseModel):
    """X minus Y of two models' estimates (their items are disjoint: independent samples)."""

    x: str
    """The first model."""
    y: str
    """The second model."""
    estimates: list[CorrectedEstimate]
    """judge_only, labels_only and ppi++ differences (method `difference`, in this order)."""
    of: list[str]
    """Which estimate each difference is of (judge_only, labels_only, ppi++)."""


class PlanRecord(BaseModel):
    """`correct --plan`: the labels a CI width needs and which items to label."""

    plan: LabelPlan
    """The labels needed with labels only and with PPI++."""
    correlation_from: Literal["pilot", "assumed"]
    """Whether the judge-human correlation was measured on the labels at hand or assumed."""
    n_pilot: int
    """Labels already at hand (the pilot)."""
    to_label: list[str]
    """Ids to label next, a seeded random sample of the unlabelled items (PPI++'s n minus the
    pilot; empty when the pilot suffices)."""
    seed: int
    """The sample's seed."""


class BiasBoundRow(BaseModel):
    """How far one validated bias can move the aggregate: its held-out effect times the share
    of items carrying its trait. Bounds only the biases found, not the judge's error."""

    bias: str
    """The bias's id (its flag column)."""
    effect: float
    """Its held-out effect from the library (Δ of the library's measure, trait present vs not)."""
    effect_ci: tuple[float, float] | None
    """The effect's interval as validated (None: the library has none)."""
    share: float
    """Share of the items flagged as carrying the trait (pairwise flags of the checker, A's
    trait minus B's: their mean, the share where only A carries it minus where only B does)."""
    share_ci: tuple[float, float]
    """Wilson interval of the share (of a mean of -1/0/1 flags: Student-t)."""
    n: int
    """Items flagged or not."""
    n_flagged: int
    """Items flagged (pairwise checker flags: items where one response carries the trait and the other not)."""
    bound: float
    """effect x share: the aggregate's expected shift from this bias."""
    bound_ci: tuple[float, float] | None
    """The product's range over both intervals (conservative: every corner of the two)."""


class CorrectionReport(BaseModel):
    """correct.json: a judge's aggregate corrected with human labels."""

    kind: Literal["correction"] = "correction"
    log: str
    """The input file."""
    log_format: str
    """judgments, inspect, or generic."""
    mode: Literal["pairwise", "pointwise"]
    """pairwise (the quantity is response A's win rate) or pointwise (a mean score)."""
    quantity: str
    """What is estimated, in words."""
    scale: str | None
    """Pointwise: the scale of the scores and labels."""
    confidence: float
    """The intervals' coverage."""
    n_items: int
    """Items with a judge value (the aggregate is over them)."""
    n_labelled: int
    """Of them, items with a human label."""
    n_without_judge: int
    """Items left out: no valid judge value (an invalid verdict, an empty score)."""
    estimates: list[CorrectedEstimate] = Field(default_factory=list)
    """judge_only, labels_only, ppi++ and, with covariates, ppi++_covariates."""
    covariates: list[str] = Field(default_factory=list)
    """The covariates of ppi++_covariates: the covariate columns, then the bias flags."""
    groups: list[GroupResult] = Field(default_factory=list)
    """One per model, when the input names them."""
    differences: list[GroupDifference] = Field(default_factory=list)
    """X minus Y for every two models."""
    flags: list[str] = Field(default_factory=list)
    """The per-bias flags of the gap regression and the covariates: the user's flag columns,
    then the checker's usable flags."""
    trait_flags: list[TraitFlags] = Field(default_factory=list)
    """The biases the checker model flagged, each with its counts and whether it was used."""
    checker_calls: CheckerCalls | None = None
    """What the checker's flags cost."""
    gap: list[GapCoefficient] = Field(default_factory=list)
    """The judge-minus-human gap on the labelled items regressed on the flags."""
    plan: PlanRecord | None = None
    """`plan`: the labels needed for `target_width`."""
    bias_bound: list[BiasBoundRow] = Field(default_factory=list)
    """Without labels: each validated bias's effect times its share."""
    assumption: str = ASSUMPTION
    """What the PPI intervals assume."""


def _split(items: Sequence[Item]) -> tuple[list[Item], list[Item]]:
    labelled = [i for i in items if i.label is not None]
    return labelled, [i for i in items if i.label is None]


def _estimates(items: Sequence[Item], confidence: float) -> list[CorrectedEstimate]:
    judge = [i.judge for i in items if i.judge is not None]
    out = [judge_only_mean(judge, confidence)] if len(judge) >= 2 else []
    labelled, unlabelled = _split(items)
    y = [i.label for i in labelled if i.label is not None]
    if len(y) >= 2:
        out.append(labels_only_mean(y, confidence))
        if unlabelled:
            out.append(
                ppi_mean(
                    y,
                    [i.judge for i in labelled if i.judge is not None],
                    [i.judge for i in unlabelled if i.judge is not None],
                    confidence,
                )
            )
    return out


def _check_covariates(items: Sequence[Item], names: Sequence[str], path: str) -> None:
    for name in names:
        values = {i.covariates[name] for i in items}
        if len(values) < 2:
            raise DataError(
                f"{path}: covariate {name!r} is constant ({next(iter(values))!r} on all {len(items)} items); "
                "it cannot adjust anything: drop it"
            )


def _covariate_estimate(items: Sequence[Item], names: Sequence[str], confidence: float) -> CorrectedEstimate:
    """ppi++_covariates on `names`: covariate columns or bias flags."""
    import numpy as np

    def row(item: Item) -> list[float]:
        return [item.covariates[n] if n in item.covariates else item.flags[n] for n in names]

    labelled, unlabelled = _split(items)
    if len(labelled) <= len(names) + 1:
        raise DataError(
            f"{len(names)} covariate(s) need more than {len(names) + 1} labelled items, got {len(labelled)}"
        )
    try:
        return ppi_covariate_mean(
            [float(i.label) for i in labelled if i.label is not None],
            [float(i.judge) for i in labelled if i.judge is not None],
            np.array([row(i) for i in labelled]),
            [float(i.judge) for i in unlabelled if i.judge is not None],
            np.array([row(i) for i in unlabelled]),
            confidence,
        )
    except np.linalg.LinAlgError:
        raise DataError(
            f"the covariates {', '.join(names)} are collinear on the {len(labelled)} labelled items "
            "(one is a combination of the others): drop one"
        ) from None


def _groups(items: Sequence[Item], confidence: float) -> tuple[list[GroupResult], list[GroupDifference]]:
    names = sorted({i.group for i in items if i.group is not None})
    if len(names) < 2:
        return [], []
    groups = []
    for name in names:
        members = [i for i in items if i.group == name]
        groups.append(GroupResult(group=name, n_items=len(members), estimates=_estimates(members, confidence)))
    differences = []
    for a in range(len(groups)):
        for b in range(a + 1, len(groups)):
            x: dict[str, CorrectedEstimate] = {e.method: e for e in groups[a].estimates}
            y: dict[str, CorrectedEstimate] = {e.method: e for e in groups[b].estimates}
            common: list[str] = [m for m in ("judge_only", "labels_only", "ppi++") if m in x and m in y]
            differences.append(
                GroupDifference(
                    x=groups[a].group,
                    y=groups[b].group,
                    estimates=[difference_of_estimates(x[m], y[m]) for m in common],
                    of=common,
                )
            )
    return groups, differences


def _gap(items: Sequence[Item], flags: Sequence[str], confidence: float, path: str) -> list[GapCoefficient]:
    import numpy as np

    labelled, _ = _split(items)
    for name in flags:
        if len({i.flags[name] for i in labelled}) < 2:
            raise DataError(f"{path}: flag {name!r} is constant on the {len(labelled)} labelled items; drop it")
    if len(labelled) <= len(flags) + 1:
        raise DataError(f"{len(flags)} flag(s) need more than {len(flags) + 1} labelled items, got {len(labelled)}")
    gap = [float(i.judge) - float(i.label) for i in labelled if i.judge is not None and i.label is not None]
    return gap_regression(gap, np.array([[i.flags[n] for n in flags] for i in labelled]), list(flags), confidence)


def _quantity(data: CorrectionInput) -> str:
    if data.mode == "pairwise":
        return "win rate of response A (the log's response 0) over response B, ties half"
    assert data.scale is not None
    return f"mean score (scale: {data.scale.describe()})"


def correct_input(data: CorrectionInput, *, confidence: float = 0.95, need_labels: bool = True) -> CorrectionReport:
    """Every estimate `data` supports. With `need_labels`, fewer than 2 labels is an error."""
    path = str(data.path)
    items = [i for i in data.items if i.judge is not None]
    dropped = len(data.items) - len(items)
    _check_covariates(items, data.covariates, path)
    labelled, unlabelled = _split(items)
    if need_labels and len(labelled) < 2:
        raise DataError(
            f"{path}: {len(labelled)} of {len(items)} items carry a human label; correcting needs at least 2 "
            "(give `labels` or `label_column`), or use `plan` to pick the items to label"
        )
    if need_labels and not unlabelled:
        raise DataError(f"{path}: every item is labelled: the labels' mean is the answer, no judge is needed")
    report = CorrectionReport(
        log=path,
        log_format=data.log_format,
        mode=data.mode,
        quantity=_quantity(data),
        scale=None if data.scale is None else data.scale.describe(),
        confidence=confidence,
        n_items=len(items),
        n_labelled=len(labelled),
        n_without_judge=dropped,
        covariates=[*data.covariates, *data.flags],
        flags=list(data.flags),
    )
    if len(labelled) >= 2 and unlabelled:
        report.estimates = _estimates(items, confidence)
        if data.flags:  # first: it names a flag constant on the labelled items
            report.gap = _gap(items, data.flags, confidence, path)
        if report.covariates:
            report.estimates.append(_covariate_estimate(items, report.covariates, confidence))
        report.groups, report.differences = _groups(items, confidence)
    else:
        report.estimates = _estimates(items, confidence)
    return report


def plan_labels(
    data: CorrectionInput,
    *,
    target_width: float,
    confidence: float = 0.95,
    assumed_correlation: float | None = None,
    seed: int = 0,
) -> PlanRecord:
    """The labels a CI of full width `target_width` needs, from the pilot labels at hand (at
    least 10: their correlation with the judge and their SD) or an assumed correlation (the SD
    then from the judge's values; half the scale's span, the largest SD it allows, when the
    judge gave every item one value), and a seeded sample of unlabelled items to label next."""
    items = [i for i in data.items if i.judge is not None]
    labelled, unlabelled = _split(items)
    pairs = [(float(i.judge), float(i.label)) for i in labelled if i.judge is not None and i.label is not None]
    if assumed_correlation is None and len(pairs) < 10:
        raise DataError(
            f"{data.path}: a plan needs a pilot of at least 10 labelled items ({len(pairs)} here) "
            "or an assumed judge-human correlation (`assumed_correlation`)"
        )
    source: Literal["pilot", "assumed"]
    if assumed_correlation is not None:
        correlation, source = assumed_correlation, "assumed"
        sd = statistics.stdev([float(i.judge) for i in items if i.judge is not None])
        if sd == 0.0:  # a judge with one value says nothing of the spread: the largest the scale allows
            sd = data.scale.span / 2.0 if data.scale is not None else 0.5
    else:
        judge, human = zip(*pairs)
        if len(set(judge)) < 2 or len(set(human)) < 2:
            raise DataError(
                f"{data.path}: the pilot's judge values or labels are constant: no correlation to plan with"
            )
        correlation, source = statistics.correlation(judge, human), "pilot"
        sd = statistics.stdev(human)
    correlation = max(-0.999, min(0.999, correlation))
    if sd <= 0:
        raise DataError(f"{data.path}: the values are constant: any width is reached with 2 labels")
    plan = labels_for_width(target_width, sd=sd, correlation=correlation, pool=len(items), confidence=confidence)
    need = plan.n_ppi if plan.n_ppi is not None else plan.n_labels_only
    more = max(0, min(need - len(labelled), len(unlabelled)))
    chosen = random.Random(seed).sample(sorted(i.item_id for i in unlabelled), more)
    return PlanRecord(plan=plan, correlation_from=source, n_pilot=len(labelled), to_label=chosen, seed=seed)


def bias_bound(
    items: Sequence[Item], effects: dict[str, tuple[float, tuple[float, float] | None]], confidence: float = 0.95
) -> list[BiasBoundRow]:
    """Each bias's held-out effect times the share of items flagged with its trait (a flag
    column named as the bias). Bounds only the biases found, not the judge's error."""
    rows = []
    for bias, (effect, effect_ci) in effects.items():
        flagged = [i.flags[bias] for i in items if bias in i.flags]
        if not flagged:
            raise DataError(f"bias {bias!r}: no item carries its flag column (or a checker model's flag)")
        n = len(flagged)
        if min(flagged) < 0:  # pairwise checker flags, A's trait minus B's: the share is their mean
            k = sum(1 for f in flagged if f != 0)
            share = math.fsum(flagged) / n
            low, high = mean_t_interval(flagged, confidence, bounds=(-1.0, 1.0))
        else:
            k = int(sum(flagged))
            share = k / n
            low, high = wilson_interval(k, n, confidence)
        bound_ci = None
        if effect_ci is not None:
            corners = [e * s for e in effect_ci for s in (low, high)]
            bound_ci = (min(corners), max(corners))
        rows.append(
            BiasBoundRow(
                bias=bias,
                effect=effect,
                effect_ci=effect_ci,
                share=share,
                share_ci=(low, high),
                n=n,
                n_flagged=k,
                bound=effect * share,
                bound_ci=bound_ci,
            )
        )
    return rows

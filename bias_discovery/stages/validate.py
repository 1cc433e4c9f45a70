"""Validate: does a candidate bias really raise the target's error on the test set?

Each candidate perturbs every test item (one teacher batch for all candidates), the target
judges every perturbed item (one batch), and the errors are compared with the baseline *on the
same items*: exact one-sided McNemar on the discordant items, a bootstrap CI of Δerror, and a
correction across the candidates validated together. `acceptance: paper` keeps BiasScope's
plain "perturbed error > baseline error" rule for comparison.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel

from ..config import PerturbSettings, ValidateSettings
from ..data.pairs import PreferencePair
from ..judging import JudgeResult, JudgeSettings, Judgment, calls_per_pair, judge_pairs
from ..library import Bias, BiasValidation, DomainValidation
from ..llm.base import Engine
from ..progress import ProgressFactory, progress_or_quiet
from ..stats import (
    PairedComparison,
    compare_paired,
    decide_acceptance,
    per_domain_breakdown,
)
from .perturb import perturb
from .records import PerturbedPair


class CandidateValidation(BaseModel):
    """validation.json entry: one candidate's numbers and decision."""

    bias_id: str
    name: str
    n_perturb_invalid: int
    comparison: PairedComparison
    per_domain: dict[str, PairedComparison]


class ValidationOutput(BaseModel):
    candidates: list[Bias]
    """The candidates with `validation` filled (accepted or not)."""
    records: list[CandidateValidation]
    perturbed: list[PerturbedPair]
    judgments: list[Judgment]


def errors_of(result: JudgeResult) -> list[bool | None]:
    """Per pair: True = wrong, False = right, None = invalid."""
    return [None if o.correct is None else not o.correct for o in result.outcomes]


def validate_biases(
    teacher: Engine,
    target: Engine,
    candidates: Sequence[Bias],
    test_pairs: Sequence[PreferencePair],
    baseline: JudgeResult,
    *,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    settings: ValidateSettings,
    seed: int,
    test_data: str,
    progress: ProgressFactory | None = None,
) -> ValidationOutput:
    """Perturb every test pair with every candidate (one teacher batch), judge the valid
    rewrites (one target batch) and decide. `progress` gets one step per batch, each with the
    number of calls it really makes (invalid rewrites are not judged)."""
    if len(baseline.outcomes) != len(test_pairs):
        raise ValueError("baseline judgments do not match the test pairs")
    if not candidates:
        return ValidationOutput(candidates=[], records=[], perturbed=[], judgments=[])
    bar = progress_or_quiet(progress)
    items = [(pair, bias) for bias in candidates for pair in test_pairs]
    with bar("perturb", len(items)) as advance:
        perturbed = perturb(teacher, items, perturb_settings, seed=seed, progress=advance)
    valid_positions = [i for i, p in enumerate(perturbed) if p.valid]
    n_judge = len(valid_positions) * calls_per_pair(judge_settings)
    with bar("judge", n_judge) as advance:
        result = judge_pairs(
            target, [perturbed[i].to_pair() for i in valid_positions], judge_settings, seed=seed, progress=advance
        )

    perturbed_errors: list[bool | None] = [None] * len(perturbed)
    for i, outcome in zip(valid_positions, result.outcomes):
        perturbed_errors[i] = None if outcome.correct is None else not outcome.correct

    baseline_errors = errors_of(baseline)
    domains = [p.domain for p in test_pairs]
    n = len(test_pairs)
    comparisons, breakdowns, invalid_counts = [], [], []
    for k, bias in enumerate(candidates):
        mine = perturbed_errors[k * n : (k + 1) * n]
        comparisons.append(
            compare_paired(baseline_errors, mine, n_boot=settings.n_boot, confidence=settings.confidence, seed=seed)
        )
        breakdowns.append(per_domain_breakdown(domains, baseline_errors, mine, n_boot=200, confidence=settings.confidence, seed=seed))
        invalid_counts.append(sum(1 for p in perturbed[k * n : (k + 1) * n] if not p.valid))
    decided = decide_acceptance(
        comparisons,
        rule=settings.acceptance,
        alpha=settings.alpha,
        correction=settings.correction,
        min_delta=settings.min_delta,
    )

    validated, records = [], []
    for bias, comparison, per_domain, n_invalid in zip(candidates, decided, breakdowns, invalid_counts):
        validation = BiasValidation(
            n=comparison.n,
            n_excluded_invalid=comparison.n_excluded_invalid,
            baseline_error=comparison.baseline_error,
            perturbed_error=comparison.perturbed_error,
            delta=comparison.delta,
            ci_low=comparison.ci_low,
            ci_high=comparison.ci_high,
            p_value=comparison.p_value,
            p_adjusted=comparison.p_adjusted,
            accepted=bool(comparison.accepted),
            rule=comparison.rule,
            per_domain={
                d: DomainValidation(
                    n=c.n, baseline_error=c.baseline_error, perturbed_error=c.perturbed_error, delta=c.delta, p_value=c.p_value
                )
                for d, c in per_domain.items()
            },
            test_data=test_data,
        )
        validated.append(bias.model_copy(update={"validation": validation}))
        records.append(
            CandidateValidation(bias_id=bias.id, name=bias.name, n_perturb_invalid=n_invalid, comparison=comparison, per_domain=per_domain)
        )
    return ValidationOutput(candidates=validated, records=records, perturbed=perturbed, judgments=result.judgments)

"""The expected calls, tokens and dollars of a run per stage and role, beside their bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..config import RunConfig
from ..data.pairs import PreferencePair
from ..judging import build_tasks
from ..library import Bias, BiasLibrary
from ..llm.config import Price
from ..llm.types import GenerationRequest
from ..loop.pilot import PilotRecord
from ._calls import planned_calls
from ._report import Assumptions, StageCalls, StageEstimate

PER_PAIR_STAGES = ("evaluate", "check", "deeper_explain", "identify", "merge")
"""Stages of an iteration whose calls grow with the target pairs: a pilot's calls per pair carry
over (none measured: none expected; Merge's grow with the candidates too, so this is rougher)."""
PLACEBO_STAGES = ("placebo (rewrite)", "placebo (judge)", "placebo (check)")


def _chars(requests: Sequence[GenerationRequest]) -> tuple[float, int]:
    """Mean and largest prompt size in characters."""
    sizes = [sum(len(m.content) for m in r.messages) for r in requests] or [0]
    return sum(sizes) / len(sizes), max(sizes)


class _Sizes(NamedTuple):
    """One kind of call's tokens: prompt mean and largest, completion mean and largest."""

    prompt_mean: float
    prompt_max: float
    completion_mean: float
    completion_max: float


_STAGE_KIND = {
    "perturb": "perturb",
    "evaluate": "evaluate",
    "deeper_explain": "explain",
    "identify": "identify",
    "merge": "merge",
    "check": "check",
    "positions": "judge",
    "baseline": "judge",
    "placebo (rewrite)": "perturb",
    "placebo (judge)": "judge",
    "placebo (check)": "check",
    "validate_seeds (perturb)": "perturb",
    "validate_seeds (judge)": "judge",
    "validate_seeds (check)": "check",
    "validate (perturb)": "perturb",
    "validate (judge)": "judge",
    "validate (check)": "check",
}
"""The kind of call (a key of `_stage_sizes`) each stage of `planned_calls` makes."""


def _stage_sizes(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    bias: Bias,
    a: Assumptions,
) -> dict[str, _Sizes]:
    """Tokens per call of each kind, from the stages' own prompts on the data (at
    `chars_per_token`) and the max_tokens budgets: built once, shared by the stages that make
    the same kind of call (the baseline, the placebo and validation all judge test pairs)."""
    from ..stages.perturb import build_perturb_request

    judge, cpt = config.judge, a.chars_per_token
    perturb_max_tokens, explain_max_tokens = config.perturb.max_tokens, config.deeper_explain.max_tokens
    judge_mean, judge_max = _chars([task.request for task in build_tasks(test_pairs, judge, seed=config.seed)])
    eval_mean, eval_max = _chars([task.request for task in build_tasks(target_pairs, judge, seed=config.seed)])
    perturb_mean, perturb_max = _chars(
        [build_perturb_request(p, bias, config.perturb, config.seed) for p in [*target_pairs, *test_pairs]]
    )
    n_pairs = len(target_pairs) + len(test_pairs)
    answer = sum(len(p.rejected) for p in [*target_pairs, *test_pairs]) / max(1, n_pairs) / cpt
    verdict = (judge.reasoning_chars or judge.max_tokens * cpt) / cpt + 8 if judge.reasoning else 2
    bias_tokens = 2 * len(bias.as_prompt_text()) / cpt
    return {
        "judge": _Sizes(judge_mean / cpt, judge_max / cpt, min(verdict, judge.max_tokens), judge.max_tokens),
        "evaluate": _Sizes(eval_mean / cpt, eval_max / cpt, min(verdict, judge.max_tokens), judge.max_tokens),
        "perturb": _Sizes(perturb_mean / cpt, perturb_max / cpt, min(answer, perturb_max_tokens), perturb_max_tokens),
        "explain": _Sizes(
            eval_mean / cpt + answer + verdict,
            eval_max / cpt + perturb_max_tokens + judge.max_tokens,
            a.completion_share * explain_max_tokens,
            explain_max_tokens,
        ),
        "identify": _Sizes(
            eval_mean / cpt + answer + verdict,
            eval_max / cpt + perturb_max_tokens + judge.max_tokens + explain_max_tokens,
            a.completion_share * config.identify.max_tokens,
            config.identify.max_tokens,
        ),
        "merge": _Sizes(bias_tokens + 100, bias_tokens + 400, config.merge.max_tokens, config.merge.max_tokens),
        "check": _Sizes(judge_mean / cpt, judge_max / cpt + perturb_max_tokens, 2, 8),
    }


def _expected_shares(config: RunConfig, a: Assumptions, n_target: int, seeds_validated: bool) -> dict[str, float]:
    """Expected calls over bound calls, per stage of `planned_calls` (1 where not listed): the
    misjudged share for the stages that follow a misjudgment, the expected candidates and the
    sequential share for validation. No candidate expected and no seed validated: no placebo
    (it is paid for only when a candidate needs it)."""
    v = config.validate_
    seq = a.sequential_share if v.sequential.enabled else 1.0
    candidates = min(a.candidates_per_iteration, v.max_candidates or n_target)
    validate = candidates * seq / max(1, v.max_candidates or n_target)
    placebo = dict.fromkeys(PLACEBO_STAGES, 0.0) if candidates <= 0 and not seeds_validated else {}
    return {
        **placebo,
        "check": a.misjudged_share,
        "deeper_explain": a.misjudged_share,
        "identify": a.misjudged_share / (1 + config.identify.retries),
        "merge": a.misjudged_share,
        "validate (perturb)": validate,
        "validate (judge)": validate,
        "validate (check)": validate,
        "validate_seeds (perturb)": seq,
        "validate_seeds (judge)": seq,
        "validate_seeds (check)": seq,
    }


def _estimate_row(
    row: StageCalls, sizes: _Sizes, share: float, pilot: PilotRecord | None, n_target: int, price: Price | None
) -> StageEstimate:
    """One stage and role's estimate from its bound row: the expected share of its calls, with
    what a `pilot` measured for this stage and role (its calls per target pair, its tokens per
    call) in place of the assumed figures, and dollars at the role's `price`."""
    p_mean, p_max, c_mean, c_max = sizes
    measured_calls = 0
    used = pilot.tokens(row.stage.split(" (")[0], row.role) if pilot else None
    if pilot and row.stage in PER_PAIR_STAGES:  # calls per target pair, retries and invalid rewrites included
        measured_calls = used.requests if used else 0
        per_pair_bound = row.per_iteration / max(1, n_target)
        share = min(1.0, measured_calls / max(1, len(pilot.pairs)) / per_pair_bound) if per_pair_bound else 0.0
    if used:  # the pilot's own token counts
        p_mean, c_mean = used.prompt_tokens / used.requests, used.completion_tokens / used.requests
        p_max, c_max = max(p_max, p_mean), max(c_max, c_mean)
    calls = row.total * share
    estimate = StageEstimate(
        stage=row.stage,
        role=row.role,
        calls=calls,
        calls_bound=row.total,
        prompt_tokens=calls * p_mean,
        prompt_tokens_bound=row.total * p_max,
        completion_tokens=calls * c_mean,
        completion_tokens_bound=row.total * c_max,
        measured_calls=measured_calls,
        measured_tokens=used.requests if used else 0,
    )
    if price is not None:
        estimate.usd = (
            estimate.prompt_tokens * price.input_per_mtok + estimate.completion_tokens * price.output_per_mtok
        ) / 1e6
        estimate.usd_bound = (
            estimate.prompt_tokens_bound * price.input_per_mtok
            + estimate.completion_tokens_bound * price.output_per_mtok
        ) / 1e6
    return estimate


def estimate_run(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    library: BiasLibrary,
    assumptions: Assumptions | None = None,
    pilot: PilotRecord | None = None,
) -> list[StageEstimate]:
    """Per stage and role of `planned_calls`: the expected calls from `assumptions` beside the
    bound (the same rows), prompt tokens from the stage's own prompts on the data (mean and
    longest, at `chars_per_token`), completion tokens (expected from the answers' sizes or
    `completion_share`, bounded by each stage's `max_tokens`), and dollars at the roles' prices.
    With a `pilot` (`check --pilot N`), its measurements replace the assumptions
    (`Assumptions.from_pilot`), the calls per target pair of evaluate, deeper_explain and
    identify, and the tokens per call of each stage and role it called."""
    a = assumptions or (Assumptions.from_pilot(pilot, len(target_pairs)) if pilot else Assumptions())
    n_target, n_test = len(target_pairs), len(test_pairs)
    bias = max(library.biases, key=lambda b: len(b.as_prompt_text()))
    sizes = _stage_sizes(config, target_pairs, test_pairs, bias, a)
    rows = planned_calls(config, n_target, n_test, len(library.biases))
    shares = _expected_shares(
        config, a, n_target, seeds_validated=any(r.stage.startswith("validate_seeds") for r in rows)
    )
    prices = {"target": config.target.price, "teacher": config.teacher.price, "checker": config.answer_checker().price}
    return [
        _estimate_row(
            row, sizes[_STAGE_KIND[row.stage]], shares.get(row.stage, 1.0), pilot, n_target, prices.get(row.role)
        )
        for row in rows
    ]

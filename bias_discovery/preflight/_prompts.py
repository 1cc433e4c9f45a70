"""The prompts a run will send, by stage and role: the longest of each, to measure against
the model's context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..data.pairs import PreferencePair
from ..judging import build_tasks, verdict_constraint
from ..library import Bias, BiasLibrary
from ..llm.conformance import PROBE_CONSTRAINTS
from ..llm.types import Constraint, GenerationRequest
from ._report import LONGEST_PER_STAGE, _Prompt

if TYPE_CHECKING:
    from ..stages.records import MisjudgedCase


def _longest(prompts: Sequence[_Prompt]) -> list[_Prompt]:
    def size(p: _Prompt) -> int:
        return sum(len(m.content) for m in p.request.messages)

    return sorted(prompts, key=size, reverse=True)[:LONGEST_PER_STAGE]


def _one_token(request: GenerationRequest) -> GenerationRequest:
    """The request as it is measured: one output token and no constraint (only its prompt's
    length in tokens is wanted)."""
    return request.model_copy(update={"max_tokens": 1, "constraint": None})


def run_prompts(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    library: BiasLibrary,
) -> dict[str, list[_Prompt]]:
    """The longest prompts of each stage, per role, built with the stages' own builders
    (`library`: the run's seed library, whose longest bias goes into the teacher's prompts)."""
    from ..stages.records import MisjudgedCase

    bias = max(library.biases, key=lambda b: len(b.as_prompt_text()))
    all_pairs = list(target_pairs) + list(test_pairs)
    # every pair as a misjudgment, its generated parts empty; a pointwise judge's case is its
    # score of the rejected response (no position), as the loop makes it (stages.evaluate)
    pointwise = config.judge.mode == "pointwise"
    shown = (
        {"order": "rejected", "verdict": None, "score": config.judge.scale_spec.high}
        if pointwise
        else {"order": "chosen_first", "verdict": "B"}
    )
    cases = [
        MisjudgedCase(
            pair_id=p.id,
            bias_id=bias.id,
            domain=p.domain,
            question=p.question,
            chosen=p.chosen,
            original_rejected=p.rejected,
            perturbed_rejected="",
            judge_output="",
            explanation="",
            **shown,
        )
        for p in all_pairs
    ]
    return {
        "target": _target_prompts(config, target_pairs, test_pairs, cases),
        "teacher": _teacher_prompts(config, all_pairs, bias, cases),
    }


def _target_prompts(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    cases: Sequence[MisjudgedCase],
) -> list[_Prompt]:
    """The judge's longest prompts: the baseline on the test pairs, evaluate on the perturbed
    target pairs (the rewrite's budget added) and deeper_explain (when enabled)."""
    from ..stages.explain import build_explain_request

    seed, judge = config.seed, config.judge
    perturb_budget = config.perturb.max_tokens
    target: list[_Prompt] = []
    target += _longest(
        [
            _Prompt(stage="baseline judge (test data)", request=_one_token(t.request), output_tokens=judge.max_tokens)
            for t in build_tasks(test_pairs, judge, seed=seed)
        ]
    )
    emptied = [p.model_copy(update={"rejected": ""}) for p in target_pairs]
    target += _longest(
        [
            _Prompt(
                stage="evaluate (perturbed target pairs)",
                request=_one_token(t.request),
                added_tokens=perturb_budget,
                added_note=f"the rewrite, at most perturb.max_tokens={perturb_budget}",
                output_tokens=judge.max_tokens,
            )
            for t in build_tasks(emptied, judge, seed=seed)
        ]
    )
    if config.deeper_explain.enabled:
        target += _longest(
            [
                _Prompt(
                    stage="deeper_explain",
                    request=_one_token(build_explain_request(c, judge, config.deeper_explain, seed=seed)),
                    added_tokens=perturb_budget + judge.max_tokens,
                    added_note=f"the rewrite ({perturb_budget}) and the judge's answer ({judge.max_tokens})",
                    output_tokens=config.deeper_explain.max_tokens,
                )
                for c in cases
            ]
        )
    return target


def _teacher_prompts(
    config: RunConfig, all_pairs: Sequence[PreferencePair], bias: Bias, cases: Sequence[MisjudgedCase]
) -> list[_Prompt]:
    """The teacher's longest prompts: perturb with the longest seed bias, and identify (the
    rewrite's, the verdict's and the explanation's budgets added)."""
    from ..stages.identify import build_identify_request
    from ..stages.perturb import build_perturb_request

    seed, judge = config.seed, config.judge
    perturb_budget = config.perturb.max_tokens
    explain_budget = config.deeper_explain.max_tokens if config.deeper_explain.enabled else 0
    teacher: list[_Prompt] = []
    teacher += _longest(
        [
            _Prompt(
                stage="perturb (target and test pairs)",
                request=_one_token(build_perturb_request(p, bias, config.perturb, seed)),
                output_tokens=perturb_budget,
            )
            for p in all_pairs
        ]
    )
    teacher += _longest(
        [
            _Prompt(
                stage="identify",
                request=_one_token(build_identify_request(c, config.identify, seed)),
                added_tokens=perturb_budget + judge.max_tokens + explain_budget,
                added_note=f"the rewrite ({perturb_budget}), the judge's answer ({judge.max_tokens})"
                + (f" and its deeper explanation ({explain_budget})" if explain_budget else ""),
                output_tokens=config.identify.max_tokens,
            )
            for c in cases
        ]
    )
    return teacher


def role_constraints(config: RunConfig, role: str) -> list[Constraint]:
    """A constraint of each kind a role's requests use."""
    if role == "target":
        return [verdict_constraint(config.judge)]
    return [PROBE_CONSTRAINTS["json_schema"], PROBE_CONSTRAINTS["choices"]]  # identify, merge

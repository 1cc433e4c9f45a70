"""Judge-prompt sensitivity: how often one judge's verdict on the same pair, shown in the same
order with the same seed, changes when only its prompt template changes.

Every pair is judged once under each of the k templates (in the order the audit draws for it,
the audit's seed), and k − 1 more times under the first template with the next repeats'
seeds: the rate at which *those* verdicts change is the judge's own sampling noise, the
baseline a template change is compared against (0 at temperature 0 on a deterministic
engine). Like is compared with like: the change rate ("some other template's verdict differs
from the first's") and the noise rate ("some repeat's verdict differs from the first's") are
each over k − 1 comparisons with the same reference verdict, so with three templates a judge
that only samples noisily does not look template-sensitive for having had two chances to
change against one. Each pairwise row (one comparison) is read against `noise_rate_single`,
one repeat's. Rates are over the pairs whose verdicts are valid under every template and
every repeat, with Wilson CIs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from ..data.pairs import PreferencePair
from ..judging import JudgeSettings, judge_request, order_for, to_judgment
from ..llm.base import Engine
from ..metrics import Estimate, Preference, proportion
from .records import PromptChange, PromptSensitivity
from .runner import repeat_seed

__all__ = ["prompt_sensitivity"]


def prompt_sensitivity(
    target: Engine,
    pairs: Sequence[PreferencePair],
    settings: JudgeSettings,
    prompts: Sequence[str],
    *,
    seed: int,
) -> PromptSensitivity:
    """Judge `pairs` under every template of `prompts` (the first is the reference) and
    len(prompts) − 1 more times under the first with the next repeats' seeds; one batch."""
    orders = [order_for(p, "swap", seed)[0] for p in pairs]
    n_comparisons = len(prompts) - 1
    arms = [(prompt, seed) for prompt in prompts] + [
        (prompts[0], repeat_seed(seed, r)) for r in range(1, n_comparisons + 1)
    ]
    requests, keys = [], []
    for prompt, call_seed in arms:
        judge = settings.model_copy(update={"prompt": prompt, "mitigation": "none"})
        for pair, order in zip(pairs, orders):
            requests.append(judge_request(pair, order, judge, call_seed))
            keys.append((pair, order))
    responses = target.generate(requests)
    picks: list[Preference | None] = [
        to_judgment(pair, order, r, allow_tie=settings.allow_tie).picked for (pair, order), r in zip(keys, responses)
    ]
    n = len(pairs)
    by_arm = [picks[k * n : (k + 1) * n] for k in range(len(arms))]
    valid = [i for i in range(n) if all(arm[i] is not None for arm in by_arm)]
    excluded = n - len(valid)
    templates, repeats = by_arm[: len(prompts)], by_arm[len(prompts) :]
    first = templates[0]

    def rate(changed: int) -> Estimate:
        return proportion(changed, len(valid), n_excluded=excluded)

    return PromptSensitivity(
        prompts=list(prompts),
        n_items=len(valid),
        n_excluded=excluded,
        change_rate=rate(sum(1 for i in valid if any(t[i] != first[i] for t in templates[1:]))),
        n_comparisons=n_comparisons,
        noise_rate=rate(sum(1 for i in valid if any(r[i] != first[i] for r in repeats))),
        noise_rate_single=rate(sum(1 for i in valid if repeats[0][i] != first[i])),
        pairwise=[
            PromptChange(
                prompt_a=prompts[a],
                prompt_b=prompts[b],
                change_rate=rate(sum(1 for i in valid if templates[a][i] != templates[b][i])),
            )
            for a, b in combinations(range(len(prompts)), 2)
        ],
        accuracy={p: rate(sum(1 for i in valid if t[i] == "chosen")) for p, t in zip(prompts, templates)},
    )

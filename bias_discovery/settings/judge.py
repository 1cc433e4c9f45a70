"""The judge's settings (`JudgeSettings`) and the small types they are made of.

Settings sit below the logic that reads them (`judging`, `mitigation`, the stages, the
operations): a config file, the command line's flags and the Python API validate against them
without importing the judge itself (nor numpy). What each setting does to a judgment is
documented in `bias_discovery.judging`; what a mitigation does, in `bias_discovery.mitigation`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError
from ..llm.types import MAX_TOP_LOGPROBS
from ..prompts import PromptTemplate, is_prompt_path, load_prompt

__all__ = [
    "JUDGE_OPTIONAL_PLACEHOLDERS",
    "JUDGE_PLACEHOLDERS",
    "MAX_REASONING_CHARS",
    "MITIGATIONS",
    "JudgeSettings",
    "Mitigation",
    "PositionMode",
    "VerdictMode",
    "check_judge_prompt",
]

Mitigation = Literal["none", "swap", "shuffle3", "votes6"]
"""A position-bias mitigation (`bias_discovery.mitigation` makes and combines its calls)."""
MITIGATIONS: tuple[Mitigation, ...] = ("none", "swap", "shuffle3", "votes6")
PositionMode = Literal["both", "swap", "fixed"]
JUDGE_PLACEHOLDERS = frozenset({"question", "response_a", "response_b"})
"""Placeholders every judge template must have."""
JUDGE_OPTIONAL_PLACEHOLDERS = frozenset({"format_instruction"})
"""Placeholders a judge template may have: the verdict format, worded to match the settings."""
MAX_REASONING_CHARS = 4000
VerdictMode = Literal["choice", "score"]


class JudgeSettings(BaseModel):
    """How to judge: prompt, position control, output format and sampling."""

    model_config = ConfigDict(extra="forbid")

    positions: PositionMode = "both"
    """Position control; see `bias_discovery.judging` (its docstring). The swap draw and the model's sampling are
    seeded by the caller's seed (a run's one `seed`), not by a setting of their own."""
    reasoning: bool = True
    """Ask for a short reasoning paragraph before the verdict (the explanation the discovery
    loop needs). Without it the judge answers with one letter."""
    reasoning_chars: int | None = Field(default=600, ge=20, le=MAX_REASONING_CHARS)
    """Upper bound on the reasoning paragraph, enforced by the output constraint; null = no
    cap (the paper's free reasoning: the paragraph ends where the judge ends it, and only
    `max_tokens` bounds it; an output cut by `max_tokens` is invalid, `truncated`)."""
    max_tokens: int = Field(default=256, ge=1)
    """Completion budget; must cover the reasoning (about 4 characters per token)."""
    temperature: float = Field(default=0.0, ge=0.0)
    """0 = greedy decoding, as in the paper."""
    prompt: str = "judge_pairwise"
    """The judge's prompt: a template name in prompts/ (`judge_pairwise`, a neutral question as
    in the paper; `judge_pairwise_mitigated`, which tells the judge to ignore style, length and
    position) or the path of the user's own template file. A template needs the placeholders
    ${question}, ${response_a} and ${response_b}; ${format_instruction} (the verdict format,
    which the output constraint enforces anyway) is optional; any other placeholder is an
    error. A relative path is stored as an absolute one, so a resumed run finds it."""
    allow_tie: bool = False
    """Offer a third verdict, "tie" (in the output constraint and the instruction). A tie is
    never a correct verdict."""
    mitigation: Mitigation = "none"
    """Position-bias mitigation: none (one call per judged order), swap (both orders; a
    disagreement is a tie), shuffle3 (three alternating orders, majority), votes6 (Chen et
    al.'s six position-shuffled votes). See `bias_discovery.mitigation`."""
    verdict: VerdictMode = "choice"
    """choice: the sampled verdict letter. score: also the verdict token's probability of each
    label (from its top log-probabilities, renormalised over A and B), giving every judged
    order a probability of preferring the rejected response and every pair the mean over its
    calls; a verdict token whose top log-probabilities hold neither label is invalid
    (`no_score`). Same calls as choice; needs llamacpp, vllm, or a vLLM / llama.cpp server."""
    score_top_logprobs: int = Field(default=5, ge=2, le=MAX_TOP_LOGPROBS)
    """Score verdicts: how many of the most likely tokens the engine reports at the verdict
    position; a label outside them counts as probability 0 (both outside: invalid)."""

    @model_validator(mode="after")
    def _score_has_two_labels(self) -> JudgeSettings:
        if self.verdict == "score" and self.allow_tie:
            raise ValueError(
                "verdict: score reads P(A) against P(B) at the verdict token; it cannot be "
                "combined with allow_tie (a tie verdict spans several tokens)"
            )
        return self

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str) -> str:
        try:
            check_judge_prompt(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return str(Path(value).expanduser().resolve()) if is_prompt_path(value) else value




def check_judge_prompt(name_or_path: str) -> PromptTemplate:
    """Load a judge template and check its placeholders; a `ConfigError` names the file and
    the missing and unknown placeholders."""
    template = load_prompt(name_or_path)
    found = template.placeholders
    missing = sorted(JUDGE_PLACEHOLDERS - found)
    unknown = sorted(found - JUDGE_PLACEHOLDERS - JUDGE_OPTIONAL_PLACEHOLDERS)
    if missing or unknown:
        where = str(Path(name_or_path).expanduser()) if is_prompt_path(name_or_path) else f"prompts/{name_or_path}.txt"
        problems = []
        if missing:
            problems.append("missing " + ", ".join(f"${{{n}}}" for n in missing))
        if unknown:
            problems.append("unknown " + ", ".join(f"${{{n}}}" for n in unknown))
        raise ConfigError(
            f"judge prompt {where}: {'; '.join(problems)} (a judge template has "
            + ", ".join(f"${{{n}}}" for n in sorted(JUDGE_PLACEHOLDERS))
            + ", and optionally ${format_instruction})"
        )
    return template

"""The judge's settings (`JudgeSettings`) and the small types they are made of.

Settings sit below the logic that reads them (`judging`, `mitigation`, the stages, the
operations): a config file, the command line's flags and the Python API validate against them
without importing the judge itself (nor numpy). What each setting does to a judgment is
documented in `bias_discovery.judging`; what a mitigation does, in `bias_discovery.mitigation`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ..errors import ConfigError
from ..llm.types import MAX_TOP_LOGPROBS
from ..pointwise import Scale, parse_scale
from ..prompts import PromptTemplate, is_prompt_path, load_prompt

__all__ = [
    "JUDGE_OPTIONAL_PLACEHOLDERS",
    "JUDGE_PLACEHOLDERS",
    "TRAJECTORY_PROMPTS",
    "MAX_REASONING_CHARS",
    "MITIGATIONS",
    "NO_POSITION",
    "POINTWISE_OPTIONAL_PLACEHOLDERS",
    "POINTWISE_PLACEHOLDERS",
    "JudgeMode",
    "JudgeSettings",
    "Mitigation",
    "PointwiseMeasure",
    "PositionMode",
    "VerdictMode",
    "check_judge_prompt",
]

Mitigation = Literal["none", "swap", "shuffle3", "votes6"]
"""A position-bias mitigation (`bias_discovery.mitigation` makes and combines its calls)."""
MITIGATIONS: tuple[Mitigation, ...] = ("none", "swap", "shuffle3", "votes6")
PositionMode = Literal["both", "swap", "fixed"]
JudgeMode = Literal["pairwise", "pointwise"]
PointwiseMeasure = Literal["score_shift", "pair_error"]
"""Which pointwise measure decides validation (`JudgeSettings.pointwise_measure`)."""
POINTWISE_PLACEHOLDERS = frozenset({"question", "response"})
"""Placeholders every pointwise judge template must have."""
POINTWISE_OPTIONAL_PLACEHOLDERS = frozenset({"format_instruction", "rubric", "reference", "policy"})
"""Placeholders a pointwise template may have: the score format, `judge.rubric`, the pair's
reference answer (`meta["reference"]`), and an agent's policy (a trajectory's system message)."""
NO_POSITION = "pointwise judges have no position"
"""Said wherever a position setting or measure would apply to a pointwise judge."""
_NOT_POINTWISE = {
    "positions": "pointwise judges have no position: each response is scored alone",
    "mitigation": "position mitigations reorder a pair; pointwise judges have no position",
    "allow_tie": "a pointwise judge gives scores; equal scores are counted as ties on their own",
}
JUDGE_PLACEHOLDERS = frozenset({"question", "response_a", "response_b"})
"""Placeholders every judge template must have."""
JUDGE_OPTIONAL_PLACEHOLDERS = frozenset({"format_instruction", "policy"})
"""Placeholders a judge template may have: the verdict format, worded to match the settings,
and the policy an agent worked under (trajectory pairs: the system message; "" for answers)."""
TRAJECTORY_PROMPTS: dict[str, str] = {
    "judge_pairwise": "judge_trajectory_pairwise",
    "judge_pointwise": "judge_trajectory_pointwise",
    "judge_pointwise_rubric": "judge_trajectory_pointwise_rubric",
}
"""The shipped answer prompts and their twins for agent trajectories: a trajectory pair is
judged with the twin (the policy, the task and transcripts); any other prompt, a user's file
included, is used as it is, with transcripts in its response placeholders."""
MAX_REASONING_CHARS = 4000
VerdictMode = Literal["choice", "score"]


class JudgeSettings(BaseModel):
    """How to judge: prompt, position control, output format and sampling."""

    model_config = ConfigDict(extra="forbid")

    mode: JudgeMode = "pairwise"
    """pairwise: the judge sees both responses and picks one. pointwise: it scores each
    response alone on `scale` (two calls per pair); a pair is misjudged when the rejected
    response scores at least as high as the chosen one (equal scores are ties, counted on
    their own). Pointwise judges have no position: `positions`, `mitigation` and `allow_tie`
    are refused with it. See docs/concepts/pointwise.md."""
    scale: str = "1-10"
    """Pointwise: what the judge answers, an integer range (`1-10`, `1-5`) or `pass/fail`
    (pass = 1). The output is constrained to the scale's labels."""
    rubric: str | None = None
    """Pointwise: the rubric text a template's ${rubric} is filled with (the shipped
    `judge_pointwise_rubric` needs it; a template without ${rubric} refuses it)."""
    pointwise_measure: PointwiseMeasure = "score_shift"
    """Pointwise: which measure decides validation, both against the placebo on the same items.
    score_shift: the rejected response's score, perturbed minus placebo (paired t-test; in
    scale points and in SDs of the judge's scores). pair_error: the pair error derived from
    the two scores (rejected >= chosen is an error; exact McNemar). The other is reported as
    secondary."""
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
    """The judge's prompt (pointwise: `judge_pointwise`, or `judge_pointwise_rubric` when a
    `rubric` is given, unless set; a pointwise template takes ${question}, ${response},
    optionally ${rubric}, ${reference} and ${format_instruction}): a template name in prompts/ (`judge_pairwise`, a neutral question as
    in the paper; `judge_pairwise_mitigated`, which tells the judge to ignore style, length and
    position) or the path of the user's own template file. A template needs the placeholders
    ${question}, ${response_a} and ${response_b}; ${format_instruction} (the verdict format,
    which the output constraint enforces anyway) and ${policy} (an agent's policy) are
    optional; any other placeholder is an error. A relative path is stored as an absolute one,
    so a resumed run finds it. Trajectory pairs (agents' runs) are judged with the shipped
    prompts' trajectory twins (`judge_trajectory_pairwise`, `judge_trajectory_pointwise`,
    `judge_trajectory_pointwise_rubric`), which show the policy once and each run as a
    transcript; any other prompt is used as it is."""
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

    @model_validator(mode="before")
    @classmethod
    def _pointwise_defaults(cls, data: Any) -> Any:
        """A pointwise judge's prompt defaults to a pointwise template; pairwise-only settings
        given with `mode: pointwise` are refused, naming the field (their defaults, which say
        nothing, pass: a settings dump from before they were left out holds them)."""
        if not isinstance(data, dict) or data.get("mode") != "pointwise":
            return data
        for name, why in _NOT_POINTWISE.items():
            if name in data and data[name] != cls.model_fields[name].default:
                raise ValueError(f"judge.{name}: not a pointwise setting ({why})")
        data = {k: v for k, v in data.items() if k not in _NOT_POINTWISE}
        if "prompt" not in data:
            data["prompt"] = "judge_pointwise_rubric" if data.get("rubric") else "judge_pointwise"
        return data

    @model_serializer(mode="wrap")
    def _without_position_settings(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A pointwise judge's settings are written without the position settings it has not
        got, so a written config (the run directory's) reads back."""
        data: dict[str, Any] = handler(self)
        if self.mode == "pointwise":
            for name in _NOT_POINTWISE:
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _mode_fits(self) -> JudgeSettings:
        check_judge_prompt(self.prompt, self.mode, rubric=self.rubric is not None, error=ValueError)
        if self.mode == "pairwise":
            return self
        scale = self.scale_spec
        if self.verdict == "score" and not scale.single_token_labels:
            prefix = next((a, b) for a in scale.labels for b in scale.labels if a != b and b.startswith(a))
            raise ValueError(
                f"judge.verdict: score reads the score from one token, but on scale {scale.spec} the label "
                f"{prefix[0]} begins {prefix[1]}; use a scale of single digits (1-9, 0-9), "
                "pass/fail, or verdict: choice"
            )
        return self

    @field_validator("scale")
    @classmethod
    def _check_scale(cls, value: str) -> str:
        return parse_scale(value).spec

    @property
    def scale_spec(self) -> Scale:
        """The parsed `scale`."""
        return parse_scale(self.scale)

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
        """The template must load (its placeholders are checked against `mode` after)."""
        try:
            load_prompt(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return str(Path(value).expanduser().resolve()) if is_prompt_path(value) else value


def check_judge_prompt(
    name_or_path: str, mode: JudgeMode = "pairwise", *, rubric: bool | None = None, error: type[Exception] = ConfigError
) -> PromptTemplate:
    """Load a judge template and check its placeholders for `mode`; the error (a
    `ConfigError` unless `error`) names the file and the missing and unknown placeholders.
    `rubric` (pointwise): whether `judge.rubric` is set; ${rubric} and the setting must come
    together (None: not checked)."""
    template = load_prompt(name_or_path)
    found = template.placeholders
    needed, optional = (
        (JUDGE_PLACEHOLDERS, JUDGE_OPTIONAL_PLACEHOLDERS)
        if mode == "pairwise"
        else (POINTWISE_PLACEHOLDERS, POINTWISE_OPTIONAL_PLACEHOLDERS)
    )
    missing = sorted(needed - found)
    unknown = sorted(found - needed - optional)
    where = str(Path(name_or_path).expanduser()) if is_prompt_path(name_or_path) else f"prompts/{name_or_path}.txt"
    if missing or unknown:
        problems = []
        if missing:
            problems.append("missing " + ", ".join(f"${{{n}}}" for n in missing))
        if unknown:
            problems.append("unknown " + ", ".join(f"${{{n}}}" for n in unknown))
        raise error(
            f"{mode} judge prompt {where}: {'; '.join(problems)} (a {mode} judge template has "
            + ", ".join(f"${{{n}}}" for n in sorted(needed))
            + ", and optionally "
            + ", ".join(f"${{{n}}}" for n in sorted(optional))
            + ")"
        )
    if mode == "pointwise" and rubric is not None and rubric != ("rubric" in found):
        raise error(
            f"judge.rubric: the prompt {where} has ${{rubric}} but no rubric is set"
            if not rubric
            else f"judge.rubric: set, but the prompt {where} has no ${{rubric}} to put it in (use judge_pointwise_rubric)"
        )
    return template

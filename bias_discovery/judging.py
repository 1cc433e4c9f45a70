"""Pairwise judging: turn preference pairs into judge requests, parse verdicts, score them.

The judge sees (question, response A, response B) and must answer with reasoning and then a
verdict. The verdict format is forced by an output constraint, and parsed again on the way
back; anything truncated, failed or unparseable is *invalid* and counted as such.

Prompts. The judge under study is the user's judge, so its prompt is a setting (`prompt`): a
shipped template or the path of the user's own file. The default, `judge_pairwise`, asks a
neutral question, as the BiasScope paper's judge does ("which response is more helpful and
accurate?", reasoning, then a verdict; the paper prints its templates as images, so this
wording is ours, not a copy), and says nothing about which cues to ignore: a prompt that
tells the judge to disregard length, style or confidence would hide the very biases the loop
measures. `judge_pairwise_mitigated` is that debiasing prompt, kept as a named
alternative (to measure what a mitigation instruction buys).

Position modes (which response is shown as A):
- `both`: every pair is judged in both orders; it is correct only if both verdicts pick the
  chosen response (JudgeBench's rule). Position bias cannot help or hurt.
- `swap`: one order per pair, drawn by a seeded coin flip keyed on the pair id (RewardBench,
  BiasScope). The draw does not depend on which other pairs are in the batch.
- `fixed`: the data set's own order when it has one (`PreferencePair.data_order`: JudgeBench's
  response_A/B), else chosen first. A rewritten pair keeps its original's order, so a baseline
  item and its perturbed twin are shown the same way round.

Verdicts (`verdict`): `choice` reads the sampled verdict letter. `score` also reads the verdict
token's probabilities: P(A) and P(B) from its top log-probabilities, renormalised over the two
labels, give each judged order the probability that the judge prefers the rejected response
(`p_rejected`), and a pair the mean over its judged orders; the choice fields stay filled from
the sampled token. The servers return these probabilities at no extra call.

Ties: with `allow_tie` the judge may also answer "tie" (Chen et al.'s third option); a tie
is never correct. Mitigations (`mitigation`, see `bias_discovery.mitigation`) make several
calls per verdict and combine them; the first order is then the position mode's (`both`
draws it with the seeded coin of `swap`, since the mitigation shows both orders itself).
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .data.pairs import Order, PreferencePair, Shown
from .data.trajectory import Trajectory, render_transcript
from .errors import ConfigError
from .llm.base import Engine, ProgressCallback
from .llm.types import (
    ChatMessage,
    Constraint,
    FinalTokenLogprobs,
    GenerationRequest,
    GenerationResponse,
    ReasonedChoice,
)
from .metrics import Preference, spearman_rho
from .mitigation import CALLS_PER_VERDICT, Mitigation, combine_votes, plan
from .pointwise import Scale, expected_score, parse_score
from .prompts import load_prompt
from .settings.judge import (
    NO_POSITION,
    TRAJECTORY_PROMPTS,
    JudgeMode,
    JudgeSettings,
    PositionMode,
    VerdictMode,
)
from .stats import Calibration, Measure, calibration, mean_and_sd, mean_t_interval, wilson_interval

Verdict = Literal["A", "B", "tie"]
InvalidReason = Literal["truncated", "engine_error", "no_verdict", "no_score"]
"""Why a judgment is invalid. `no_score` (score verdicts only): the verdict token's top
log-probabilities hold neither label, or the engine could not place the verdict token."""
LABELS = ("A", "B")


class JudgeTask(BaseModel):
    """One request to the judge: a pair shown in one order."""

    model_config = ConfigDict(frozen=True)

    pair_index: int
    """Position of the pair in the judged list (ids may repeat: one test pair under many biases)."""
    pair_id: str
    order: Shown
    """The order the pair is shown in; pointwise: the response scored (`chosen`, `rejected`)."""
    request: GenerationRequest


class Judgment(BaseModel):
    """One judged order of one pair; a line of judgments.jsonl."""

    pair_id: str
    """The judged pair's id."""
    domain: str
    """The pair's domain."""
    order: Shown
    """The order it was shown in: `chosen_first` (the better response as A) or `rejected_first`;
    pointwise: the response scored alone, `chosen` or `rejected`."""
    verdict: Verdict | None
    """The label the judge gave (A, B or tie); None when the output was invalid."""
    picked: Preference | None
    """The response that label points at in this order (chosen, rejected or tie)."""
    correct: bool | None
    """Whether the judge picked the chosen response; None when invalid."""
    invalid_reason: InvalidReason | None = None
    """Why the output is invalid; None when it is valid."""
    explanation: str = ""
    """The judge's reasoning, without the verdict line."""
    raw_output: str
    """The judge's output as it came."""
    prompt_tokens: int
    """Tokens of the prompt."""
    completion_tokens: int
    """Tokens the judge generated."""
    cached: bool = False
    """Whether the call cache answered (no model call was made)."""
    p_rejected: float | None = None
    """Score verdicts: the verdict token's probability of the rejected response's label,
    renormalised over the two labels (P(label) / (P(A) + P(B)))."""
    labels_in_top: int | None = None
    """Score verdicts: how many of the two labels were among the verdict token's top
    log-probabilities (1: the other one counts as probability 0)."""
    score: float | None = None
    """Pointwise: the score given, on the judge's scale (an expected score with score
    verdicts where the probabilities could be read, else the sampled label's); None when
    invalid."""
    score_from: Literal["probabilities", "sampled"] | None = None
    """Pointwise: where `score` came from (score verdicts fall back to the sampled label, and
    are counted, when the final token is not a whole label)."""
    response_words: int | None = None
    """Pointwise: whitespace tokens of the scored response (what the score's correlation with
    length is measured on)."""


class PairOutcome(BaseModel):
    """The verdict on a whole pair after combining its judged orders."""

    pair_id: str
    """The pair's id."""
    domain: str
    """The pair's domain."""
    correct: bool | None
    """None when any of the pair's judgments was invalid (with a mitigation: when its
    combined verdict is invalid)."""
    orders: list[Shown]
    """The orders the pair was judged in (pointwise: the responses scored)."""
    preference: Preference | None = None
    """With a mitigation: the combined verdict (chosen / rejected / tie)."""
    confidence: float | None = None
    """With a mitigation: the share of the valid votes that agree with `preference`."""
    position_consistent: bool | None = None
    """With a mitigation: every valid vote picked the same response."""
    p_rejected: float | None = None
    """Score verdicts: the mean of the pair's judgments' `p_rejected` (None when any of them
    is invalid, as `correct`)."""
    score_chosen: float | None = None
    """Pointwise: the chosen response's score (None when invalid)."""
    score_rejected: float | None = None
    """Pointwise: the rejected response's score (None when invalid)."""
    rejected_share: float | None = None
    """Pointwise: `score_rejected` as a share of the scale (0 lowest label, 1 highest): the
    per-item value of the score-shift measure."""


class ScoreSummary(BaseModel):
    """Score verdicts over a set of pairs: the mean probability of preferring the rejected
    response over the n pairs with a score, with a 95 % Student-t CI over pairs."""

    n: int
    mean_p_rejected: float | None
    ci_low: float | None
    ci_high: float | None


class PointwiseSummary(BaseModel):
    """A pointwise judge's scores over a set of pairs (`JudgeSummary.pointwise`): each
    response's mean score with a 95 % Student-t CI over the n pairs with both scores, the
    ties (equal scores, which count as errors in `error_rate`) on their own, and where the
    scores came from."""

    scale: str
    n: int
    """Pairs with both scores valid."""
    mean_chosen: float | None
    chosen_ci: tuple[float, float] | None
    mean_rejected: float | None
    rejected_ci: tuple[float, float] | None
    sd_scores: float | None
    """Standard deviation of every valid score (both responses): the unit of a shift in SDs."""
    ties: int
    """Pairs whose two scores are equal (counted as errors; never silently folded in)."""
    tie_rate: float | None
    tie_ci: tuple[float, float] | None
    """Wilson interval of `tie_rate` over n."""
    rejected_higher: int
    """Pairs whose rejected response scored strictly higher."""
    from_probabilities: int = 0
    """Scores read as expected scores from the final token's probabilities (score verdicts)."""
    from_sampled: int = 0
    """Scores read from the sampled label."""
    length_rho: float | None = None
    """Spearman's ρ between each valid score and the scored response's length in words, over
    every scored response (chosen and rejected: a longer response may also be a better one,
    so this describes the judge, it does not isolate a bias; the audit's padded lengths do)."""
    length_rho_ci: tuple[float, float] | None = None
    """95 % CI of `length_rho`: Fisher's z with Fieller's variance 1.06 / (n - 3) (n > 3)."""
    length_n: int = 0
    """Scores in `length_rho`."""


class DomainSummary(BaseModel):
    n: int
    n_valid: int
    error_rate: float | None
    ci_low: float | None
    ci_high: float | None
    judgebench_score: float | None = None
    """JudgeBench's own score on this domain's n pairs (see `JudgeSummary.judgebench_score`)."""
    score: ScoreSummary | None = None
    """Score verdicts: this domain's mean probability of preferring the rejected response."""


class JudgeSummary(BaseModel):
    """summary.json: the judge's scores on one data set."""

    model: str
    data: str
    positions: PositionMode | None
    """The position mode; None for a pointwise judge (it has no position)."""
    seed: int
    mitigation: Mitigation = "none"
    prompt: str | None = None
    """The judge prompt (`JudgeSettings.prompt`: a shipped name or a template path)."""
    n_pairs: int
    n_valid_pairs: int
    n_judgments: int
    n_invalid_judgments: int
    invalid_reasons: dict[str, int]
    invalid_examples: dict[str, str] = Field(default_factory=dict)
    """For engine errors, the engine's message of the first one (e.g. a prompt longer than
    the context window), so the cause is shown, not only counted."""
    skipped_rows: int = 0
    """Bad data rows skipped at load (`--skip-bad-rows`): not among the n_pairs."""
    error_rate: float | None
    """Share of valid pairs judged wrongly."""
    error_ci_low: float | None
    error_ci_high: float | None
    invalid_rate: float
    """Share of pairs with at least one invalid judgment (not counted in error_rate)."""
    error_rate_invalid_as_error: float | None
    """Error rate if every invalid pair counted as an error: a pessimistic bound."""
    position_a_rate: float | None
    """Share of valid verdicts that picked position A (0.5 = no position preference when
    correct answers are balanced over positions)."""
    position_consistency: float | None
    """`both` mode: share of pairs whose two verdicts picked the same response; with a
    mitigation: share of valid verdicts whose votes all agreed."""
    judgebench_score: float | None = None
    """JudgeBench's own score (accuracy, higher is better): the share of *all* n_pairs whose net
    vote is positive, a verdict for the chosen response counting +1, one for the rejected
    response -1 and an invalid verdict 0. With both orders judged, one right verdict and one
    invalid count as correct, one right and one wrong (or two invalid) as not. With one order
    per pair it is the share of pairs judged right, invalid ones counted as not right. Source:
    JudgeBench (Tan et al., ICLR 2025, Section 4) and its `utils/metrics.py`
    (`compute_final_metrics`), which divides by all pairs, nulls included. Our `error_rate`
    is stricter: a pair counts as right only when every order is right, over valid pairs."""
    judgebench_ci_low: float | None = None
    judgebench_ci_high: float | None = None
    """Wilson interval of judgebench_score over n_pairs."""
    judgebench_ties: int = 0
    """Pairs with a net vote of 0 (not counted as correct by JudgeBench)."""
    per_domain: dict[str, DomainSummary]
    prompt_tokens: int
    completion_tokens: int
    cached_calls: int
    verdict: VerdictMode = "choice"
    score: ScoreSummary | None = None
    """Score verdicts: the mean probability of preferring the rejected response over the
    valid pairs (each pair: the mean over its judged orders), with a 95 % CI."""
    score_one_label: int = 0
    """Score verdicts: judgments whose verdict token's top log-probabilities held only one of
    the labels (the other counted as probability 0, which pushes p_rejected to 0 or 1)."""
    mode: JudgeMode = "pairwise"
    """pairwise, or pointwise (each response scored alone; `positions` is then None:
    pointwise judges have no position)."""
    pointwise: PointwiseSummary | None = None
    """Pointwise: the scores, ties and their sources."""
    calibration: Calibration | None = None
    """Score verdicts: ECE and Brier of the verdict probabilities against the labels, with
    bootstrap CIs over pairs, and the reliability bins (`verdict_calibration`)."""


_VERDICT_PATTERNS = (
    re.compile(r"verdict\s*[:\-]?\s*\**\s*\[*\s*(?:response|output|assistant)?\s*\(?\s*([AB])\b", re.I),
    re.compile(r"\[\[\s*([AB])\s*\]\]"),
)
_VERDICT_PATTERNS_WITH_TIE = (
    re.compile(r"verdict\s*[:\-]?\s*\**\s*\[*\s*(?:response|output|assistant)?\s*\(?\s*([AB]|tie)\b", re.I),
    re.compile(r"\[\[\s*([AB]|tie)\s*\]\]", re.I),
)


def order_for(pair: PreferencePair, mode: PositionMode, seed: int) -> list[Order]:
    """The order(s) in which `pair` is shown under position mode `mode`."""
    if mode == "both":
        return ["chosen_first", "rejected_first"]
    if mode == "fixed":
        return [pair.data_order or "chosen_first"]
    digest = hashlib.sha256(f"{seed}:{pair.id}".encode()).digest()
    return ["rejected_first"] if digest[0] & 1 else ["chosen_first"]


def verdict_constraint(settings: JudgeSettings) -> Constraint:
    """The verdict format as an output constraint. With a reasoning cap the paragraph is
    bounded; without one it is unbounded, but still one paragraph: its newline is where the
    constraint forces the verdict, so a judge cannot write on without ever deciding."""
    if settings.mode == "pointwise":
        labels = settings.scale_spec.labels
        if not settings.reasoning:
            return Constraint(choices=labels)
        return Constraint.reasoned_choice(
            ReasonedChoice(choices=labels, max_chars=settings.reasoning_chars, choice_label="Score")
        )
    verdicts: tuple[str, ...] = ("A", "B", "tie") if settings.allow_tie else ("A", "B")
    if not settings.reasoning:
        return Constraint(choices=verdicts)
    return Constraint.reasoned_choice(ReasonedChoice(choices=verdicts, max_chars=settings.reasoning_chars))


def format_instruction(settings: JudgeSettings) -> str:
    """The output format in words, matching the constraint (`verdict_constraint`)."""
    if settings.mode == "pointwise":
        scale = settings.scale_spec.describe()
        if not settings.reasoning:
            return f"Answer with the score only: {scale}."
        return (
            f'First write "Reasoning:" followed by one short paragraph, then on a new line write "Score: " '
            f"and your score, {scale}."
        )
    if settings.allow_tie:
        if not settings.reasoning:
            return "Answer with a single word: A, B, or tie if both are equally good or bad."
        return (
            'First write "Reasoning:" followed by one short paragraph, then on a new line write '
            '"Verdict: A", "Verdict: B", or "Verdict: tie" if both are equally good or bad.'
        )
    if not settings.reasoning:
        return "Answer with a single letter: A or B."
    if settings.reasoning_chars is None:
        return (
            'First write "Reasoning:" followed by your reasoning in one paragraph, then on a new line '
            'write "Verdict: A" or "Verdict: B".'
        )
    return (
        'First write "Reasoning:" followed by one short paragraph, then on a new line write '
        '"Verdict: A" or "Verdict: B".'
    )


def judge_messages(pair: PreferencePair, order: Shown, settings: JudgeSettings) -> tuple[ChatMessage, ...]:
    """The judge's prompt for `pair` shown in `order` (pointwise: its `chosen` or `rejected`
    response alone; also the start of a DeeperExplain chat)."""
    if settings.mode == "pointwise" or order in ("chosen", "rejected"):
        return pointwise_messages(pair, order, settings)
    a, b = (pair.chosen, pair.rejected) if order == "chosen_first" else (pair.rejected, pair.chosen)
    template = load_prompt(prompt_for(pair, settings))
    values = {"question": pair.question, "response_a": shown_text(pair, a), "response_b": shown_text(pair, b)}
    if "format_instruction" in template.placeholders:
        values["format_instruction"] = format_instruction(settings)
    if "policy" in template.placeholders:
        values["policy"] = policy_of(pair)
    return template.render(**values)


def prompt_for(pair: PreferencePair, settings: JudgeSettings) -> str:
    """The prompt that judges `pair`: `settings.prompt`, or for a trajectory pair the trajectory
    twin of a shipped answer prompt (`TRAJECTORY_PROMPTS`)."""
    if pair.kind == "trajectory":
        return TRAJECTORY_PROMPTS.get(settings.prompt, settings.prompt)
    return settings.prompt


def shown_text(pair: PreferencePair, response: str) -> str:
    """What the judge reads of one response: the text of an answer, the transcript of a
    trajectory (`render_transcript`: roles, tool calls with arguments, tool outputs; the
    policy is given once, by ${policy}). Nothing is cut: a prompt over the model's context is
    refused by the engine and the judgment is invalid (`engine_error`) with the reason in its
    `raw_output`."""
    if pair.kind != "trajectory":
        return response
    return render_transcript(Trajectory.from_response(response, where=f"pair {pair.id!r}"))


def policy_of(pair: PreferencePair) -> str:
    """The policy a trajectory pair's agents worked under: the chosen run's system message
    (a data set's runs share it); `meta["policy"]` when it has none; "" for answers."""
    policy = ""
    if pair.kind == "trajectory":
        policy = Trajectory.from_response(pair.chosen, where=f"pair {pair.id!r}").policy
    if not policy:
        meta_policy = pair.meta.get("policy")
        policy = meta_policy if isinstance(meta_policy, str) else ""
    return policy


def pointwise_messages(pair: PreferencePair, shown: Shown, settings: JudgeSettings) -> tuple[ChatMessage, ...]:
    """A pointwise judge's prompt for one response of `pair` (`shown`: chosen or rejected).
    ${reference} is the pair's `meta["reference"]`; a pair without one is an error naming it."""
    if shown not in ("chosen", "rejected"):
        raise ValueError(f"a pointwise judge scores one response (chosen or rejected), not {shown!r}: {NO_POSITION}")
    template = load_prompt(prompt_for(pair, settings))
    values = {
        "question": pair.question,
        "response": shown_text(pair, pair.chosen if shown == "chosen" else pair.rejected),
    }
    if "format_instruction" in template.placeholders:
        values["format_instruction"] = format_instruction(settings)
    if "policy" in template.placeholders:
        values["policy"] = policy_of(pair)
    if "rubric" in template.placeholders:
        values["rubric"] = settings.rubric or ""
    if "reference" in template.placeholders:
        reference = pair.meta.get("reference")
        if not isinstance(reference, str) or not reference.strip():
            raise ConfigError(
                f"judge prompt {settings.prompt}: ${{reference}} needs a reference answer, but pair {pair.id!r} has none "
                "(a data row's `reference` field)"
            )
        values["reference"] = reference
    return template.render(**values)


def measure_of(settings: JudgeSettings) -> Measure:
    """What validation compares per item under these settings: the error (choice verdicts),
    the probability of preferring the rejected response (score verdicts), or for a pointwise
    judge its `pointwise_measure` (the pair error, or the rejected response's score)."""
    if settings.mode == "pointwise":
        return "score" if settings.pointwise_measure == "score_shift" else "error"
    return "p_rejected" if settings.verdict == "score" else "error"


def secondary_measure_of(settings: JudgeSettings) -> Measure | None:
    """The pointwise measure that does not decide, reported next to the deciding one (None for
    a pairwise judge)."""
    if settings.mode != "pointwise":
        return None
    return "error" if settings.pointwise_measure == "score_shift" else "score"


def calls_per_pair(settings: JudgeSettings) -> int:
    """Model calls one pair costs under `settings` (progress totals, cost reports)."""
    if settings.mode == "pointwise":
        return 2
    if settings.mitigation != "none":
        return CALLS_PER_VERDICT[settings.mitigation]
    return 2 if settings.positions == "both" else 1


def pair_calls(pair: PreferencePair, settings: JudgeSettings, seed: int) -> list[tuple[Shown, int]]:
    """The (order, seed) of every call judging `pair` makes: one per judged order, or the
    mitigation's plan from the position mode's first order; pointwise, one per response."""
    if settings.mode == "pointwise":
        return [("chosen", seed), ("rejected", seed)]
    if settings.mitigation == "none":
        return [(order, seed) for order in order_for(pair, settings.positions, seed)]
    first = order_for(pair, "swap" if settings.positions == "both" else settings.positions, seed)[0]
    return list(plan(settings.mitigation, first, seed))


def judge_request(pair: PreferencePair, order: Shown, settings: JudgeSettings, seed: int) -> GenerationRequest:
    """The request judging `pair` shown in `order`, sampled with `seed`."""
    return GenerationRequest(
        messages=judge_messages(pair, order, settings),
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        seed=seed,
        constraint=verdict_constraint(settings),
        final_top_logprobs=settings.score_top_logprobs if settings.verdict == "score" else None,
    )


def build_tasks(pairs: Sequence[PreferencePair], settings: JudgeSettings, *, seed: int) -> list[JudgeTask]:
    """All requests needed to judge `pairs`, in pair order (a pair's calls adjacent); `seed`
    draws the swaps and seeds the model's sampling."""
    tasks = []
    for index, pair in enumerate(pairs):
        for order, call_seed in pair_calls(pair, settings, seed):
            request = judge_request(pair, order, settings, call_seed)
            tasks.append(JudgeTask(pair_index=index, pair_id=pair.id, order=order, request=request))
    return tasks


def parse_verdict(text: str, *, allow_tie: bool = False) -> Verdict | None:
    """Find the verdict in a judge's output; the last explicit verdict wins. "tie" is a
    verdict only when the judge was offered it (`allow_tie`)."""
    stripped = text.strip().strip("*[]().: ")
    if stripped in ("A", "B"):
        return stripped  # type: ignore[return-value]
    if allow_tie and stripped.lower() == "tie":
        return "tie"
    for pattern in _VERDICT_PATTERNS_WITH_TIE if allow_tie else _VERDICT_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            last = matches[-1]
            return "tie" if last.lower() == "tie" else last.upper()
    return None


def extract_explanation(text: str) -> str:
    """The judge's reasoning without the verdict line (what DeeperExplain and reports show)."""
    body = re.split(r"\n\s*verdict\s*:", text, maxsplit=1, flags=re.I)[0]
    return re.sub(r"^\s*reasoning\s*:\s*", "", body, flags=re.I).strip()


def label_probabilities(logprobs: FinalTokenLogprobs | None) -> dict[str, float] | None:
    """P(A) and P(B) at the verdict token, renormalised over the two labels, from its top
    log-probabilities (tokens that are a label up to spaces, e.g. "A" and " A", add up; a label
    outside the top counts as 0). None when the verdict token is not a label or neither label
    is among the top."""
    if logprobs is None or logprobs.token.strip() not in LABELS:
        return None
    mass = dict.fromkeys(LABELS, 0.0)
    for candidate in logprobs.top:
        label = candidate.token.strip()
        if label in mass:
            mass[label] += math.exp(candidate.logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {label: value / total for label, value in mass.items()}


def to_judgment(
    pair: PreferencePair,
    order: Order,
    response: GenerationResponse,
    *,
    allow_tie: bool = False,
    score: bool = False,
) -> Judgment:
    """Score one response. Anything not finished cleanly is invalid, whatever it contains;
    with `score`, so is a verdict whose token's probabilities hold neither label."""
    verdict: Verdict | None = None
    reason: InvalidReason | None = None
    probabilities: dict[str, float] | None = None
    if response.finish_reason == "error":
        reason = "engine_error"
    elif response.finish_reason == "length":
        reason = "truncated"
    else:
        verdict = parse_verdict(response.text, allow_tie=allow_tie)
        if verdict is None:
            reason = "no_verdict"
        elif score:
            probabilities = label_probabilities(response.final_logprobs)
            if probabilities is None:
                verdict, reason = None, "no_score"
    picked: Preference | None = None
    if verdict == "tie":
        picked = "tie"
    elif verdict is not None:
        chosen_letter = "A" if order == "chosen_first" else "B"
        picked = "chosen" if verdict == chosen_letter else "rejected"
    return Judgment(
        pair_id=pair.id,
        domain=pair.domain,
        order=order,
        verdict=verdict,
        picked=picked,
        correct=None if picked is None else picked == "chosen",
        invalid_reason=reason,
        explanation=extract_explanation(response.text) if reason != "engine_error" else "",
        raw_output=response.text,
        prompt_tokens=response.prompt_tokens,
        completion_tokens=response.completion_tokens,
        cached=response.cached,
        p_rejected=None if probabilities is None else probabilities["B" if order == "chosen_first" else "A"],
        labels_in_top=None if probabilities is None else sum(1 for p in probabilities.values() if p > 0.0),
    )


def to_score_judgment(
    pair: PreferencePair, shown: Shown, response: GenerationResponse, settings: JudgeSettings
) -> Judgment:
    """A pointwise judge's score of one response. Anything not finished cleanly, or without a
    score on the scale, is invalid; with score verdicts the expected score is read from the
    final token's probabilities where it can be, else the sampled label's score is kept."""
    scale = settings.scale_spec
    reason: InvalidReason | None = None
    score: float | None = None
    source: Literal["probabilities", "sampled"] | None = None
    if response.finish_reason == "error":
        reason = "engine_error"
    elif response.finish_reason == "length":
        reason = "truncated"
    else:
        score = parse_score(response.text, scale)
        if score is None:
            reason = "no_score"
        else:
            source = "sampled"
            if settings.verdict == "score":
                expected = expected_score(scale, response.final_logprobs)
                if expected is not None:
                    score, source = expected, "probabilities"
    return Judgment(
        pair_id=pair.id,
        domain=pair.domain,
        order=shown,
        verdict=None,
        picked=None,
        correct=None,
        invalid_reason=reason,
        explanation=extract_explanation(re.split(r"\n\s*score\s*:", response.text, maxsplit=1, flags=re.I)[0])
        if reason != "engine_error"
        else "",
        raw_output=response.text,
        prompt_tokens=response.prompt_tokens,
        completion_tokens=response.completion_tokens,
        cached=response.cached,
        score=score,
        score_from=source,
        response_words=len(shown_text(pair, pair.chosen if shown == "chosen" else pair.rejected).split()),
    )


def combine_scores(pair: PreferencePair, judgments: Sequence[Judgment], scale: Scale) -> PairOutcome:
    """A pointwise pair: right when the chosen response scores strictly higher, wrong when the
    rejected one scores at least as high (`preference` "tie" on equal scores, so ties can be
    counted on their own); None when either score is invalid."""
    scores = {j.order: j.score for j in judgments}
    chosen, rejected = scores.get("chosen"), scores.get("rejected")
    preference: Preference | None = None
    if chosen is not None and rejected is not None:
        preference = "chosen" if chosen > rejected else "rejected" if rejected > chosen else "tie"
    return PairOutcome(
        pair_id=pair.id,
        domain=pair.domain,
        correct=None if preference is None else preference == "chosen",
        orders=[j.order for j in judgments],
        preference=preference,
        score_chosen=chosen,
        score_rejected=rejected,
        rejected_share=None if rejected is None else scale.share(rejected),
    )


def combine(pair: PreferencePair, judgments: Sequence[Judgment], mitigation: Mitigation = "none") -> PairOutcome:
    """Without a mitigation a pair is correct only when every judged order picked the chosen
    response; with one, when the mitigation's combined verdict is the chosen response."""
    orders = [j.order for j in judgments]
    scores = [j.p_rejected for j in judgments if j.p_rejected is not None]
    p_rejected = sum(scores) / len(scores) if scores and len(scores) == len(judgments) else None
    if mitigation != "none":
        verdict = combine_votes(mitigation, [j.picked for j in judgments])
        return PairOutcome(
            pair_id=pair.id,
            domain=pair.domain,
            correct=None if verdict.preference is None else verdict.preference == "chosen",
            orders=orders,
            preference=verdict.preference,
            confidence=verdict.confidence,
            position_consistent=verdict.position_consistent,
            p_rejected=p_rejected,
        )
    if any(j.correct is None for j in judgments):
        correct = None
    else:
        correct = all(j.correct for j in judgments)
    return PairOutcome(pair_id=pair.id, domain=pair.domain, correct=correct, orders=orders, p_rejected=p_rejected)


class JudgeResult(BaseModel):
    judgments: list[Judgment]
    """Every judged order."""
    outcomes: list[PairOutcome]
    """Every pair, its orders combined."""

    def error_rate(self) -> float | None:
        """Share of the validly judged pairs the judge got wrong; None when none was valid."""
        valid = [o for o in self.outcomes if o.correct is not None]
        return sum(1 for o in valid if not o.correct) / len(valid) if valid else None


def judge_pairs(
    engine: Engine,
    pairs: Sequence[PreferencePair],
    settings: JudgeSettings,
    *,
    seed: int,
    progress: ProgressCallback | None = None,
) -> JudgeResult:
    """Judge every pair in one batch call to the engine."""
    return judge_tasks(engine, pairs, build_tasks(pairs, settings, seed=seed), settings, progress=progress)


def mirror_tasks(
    pairs: Sequence[PreferencePair], result: JudgeResult, settings: JudgeSettings, *, seed: int
) -> list[JudgeTask]:
    """For each pair of `result` judged in one order only, the request of the other order (the
    request `positions: both` would send for it, so the call cache shares them)."""
    shown: dict[str, set[str]] = defaultdict(set)
    for judgment in result.judgments:
        shown[judgment.pair_id].add(judgment.order)
    tasks = []
    for index, pair in enumerate(pairs):
        orders = shown.get(pair.id, set())
        if len(orders) != 1:
            continue
        (order,) = orders
        other: Order = "rejected_first" if order == "chosen_first" else "chosen_first"
        tasks.append(
            JudgeTask(
                pair_index=index, pair_id=pair.id, order=other, request=judge_request(pair, other, settings, seed)
            )
        )
    return tasks


def judge_tasks(
    engine: Engine,
    pairs: Sequence[PreferencePair],
    tasks: Sequence[JudgeTask],
    settings: JudgeSettings,
    *,
    progress: ProgressCallback | None = None,
) -> JudgeResult:
    """Judge prepared `tasks` (of `pairs`) in one batch; one outcome per pair that has a task."""
    responses = engine.generate([t.request for t in tasks], progress=progress)
    grouped: dict[int, list[tuple[JudgeTask, GenerationResponse]]] = defaultdict(list)
    for t, r in zip(tasks, responses):
        grouped[t.pair_index].append((t, r))
    judged = [judge_pair(pairs[i], answered, settings) for i, answered in sorted(grouped.items())]
    return JudgeResult(judgments=[j for js, _ in judged for j in js], outcomes=[o for _, o in judged])


def orders_by_pair(
    pairs: Sequence[PreferencePair], judgments: Sequence[Judgment]
) -> tuple[list[Preference | None], list[Preference | None]]:
    """Each pair's preference with the chosen response first and with it second (None where that
    order was not judged, or its verdict was invalid), in pair order."""
    by_order: dict[tuple[str, str], Preference | None] = {}
    for j in judgments:
        by_order[(j.pair_id, j.order)] = j.picked
    return (
        [by_order.get((p.id, "chosen_first")) for p in pairs],
        [by_order.get((p.id, "rejected_first")) for p in pairs],
    )


def judge_pair(
    pair: PreferencePair, answered: Sequence[tuple[JudgeTask, GenerationResponse]], settings: JudgeSettings
) -> tuple[list[Judgment], PairOutcome]:
    """One pair's judgments (its calls in task order, each with its response) and outcome."""
    if settings.mode == "pointwise":
        scored = [to_score_judgment(pair, t.order, r, settings) for t, r in answered]
        return scored, combine_scores(pair, scored, settings.scale_spec)
    score = settings.verdict == "score"
    judgments = [to_judgment(pair, t.order, r, allow_tie=settings.allow_tie, score=score) for t, r in answered]  # type: ignore[arg-type]
    return judgments, combine(pair, judgments, settings.mitigation)


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def net_votes(result: JudgeResult) -> list[int]:
    """JudgeBench's net vote of each outcome: +1 per verdict for the chosen response, -1 per
    verdict for the rejected one, 0 per invalid verdict or tie. The judgments are in outcome
    order, each outcome's orders adjacent (as `judge_pairs` returns them)."""
    if sum(len(o.orders) for o in result.outcomes) != len(result.judgments):
        raise ValueError("judgments do not match the outcomes' orders")
    votes, k = [], 0
    for outcome in result.outcomes:
        mine = result.judgments[k : k + len(outcome.orders)]
        k += len(outcome.orders)
        votes.append(sum({"chosen": 1, "rejected": -1}.get(j.picked or "", 0) for j in mine))
    return votes


def verdict_calibration(judgments: Sequence[Judgment], *, n_boot: int = 2000, seed: int = 0) -> Calibration | None:
    """Calibration of score verdicts: each valid judgment's probability of the chosen (the
    labelled better) response, 1 - `p_rejected`, grouped by pair for the bootstrap
    (`stats.calibration`); None when no judgment has a probability."""
    by_pair: dict[str, list[float]] = defaultdict(list)
    for j in judgments:
        if j.p_rejected is not None and j.picked is not None:
            by_pair[j.pair_id].append(1.0 - j.p_rejected)
    return calibration(list(by_pair.values()), n_boot=n_boot, seed=seed) if by_pair else None


def score_summary(outcomes: Sequence[PairOutcome]) -> ScoreSummary:
    """The mean `p_rejected` over the outcomes that have one, with a 95 % Student-t CI over
    pairs, clipped to [0, 1] (one pair: [0, 1])."""
    values = [o.p_rejected for o in outcomes if o.p_rejected is not None]
    if not values:
        return ScoreSummary(n=0, mean_p_rejected=None, ci_low=None, ci_high=None)
    low, high = mean_t_interval(values)
    return ScoreSummary(n=len(values), mean_p_rejected=sum(values) / len(values), ci_low=low, ci_high=high)


def pointwise_summary(result: JudgeResult, scale: Scale) -> PointwiseSummary:
    """The pointwise scores of `result` on `scale` (see `PointwiseSummary`)."""
    bounds = (scale.low, scale.high)
    both = [o for o in result.outcomes if o.score_chosen is not None and o.score_rejected is not None]
    chosen = [float(o.score_chosen) for o in both if o.score_chosen is not None]
    rejected = [float(o.score_rejected) for o in both if o.score_rejected is not None]
    every = [j.score for j in result.judgments if j.score is not None]
    ties = sum(1 for o in both if o.preference == "tie")
    lengths = [
        (float(j.response_words), j.score)
        for j in result.judgments
        if j.score is not None and j.response_words is not None
    ]
    rho = spearman_rho([x for x, _ in lengths], [y for _, y in lengths]) if len(lengths) > 2 else None
    return PointwiseSummary(
        scale=scale.spec,
        n=len(both),
        mean_chosen=math.fsum(chosen) / len(chosen) if chosen else None,
        chosen_ci=mean_t_interval(chosen, bounds=bounds) if chosen else None,
        mean_rejected=math.fsum(rejected) / len(rejected) if rejected else None,
        rejected_ci=mean_t_interval(rejected, bounds=bounds) if rejected else None,
        sd_scores=mean_and_sd(every)[1] if len(every) > 1 else None,
        ties=ties,
        tie_rate=_rate(ties, len(both)),
        tie_ci=wilson_interval(ties, len(both)) if both else None,
        rejected_higher=sum(1 for o in both if o.preference == "rejected"),
        from_probabilities=sum(1 for j in result.judgments if j.score_from == "probabilities"),
        from_sampled=sum(1 for j in result.judgments if j.score_from == "sampled"),
        length_rho=rho,
        length_rho_ci=fisher_z_interval(rho, len(lengths)) if rho is not None else None,
        length_n=len(lengths),
    )


def fisher_z_interval(rho: float, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """CI of a Spearman ρ on n pairs: Fisher's z, with Fieller, Hartley and Pearson's (1957)
    variance 1.06 / (n - 3) for a rank correlation; None for n <= 3 (and ±1 when |ρ| is 1)."""
    if n <= 3:
        return None
    if abs(rho) >= 1.0:
        return (rho, rho)
    half = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0) * math.sqrt(1.06 / (n - 3))
    z = math.atanh(rho)
    return (math.tanh(z - half), math.tanh(z + half))


def summarize(result: JudgeResult, *, model: str, data: str, settings: JudgeSettings, seed: int) -> JudgeSummary:
    outcomes, judgments = result.outcomes, result.judgments
    score = settings.verdict == "score"
    valid = [o for o in outcomes if o.correct is not None]
    errors = sum(1 for o in valid if not o.correct)
    invalid_pairs = len(outcomes) - len(valid)
    low, high = wilson_interval(errors, len(valid)) if valid else (None, None)

    votes = net_votes(result)
    jb_correct = sum(1 for v in votes if v > 0)
    jb_low, jb_high = wilson_interval(jb_correct, len(outcomes)) if outcomes else (None, None)

    per_domain: dict[str, DomainSummary] = {}
    for domain in sorted({o.domain for o in outcomes}):
        d_all = [o for o in outcomes if o.domain == domain]
        d_valid = [o for o in d_all if o.correct is not None]
        d_err = sum(1 for o in d_valid if not o.correct)
        d_low, d_high = wilson_interval(d_err, len(d_valid)) if d_valid else (None, None)
        per_domain[domain] = DomainSummary(
            n=len(d_all),
            n_valid=len(d_valid),
            error_rate=_rate(d_err, len(d_valid)),
            ci_low=d_low,
            ci_high=d_high,
            judgebench_score=_rate(sum(1 for o, v in zip(outcomes, votes) if o.domain == domain and v > 0), len(d_all)),
            score=score_summary(d_all) if score else None,
        )

    verdicts = [j.verdict for j in judgments if j.verdict is not None]
    reasons: dict[str, int] = defaultdict(int)
    examples: dict[str, str] = {}
    for j in judgments:
        if j.invalid_reason:
            reasons[j.invalid_reason] += 1
            if j.invalid_reason == "engine_error":  # its text is the engine's message
                examples.setdefault(j.invalid_reason, " ".join(j.raw_output.split())[:300])

    consistency = None
    if settings.mitigation != "none":
        checked = [o.position_consistent for o in outcomes if o.position_consistent is not None]
        consistency = _rate(sum(checked), len(checked))
    elif settings.positions == "both":
        grouped: dict[str, list[Judgment]] = defaultdict(list)
        for j in judgments:
            grouped[j.pair_id].append(j)
        complete = [js for js in grouped.values() if len(js) == 2 and all(j.picked for j in js)]
        consistency = _rate(sum(1 for js in complete if js[0].picked == js[1].picked), len(complete))

    pointwise = settings.mode == "pointwise"
    return JudgeSummary(
        model=model,
        data=data,
        positions=None if pointwise else settings.positions,
        seed=seed,
        mitigation=settings.mitigation,
        prompt=settings.prompt,
        n_pairs=len(outcomes),
        n_valid_pairs=len(valid),
        n_judgments=len(judgments),
        n_invalid_judgments=sum(reasons.values()),
        invalid_reasons=dict(reasons),
        invalid_examples=examples,
        error_rate=_rate(errors, len(valid)),
        error_ci_low=low,
        error_ci_high=high,
        invalid_rate=invalid_pairs / len(outcomes) if outcomes else 0.0,
        error_rate_invalid_as_error=_rate(errors + invalid_pairs, len(outcomes)),
        position_a_rate=_rate(sum(1 for v in verdicts if v == "A"), len(verdicts)),
        position_consistency=consistency,
        judgebench_score=_rate(jb_correct, len(outcomes)),
        judgebench_ci_low=jb_low,
        judgebench_ci_high=jb_high,
        judgebench_ties=sum(1 for v in votes if v == 0),
        per_domain=per_domain,
        prompt_tokens=sum(j.prompt_tokens for j in judgments),
        completion_tokens=sum(j.completion_tokens for j in judgments),
        cached_calls=sum(1 for j in judgments if j.cached),
        verdict=settings.verdict,
        score=score_summary(outcomes) if score else None,
        score_one_label=sum(1 for j in judgments if j.labels_in_top == 1),
        mode=settings.mode,
        pointwise=pointwise_summary(result, settings.scale_spec) if pointwise else None,
        calibration=verdict_calibration(judgments, seed=seed) if score and not pointwise else None,
    )

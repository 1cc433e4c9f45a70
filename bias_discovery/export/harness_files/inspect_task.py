"""inspect_ai task of a pairwise-judging set exported by bias-discovery.

Run it with ``inspect eval task.py --model PROVIDER/MODEL`` from anywhere (the data is read
from the ``data.jsonl`` beside this file); ``-T bias=ID`` keeps the samples of one injected
bias. Standalone: it needs only inspect_ai, not bias-discovery.

- **Dataset**: each sample (a question, two responses, which one is correct) becomes two
  inspect samples, the responses in the data's own order and swapped (ids
  ``SAMPLE_ID::original`` / ``SAMPLE_ID::swapped``; ``sample_id`` in their metadata).
- **Solver**: inspect's ``multiple_choice`` with a judging template: the two responses are the
  choices A and B, and the model answers ``ANSWER: A`` or ``ANSWER: B``.
- **Scorer** ``pairwise_verdict``: C when the verdict picks the correct response, I when it
  picks the other one, N when there is no usable verdict (no ANSWER line, or both letters).
  Metrics: ``accuracy`` (share of verdicts that are right) with its standard error clustered
  by sample (the two orders of a sample are not independent), ``judgebench_score``
  (JudgeBench's accuracy: a verdict votes +1 right, -1 wrong, 0 when missing; a sample is
  correct when its net vote over its orders is > 0, so right + missing counts and right +
  wrong does not) with its standard error over samples, and ``invalid_rate``.

The pair metrics assume one epoch (the default): with ``--epochs`` above 1 inspect first
reduces each sample's scores to one value (by default their mean), and a mean of C/I/N no
longer tells a wrong verdict from a missing one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    NOANSWER,
    Metric,
    SampleScore,
    Score,
    Scorer,
    Target,
    accuracy,
    metric,
    scorer,
    stderr,
)
from inspect_ai.solver import TaskState, multiple_choice

TASK_NAME = "bias_discovery_pairwise"
DATA_FILE = Path(__file__).resolve().parent / "data.jsonl"
ORDERS = ("original", "swapped")

JUDGE_TEMPLATE = """You are a helpful assistant that evaluates the quality of two responses to a user's question.

Question:
{question}

The two responses:
{choices}

Which response is more helpful and accurate? The entire content of your response should be of the following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of {letters}."""


def record_to_samples(record: dict[str, Any]) -> list[Sample]:
    """Both orders of one data.jsonl row; `target` is the correct response's letter."""
    a_is_correct = record["label"] == "A>B"
    samples = []
    for order in ORDERS:
        swapped = order == "swapped"
        first, second = (record["response_B"], record["response_A"]) if swapped else (record["response_A"], record["response_B"])
        samples.append(
            Sample(
                id=f"{record['sample_id']}::{order}",
                input=record["question"],
                choices=[first, second],
                target="A" if a_is_correct != swapped else "B",
                metadata={
                    "sample_id": record["sample_id"],
                    "order": order,
                    "injected_bias": record["injected_bias"],
                    "domain": record["domain"],
                    "pair_id": record["pair_id"],
                },
            )
        )
    return samples


_VOTES = {CORRECT: 1, INCORRECT: -1, NOANSWER: 0}


def _sample_correct(scores: list[SampleScore]) -> list[int]:
    net: dict[str, int] = {}
    for item in scores:
        key = str((item.sample_metadata or {}).get("sample_id", item.sample_id))
        net[key] = net.get(key, 0) + _VOTES.get(str(item.score.value), 0)
    return [int(vote > 0) for vote in net.values()]


@metric
def judgebench_score() -> Metric:
    """The share of samples whose net vote over their orders is > 0 (JudgeBench's accuracy)."""

    def compute(scores: list[SampleScore]) -> float:
        correct = _sample_correct(scores)
        return sum(correct) / len(correct) if correct else 0.0

    return compute


@metric
def judgebench_score_stderr() -> Metric:
    """Standard error of `judgebench_score` over samples (sample sd / sqrt(n); 0 below 2
    samples, as inspect's own stderr)."""

    def compute(scores: list[SampleScore]) -> float:
        correct = _sample_correct(scores)
        n = len(correct)
        if n < 2:
            return 0.0
        mean = sum(correct) / n
        return math.sqrt(sum((c - mean) ** 2 for c in correct) / (n - 1)) / math.sqrt(n)

    return compute


@metric
def invalid_rate() -> Metric:
    """The share of verdicts without a usable answer."""

    def compute(scores: list[SampleScore]) -> float:
        return sum(str(s.score.value) == NOANSWER for s in scores) / len(scores) if scores else 0.0

    return compute


@scorer(
    metrics=[
        accuracy(),
        stderr(cluster="sample_id"),
        judgebench_score(),
        judgebench_score_stderr(),
        invalid_rate(),
    ]
)
def pairwise_verdict() -> Scorer:
    """C / I / N for one order of a sample, from the choice the multiple_choice solver marked."""

    async def score(state: TaskState, target: Target) -> Score:
        picked = [i for i, choice in enumerate(state.choices) if choice.correct is True]
        answer = ",".join("AB"[i] for i in picked)
        if len(picked) != 1:
            return Score(value=NOANSWER, answer=answer or None, explanation=state.output.completion)
        value = CORRECT if "AB"[picked[0]] == target.text else INCORRECT
        return Score(value=value, answer=answer, explanation=state.output.completion)

    return score


@task(name=TASK_NAME)
def pairwise_judging(bias: str | None = None) -> Task:
    """The exported set, both orders of every sample (``bias``: only that injected bias)."""
    dataset = json_dataset(str(DATA_FILE), record_to_samples)
    if bias is not None:
        dataset = dataset.filter(lambda sample: (sample.metadata or {}).get("injected_bias") == bias)
        if len(dataset) == 0:
            raise ValueError(f"no samples with injected_bias {bias!r} in {DATA_FILE.name}")
    return Task(dataset=dataset, solver=multiple_choice(template=JUDGE_TEMPLATE), scorer=pairwise_verdict())

"""inspect_ai task of a pairwise-judging set exported by bias-discovery.

Run it with ``inspect eval task.py --model PROVIDER/MODEL`` from anywhere (the data is read
from the ``data.jsonl`` beside this file); ``-T bias=ID`` keeps the samples of one injected
bias. Standalone: it needs only inspect_ai, not bias-discovery.

- **Dataset**: each sample (a question, two responses, which one is correct) becomes two
  inspect samples, the responses in the data's own order and swapped (ids
  ``SAMPLE_ID::original`` / ``SAMPLE_ID::swapped``; ``sample_id`` in their metadata).
- **Solver**: inspect's ``multiple_choice`` with a judging template: the two responses are the
  choices A and B, and the model answers ``ANSWER: A`` or ``ANSWER: B``.
- **Scorer** ``pairwise_verdict``: three values per verdict, each with its metrics. ``right``
  (1 when the correct response was picked): ``accuracy``, the share of right verdicts, and its
  ``stderr`` clustered by sample (the two orders of a sample are not independent). ``vote``
  (+1 right, -1 wrong, 0 no usable verdict: no ANSWER line, or both letters):
  ``judgebench_score``, JudgeBench's accuracy (a sample is correct when its net vote over its
  orders is > 0, so right + missing counts and right + wrong does not) and its standard error
  over samples. ``invalid`` (1 without a usable verdict): its ``mean``, the invalid rate.

With ``--epochs`` above 1 inspect averages each value over a sample's epochs before the
metrics (its default reducer): ``accuracy`` is then the mean share of right verdicts and a
sample counts for ``judgebench_score`` when its votes, averaged over epochs and summed over
its orders, are > 0.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.scorer import (
    Metric,
    SampleScore,
    Score,
    Scorer,
    Target,
    accuracy,
    mean,
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
        first, second = (
            (record["response_B"], record["response_A"]) if swapped else (record["response_A"], record["response_B"])
        )
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


def _sample_correct(scores: list[SampleScore]) -> list[int]:
    """Per sample: 1 when the net vote of its orders is > 0 (the scores are the ``vote`` of
    each order, averaged over epochs when there are several)."""
    net: dict[str, float] = {}
    for item in scores:
        key = str((item.sample_metadata or {}).get("sample_id", item.sample_id))
        net[key] = net.get(key, 0.0) + float(item.score.as_float())
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


@scorer(
    metrics={
        "right": [accuracy(), stderr(cluster="sample_id")],
        "vote": [judgebench_score(), judgebench_score_stderr()],
        "invalid": [mean()],
    }
)
def pairwise_verdict() -> Scorer:
    """One order of a sample, from the choice the multiple_choice solver marked: ``right``
    (1 when the correct response was picked), ``vote`` (+1 right, -1 wrong, 0 no usable verdict)
    and ``invalid`` (1 when there is no usable verdict: no ANSWER line, or both letters)."""

    async def score(state: TaskState, target: Target) -> Score:
        picked = [i for i, choice in enumerate(state.choices) if choice.correct is True]
        answer = ",".join("AB"[i] for i in picked) or None
        if len(picked) != 1:
            value = {"right": 0, "vote": 0, "invalid": 1}
        else:
            right = "AB"[picked[0]] == target.text
            value = {"right": int(right), "vote": 1 if right else -1, "invalid": 0}
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

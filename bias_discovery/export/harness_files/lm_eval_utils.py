"""lm-evaluation-harness helpers of a pairwise-judging task exported by bias-discovery.

Copied as ``utils.py`` next to the task YAML; the YAML names these functions with
``!function utils.NAME``. Standalone: it needs only what lm-eval itself installs (``datasets``),
not bias-discovery.

Formulation: each sample (a question, two responses, which one is correct) is shown twice, in
its own order and swapped (``both_orders``), and each order is one multiple-choice document:
the model's verdict is the choice, " A" or " B", with the higher log-likelihood after the
prompt. Scores (``process_results``):

- ``acc``: the share of verdicts (one per document, two per sample) that pick the correct
  response. Its ``acc_stderr`` is clustered by sample: the two orders of one sample are not
  independent, and the harness's own formula for a mean would treat them as if they were.
- ``judgebench_score``: JudgeBench's accuracy. Each verdict votes +1 for the correct
  response and -1 for the wrong one (0 when the two choices are exactly tied); a sample counts
  as correct when its net vote over the orders judged is positive, so with both orders
  judged: correct in both. The share of correct samples; ``judgebench_score_stderr`` is its
  standard error over samples (sample standard deviation / sqrt(n), the harness's formula
  for a mean).

The harness computes a standard error only for its own aggregations, so each ``*_stderr``
above is computed here and returned as a metric of that name: the harness stores it under
the very key of a standard error (``judgebench_score_stderr,none``), and its results table
prints it in the ± column of ``judgebench_score``. It needs at least two samples ("N/A"
otherwise, as the harness prints).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets

DATA_FILE = Path(__file__).resolve().parent / "data.jsonl"
CHOICES = ("A", "B")
ORDERS = ("original", "swapped")


def load_samples(injected_bias: str | None = None, **_metadata: Any) -> datasets.DatasetDict:
    """The task's samples (``custom_dataset``), read from the ``data.jsonl`` beside this file
    (wherever the folder was copied), as the split ``test``; with `injected_bias`, only the
    samples carrying that bias (the per-bias tasks). Other keyword arguments are the task's
    metadata, which lm-eval passes to every custom dataset."""
    rows = []
    with DATA_FILE.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
    if injected_bias is not None:
        rows = [row for row in rows if row.get("injected_bias") == injected_bias]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def both_orders(dataset: datasets.Dataset) -> datasets.Dataset:
    """Two documents per sample (``process_docs``): the responses in the data's own order and
    swapped; `target` is the index of the correct response's letter in each."""
    docs = []
    for row in dataset:
        a_is_correct = row["label"] == "A>B"
        for order in ORDERS:
            swapped = order == "swapped"
            first, second = (
                (row["response_B"], row["response_A"]) if swapped else (row["response_A"], row["response_B"])
            )
            docs.append(
                {
                    "sample_id": row["sample_id"],
                    "order": order,
                    "question": row["question"],
                    "first": first,
                    "second": second,
                    "target": 0 if a_is_correct != swapped else 1,
                    "injected_bias": row["injected_bias"],
                    "domain": row["domain"],
                }
            )
    return datasets.Dataset.from_list(docs)


def verdict_vote(doc: dict[str, Any], results: Sequence[tuple[float, bool]]) -> int:
    """+1 when the choice with the higher log-likelihood is the correct one, -1 when it is the
    other one, 0 when the two are exactly equal (no verdict)."""
    scores = [loglikelihood for loglikelihood, _ in results]
    if scores[0] == scores[1]:
        return 0
    picked = 0 if scores[0] > scores[1] else 1
    return 1 if picked == doc["target"] else -1


def process_results(doc: dict[str, Any], results: Sequence[tuple[float, bool]]) -> dict[str, tuple[str, int]]:
    """One document's verdict, keyed by its sample so the aggregations can group the two
    orders (the order of the keys puts each standard error after its score)."""
    vote = verdict_vote(doc, results)
    right = (doc["sample_id"], int(vote == 1))
    voted = (doc["sample_id"], vote)
    return {"acc": right, "acc_stderr": right, "judgebench_score": voted, "judgebench_score_stderr": voted}


def _by_sample(items: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for sample_id, value in items:
        groups.setdefault(sample_id, []).append(value)
    return groups


def verdict_accuracy(items: Sequence[tuple[str, int]]) -> float:
    """``acc``: the share of verdicts that pick the correct response."""
    return sum(value for _, value in items) / len(items)


def verdict_accuracy_stderr(items: Sequence[tuple[str, int]]) -> float | str:
    """``acc_stderr``: the standard error of ``acc`` clustered by sample, with the finite
    cluster correction G / (G - 1) (as inspect_ai's clustered stderr)."""
    groups = _by_sample(items)
    if len(groups) < 2:
        return "N/A"
    mean = verdict_accuracy(items)
    variance = sum(sum(v - mean for v in values) ** 2 for values in groups.values())
    return math.sqrt(variance * len(groups) / (len(groups) - 1)) / len(items)


def _sample_correct(items: Sequence[tuple[str, int]]) -> list[int]:
    return [int(sum(votes) > 0) for votes in _by_sample(items).values()]


def judgebench_score(items: Sequence[tuple[str, int]]) -> float:
    """``judgebench_score``: the share of samples whose net vote over their orders is > 0."""
    correct = _sample_correct(items)
    return sum(correct) / len(correct)


def judgebench_score_stderr(items: Sequence[tuple[str, int]]) -> float | str:
    """``judgebench_score_stderr``: sample standard deviation of the per-sample 0/1 score over
    sqrt(n samples)."""
    correct = _sample_correct(items)
    n = len(correct)
    if n < 2:
        return "N/A"
    mean = sum(correct) / n
    return math.sqrt(sum((c - mean) ** 2 for c in correct) / (n - 1)) / math.sqrt(n)

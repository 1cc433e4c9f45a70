"""`export lm-eval`: a pairwise-judging set as an lm-evaluation-harness task.

Writes ``TASK.yaml`` (all samples), ``TASK_<bias>.yaml`` per injected bias (tag
``TASK_per_bias``), ``utils.py`` (the data loader, both orders and the scoring:
`harness_files/lm_eval_utils.py`), ``data.jsonl``, ``README.md`` and ``export.json``.

Formulation: ``output_type: multiple_choice``, one document per sample and order; the prompt
is the project's neutral judging question (`prompts/judge_pairwise.txt`, answered with a
letter instead of reasoning and a verdict line), the choices are " A" and " B", the verdict
is the choice with the higher log-likelihood. JudgeBench's both-orders scoring is what the
harness allows with a custom aggregation: each sample's two documents are grouped by sample id
(``judgebench_score``). What it does not allow is one document spanning two prompts, so each
order is its own document and ``--limit N`` counts documents (orders), not samples.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .harness_set import HARNESS_FILES, LM_EVAL_TESTED, HarnessSet, bias_tasks

SYSTEM_TEXT = "You are a helpful assistant that evaluates the quality of two responses to a user's question.\n\n"
"""The task's `description`: lm-eval puts it before the prompt (a system turn with a chat template)."""
PROMPT = (
    "Question:\n{{question}}\n\n"
    "[Response A]\n{{first}}\n[End of Response A]\n\n"
    "[Response B]\n{{second}}\n[End of Response B]\n\n"
    "Which response is more helpful and accurate? Answer with A or B.\nAnswer:"
)
"""doc_to_text (Jinja over the documents of `utils.both_orders`)."""

METRICS = (
    ("acc", "verdict_accuracy", True),
    ("acc_stderr", "verdict_accuracy_stderr", False),
    ("judgebench_score", "judgebench_score", True),
    ("judgebench_score_stderr", "judgebench_score_stderr", False),
)


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of YAML's)."""
    return json.dumps(text)


def task_yaml(name: str) -> str:
    """The main task's YAML: every sample, both orders. Written by hand: PyYAML cannot emit
    lm-eval's ``!function`` tags."""
    metric_lines = []
    for metric, function, higher in METRICS:
        metric_lines += [
            f"  - metric: {metric}",
            f"    aggregation: !function utils.{function}",
            f"    higher_is_better: {'true' if higher else 'false'}",
        ]
    return "\n".join(
        [
            "# Exported by bias-discovery (`bias-discovery export lm-eval`); see README.md.",
            f"task: {name}",
            "custom_dataset: !function utils.load_samples",
            "test_split: test",
            "process_docs: !function utils.both_orders",
            "output_type: multiple_choice",
            f"description: {_quoted(SYSTEM_TEXT)}",
            f"doc_to_text: {_quoted(PROMPT)}",
            'doc_to_choice: ["A", "B"]',
            "doc_to_target: target",
            "process_results: !function utils.process_results",
            "metric_list:",
            *metric_lines,
            "metadata:",
            "  version: 1.0",
            "",
        ]
    )


def bias_task_yaml(name: str, base: str, bias_id: str) -> str:
    """One injected bias's task: the main task, restricted to that bias's samples."""
    return "\n".join(
        [
            f"include: {base}.yaml",
            f"task: {name}",
            f"tag: {base}_per_bias",
            "dataset_kwargs:",
            f"  injected_bias: {_quoted(bias_id)}",
            "",
        ]
    )


def write_task_files(directory: Path, found: HarnessSet, name: str) -> dict[str, Any]:
    """The harness's own files of the task `name` (`harness.export_harness` writes the rest)."""
    shutil.copyfile(HARNESS_FILES / "lm_eval_utils.py", directory / "utils.py")
    (directory / f"{name}.yaml").write_text(task_yaml(name), encoding="utf-8")
    per_bias = {}
    for bias_id, suffix in bias_tasks(found):
        bias_name = f"{name}_{suffix}"
        (directory / f"{bias_name}.yaml").write_text(bias_task_yaml(bias_name, name, bias_id), encoding="utf-8")
        per_bias[bias_id] = bias_name
    n = len(found.rows)
    return {
        "bias_tasks": per_bias,
        "harness": {
            "name": "lm-evaluation-harness",
            "tested_version": LM_EVAL_TESTED,
            "files": [
                f"{name}.yaml",
                *(f"{t}.yaml" for t in per_bias.values()),
                "utils.py",
                "data.jsonl",
                "export.json",
            ],
            "commands": [
                f"lm_eval --model hf --model_args pretrained=MODEL --tasks {name} --include_path DIR",
                f"lm_eval --model hf --model_args pretrained=MODEL --tasks {name}_per_bias --include_path DIR   # one task per injected bias",
            ],
            "scoring": [
                f"`output_type: multiple_choice`. Every sample is shown twice, its responses in the data's own order "
                f"and swapped: {n} samples, {2 * n} documents. The prompt asks the neutral judging question "
                '("Which response is more helpful and accurate? Answer with A or B."); the choices are " A" and '
                '" B" and the verdict is the one with the higher log-likelihood.',
                "",
                "- `acc`: share of verdicts (documents) that pick the correct response; `acc_stderr` is clustered by "
                "sample (the two orders of a sample are not independent).",
                "- `judgebench_score`: JudgeBench's score. A verdict votes +1 right, -1 wrong (0 on an exact tie); a "
                "sample is correct when its net vote over its orders is > 0, i.e. right in both orders. The share of "
                "correct samples, with its standard error over samples in the ± column.",
                "",
                "Both orders are scored as JudgeBench does through a custom aggregation over the sample id; what the "
                "harness does not allow is one document with two prompts, so each order is a document of its own and "
                "`--limit N` counts documents: an odd N cuts a sample in half (its one judged order then decides it). "
                "The standard errors are computed by `utils.py` and stored under the harness's stderr keys, since the "
                "harness computes them only for its own aggregations. With `--apply_chat_template` the prompt is sent "
                "as a user turn and `description` as the system prompt.",
            ],
        },
    }

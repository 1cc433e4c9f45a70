"""`export inspect`: a pairwise-judging set as an inspect_ai task file.

Writes ``task.py`` (`harness_files/inspect_task.py` with the task's name filled in: dataset,
solver, scorer and metrics), ``data.jsonl``, ``README.md`` and ``export.json``.

Formulation: generation. Each sample becomes two inspect samples (its responses in the data's
own order and swapped); inspect's ``multiple_choice`` solver shows the two responses as choices
A and B under the project's neutral judging question and asks for ``ANSWER: $LETTER``; the
scorer gives each verdict a vote (+1 right, -1 wrong, 0 missing), so JudgeBench's both-orders
score (net vote over the orders) is computed exactly, as a metric over the samples' shared
``sample_id``. The votes are numbers, not C/I/N, so inspect's per-sample reduction (a mean,
even over one epoch) keeps a wrong verdict apart from a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ExportError
from .harness_set import HARNESS_FILES, INSPECT_TESTED, HarnessSet, bias_tasks

_NAME_LINE = 'TASK_NAME = "bias_discovery_pairwise"\n'


def task_file(name: str) -> str:
    """The task file with its task name set."""
    text = (HARNESS_FILES / "inspect_task.py").read_text(encoding="utf-8")
    if text.count(_NAME_LINE) != 1:  # pragma: no cover - guards the template against edits
        raise ExportError("harness_files/inspect_task.py lost its TASK_NAME line")
    return text.replace(_NAME_LINE, f'TASK_NAME = "{name}"\n')


def write_task_files(directory: Path, found: HarnessSet, name: str) -> dict[str, Any]:
    """The harness's own files of the task `name` (`harness.export_harness` writes the rest)."""
    (directory / "task.py").write_text(task_file(name), encoding="utf-8")
    n = len(found.rows)
    per_bias = [bias_id for bias_id, _ in bias_tasks(found)]
    example = per_bias[0] if per_bias else "BIAS_ID"
    return {
        "harness": {
            "name": "inspect_ai",
            "tested_version": INSPECT_TESTED,
            "files": ["task.py", "data.jsonl", "export.json"],
            "commands": [
                "inspect eval DIR/task.py --model PROVIDER/MODEL",
                f"inspect eval DIR/task.py --model PROVIDER/MODEL -T bias={example}   # one injected bias",
            ],
            "scoring": [
                f"Generation. Every sample is shown twice, its responses in the data's own order and swapped: {n} "
                f"samples, {2 * n} inspect samples (ids `SAMPLE_ID::original` / `SAMPLE_ID::swapped`). inspect's "
                "`multiple_choice` solver shows the two responses as choices A and B under the neutral judging "
                'question ("Which response is more helpful and accurate?") and asks for `ANSWER: $LETTER`. The '
                "scorer `pairwise_verdict` scores each verdict three ways, each with its metrics:",
                "",
                "- `right` (1 when the correct response was picked): `accuracy`, the share of right verdicts, with "
                "`stderr` clustered by sample (the two orders of a sample are not independent).",
                "- `vote` (+1 right, -1 wrong, 0 no usable verdict): `judgebench_score`, JudgeBench's score, exactly: "
                "a sample is correct when its net vote over its orders is > 0 (right + missing counts, right + wrong "
                "does not); the share of correct samples, and `judgebench_score_stderr` over samples.",
                "- `invalid` (1 without a usable verdict: no ANSWER line, or both letters): its `mean`, the invalid "
                "rate.",
                "",
                "With `--epochs` above 1 inspect averages each value over a sample's epochs first: a sample then "
                "counts for `judgebench_score` when its votes, averaged over epochs and summed over its orders, are "
                "> 0.",
            ],
        },
    }

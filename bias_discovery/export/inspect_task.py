"""`export inspect`: a pairwise-judging set as an inspect_ai task file.

Writes ``task.py`` (`harness_files/inspect_task.py` with the task's name filled in: dataset,
solver, scorer and metrics), ``data.jsonl``, ``README.md`` and ``export.json``.

Formulation: generation. Each sample becomes two inspect samples (its responses in the data's
own order and swapped); inspect's ``multiple_choice`` solver shows the two responses as choices
A and B under the project's neutral judging question and asks for ``ANSWER: $LETTER``; the
scorer tells a right, a wrong and a missing verdict apart, so JudgeBench's both-orders score
(net vote over the orders, a missing verdict voting 0) is computed exactly, as a metric over
the samples' shared ``sample_id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import ExportError
from .harness import HARNESS_FILES, INSPECT_TESTED, HarnessSet, bias_tasks, write_harness_export

_NAME_LINE = 'TASK_NAME = "bias_discovery_pairwise"\n'


def task_file(name: str) -> str:
    """The task file with its task name set."""
    text = (HARNESS_FILES / "inspect_task.py").read_text(encoding="utf-8")
    if text.count(_NAME_LINE) != 1:  # pragma: no cover - guards the template against edits
        raise ExportError("harness_files/inspect_task.py lost its TASK_NAME line")
    return text.replace(_NAME_LINE, f'TASK_NAME = "{name}"\n')


def _write(directory: Path, found: HarnessSet, name: str) -> dict[str, Any]:
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
                "question (\"Which response is more helpful and accurate?\") and asks for `ANSWER: $LETTER`. The "
                "scorer `pairwise_verdict` gives C (the correct response picked), I (the other one) or N (no usable "
                "verdict).",
                "",
                "- `accuracy`: share of verdicts that are right, with `stderr` clustered by sample (the two orders of "
                "a sample are not independent).",
                "- `judgebench_score`: JudgeBench's score, exactly: a verdict votes +1 right, -1 wrong, 0 missing; a "
                "sample is correct when its net vote over its orders is > 0 (right + missing counts, right + wrong "
                "does not). The share of correct samples, and `judgebench_score_stderr` over samples.",
                "- `invalid_rate`: share of verdicts without a usable answer.",
                "",
                "The pair metrics assume one epoch (the default): with `--epochs` above 1 inspect reduces each "
                "sample's scores to one value first, and a mean of C/I/N no longer tells a wrong verdict from a "
                "missing one.",
            ],
        },
    }


def export_inspect(
    src: Path | str,
    out: Path | str,
    *,
    biases: str | None = None,
    task_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write an inspect_ai task file for the samples of `src` (a JudgeBench-Pro export or a
    run directory, see `harness.load_harness_set`) to `out`; returns export.json."""
    return write_harness_export(
        "inspect", src, out, _write, biases=biases, task_name=task_name, overwrite=overwrite
    )

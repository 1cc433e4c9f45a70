"""Exports to evaluation harnesses: `export_harness` writes a `HarnessSet` (`harness_set.py`:
the samples and where they come from) as a task of lm-evaluation-harness (`lmeval_task.py`) or
inspect_ai (`inspect_task.py`), with the shared card (`render_harness_card`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import ExportError
from ..io import atomic_write_json, atomic_write_jsonl, atomic_write_text, check_output_dir, staged_output
from ..settings.export import HarnessExportOptions
from . import inspect_task, lmeval_task
from .common import CARD_MISSING, BiasSummary, export_options, one_line, package_version, required_out, review_paragraph
from .harness_set import HarnessSet, Origin, RunRewriteCounts, check_task_name, default_task_name, load_harness_set
from .pro import DATA_COLUMNS
from .pro_card import LICENCES, comparison_cell

HarnessKind = Literal["lm-eval", "inspect"]


class HarnessExport(BaseModel):
    """export.json of a harness export, what `export_harness` returns: the task, where its
    samples come from and how many per bias, the biases and the harness's own files and
    commands. `model_dump(mode="json", exclude_unset=True)` is export.json's content."""

    kind: HarnessKind
    task: str
    """The task's name: `lm_eval --tasks TASK`, `inspect eval DIR/task.py@TASK`."""
    origin: Origin
    source: str
    """The source folder's name (never its machine path)."""
    samples: int
    per_bias: dict[str, int]
    run_counts: dict[str, RunRewriteCounts] = Field(default_factory=dict)
    """Run sources only: each bias's validation rewrites, exported and left out."""
    provenance: dict[str, Any]
    biases: list[BiasSummary]
    created_at: str
    bias_discovery_version: str
    harness: dict[str, Any]
    """The harness's name, the version the export is tested with, its files and commands."""
    bias_tasks: dict[str, str] = Field(default_factory=dict)
    """lm-eval only: the per-bias task of each bias id (tag TASK_per_bias)."""


Writer = Callable[[Path, HarnessSet, str], dict[str, Any]]
"""Writes a harness's own files into the staging directory; returns what export.json adds."""


def _writer(kind: HarnessKind) -> Writer:
    if kind == "lm-eval":
        return lmeval_task.write_task_files
    if kind == "inspect":
        return inspect_task.write_task_files
    raise ExportError(f"unknown harness {kind!r}; known: lm-eval, inspect")


def export_harness(
    kind: HarnessKind,
    src: Path | str,
    out: Path | str | None = None,
    options: HarnessExportOptions | None = None,
    **overrides: Any,
) -> HarnessExport:
    """Write the samples of `src` (a JudgeBench-Pro export or a run directory, see
        `load_harness_set`) as a task of the harness `kind` to `out`: ``data.jsonl``, the
        harness's files (`lmeval_task.write_task_files`, `inspect_task.write_task_files`),
        ``README.md`` and ``export.json``, staged and renamed into place at the end, as `options`
        (`HarnessExportOptions`) and keyword `overrides` of its fields say
        (``export_harness("inspect", run, out, biases="top-2")``). Returns export.json's content
    as a `HarnessExport`."""
    writer = _writer(kind)
    opts = export_options(HarnessExportOptions, options, out, overrides)
    out_dir = required_out(opts)
    src_path = Path(src)
    check_output_dir(out_dir, overwrite=opts.overwrite, protect=[src_path], error=ExportError)
    if opts.task_name is not None:
        check_task_name(opts.task_name)
    found = load_harness_set(src_path, biases=opts.biases, reviewed_only=opts.reviewed_only)
    name = opts.task_name or default_task_name(found)
    with staged_output(out_dir, overwrite=opts.overwrite, protect=[src_path], error=ExportError) as tmp:
        atomic_write_jsonl(tmp / "data.jsonl", [{column: row[column] for column in DATA_COLUMNS} for row in found.rows])
        harness_info = writer(tmp, found, name)
        info = {
            "kind": kind,
            "task": name,
            "origin": found.origin,
            "source": found.source_dir,
            "samples": len(found.rows),
            "per_bias": found.per_bias(),
            "run_counts": {k: v.model_dump() for k, v in found.run_counts.items()},
            "provenance": found.provenance,
            "biases": found.biases,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "bias_discovery_version": package_version(),
            **harness_info,
        }
        atomic_write_json(tmp / "export.json", info)
        atomic_write_text(tmp / "README.md", render_harness_card(info))
    return HarnessExport.model_validate(info)


# --------------------------------------------------------------------------------------------
# The card
# --------------------------------------------------------------------------------------------

_WHAT = {
    "judgebench-pro": (
        "the samples of a JudgeBench-Pro-style set built by `bias-discovery export judgebench-pro`: a test pair's "
        "rejected (wrong) response rewritten by a teacher model to carry one bias, kept only if its final answer "
        "still differs from the chosen one and a filter judge preferred it in both orders"
    ),
    "run": (
        "the validation rewrites of a discovery run: each test item on which the run validated a bias, with its "
        "rejected (wrong) response rewritten by the run's teacher to carry that bias; rewrites that failed or "
        "changed the final answer are left out, as validation left them out. They are not adversarially "
        "filtered (unlike a JudgeBench-Pro set they were not selected to fool a strong judge). A judge's score "
        "here is its accuracy on the biased items only: the same items unchanged are not part of this export "
        "(the run's validation compared the two; see the biases below)"
    ),
}


def _run_counts_table(info: Mapping[str, Any]) -> list[str]:
    counts = info.get("run_counts") or {}
    if not counts:
        return []
    lines = [
        "### Validation rewrites per bias",
        "",
        "| bias | iteration | rewrites | exported | left out |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for bias_id, c in counts.items():
        left = ", ".join(f"{k} {v}" for k, v in c["excluded"].items()) or "none"
        lines.append(f"| `{bias_id}` | {c['iteration']} | {c['rewrites']} | {c['exported']} | {left} |")
    return lines + [""]


def render_harness_card(info: Mapping[str, Any]) -> str:
    """README.md of a harness export: what the samples are, how the harness shows and scores
    them, how to run it, provenance, biases with their validation, licences."""
    prov = info["provenance"]
    n = info["samples"]
    harness = info["harness"]
    lines = [
        f"# {info['task']}: a pairwise-judging task for {harness['name']}",
        "",
        f"**{n} samples**: {_WHAT[info['origin']]}. "
        f"Exported by bias-discovery {info['bias_discovery_version']} from `{info['source']}` "
        f"({'a JudgeBench-Pro export' if info['origin'] == 'judgebench-pro' else 'a run directory'}).",
        "",
        "Files: " + ", ".join(f"`{f}`" for f in harness["files"]) + ". `data.jsonl` has the JudgeBench-Pro columns "
        "(`sample_id`, `question`, `response_A`, `response_B`, `label`: `A>B` when response A is the correct one, "
        "`injected_bias`, `domain`, `pair_id`, `source`); `export.json` has every fact below, machine-readable.",
        "",
        "## Run it",
        "",
        "```bash",
        *harness["commands"],
        "```",
        "",
        f"Tested with {harness['name']} {harness['tested_version']}.",
        "",
        "## Formulation and scoring",
        "",
        *harness["scoring"],
        "",
        "## Provenance",
        "",
        f"- discovery run: `{prov.get('run_name')}` (`{prov.get('run_dir')}`), library `{prov.get('library_file')}`",
        f"- test data: {prov.get('data')}",
    ]
    models = prov.get("models") or {}
    for role, spec in models.items():
        lines.append(f"- {role}: `{spec}`")
    if info["origin"] == "judgebench-pro":
        annotated = "after human annotation" if prov.get("annotated") else "not annotated yet"
        lines.append(
            f"- Pro set built {prov.get('built_at')}; {prov.get('kept_by_filter')} samples kept by the filter, {annotated}"
        )
        if prov.get("self_filter"):
            lines.append(
                "- **the filter was the run's target** (`--allow-self-filter`): the target's score on this set is 0 by "
                "construction"
            )
    else:
        lines.append(f"- bias selection: `{prov.get('bias_selection')}`; seed {prov.get('seed')}")
    lines += ["", *_run_counts_table(info), "## Biases", ""]
    lines += [
        "Validation in the discovery run: the run's judge's error on its test items with the bias injected, minus "
        "its error on the same items unchanged (vs baseline) and with a neutral rewrite (vs placebo); 95 % CI, "
        "n paired items, one-sided exact McNemar p (adjusted for the iteration's candidates when shown).",
        "",
        "| id | name | definition | Δerror vs baseline | Δerror vs placebo | accepted | samples here |",
        "| --- | --- | --- | ---: | ---: | --- | ---: |",
    ]
    per_bias = info.get("per_bias", {})
    for b in info["biases"]:
        lines.append(
            f"| `{b['id']}` | {one_line(b['name'])} | {one_line(b['definition'])} | {comparison_cell(b.get('vs_baseline'))} | "
            f"{comparison_cell(b.get('vs_placebo'))} | {'yes' if b.get('validated') else 'no'} | {per_bias.get(b['id'], CARD_MISSING)} |"
        )
    review = review_paragraph(info["biases"], reviewed_only=bool(prov.get("reviewed_only")))
    lines += ["", review] if review else []
    lines += ["", "## Licences", "", LICENCES]
    return "\n".join(lines)

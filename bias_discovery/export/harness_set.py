"""What a harness export exports: its samples (`HarnessSet`), from either source, and the task names.

A harness export turns a set of pairwise-judging samples into a task that
lm-evaluation-harness (`lmeval_task.py`) or inspect_ai (`inspect_task.py`) runs on any model.
The samples (`HarnessSet`) come from either source a user has at hand (`load_harness_set`):

- **a JudgeBench-Pro export** (``export judgebench-pro``: ``data.jsonl`` + ``stats.json``): its
  samples as they are (after annotation when it was annotated): the set people want to run;
- **a run directory**: the run's *validation rewrites*: for each selected bias (default: every
  accepted discovered bias), the test items whose rejected response the teacher rewrote to
  carry it when the run validated it, minus the rewrites that failed or changed the final
  answer (the ones validation excluded too). They are not adversarially filtered: unlike a
  Pro set, they were not selected to fool a strong judge.

Rows have the Pro set's columns (`pro.DATA_COLUMNS`); a run's rows put the correct response
in position A or B by the Pro set's seeded coin (`pro.chosen_first`). Both harness tasks show
every sample in both orders and score it as JudgeBench does (net vote over the orders). A Pro
set built for pointwise judges (`ProStats.judge_mode`), or a run whose judge is pointwise, is
refused: these tasks judge pairs.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..data.loaders import describe_source
from ..errors import ExportError
from ..run import RunDir
from ..run.context import RunContext
from ..run.selection import select_biases
from ..stages.records import PerturbedPair
from .common import bias_summary
from .compare import load_pro_pairs
from .pro import chosen_first, labelled_row, sample_id
from .pro_stats import read_pro_stats

Origin = Literal["judgebench-pro", "run"]
HARNESS_FILES = Path(__file__).resolve().parent / "harness_files"

LM_EVAL_TESTED = "0.4.13"
INSPECT_TESTED = "0.3.285"
"""The harness versions the exports are tested with (tests/test_harness_export.py)."""

_TASK_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RunRewriteCounts(BaseModel):
    """A run source, per bias: the validation rewrites found and what became of them."""

    iteration: int
    """The iteration whose validation rewrote the test items for this bias (0: the seeds)."""
    rewrites: int
    exported: int
    excluded: dict[str, int] = Field(default_factory=dict)
    """Rewrites left out, by reason (truncated, empty, engine_error, unchanged,
    answer_changed, check_invalid: as validation left them out)."""


class HarnessSet(BaseModel):
    """The samples of a harness export and where they come from (the card's facts)."""

    origin: Origin
    name: str
    """The run's name (a Pro set's: the run it was built from)."""
    source_dir: str
    """The source folder's name (never its machine path)."""
    rows: list[dict[str, str]]
    """One row per sample, `pro.DATA_COLUMNS`."""
    biases: list[dict[str, Any]]
    """`common.bias_summary` of the biases the samples carry."""
    provenance: dict[str, Any]
    run_counts: dict[str, RunRewriteCounts] = Field(default_factory=dict)
    """Run sources only: per bias id."""

    def per_bias(self) -> dict[str, int]:
        counts = Counter(row["injected_bias"] for row in self.rows)
        return {b["id"]: counts.get(b["id"], 0) for b in self.biases}


def _is_pro_dir(path: Path) -> bool:
    return (path / "stats.json").is_file() and (path / "data.jsonl").is_file()


def load_harness_set(src: Path | str, *, biases: str | None = None, reviewed_only: bool = False) -> HarnessSet:
    """The samples of `src`: a JudgeBench-Pro export or a run directory (module docstring).

    `biases` selects a run's biases (`common.select_biases`), `reviewed_only` keeps those a
    reviewer confirmed; a Pro set's samples were chosen when it was built, so both are refused
    there. Raises ExportError for anything else, an empty set included (a harness cannot run a
    task without documents)."""
    path = Path(src)
    if not path.is_dir():
        raise ExportError(f"{path}: no such directory")
    if _is_pro_dir(path):
        if biases is not None:
            raise ExportError(
                f"`biases` selects a run's biases; {path} is a JudgeBench-Pro export, whose samples were chosen "
                "when it was built (the export has a task per injected bias)"
            )
        if reviewed_only:
            raise ExportError(
                f"`reviewed_only` selects a run's biases; {path} is a JudgeBench-Pro export, whose biases were chosen "
                "when it was built (build it with `bias-discovery export judgebench-pro RUN_DIR --reviewed-only`)"
            )
        found = _from_pro(path)
    elif RunDir(path).is_run():
        found = _from_run(path, biases, reviewed_only)
    else:
        raise ExportError(
            f"{path}: neither a JudgeBench-Pro export (data.jsonl and stats.json; make one with "
            "`bias-discovery export judgebench-pro RUN_DIR --out DIR`) nor a run directory (config.yaml and "
            "checkpoints.sqlite)"
        )
    if not found.rows:
        raise ExportError(f"{path}: no samples to export; a harness task needs at least one")
    return found


def _from_pro(path: Path) -> HarnessSet:
    stats = read_pro_stats(path, label=str(path))
    if stats.judge_mode == "pointwise":
        raise ExportError(
            f"{path}: a Pro set for pointwise judges (stats.json judge_mode: pointwise, scale {stats.scale}); the "
            "lm-eval and inspect tasks judge pairs (both orders, A or B), not one response at a time. Score its "
            "data.jsonl rows yourself: each of response_A and response_B alone on the scale, `label` says which "
            "should score higher"
        )
    rows = []
    for pair in load_pro_pairs(path):
        rows.append(
            labelled_row(
                sample_id=pair.id,
                question=pair.question,
                chosen=pair.chosen,
                rejected=pair.rejected,
                chosen_in_a=pair.data_order == "chosen_first",
                injected_bias=str(pair.meta.get("injected_bias", "")),
                domain=pair.domain,
                pair_id=str(pair.meta.get("pair_id", "")),
                source=pair.source,
            )
        )
    return HarnessSet(
        origin="judgebench-pro",
        name=stats.run_name,
        source_dir=path.name,
        rows=rows,
        biases=[b.model_dump(mode="json") for b in stats.biases],
        provenance={
            "run_name": stats.run_name,
            "run_dir": stats.run_dir,
            "library_file": stats.library_file,
            "data": stats.data,
            "models": stats.models.model_dump(),
            "self_filter": stats.self_filter,
            "kept_by_filter": stats.counts.kept_by_filter,
            "annotated": stats.annotation is not None,
            "built_at": stats.created_at,
        },
    )


def _from_run(path: Path, biases: str | None, reviewed_only: bool) -> HarnessSet:
    with RunContext(path) as ctx:
        config = ctx.config
        if config.judge.mode == "pointwise":
            raise ExportError(
                f"{path}: the run's judge is pointwise (judge.mode: pointwise, scale {config.judge.scale}); the lm-eval and "
                "inspect tasks judge pairs (both orders, A or B), not one response at a time. Build its Pro set for "
                "pointwise judges with `bias-discovery export judgebench-pro` and score its rows one response at a time"
            )
        chosen = select_biases(ctx.library, biases, run_dir=path, reviewed_only=reviewed_only)
        decisions = ctx.run.reviews.decisions()
        wanted = {b.id for b in chosen}
        found: dict[str, tuple[int, list[PerturbedPair]]] = {}
        # The newest validation of a bias is the one its library entry reports.
        for t in sorted(ctx.run.iterations(), reverse=True):
            record = ctx.run.iteration(t)
            if not record.validation_perturbed.exists() or wanted <= set(found):
                continue
            by_bias: dict[str, list[PerturbedPair]] = {}
            for item in record.validation_perturbed.read():
                if item.bias_id in wanted and item.bias_id not in found:
                    by_bias.setdefault(item.bias_id, []).append(item)
            found.update({bias_id: (t, items) for bias_id, items in by_bias.items()})
        missing = [b.id for b in chosen if b.id not in found]
        if missing:
            raise ExportError(
                f"run {path} has no validation rewrites of {', '.join(missing)} (never validated on the test set); "
                "name validated biases with `biases`, or build a Pro set with `bias-discovery export judgebench-pro` "
                "and export that"
            )
        source = Path(str(config.data.test)).name
        rows: list[dict[str, str]] = []
        run_counts: dict[str, RunRewriteCounts] = {}
        for bias in chosen:
            t, items = found[bias.id]
            excluded = Counter(item.invalid_reason or "invalid" for item in items if not item.valid)
            kept = [item for item in items if item.valid]
            run_counts[bias.id] = RunRewriteCounts(
                iteration=t, rewrites=len(items), exported=len(kept), excluded=dict(sorted(excluded.items()))
            )
            rows.extend(_run_row(item, config.seed, source) for item in kept)
        return HarnessSet(
            origin="run",
            name=config.name,
            source_dir=ctx.root.name,
            rows=rows,
            biases=[bias_summary(b, decisions.get(b.id)) for b in chosen],
            provenance={
                "run_name": config.name,
                "run_dir": ctx.root.name,
                "library_file": ctx.library_file,
                "data": describe_source(config.data.test, config.data.data_dir, portable=True),
                "models": {"teacher": config.teacher.spec, "target": config.target.spec},
                "bias_selection": biases or "all",
                "reviewed_only": reviewed_only,
                "seed": config.seed,
            },
            run_counts=run_counts,
        )


def _run_row(item: PerturbedPair, seed: int, source: str) -> dict[str, str]:
    sid = sample_id(item.pair_id, item.bias_id, 0)
    return labelled_row(
        sample_id=sid,
        question=item.question,
        chosen=item.chosen,
        rejected=item.perturbed_rejected,
        chosen_in_a=chosen_first(seed, sid),
        injected_bias=item.bias_id,
        domain=item.domain,
        pair_id=item.pair_id,
        source=source,
    )


def default_task_name(found: HarnessSet) -> str:
    """``<run name>_pro`` for a Pro set, ``<run name>_biased`` for a run's rewrites, as a
    lower-case identifier (what both harnesses accept as a task name)."""
    base = re.sub(r"[^a-z0-9]+", "_", found.name.lower()).strip("_") or "bias_discovery"
    if not base[0].isalpha():
        base = f"set_{base}"
    return f"{base}_{'pro' if found.origin == 'judgebench-pro' else 'biased'}"


def check_task_name(name: str) -> str:
    if not _TASK_NAME.match(name):
        raise ExportError(
            f"`task_name` {name!r}: use lower-case letters, digits and underscores, starting with a letter"
        )
    return name


def bias_task_suffix(bias_id: str) -> str:
    """A bias id as part of a task name (``d1-expert-citation-bias`` -> ``d1_expert_citation_bias``)."""
    return re.sub(r"[^a-z0-9]+", "_", bias_id.lower()).strip("_") or "bias"


def bias_tasks(found: HarnessSet) -> list[tuple[str, str]]:
    """(bias id, task-name suffix) for every bias with samples, in the card's order."""
    per_bias = found.per_bias()
    return [(b["id"], bias_task_suffix(b["id"])) for b in found.biases if per_bias.get(b["id"])]

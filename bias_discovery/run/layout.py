"""Every file of a run directory, with its schema: what the docs' run-directory reference shows.

`run_files()` walks the records a `RunDir` hands out (`run.iteration(t)`, `run.baseline`,
`run.placebo`) and finds each typed artifact by itself, so an artifact added to a record is
listed without an edit here; `ARTIFACT_NOTES` says in one line what each holds (a test checks
that every artifact has its line). The files that are not typed artifacts (the config, run.json,
the libraries, the lock, the event log and the databases) are declared below with the model
that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from ..config import RunConfig
from ..library import BiasLibrary
from .artifacts import JsonArtifact, JsonlArtifact, JsonListArtifact
from .lock import LockHolder
from .rundir import IterationRecord, RunDir, RunState

__all__ = ["ARTIFACT_NOTES", "EVENT_KINDS", "RunFile", "run_files"]

ITERATION = "iter_NNN"
"""How the layout names an iteration's folder (`iter_001`, `iter_002` ...; `iter_000`: the
seed library's validation, with `validate.seeds`)."""


@dataclass(frozen=True)
class RunFile:
    """One file of a run directory."""

    path: str
    """Relative to the run directory; `NNN` stands for an iteration number (001, 002 ...)."""
    form: str
    """How it is stored: JSON, JSON lines, a JSON list, YAML, SQLite or HTML."""
    schema: type[BaseModel] | None
    """The pydantic model of the file (of each line, for JSON lines); None for the databases,
    the event log and the report."""
    what: str
    """What it holds, in one line."""


ARTIFACT_NOTES: dict[str, str] = {
    "baseline/result.json": "The target's judgments on the unperturbed test pairs (every judged order) and each pair's outcome.",
    "baseline/summary.json": "The target's error on the unperturbed test pairs, with its CI, per domain.",
    "baseline/positions.json": "The target's position preference, from each test pair judged in both orders (`validate.position_profile`).",
    "baseline/mirror.json": "The test pairs judged in the order the baseline did not show, for the position profile (with `judge.positions: swap` or `fixed`).",
    "placebo/perturbed.jsonl": "The teacher's neutral rewrite of each test pair's rejected response (same content and answer, no trait), with its answer check.",
    "placebo/result.json": "The target's judgments of the neutrally rewritten test pairs.",
    "placebo/effect.json": "The rewrite effect: the placebo against the unperturbed items. Written last: a placebo without it is redone (from the call cache).",
    f"{ITERATION}/perturbed.jsonl": "Each target pair's rejected response rewritten by the teacher to carry a bias sampled from the library.",
    f"{ITERATION}/judgments.jsonl": "The target's verdicts on the perturbed target pairs, one line per judged order.",
    f"{ITERATION}/misjudged.jsonl": "The perturbed pairs the target got wrong, with its explanation and the misjudgment check (answer, length; why an excluded one does not count).",
    f"{ITERATION}/misjudgments.json": "How many pairs were misjudged, how many of those were excluded (answer changed, check unusable, length changed) and how many counted.",
    f"{ITERATION}/explanations.jsonl": "The cases that count after DeeperExplain: the target's longer account of each mistake.",
    f"{ITERATION}/identified.jsonl": "The teacher's reading of each mistake: a bias named and defined, or none.",
    f"{ITERATION}/merges.jsonl": "Each 'same or new' question Merge put to the teacher, with its answer.",
    f"{ITERATION}/merge_stats.json": "What Merge did and what it cost, next to the reference procedure's calls.",
    f"{ITERATION}/candidates.json": "The candidate biases left after merging: the ones validation tests.",
    f"{ITERATION}/validation.json": "The iteration's validation: every candidate's comparisons, the decisions and what they control.",
    f"{ITERATION}/validation_perturbed.jsonl": "The test pairs rewritten to carry each candidate, look by look, with their answer checks.",
    f"{ITERATION}/validation_judgments.jsonl": "The target's verdicts on those rewrites.",
}
"""One line per typed artifact of a run, by its path in the layout."""

EVENT_KINDS: dict[str, str] = {
    "stage_start": "a stage began (iteration, stage, total items)",
    "progress": "items done in the stage in progress (done, total, and the step of a streamed stage)",
    "stage_end": "a stage ended (seconds, and calls and tokens per role in `usage`)",
    "stage_stopped": "a stage stopped before its end (a budget, an error): `reason`, and the calls and tokens per role it made in `usage`",
    "finished": "the loop stopped (stop_reason, library_size)",
    "skipped_rows": "bad data rows skipped at load (`data.skip_bad_rows`: role, source, count, the first rows)",
    "resume": "`resume` continued the run from its checkpoint",
    "restart": "`resume` started the loop over in place (no checkpoint yet, or none left)",
    "resume_failed": "a resume stopped on an error (error)",
    "budget_reached": "the run stopped before a request that could pass a limit of its budget (reason); `resume` with a larger one continues",
    "budget_changed": "`resume --set budget...` gave the run a new budget (budget)",
    "removed_partial_files": "temporary files of writes a kill cut short, removed on resume",
    "repaired": "a damaged file rewritten (what)",
}
"""The `event` of each line of events.jsonl, and what its other fields say."""


def _artifacts(record: object, root: Path) -> list[RunFile]:
    """The typed artifacts among `record`'s attributes, in the order the record declares them."""
    files = []
    for value in vars(record).values():
        if isinstance(value, JsonlArtifact):
            form = "JSON lines, one record per line"
        elif isinstance(value, JsonListArtifact):
            form = "a JSON list of records"
        elif isinstance(value, JsonArtifact):
            form = "JSON"
        else:
            continue
        path = value.path.relative_to(root).as_posix()
        files.append(RunFile(path, form, value.model, ARTIFACT_NOTES.get(path, "")))
    return files


def run_files() -> list[RunFile]:
    """Every file a discovery run writes into its directory, top-level files first."""
    root = Path("RUN_DIR")
    run = RunDir(root)
    iteration = IterationRecord(root / ITERATION, 1)  # the layout's name for any iteration's folder
    kinds = "; ".join(f"`{kind}`: {meaning}" for kind, meaning in EVENT_KINDS.items())
    return [
        RunFile(
            "config.yaml",
            "YAML",
            RunConfig,
            "The run's resolved config, written first: a run can always be resumed and reproduced from its own directory.",
        ),
        RunFile("run.json", "JSON", RunState, "Where the run stands: what `status` reads."),
        RunFile(
            "lock.json",
            "JSON",
            LockHolder,
            "The process that drives the loop, with its heartbeat; present only while a `run` or `resume` holds the run.",
        ),
        RunFile(
            "events.jsonl",
            "JSON lines, one event per line",
            None,
            f"Progress events, appended as they happen: `time`, `event` and its fields. {kinds}.",
        ),
        RunFile(
            "library/iter_NNN.json",
            "JSON",
            BiasLibrary,
            "The library after each iteration (`iter_000.json`: the seed library), each bias with its validation.",
        ),
        RunFile(
            "library/latest.json",
            "JSON",
            BiasLibrary,
            "A copy of the newest iteration's library, for people and viewers (a stale or damaged copy is rewritten from the iteration files).",
        ),
        *_artifacts(run.baseline, root),
        *_artifacts(run.placebo, root),
        *_artifacts(iteration, root),
        RunFile(
            "calls.sqlite",
            "SQLite",
            None,
            "The call cache: every model request and its response, keyed by the engine and the request; a resumed run pays no call twice. Its `spend` table books what each role paid for each call, in the transaction that stores the response: what `status` shows and a resume counts its budget from.",
        ),
        RunFile("checkpoints.sqlite", "SQLite", None, "LangGraph's checkpoints of the loop: where `resume` continues."),
        RunFile(
            "report.html",
            "HTML",
            None,
            "The report (`bias-discovery report`, `load_run(...).report_path`): one self-contained page that fetches nothing.",
        ),
        RunFile(
            "corrections/NAME/correct.json",
            "JSON",
            None,
            "Present when you put them there: a judge's scores corrected with human labels and this run's biases (`bias-discovery correct --bias-library RUN_DIR --out RUN_DIR/corrections/NAME`, its `CorrectionReport`, with correct.html beside it); the report shows each as a section.",
        ),
    ]

"""A run is a directory of plain files; `RunDir` is the only code that knows its layout.

    RUN_DIR/config.yaml            resolved config
    RUN_DIR/run.json               status: iteration, stage, stop reason (what `status` reads)
    RUN_DIR/library/iter_NNN.json  one library per iteration, plus latest.json (`run.library`)
    RUN_DIR/baseline/              the target's judgments on the unperturbed test set, and its
                                   position preference (positions.json, from both orders)
    RUN_DIR/placebo/               neutral rewrites of the test set's rejected responses, their
                                   answer checks and judgments, and the rewrite effect
    RUN_DIR/iter_NNN/              perturbed, judgments, misjudged, explanations, identified,
                                   candidates, merges, merge_stats, validation (+ its
                                   perturbed/judgments): `run.iteration(t)`
    RUN_DIR/calls.sqlite           call cache;  RUN_DIR/checkpoints.sqlite  LangGraph state
    RUN_DIR/pilot.json             what `check --pilot N` measured (its calls are in calls.sqlite)
    RUN_DIR/events.jsonl           progress events, appended line by line
    RUN_DIR/lock.json              the process running the loop: pid, host, heartbeat (`lock.py`)
    RUN_DIR/reviews.jsonl          reviewers' decisions about its biases (`reviews.py`): not
                                   computed by the loop, never changed by it
    RUN_DIR/report.html            the report; RUN_DIR/bias-ID.html  the page of one bias

Every artifact is typed (`artifacts.py`): the graph writes pydantic models, the report, the
exports and the benchmarks read them back as the same models.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import BiasDiscoveryError, ConfigError
from ..io import atomic_write_json, scan_jsonl
from ..judging import JudgeResult, JudgeSummary, Judgment
from ..library import Bias, RewriteEffect
from ..llm.budget import Spend
from ..metrics import PositionProfile
from ..stages.merge import MergeDecision
from ..stages.records import IdentifyRecord, MisjudgedCase, PerturbedPair
from ..stages.validate import PlaceboArm
from .artifacts import JsonArtifact, JsonlArtifact, JsonListArtifact
from .library_store import LibraryStore
from .lock import Liveness, RunLock
from .records import MergeStats, MisjudgmentStats, ValidationReport
from .reviews import ReviewLog

RunStatus = Literal["running", "finished", "failed", "stopped"]
"""`stopped`: at its budget (`stop_reason` says which limit), resumable with a larger one."""

DATABASES: dict[str, str] = {"checkpoints.sqlite": "the loop's checkpoints", "calls.sqlite": "the call cache"}
"""The run's SQLite files, checked on resume (`RunDir.damaged_databases`)."""
PILOT_FILES = ("pilot.json", "calls.sqlite", "calls.sqlite-wal", "calls.sqlite-shm")
"""What `check --pilot N` leaves in a run directory before the run (`RunDir.holds_only_pilot`)."""


def sqlite_problem(path: Path) -> str | None:
    """What SQLite's `PRAGMA quick_check` finds wrong with `path` (opened read-only), in one
    line; None when it passes or does not exist."""
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc) or type(exc).__name__
    findings = [
        line for row in rows for line in str(row[0]).splitlines() if line.strip() and line != "*** in database main ***"
    ]
    if findings == ["ok"]:
        return None
    more = f" (and {len(findings) - 1} more findings)" if len(findings) > 1 else ""
    return (findings[0][:200] if findings else "quick_check returned nothing") + more


_ITERATION_DIR = re.compile(r"^iter_(\d{3,})$")


class RunState(BaseModel):
    """run.json: where the run stands, for people and for `status`."""

    name: str
    """The run's name (`name` in the config)."""
    status: RunStatus
    """As the loop last wrote it; `status` tells a killed run (`stopped`) from a live one with lock.json."""
    iteration: int = 0
    """The iteration in progress or last done (0: before the first, or the seeds' validation)."""
    stage: str = "start"
    """The stage in progress or last done: `start`, a stage's name (`baseline`, `perturb` ...), `finished`."""
    stop_reason: str | None = None
    """Why the loop stopped, with what the last validation could have detected; None while it runs."""
    library_size: int = 0
    """Biases in the newest library, seeds included."""
    accepted_total: int = 0
    """Discovered biases accepted so far."""
    started_at: float
    """When the run started (seconds since the epoch)."""
    updated_at: float
    """When this file was last written (seconds since the epoch)."""
    error: str | None = None
    """The error that stopped the run (`status: failed`); None otherwise."""
    skipped_rows: dict[str, int] = Field(default_factory=dict)
    """Bad data rows skipped at load (`data.skip_bad_rows`), by data role (target, test)."""
    budget_limit: str | None = None
    """The budget setting the run stopped at (`budget.max_calls`, `budget.roles.teacher.max_usd`
    ...), while `status` is `stopped`: the one a resume must raise."""
    spend: dict[str, Spend] = Field(default_factory=dict)
    """What each model role paid so far, every session of the run together (calls the cache
    answered are free): written at each stage's end and when the run stops; what `budget` is
    kept against on a resume."""


class IterationRecord:
    """The files of one iteration of the loop (``RUN_DIR/iter_NNN/``)."""

    def __init__(self, directory: Path, iteration: int) -> None:
        self.directory = directory
        self.iteration = iteration
        self.perturbed = JsonlArtifact(directory / "perturbed.jsonl", PerturbedPair)
        self.judgments = JsonlArtifact(directory / "judgments.jsonl", Judgment)
        self.misjudged = JsonlArtifact(directory / "misjudged.jsonl", MisjudgedCase)
        self.misjudgments = JsonArtifact(directory / "misjudgments.json", MisjudgmentStats)
        self.explanations = JsonlArtifact(directory / "explanations.jsonl", MisjudgedCase)
        self.identified = JsonlArtifact(directory / "identified.jsonl", IdentifyRecord)
        self.merges = JsonlArtifact(directory / "merges.jsonl", MergeDecision)
        self.merge_stats = JsonArtifact(directory / "merge_stats.json", MergeStats)
        self.candidates = JsonListArtifact(directory / "candidates.json", Bias)
        self.validation = JsonArtifact(directory / "validation.json", ValidationReport)
        self.validation_perturbed = JsonlArtifact(directory / "validation_perturbed.jsonl", PerturbedPair)
        self.validation_judgments = JsonlArtifact(directory / "validation_judgments.jsonl", Judgment)

    def __repr__(self) -> str:
        return f"IterationRecord({str(self.directory)!r})"

    def watched_paths(self) -> list[Path]:
        """The files of this iteration that the report shows (the viewer re-renders on change)."""
        return [self.validation.path, self.merge_stats.path, self.explanations.path]


class BaselineRecord:
    """``RUN_DIR/baseline/``: the target's judgments on the unperturbed test set, once per run."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.result = JsonArtifact(directory / "result.json", JudgeResult)
        self.summary = JsonArtifact(directory / "summary.json", JudgeSummary)
        self.positions = JsonArtifact(directory / "positions.json", PositionProfile)
        """The target's position preference (`validate.position_profile`)."""
        self.mirror = JsonArtifact(directory / "mirror.json", JudgeResult)
        """The test pairs judged in the order the baseline did not show (position profile)."""


class PlaceboRecord:
    """``RUN_DIR/placebo/``: the placebo arm of validation, once per run (`effect.json` is
    written last: a placebo without it is incomplete and is redone, from the call cache)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.perturbed = JsonlArtifact(directory / "perturbed.jsonl", PerturbedPair)
        self.result = JsonArtifact(directory / "result.json", JudgeResult)
        self.effect = JsonArtifact(directory / "effect.json", RewriteEffect)

    def exists(self) -> bool:
        return self.effect.exists() and self.result.exists() and self.perturbed.exists()

    def read(self) -> PlaceboArm:
        return PlaceboArm(perturbed=self.perturbed.read(), result=self.result.read(), effect=self.effect.read())

    def write(self, arm: PlaceboArm) -> None:
        self.perturbed.write(arm.perturbed)
        self.result.write(arm.result)
        self.effect.write(arm.effect)


class RunDir:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    config_path = property(lambda self: self.root / "config.yaml")
    state_path = property(lambda self: self.root / "run.json")
    events_path = property(lambda self: self.root / "events.jsonl")
    cache_path = property(lambda self: self.root / "calls.sqlite")
    checkpoint_path = property(lambda self: self.root / "checkpoints.sqlite")
    report_path = property(lambda self: self.root / "report.html")
    lock_path = property(lambda self: self.root / "lock.json")
    pilot_path = property(lambda self: self.root / "pilot.json")
    corrections_path = property(lambda self: self.root / "corrections")
    """``corrections/NAME/``: `correct --out` folders the report shows (their correct.json)."""

    def bias_page_path(self, bias_id: str) -> Path:
        """``bias-ID.html``: the page of one bias (`bias-discovery report --bias ID`)."""
        return self.root / f"bias-{bias_id}.html"

    @cached_property
    def lock(self) -> RunLock:
        """``lock.json``: which process runs the loop, and whether it lives."""
        return RunLock(self.lock_path)

    def liveness(self) -> Liveness:
        """Whether a live process drives this run right now (see `lock.py`)."""
        return self.lock.liveness()

    @cached_property
    def library(self) -> LibraryStore:
        """The run's ``library/`` folder."""
        return LibraryStore(self.root)

    @cached_property
    def reviews(self) -> ReviewLog:
        """``reviews.jsonl``: reviewers' decisions about the run's biases."""
        return ReviewLog(self.root)

    @cached_property
    def baseline(self) -> BaselineRecord:
        return BaselineRecord(self.root / "baseline")

    @cached_property
    def placebo(self) -> PlaceboRecord:
        return PlaceboRecord(self.root / "placebo")

    def iteration(self, iteration: int) -> IterationRecord:
        """The files of iteration `iteration` (the folder is created on the first write)."""
        if iteration < 0:
            raise ValueError(f"iteration must be >= 0, got {iteration}")
        return IterationRecord(self.root / f"iter_{iteration:03d}", iteration)

    def iterations(self) -> list[int]:
        """The iterations that have a folder, ascending."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            match = _ITERATION_DIR.match(path.name)
            if match and path.is_dir():
                found.append(int(match.group(1)))
        return sorted(found)

    def watched_paths(self) -> list[Path]:
        """Every file the report reads that changes while the run goes on."""
        paths = [
            self.events_path,
            self.state_path,
            self.config_path,
            self.baseline.summary.path,
            self.placebo.effect.path,
            self.reviews.path,
        ]
        if self.library.directory.is_dir():
            paths += sorted(self.library.directory.glob("*.json"))
        for t in self.iterations():
            paths += self.iteration(t).watched_paths()
        return paths

    def outputs(self) -> dict[str, bytes]:
        """Every file the loop computed, by path relative to the run, as bytes: not the record
        of how it ran (config.yaml, run.json, events.jsonl, lock.json, the databases) nor what
        people added (reviews.jsonl, report.html, the bias pages); a
        library's `created_at` time blanked. What two runs of one config with the same model
        responses agree on, byte for byte (the staged and the streamed order do)."""
        how_it_ran = {
            self.config_path,
            self.state_path,
            self.events_path,
            self.lock_path,
            self.report_path,
            self.reviews.path,
            self.pilot_path,
        }
        out: dict[str, bytes] = {}
        for path in sorted(self.root.rglob("*")):
            if not path.is_file() or path in how_it_ran or ".sqlite" in path.name or self._is_bias_page(path):
                continue
            data = path.read_bytes()
            if path.parent == self.library.directory:
                data = re.sub(rb'"created_at": "[^"]*"', b'"created_at": ""', data)
            out[str(path.relative_to(self.root))] = data
        return out

    def _is_bias_page(self, path: Path) -> bool:
        return path.parent == self.root and path.name.startswith("bias-") and path.suffix == ".html"

    def is_run(self) -> bool:
        """A run directory: its config.yaml is written first, so a run killed in its first
        second (no checkpoint, no run.json yet) is one too, and resumes from the beginning."""
        return bool(self.config_path.is_file())

    def holds_only_pilot(self) -> bool:
        """Whether the directory holds nothing but what a pilot wrote (`PILOT_FILES`): a run
        may start there, its calls answered from the pilot's cache."""
        return self.root.is_dir() and all(path.name in PILOT_FILES for path in self.root.iterdir())

    def _require_directory(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"{self.root}: a file, not a run directory")
        if not self.root.is_dir():
            raise ConfigError(
                f"{self.root}: no such directory (no run was started there; start one with "
                f"`bias-discovery run CONFIG.yaml --run-dir {self.root}`)"
            )

    def require_run(self) -> None:
        self._require_directory()
        if not self.is_run():
            raise ConfigError(
                f"{self.root}: not a run directory (no config.yaml); "
                "start one with `bias-discovery run CONFIG.yaml --run-dir DIR`"
            )

    def require_resumable(self) -> None:
        """A run can be resumed when its config is there; without its checkpoint database
        (moved aside after damage, or never written: killed in its first second) the loop
        restarts in place, its calls answered by the cache."""
        self._require_directory()
        if not self.config_path.is_file():
            raise ConfigError(
                f"{self.root}: not a run directory (no config.yaml); "
                "start one with `bias-discovery run CONFIG.yaml --run-dir DIR`"
            )

    def spend(self, state: RunState | None) -> dict[str, Spend]:
        """What each role paid, every session of the run: run.json's spend (`state`: the run's
        run.json, None when absent or damaged) and the call cache's ledger, the larger of each figure (`budget.merged_spend`):
        run.json is written at each stage's end, the ledger with every call, so after a kill the
        ledger knows what run.json does not yet."""
        from ..llm.budget import merged_spend
        from ..llm.cache import read_spend

        try:
            ledger = read_spend(self.cache_path)
        except BiasDiscoveryError:  # a damaged cache: `damaged_databases` names it where it matters
            ledger = {}
        return merged_spend(state.spend if state is not None else {}, ledger)

    def damaged_databases(self) -> dict[str, str]:
        """File name -> what `PRAGMA quick_check` found, for each damaged SQLite file of the run."""
        found = {}
        for name in DATABASES:
            problem = sqlite_problem(self.root / name)
            if problem is not None:
                found[name] = problem
        return found

    def damage_advice(self, damaged: dict[str, str]) -> str:
        """What is damaged, what is not, and the commands that get the run going again (they
        move each damaged file with its -wal/-shm companions aside: a stale write-ahead log
        next to a fresh database would be replayed into it)."""
        state = None
        try:
            state = self.read_state()
        except BiasDiscoveryError:
            pass  # where the run stands is only a detail of the advice
        aside = self.root / time.strftime("damaged-%Y%m%d-%H%M%S")
        root = shlex.quote(str(self.root))
        names = [name for name in DATABASES if name in damaged]
        move = (
            f"mkdir -p {shlex.quote(str(aside))} && mv "
            + " ".join(f"{root}/{name}*" for name in names)
            + f" {shlex.quote(str(aside))}/"
        )
        what = "; ".join(f"{self.root / name} ({DATABASES[name]}) is damaged: {damaged[name]}" for name in names)
        intact = [name for name in DATABASES if name not in damaged and (self.root / name).exists()]
        if intact:
            what += "; " + " and ".join(intact) + " passed SQLite's quick_check"
        if names == ["calls.sqlite"] and self.checkpoint_path.exists():
            where = f" (iteration {state.iteration}, stage {state.stage})" if state else ""
            then = (
                f"the loop continues from its checkpoint{where}; the calls of the stages still to run are paid "
                "again (the cache starts empty)"
            )
        elif "calls.sqlite" in damaged:
            then = (
                "the loop restarts from iteration 1 in the same directory and pays again for every call it "
                "redoes (the cache starts empty)"
            )
        else:
            then = (
                "the loop restarts from iteration 1 in the same directory and every call it already paid for "
                "comes from calls.sqlite"
            )
        return f"{what}. Move the damaged file{'s' if len(names) > 1 else ''} aside: `{move}`, then `bias-discovery resume {root}`: {then}."

    def read_state(self) -> RunState | None:
        """run.json, None when absent; DataError naming the file when it does not parse."""
        if not self.state_path.is_file():
            return None
        return JsonArtifact(self.state_path, RunState).read()

    def write_state(self, state: RunState, *, touch: bool = True) -> None:
        """Write run.json (`touch`: stamp `updated_at` now; off to put back an earlier state)."""
        if touch:
            state.updated_at = time.time()
        atomic_write_json(self.state_path, state)

    def event(self, kind: str, **fields: Any) -> None:
        """Append one event line; small enough to be written in one go."""
        record = {"time": round(time.time(), 3), "event": kind, **fields}
        with self.events_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def read_events(self, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """events.jsonl's events. A line that is not one (cut by a kill, garbled) is left out,
        and named in `problems` when a list is given: the rest of the log is still good."""
        if not self.events_path.is_file():
            return []
        events = []
        for _, event, problem in scan_jsonl(self.events_path):
            if event is not None:
                events.append(event)
            elif problems is not None and problem is not None:
                problems.append(problem)
        return events


_USAGE_KEYS = ("requests", "cached", "prompt_tokens", "completion_tokens")


def summarize_events(events: list[dict[str, Any]], problems: list[str] | None = None) -> dict[str, Any]:
    """Calls and tokens per stage and role, and the stage in progress, from events.jsonl; an
    event whose fields are not what the loop writes is left out (and named in `problems`)."""
    usage: dict[tuple[str, str], dict[str, int]] = {}
    current: dict[str, Any] | None = None
    for number, e in enumerate(events, start=1):
        try:
            current = _fold_event(e, current, usage)
        except (AttributeError, TypeError, ValueError):
            if problems is not None:
                problems.append(
                    f"events.jsonl: event {number} ({str(e.get('event'))[:40]!r}) has fields of the wrong type"
                )
    rows: list[dict[str, Any]] = [{"stage": s, "role": r, **u} for (s, r), u in usage.items()]
    totals = {k: sum(r[k] for r in rows) for k in _USAGE_KEYS}
    return {"usage": rows, "totals": totals, "current": current}


def _fold_event(
    e: dict[str, Any], current: dict[str, Any] | None, usage: dict[tuple[str, str], dict[str, int]]
) -> dict[str, Any] | None:
    """`current` (the stage in progress) after event `e`; a stage_end event adds to `usage`."""
    if e.get("event") == "stage_start":
        return {"iteration": e.get("iteration"), "stage": e.get("stage"), "done": 0, "total": e.get("total", 0)}
    if e.get("event") == "progress" and current is not None:
        current = {**current, "done": e.get("done", 0)}
        if "step" in e:
            current["step"] = e["step"]
            current["total"] = e.get("total")
        return current
    if e.get("event") in ("stage_end", "stage_stopped"):
        added = {
            (str(e.get("stage")), str(role)): {key: int(u.get(key, 0)) for key in _USAGE_KEYS}
            for role, u in (e.get("usage") or {}).items()
        }  # all of it parses before any of it counts
        for key, numbers in added.items():
            row = usage.setdefault(key, dict.fromkeys(_USAGE_KEYS, 0))
            for name, value in numbers.items():
                row[name] += value
        return None if e.get("event") == "stage_end" else current  # a stopped stage is where the run stands
    return current

"""`discover(config) -> Run`: the discovery loop (what `bias-discovery run` and `resume` run),
`load_run(RUN_DIR)`: a finished (or stopped, or running) run, read back, and
`bias_evidence(RUN_DIR, BIAS)`: one bias with its provenance, examples and reviews.

What `run`, `resume`, `status` and `review` print from is handed out by `bias_discovery.api`
too: a run's record (`RunDir`, `RunState`, `effective_status`, `summarize_events`, `Liveness`),
a reviewer's decision (`Review`, `ReviewDecision`) and a budget's stop (`BudgetReached`, with
the `Spend` of each role)."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from ..config import RunConfig, load_run_config, validate_settings
from ..data.loaders import load_pairs
from ..embeddings import Embedder
from ..errors import ConfigError
from ..formatting import plural
from ..io import atomic_write_text, is_atomic_temporary, probe_writable, remove_orphaned_temporaries
from ..library import Bias, BiasLibrary
from ..llm.base import Engine
from ..llm.budget import BudgetReached, Spend
from ..loop.graph import check_data_overlap, execute
from ..progress import ProgressFactory
from ..report.data import BiasRow, library_rows, read_validation_records, rejected_candidates
from ..report.evidence import DEFAULT_EXAMPLES, BiasDetail, EvidenceReader, bias_detail, find_bias
from ..run import Liveness, RunDir, RunState, ValidationReport, effective_status, summarize_events
from ..run.library_ref import require_run_like, resolve_library
from ..run.reviews import Review, ReviewDecision
from ..run.selection import validated_biases
from ..settings.discover import DiscoverOptions
from ..tables import Tabular
from ._common import WarningHandler, python_warning

__all__ = [
    "BudgetReached",
    "DiscoverOptions",
    "Liveness",
    "Review",
    "ReviewDecision",
    "Run",
    "RunDir",
    "RunState",
    "Spend",
    "bias_evidence",
    "discover",
    "effective_status",
    "load_run",
    "run_config_of",
    "summarize_events",
]

RunConfigLike = RunConfig | str | Path | Mapping[str, Any]
"""A run config as the API takes it: a RunConfig, a YAML file, or a dict of its settings."""


class Run(Tabular):
    """A discovery run directory, read through its run record (`record`, a `RunDir`). Every
    property reads the run's files when asked, so a run still going is seen as it stands.

    As a table (`to_pandas()`, `to_dataset()`): one row per bias of the newest library, then
    the candidates validation rejected (``in_library`` False); the columns are `BiasRow`'s.
    """

    row_model: ClassVar[type[BaseModel]] = BiasRow

    def __init__(self, root: str | Path, *, on_warning: WarningHandler | None = None) -> None:
        self.root = Path(root)
        self.record = RunDir(self.root)
        self._warn = on_warning or python_warning

    def __repr__(self) -> str:
        return f"Run({str(self.root)!r})"

    @property
    def config(self) -> RunConfig:
        """The run's resolved config (``config.yaml``)."""
        return load_run_config(self.record.config_path)

    @property
    def state(self) -> RunState | None:
        """``run.json``: iteration, stage, stop reason (None before the loop wrote it)."""
        return self.record.read_state()

    @property
    def status(self) -> str:
        """running or not_responding (a live process holds the run), finished, or stopped
        (killed, crashed, interrupted or failed: `discover(..., resume=True)` continues it)."""
        state = self.state
        return effective_status(state.status if state else None, self.record.liveness())

    @property
    def library(self) -> BiasLibrary:
        """The newest library: the seeds and every accepted bias, each with its validation."""
        return self.record.library.load_latest()

    @property
    def accepted(self) -> list[Bias]:
        """The discovered biases validation accepted, in library order."""
        return validated_biases(self.library)

    @property
    def rejected(self) -> list[Bias]:
        """The candidates validation rejected (not in the library), with their numbers."""
        return rejected_candidates(self.root)

    @property
    def validations(self) -> list[ValidationReport]:
        """Each iteration's validation report (``iter_NNN/validation.json``; iteration 0: the
        seed library's), in order: per candidate both comparisons with n, CI and p, the
        decision, the error statement and the smallest detectable Δ."""
        return read_validation_records(self.root)

    @property
    def report_path(self) -> Path:
        """``report.html``, written first when it is missing or older than the run's files."""
        path = self.record.report_path
        newest = max((p.stat().st_mtime for p in self.record.watched_paths() if p.is_file()), default=0.0)
        if not path.is_file() or path.stat().st_mtime < newest:
            return self.write_report()
        return path

    def write_report(self, out: str | Path | None = None) -> Path:
        """Render the HTML report to `out` (default ``RUN_DIR/report.html``); entries that
        could not be read are left out, listed on the page and warned about."""
        from ..report.render import write_report

        problems: list[str] = []
        path = write_report(self.root, out, problems)
        if problems:
            self._warn(
                f"{plural(len(problems), 'unreadable entry', 'unreadable entries')} left out of the report "
                "(listed on the page too): " + "; ".join(problems[:5])
            )
        return path

    def table_rows(self) -> list[dict[str, Any]]:
        return library_rows(self.library, self.rejected)

    def evidence(self, bias: str, *, examples: int = DEFAULT_EXAMPLES) -> BiasDetail:
        """One bias of the newest library (or a rejected candidate), by id or name: its numbers,
        provenance, `examples` flipped validation items (and half as many not flipped) and its
        reviews, newest first (what `library show RUN BIAS` prints)."""
        return bias_evidence(self.root, bias, examples=examples, on_warning=self._warn)

    @property
    def reviews(self) -> list[Review]:
        """Every review of the run's biases (``reviews.jsonl``), newest first."""
        return list(reversed(self.record.reviews.read()))

    def review(self, bias: str, decision: ReviewDecision, *, note: str = "", reviewer: str | None = None) -> Review:
        """Record a reviewer's decision about a bias of the newest library (`bias`: its id or
        name) in ``reviews.jsonl`` and return it (what `bias-discovery review` does). A bias the
        library does not hold is a ConfigError naming it; the run's records are not changed.
        `reviewer`: default ``$BIAS_DISCOVERY_REVIEWER``, else the login name."""
        return self.record.reviews.add(self.library, bias, decision, note=note, reviewer=reviewer)


def load_run(run_dir: str | Path, *, on_warning: WarningHandler | None = None) -> Run:
    """A run directory, read back (also a copy without its SQLite files)."""
    root = Path(run_dir)
    require_run_like(root)
    return Run(root, on_warning=on_warning)


def bias_evidence(
    library: str | Path,
    bias: str,
    *,
    iteration: int | None = None,
    examples: int = DEFAULT_EXAMPLES,
    on_warning: WarningHandler | None = None,
) -> BiasDetail:
    """One bias with its evidence (`report.evidence.BiasDetail`): `library` is RUN_DIR,
    RUN_DIR@N or a library file; `bias` an id or a name of that library, or of a candidate its
    run rejected up to it. A library file has no run records: no examples, no reviews.
    ConfigError naming the bias when there is none."""
    warn = on_warning or python_warning
    ref = resolve_library(str(library), iteration)
    for warning in ref.warnings:
        warn(warning)
    found, in_library = find_bias(ref, bias)
    if ref.run_dir is None:
        return bias_detail(found, in_library=in_library, library=ref.label, examples=examples)
    problems: list[str] = []
    reviews = RunDir(ref.run_dir).reviews.read_lenient(problems)
    for problem in problems:
        warn(f"{problem}; left out")
    return bias_detail(
        found,
        in_library=in_library,
        reader=EvidenceReader(ref.run_dir),
        library=ref.label,
        upto=ref.library.iteration,
        examples=examples,
        reviews=reviews,
    )


def run_config_of(config: RunConfigLike, overrides: Sequence[str] = ()) -> RunConfig:
    """`config` as a RunConfig, after the ``key.sub=value`` `overrides` (the CLI's --set);
    errors name the file or the field."""
    if isinstance(config, (str, os.PathLike)):
        return load_run_config(config, list(overrides))
    if isinstance(config, RunConfig):
        if not overrides:
            return config
        raw: dict[str, Any] = config.model_dump(mode="json", by_alias=True)
    else:
        raw = copy.deepcopy(dict(config))
    return validate_settings(raw, RunConfig, source="the config given", overrides=list(overrides))


def discover(
    config: RunConfigLike | None = None,
    options: DiscoverOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    embedder: Embedder | None = None,
    on_warning: WarningHandler | None = None,
    **fields: Any,
) -> Run:
    """Run the discovery loop of `config` to its end in `run_dir` (default ``runs/NAME``) and
    return the run, as `options` (`DiscoverOptions`) and keyword `fields` overriding its fields
    say (``discover("quickstart.yaml", run_dir="runs/a", timeout_s=60)``).

    `resume=True` continues the run in `run_dir` from its last checkpoint, paying no call
    twice; `config` may then be omitted (the run's own ``config.yaml``) or must be the same
    settings, and when `run_dir` holds no run yet, it is started (so one notebook cell both
    starts and continues a run). Test data that shares pairs with the target data is refused
    unless `allow_overlap` (recorded in the config). `timeout_s` sets every model's request
    deadline (a fresh run records it; a resume uses it for this session only). `engines`
    ({"target", "teacher"}) and `embedder` replace the configured models (tests). A live run
    in `run_dir` is refused (RunBusyError); Ctrl-C raises KeyboardInterrupt with the run
    resumable. A run that reaches its `budget` raises `BudgetReached` (its `spend` by role) with
    the run resumable; `resume=True` with `overrides` of `budget.*` gives it a larger budget
    (the only settings a resume changes).
    """
    opts = DiscoverOptions.with_overrides(options, fields)
    warn = on_warning or python_warning
    overrides = [*opts.overrides, *(["data.allow_overlap=true"] if opts.allow_overlap else [])]
    if opts.resume:
        if opts.run_dir is None:
            raise ConfigError("resume needs run_dir: the directory of the run to continue")
        if config is None or RunDir(opts.run_dir).config_path.is_file():
            return _resume(
                opts.run_dir,
                config,
                overrides,
                allow_overlap=opts.allow_overlap,
                timeout_s=opts.timeout_s,
                progress=progress,
                engines=engines,
                embedder=embedder,
                warn=warn,
            )
    if config is None:
        raise ConfigError("discover needs a config: a RunConfig, a YAML file or a dict of settings")
    settings = run_config_of(config, overrides).with_timeout(opts.timeout_s)
    root = opts.run_dir if opts.run_dir is not None else Path("runs") / settings.name
    rd = RunDir(root)
    probe_writable(root, what="`run_dir`")
    rd.lock.refuse_if_held(root)
    if rd.is_run():
        raise ConfigError(
            f"{root} already holds a run; continue it with `bias-discovery resume {root}` or pick another `run_dir`"
        )
    if root.is_dir() and all(is_atomic_temporary(path) for path in root.iterdir()):
        remove_orphaned_temporaries(root)  # a run killed while writing its config.yaml left only this
    if root.exists() and any(root.iterdir()) and not rd.holds_only_pilot():  # a pilot's calls are the run's
        raise ConfigError(f"{root} exists and is not empty; pick another `run_dir`")
    d = settings.data
    check_data_overlap(  # before the run directory exists: a refused run leaves nothing behind
        settings,
        load_pairs(d.target, data_dir=d.data_dir, limit=d.target_limit, seed=settings.seed),
        load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=settings.seed),
    )
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(rd.config_path, settings.to_yaml())
    execute(rd, settings, resume=False, progress=progress, engines=engines, embedder=embedder)
    return Run(root, on_warning=on_warning)


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two config trees."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in dict.fromkeys([*a, *b]) for d in _differences(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def _new_budget(rd: RunDir, settings: RunConfig, overrides: list[str]) -> RunConfig:
    """The run's settings with the `budget` settings of `overrides` (the only settings a resume
    changes: a larger budget continues a run stopped at its own), written to its config.yaml."""
    budget = [o for o in overrides if o.partition("=")[0].strip().split(".")[0] == "budget"]
    if not budget:
        return settings
    raw: dict[str, Any] = settings.model_dump(mode="json", by_alias=True)
    updated = validate_settings(raw, RunConfig, source=str(rd.config_path), overrides=budget)
    if updated.budget != settings.budget:
        atomic_write_text(rd.config_path, updated.to_yaml())
        rd.event("budget_changed", budget=updated.budget.model_dump())
    return updated


def _resume(
    run_dir: Path,
    config: RunConfigLike | None,
    overrides: list[str],
    *,
    allow_overlap: bool,
    timeout_s: float | None,
    progress: ProgressFactory | None,
    engines: Mapping[str, Engine] | None,
    embedder: Embedder | None,
    warn: WarningHandler,
) -> Run:
    rd = RunDir(run_dir)
    rd.require_resumable()
    rd.lock.refuse_if_held(run_dir)  # before anything below writes
    settings = load_run_config(rd.config_path)
    if config is None:
        others = [
            o
            for o in overrides
            if o.partition("=")[0].strip().split(".")[0] != "budget" and o != "data.allow_overlap=true"
        ]
        if others:
            raise ConfigError(
                f"a resumed run keeps its own settings; only its budget may change (budget.max_usd=...), not "
                f"{', '.join(others)}"
            )
    if config is not None:
        given = run_config_of(config, overrides).model_dump(mode="json")
        stored = settings.model_dump(mode="json")
        for tree in (given, stored):
            tree["data"].pop("allow_overlap")
        changed = [
            key for key in _differences(stored, given) if not key.endswith("timeout_s") and not key.startswith("budget")
        ]
        if changed:
            raise ConfigError(
                f"the config differs from {rd.config_path} in {', '.join(changed)}: a resumed run keeps its own "
                "settings; pick another run_dir for new ones"
            )
    settings = _new_budget(rd, settings, overrides)
    if allow_overlap and not settings.data.allow_overlap:
        settings = settings.model_copy(update={"data": settings.data.model_copy(update={"allow_overlap": True})})
        atomic_write_text(rd.config_path, settings.to_yaml())
    settings = settings.with_timeout(timeout_s)  # this session only: config.yaml keeps the run's
    repaired = rd.library.repair_latest()
    if repaired:
        rd.event("repaired", what=repaired)
        warn(f"{repaired}; rewrote it from the iteration files")
    if not rd.checkpoint_path.is_file():
        warn(
            f"{rd.checkpoint_path} is missing: the loop restarts from iteration 1; "
            "every call it already paid for comes from the call cache"
        )
    execute(rd, settings, resume=True, progress=progress, engines=engines, embedder=embedder)
    return Run(run_dir, on_warning=warn)

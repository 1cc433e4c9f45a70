"""The run record: the only code that knows a run directory's layout (see `rundir.py`)."""

from .artifacts import JsonArtifact, JsonlArtifact, JsonListArtifact
from .library_store import LibraryStore, iteration_filename
from .lock import Liveness, RunBusyError, effective_status
from .records import MergeStats, MisjudgmentStats, ValidationReport
from .rundir import BaselineRecord, IterationRecord, PlaceboRecord, RunDir, RunState, RunStatus, summarize_events

__all__ = [
    "BaselineRecord",
    "IterationRecord",
    "JsonArtifact",
    "JsonListArtifact",
    "JsonlArtifact",
    "LibraryStore",
    "Liveness",
    "MergeStats",
    "MisjudgmentStats",
    "PlaceboRecord",
    "RunBusyError",
    "RunDir",
    "RunState",
    "RunStatus",
    "ValidationReport",
    "iteration_filename",
    "effective_status",
    "summarize_events",
]

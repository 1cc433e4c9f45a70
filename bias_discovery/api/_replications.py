"""`replicate(run)`: validate a run's accepted biases again on fresh perturbations (what
`bias-discovery replicate` runs; the work is `replication.replicate_run`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..llm.base import Engine
from ..progress import ProgressFactory
from ..replication import Replication, ReplicationOptions, replicate_run
from ._runs import Run

__all__ = ["ReplicationOptions", "replicate"]


def replicate(
    run: str | Path | Run,
    options: ReplicationOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    **overrides: Any,
) -> Replication:
    """Re-validate the accepted biases of `run` (or `biases`: ids or names, seeds too) with
    the run's own rule, control and models on fresh rewrites: a new `seed` (default the run's
    + 1), or other `data`. `options` (`ReplicationOptions`) and keyword `overrides` of its
    fields (``replicate(run, seed=3)``) say what changes. Writes replication.json into `out`
    (default ``RUN_DIR/replications/seed-S``; `Replication.out`); every call goes through the
    run's call cache. `engines` ({"target", "teacher", "checker"}) replaces the models (tests).
    A value that does not validate raises pydantic's ValidationError naming the field.
    """
    replication, _ = replicate_run(
        run.root if isinstance(run, Run) else run,
        ReplicationOptions.with_overrides(options, overrides),
        progress=progress,
        engines=engines,
    )
    return replication

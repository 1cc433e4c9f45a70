"""`replicate(run)`: validate a run's accepted biases again on fresh perturbations (what
`bias-discovery replicate` runs; the work is `replication.replicate_run`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..llm.base import Engine
from ..progress import ProgressFactory
from ..replication import Replication, replicate_run
from .common import spec_list
from .runs import Run

__all__ = ["replicate"]


def replicate(
    run: str | Path | Run,
    *,
    seed: int | None = None,
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    biases: str | Sequence[str] | None = None,
    temperature: float | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    allow_overlap: bool = False,
    skip_bad_rows: bool = False,
    timeout_s: float | None = None,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
) -> Replication:
    """Re-validate the accepted biases of `run` (or `biases`: ids or names, seeds too) with
    the run's own rule, control and models on fresh rewrites: a new `seed` (default the run's
    + 1), or other `data`. Writes replication.json into `out` (default
    ``RUN_DIR/replications/seed-S``; `Replication.out`); every call goes through the run's call
    cache. `timeout_s`: each request's deadline (None: the run's). `engines` ({"target",
    "teacher", "checker"}) replaces the models (tests).
    """
    replication, _ = replicate_run(
        run.root if isinstance(run, Run) else run,
        seed=seed,
        data=str(data) if data is not None else None,
        data_dir=data_dir,
        limit=limit,
        biases=spec_list(biases) if biases is not None else None,
        temperature=temperature,
        out=out,
        overwrite=overwrite,
        allow_overlap=allow_overlap,
        skip_bad_rows=skip_bad_rows,
        progress=progress,
        engines=engines,
        timeout_s=timeout_s,
    )
    return replication

"""`replicate(run)`: validate a run's accepted biases again on fresh perturbations (what
`bias-discovery replicate` runs; the work is `replication.replicate_run`), and
`validate_family(biases, pairs, config)`: validate biases made anywhere (another tool's kept
biases, a hand-written list) with a config's rule on pairs of your choice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.pairs import PreferencePair
from ..library import Bias
from ..llm.base import Engine
from ..llm.roles import ModelRoles
from ..progress import ProgressFactory
from ..replication import Replication, ReplicationOptions, replicate_run, validate_on_pairs
from ..stages.validate import ValidationModels, ValidationOutput
from ._common import cache_path_of
from ._runs import Run, RunConfigLike, run_config_of

__all__ = ["ReplicationOptions", "ValidationOutput", "replicate", "validate_family"]


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


def validate_family(
    biases: Sequence[Bias],
    pairs: Sequence[PreferencePair],
    config: RunConfigLike,
    *,
    scope: str = "the biases given",
    data: str = "test",
    cache: str | Path | bool = False,
    engines: Mapping[str, Engine] | None = None,
    progress: ProgressFactory | None = None,
) -> ValidationOutput:
    """Validate `biases` as one family on `pairs` with `config`'s models and rule (by default:
    the placebo control, the answer check, Holm's correction, sequential looks), exactly as the
    loop validates its own candidates: a selection made elsewhere, tested on items it was not
    selected on. Nothing is written. `scope` names the family in its error statement, `data`
    the pairs in each record; `cache`: True the shared call cache, False none, or a SQLite
    file. `engines` ({"target", "teacher", "checker"}) replaces the models (tests). Returns each
    bias with its `validation` (accepted or not), its records and the family's error statement.
    """
    settings = run_config_of(config)
    configs = {"target": settings.target, "teacher": settings.teacher, "checker": settings.answer_checker()}
    with ModelRoles(configs, cache_path=cache_path_of(cache), engines=engines) as roles:
        checker = roles["checker"] if settings.validate_.answer_check else None
        _, _, output = validate_on_pairs(
            ValidationModels(teacher=roles["teacher"], target=roles["target"], checker=checker),
            settings,
            biases,
            pairs,
            seed=settings.seed,
            perturb_settings=settings.perturb,
            scope=scope,
            test_data=data,
            pipeline=settings.pipeline,
            bar=progress,
        )
    return output

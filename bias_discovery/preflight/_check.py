"""The whole check: every role's endpoints, the planned calls and the estimate, in one report;
and `check --pilot N`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..library import seed_library_for_run
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..loop.pilot import PilotRecord
from ..progress import ProgressFactory
from ._calls import planned_calls
from ._endpoints import _Engines, check_endpoint
from ._estimate import estimate_run
from ._prompts import role_constraints, run_prompts
from ._report import Assumptions, EndpointReport, PreflightReport

if TYPE_CHECKING:
    from ..llm.smoke import SmokeResult


def _smoke_once() -> Callable[[ModelConfig], SmokeResult]:
    """`llm.smoke.check_engine`, once per engine and model (a target that is also the teacher
    is checked once)."""
    from ..llm.smoke import check_engine

    done: dict[str, SmokeResult] = {}

    def smoke(config: ModelConfig) -> SmokeResult:
        if config.spec not in done:
            done[config.spec] = check_engine(config.provider, config.model)
        return done[config.spec]

    return smoke


def _single_url_configs(config: ModelConfig) -> list[ModelConfig]:
    """One config per replica (each server is checked on its own)."""
    urls = config.base_urls
    if len(urls) <= 1:
        return [config]
    return [config.model_copy(update={"base_url": url}) for url in urls]


def run_preflight(
    config: RunConfig,
    *,
    make_engine: Callable[[ModelConfig], Engine] | None = None,
    smoke: Callable[[ModelConfig], SmokeResult] | None = None,
    pilot: Callable[[RunConfig], PilotRecord] | None = None,
) -> PreflightReport:
    """Check every server of the run's roles and plan its calls (see the module docstring).
    `pilot` (`check --pilot N`: `loop.pilot.run_pilot`) runs once every server passed, after
    the check's engines are closed; what it measures replaces the estimate's assumptions.
    `make_engine` builds engines without a call cache (tests may pass their own). `smoke`
    checks an embedded engine (hf, llamacpp) in a child process first; by default `llm.smoke.check_engine`
    when the engines are the real ones, none with a `make_engine` of the caller's."""
    from ..data.loaders import bad_rows_for, load_pairs
    from ..llm.registry import make_engine as registry_make_engine

    def default_build(c: ModelConfig) -> Engine:
        # few retries: a check should say "unreachable" in seconds, not after minutes
        return registry_make_engine(c.model_copy(update={"max_retries": min(c.max_retries, 2)}))

    d = config.data
    target_bad, test_bad = bad_rows_for(d.target, d.skip_bad_rows), bad_rows_for(d.test, d.skip_bad_rows)
    target_pairs = load_pairs(
        d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed, bad_rows=target_bad
    )
    test_pairs = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed, bad_rows=test_bad)
    library = seed_library_for_run(config.seed_library)
    prompts = run_prompts(config, target_pairs, test_pairs, library)
    engines = _Engines(make_engine or default_build)
    if smoke is None and make_engine is None:
        smoke = _smoke_once()
    endpoints: list[EndpointReport] = []
    try:
        for role, model in (("target", config.target), ("teacher", config.teacher)):
            for single in _single_url_configs(model):
                endpoints.append(
                    check_endpoint(role, single, engines, role_constraints(config, role), prompts[role], smoke)
                )
    finally:
        engines.close()
    record = pilot(config) if pilot is not None and not any(e.failed for e in endpoints) else None
    return PreflightReport(
        endpoints=endpoints,
        calls=planned_calls(config, len(target_pairs), len(test_pairs), len(library.biases)),
        estimates=estimate_run(config, target_pairs, test_pairs, library, pilot=record),
        assumptions=Assumptions.from_pilot(record, len(target_pairs)) if record else Assumptions(),
        pilot=record,
        max_iterations=config.max_iterations,
        n_target=len(target_pairs),
        n_test=len(test_pairs),
        skipped_rows=len(target_bad or []) + len(test_bad or []),
    )


def pilot_into(
    run_dir: Path | None,
    n_pairs: int,
    *,
    announce: Callable[[Path], None] | None = None,
    progress: ProgressFactory | None = None,
) -> Callable[[RunConfig], PilotRecord]:
    """`check --pilot N`: `run_preflight`'s `pilot`, `loop.pilot.run_pilot` on the first
    `n_pairs` target pairs into `run_dir` (default ``runs/NAME``, where `run` puts the run);
    `announce` is told the directory as the pilot starts; `progress` draws its bars."""
    from ..loop.pilot import run_pilot

    def pilot(config: RunConfig) -> PilotRecord:
        root = run_dir or Path("runs") / config.name
        if announce is not None:
            announce(root)
        return run_pilot(config, root, n_pairs, progress=progress)

    return pilot

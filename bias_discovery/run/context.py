"""A finished (or stopped) run directory, read by what is made from it (an export, a
replication, an audit's overlap check): its config, its newest library, and its models, every
one through the run's call cache (``RUN_DIR/calls.sqlite``), so a repeated export never pays
twice."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..config import RunConfig, load_run_config
from ..library import BiasLibrary
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..llm.roles import ModelRoles
from .rundir import RunDir


class RunContext:
    """A finished (or stopped) run directory, read for an export: its config, its newest
    library, and its models (`roles`), every one through the run's call cache."""

    def __init__(
        self, run_dir: Path | str, *, engines: Mapping[str, Engine] | None = None, timeout_s: float | None = None
    ) -> None:
        """`engines` replaces roles by ready engines (tests use scripted fakes); `timeout_s`
        (`--timeout`) replaces every model's request deadline (None: the run's)."""
        self.run = RunDir(run_dir)
        self.run.require_run()
        self.timeout_s = timeout_s
        self.config: RunConfig = load_run_config(self.run.config_path).with_timeout(timeout_s)
        self.library: BiasLibrary = self.run.library.load_latest()
        self._engines = dict(engines or {})
        self._roles: ModelRoles | None = None

    @property
    def root(self) -> Path:
        return self.run.root

    @property
    def library_file(self) -> str:
        """The library the export read, relative to the run directory."""
        store = self.run.library
        iterations = store.iterations()
        path = store.path_for(iterations[-1]) if iterations else store.latest_path
        return str(path.relative_to(self.run.root))

    def roles(self, configs: Mapping[str, ModelConfig]) -> ModelRoles:
        """The export's models by role (teacher, checker, filter ...): roles with the same
        config share one engine (the teacher doubling as equivalence checker is loaded once)."""
        if self._roles is not None:
            raise RuntimeError("RunContext.roles is called once per export")
        configs = {role: config.with_timeout(self.timeout_s) for role, config in configs.items()}
        self._roles = ModelRoles(configs, cache_path=self.run.cache_path, engines=self._engines)
        return self._roles

    def close(self) -> None:
        if self._roles is not None:
            self._roles.close()

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The models a job uses, by role (target, teacher, checker, filter), as one object.

`ModelRoles` builds each role's engine from its `ModelConfig` on first use, through the call
cache; roles with the same config share one engine (a target that is also the teacher is
loaded once: one `vllm.LLM` per process, one copy of the weights), and every role gets its own
meter, so a run can say what each role cost per stage. Tests and library callers hand in ready
engines by role instead of configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from .base import Engine
from .budget import Budget
from .config import ModelConfig
from .meter import MeteredEngine, StageUsage


class ModelRoles:
    """Engines by role, built lazily, shared between roles with equal configs, metered per role."""

    def __init__(
        self,
        configs: Mapping[str, ModelConfig],
        *,
        cache_path: Path | str | None = None,
        engines: Mapping[str, Engine] | None = None,
        budget: Budget | None = None,
    ) -> None:
        """`configs`: the model of each role. `cache_path`: the SQLite call cache every built
        engine goes through (None: no cache). `engines`: ready engines for some roles (tests use
        scripted fakes; roles the job does not use are ignored); a role whose config equals such a
        role's config shares its engine. `budget`: kept by every role's meter (`llm.budget`)."""
        self.configs = dict(configs)
        self.budget = budget
        self.cache_path = cache_path
        self._by_config: dict[str, Engine] = {}
        self._owned: list[Engine] = []
        self._meters: dict[str, MeteredEngine] = {}
        self._stage = "unknown"
        for role, engine in (engines or {}).items():
            if role not in self.configs:
                continue  # a role this job does not use
            self._by_config.setdefault(self._key(role), engine)
            self._meters[role] = self._meter(engine, role)

    def _meter(self, engine: Engine, role: str) -> MeteredEngine:
        meter = MeteredEngine(engine, role, self.budget)
        meter.stage = self._stage
        return meter

    def _key(self, role: str) -> str:
        """Roles with equal configs share an engine (a price is not the engine's)."""
        return self.configs[role].model_dump_json(exclude={"price"})

    def __contains__(self, role: object) -> bool:
        return role in self.configs

    def __getitem__(self, role: str) -> MeteredEngine:
        """The metered engine of `role`, built on first use."""
        meter = self._meters.get(role)
        if meter is None:
            if role not in self.configs:
                raise ConfigError(f"no model config for role {role!r} (roles: {', '.join(self.configs)})")
            key = self._key(role)
            engine = self._by_config.get(key)
            if engine is None:
                from .registry import make_engine

                engine = make_engine(self.configs[role], cache_path=self.cache_path)
                self._by_config[key] = engine
                self._owned.append(engine)
            meter = self._meters[role] = self._meter(engine, role)
        return meter

    def built(self) -> list[MeteredEngine]:
        """The meters of the roles used so far."""
        return list(self._meters.values())

    def set_stage(self, stage: str) -> None:
        """Book the calls of every role to `stage` from now on."""
        self._stage = stage
        for meter in self._meters.values():
            meter.stage = stage

    def take_usage(self, stage: str) -> dict[str, StageUsage]:
        """Per role, what `stage` cost since the last call (roles that made no request are left
        out); its counters are reset (other stages' go on: streamed stages overlap)."""
        usage = {}
        for role, meter in self._meters.items():
            booked = meter.take_usage(stage).get(stage)
            if booked is not None and booked.requests:
                usage[role] = booked
        return usage

    def close(self) -> None:
        """Close every engine this object built (injected engines belong to the caller)."""
        for engine in self._owned:
            engine.close()
        self._owned.clear()
        self._by_config.clear()
        self._meters.clear()

    def __enter__(self) -> ModelRoles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

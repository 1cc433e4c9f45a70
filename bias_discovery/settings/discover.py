"""The options of one discovery invocation (`DiscoverOptions`): where the run goes, whether it
continues one, and the knobs that are not the run's settings. `bias-discovery run` and
`resume` make their flags from these fields (`cli._options.option`), and `api.discover` takes
them and keyword overrides of their fields. The run's own settings are its config
(`RunConfig`); these only say how this invocation treats it."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ..options import CallOptions

__all__ = ["DiscoverOptions"]


class DiscoverOptions(CallOptions):
    """How `api.discover` runs a config (`run` / `resume`'s options). `timeout_s` (inherited)
    sets every model's request deadline: a fresh run records it, a resume uses it for this
    session only."""

    run_dir: Path | None = None
    """Run directory (default: runs/<name>)."""
    resume: bool = False
    """Continue the run in `run_dir` from its last checkpoint, paying no call twice (a
    `run_dir` without a run yet is started)."""
    overrides: list[str] = Field(default_factory=list)
    """Settings as key.sub=value, over the config's; on a resume only `budget.*` settings
    change (a larger budget continues a run stopped at its own), written to the run's
    config.yaml."""
    allow_overlap: bool = False
    """Go on when test pairs are also target pairs (same id or content); recorded
    (data.allow_overlap). Not `OverlapOptions.allow_overlap`: here the run's own test and
    target data overlap."""

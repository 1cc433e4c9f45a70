"""A run is a directory of plain files; this module knows its layout and its event log.

    RUN_DIR/config.yaml            resolved config
    RUN_DIR/run.json               status: iteration, stage, stop reason (what `status` reads)
    RUN_DIR/library/iter_NNN.json  one library per iteration, plus latest.json
    RUN_DIR/baseline/              the target's judgments on the unperturbed test set
    RUN_DIR/iter_NNN/              perturbed, judgments, misjudged, explanations, identified,
                                   candidates, merges, validation (+ its perturbed/judgments)
    RUN_DIR/calls.sqlite           call cache;  RUN_DIR/checkpoints.sqlite  LangGraph state
    RUN_DIR/events.jsonl           progress events, appended line by line
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from .errors import ConfigError
from .io import atomic_write_json

RunStatus = Literal["running", "finished", "failed"]


class RunState(BaseModel):
    """run.json: where the run stands, for people and for `status`."""

    name: str
    status: RunStatus
    iteration: int = 0
    stage: str = "start"
    stop_reason: str | None = None
    library_size: int = 0
    accepted_total: int = 0
    started_at: float
    updated_at: float
    error: str | None = None


class RunDir:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    config_path = property(lambda self: self.root / "config.yaml")
    state_path = property(lambda self: self.root / "run.json")
    events_path = property(lambda self: self.root / "events.jsonl")
    cache_path = property(lambda self: self.root / "calls.sqlite")
    checkpoint_path = property(lambda self: self.root / "checkpoints.sqlite")
    baseline_dir = property(lambda self: self.root / "baseline")

    def iteration_dir(self, iteration: int) -> Path:
        return self.root / f"iter_{iteration:03d}"

    def is_run(self) -> bool:
        return self.config_path.is_file() and self.checkpoint_path.is_file()

    def require_run(self) -> None:
        if not self.root.is_dir():
            raise ConfigError(f"{self.root}: no such directory")
        if not self.is_run():
            raise ConfigError(
                f"{self.root}: not a run directory (no config.yaml and checkpoints.sqlite); "
                "start one with `bias-discovery run CONFIG.yaml --run-dir DIR`"
            )

    def read_state(self) -> RunState | None:
        if not self.state_path.is_file():
            return None
        return RunState.model_validate_json(self.state_path.read_text(encoding="utf-8"))

    def write_state(self, state: RunState) -> None:
        state.updated_at = time.time()
        atomic_write_json(self.state_path, state)

    def event(self, kind: str, **fields: Any) -> None:
        """Append one event line; small enough to be written in one go."""
        record = {"time": round(time.time(), 3), "event": kind, **fields}
        with self.events_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def read_events(self) -> list[dict[str, Any]]:
        if not self.events_path.is_file():
            return []
        events = []
        for line in self.events_path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill; the rest of the log is still good
        return events


def summarize_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Calls and tokens per stage and role, and the stage in progress, from events.jsonl."""
    usage: dict[tuple[str, str], dict[str, int]] = {}
    current: dict[str, Any] | None = None
    for e in events:
        if e.get("event") == "stage_start":
            current = {"iteration": e.get("iteration"), "stage": e.get("stage"), "done": 0, "total": e.get("total", 0)}
        elif e.get("event") == "progress" and current is not None:
            current["done"] = e.get("done", 0)
        elif e.get("event") == "stage_end":
            current = None
            for role, u in (e.get("usage") or {}).items():
                row = usage.setdefault((str(e.get("stage")), role), {"requests": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0})
                for key in row:
                    row[key] += int(u.get(key, 0))
    rows: list[dict[str, Any]] = [{"stage": s, "role": r, **u} for (s, r), u in usage.items()]
    totals = {k: sum(r[k] for r in rows) for k in ("requests", "cached", "prompt_tokens", "completion_tokens")}
    return {"usage": rows, "totals": totals, "current": current}

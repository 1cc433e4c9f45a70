"""What every benchmark record says about where and when it was measured, taken when the run
starts: the command, the start time, the commit of the code it started at (marked when the tree
had uncommitted changes: a record of a dirty tree is not a record of that commit), the CPU's
model name and flags, and, when the record is written, the run's duration.

    from provenance import Provenance

    def main() -> None:
        started = Provenance.start()          # first thing: before any work, before any commit
        ...                                   # the run
        started.write_json(path, payload)     # payload + {"provenance": {...}}

A results file in benchmarks/results/ is only ever written by its script, through `write_json`
(tests/test_benchmark_records.py checks that every one carries `PROVENANCE_KEYS`). Imported by
the benchmark scripts, which `python benchmarks/NAME.py` runs with this directory first on
sys.path."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PROVENANCE_KEYS = ("command", "started_at", "commit", "dirty", "cpu_model", "cpu_flags", "cores", "duration_s")
"""What a record's `provenance` block holds at least."""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (e.g. "AMD EPYC"); elsewhere what platform knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> list[str]:
    """The CPU's feature flags from /proc/cpuinfo (avx2, avx512f, amx_tile ...: what a compiled
    engine may use); [] where /proc/cpuinfo has none."""
    return sorted(set(_cpuinfo("flags").split()))


def _cpuinfo(key: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def git_commit(directory: Path = REPO) -> str:
    """HEAD of the checkout at `directory`, with " (with uncommitted changes)" when its tracked
    files differ from it; "unknown (not a git checkout)" when git cannot say."""
    head, dirty = _git_state(directory)
    return head + (" (with uncommitted changes)" if dirty else "")


def _git_state(directory: Path) -> tuple[str, bool]:
    try:
        head = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)", False
    return head.stdout.strip(), bool(dirty.stdout.strip())


@dataclass(frozen=True)
class Provenance:
    """Where and when a benchmark run started (`start`), written with its result (`stamp`)."""

    command: str
    cwd: str
    """Where `command` was typed, relative to the repository's root ("." for the root, "benchmarks"
    for a script started in its folder): the command's relative paths are that folder's."""
    started_at: str
    commit: str
    dirty: bool
    cpu_model: str
    cpu_flags: list[str]
    cores: int | None
    platform: str
    python: str
    load_at_start: list[float]
    _t0: float = field(repr=False)

    @classmethod
    def start(cls, argv: list[str] | None = None, *, print_at_exit: bool = False) -> Provenance:
        """Capture the run's provenance now: call it first in main(), before any work.
        `print_at_exit`: a benchmark that prints its figures and writes no file prints its
        provenance block as its last line (one JSON line, "provenance: {...}")."""
        head, dirty = _git_state(REPO)
        started = cls(
            command=" ".join(["python", *(sys.argv if argv is None else argv)]),
            cwd=os.path.relpath(os.getcwd(), REPO),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            commit=head + (" (with uncommitted changes)" if dirty else ""),
            dirty=dirty,
            cpu_model=cpu_model(),
            cpu_flags=cpu_flags(),
            cores=os.cpu_count(),
            platform=platform.platform(),
            python=platform.python_version(),
            load_at_start=[round(x, 2) for x in os.getloadavg()],
            _t0=time.monotonic(),
        )
        if print_at_exit:
            import atexit

            atexit.register(lambda: print("provenance: " + json.dumps(started.stamp()), flush=True))
        return started

    def stamp(self) -> dict[str, Any]:
        """The record's `provenance` block: the start's facts, the duration so far, the load now."""
        block = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        block["duration_s"] = round(time.monotonic() - self._t0, 1)
        block["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return block

    def write_json(self, path: Path, payload: dict[str, Any], *, indent: int = 2) -> None:
        """Write `payload` with its `provenance` block (the only way a results file is written)."""
        path.write_text(
            json.dumps({**payload, "provenance": self.stamp()}, indent=indent, default=str) + "\n", encoding="utf-8"
        )

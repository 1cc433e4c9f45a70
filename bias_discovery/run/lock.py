"""Who runs a run: ``RUN_DIR/lock.json`` names the process driving the loop, with a heartbeat.

`run` and `resume` hold the lock while the loop runs (`RunLock.hold`): it is written when they
start, its heartbeat is refreshed every `HEARTBEAT_S` seconds by a thread, and it is removed
when they end. A process killed with SIGKILL (or a machine that died) leaves it behind, and
`RunLock.liveness` tells a live holder from a stale file:

- on this host the holder lives when its pid is alive, is still the same process (its start
  time matches: a reused pid is not taken for it) and its heartbeat is fresh;
- on another host only the heartbeat can tell: fresh means alive (pids mean nothing there).

A process of this host that is alive but has not refreshed its heartbeat for `STALE_AFTER_S`
seconds is *not responding* (stopped with SIGSTOP, or stuck): it still holds the run, so a
second `resume` refuses, and `status` says so instead of `running` or `stopped`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from ..errors import BiasDiscoveryError
from ..formatting import duration
from ..io import atomic_write_json

HEARTBEAT_S = 10.0
"""How often a holder refreshes its heartbeat."""

STALE_AFTER_S = 60.0
"""A heartbeat older than this is stale: six missed beats, so a slow machine is not taken for
a dead one."""


class RunBusyError(BiasDiscoveryError):
    """The run is held by a live process (a second `run` or `resume` on it would corrupt it)."""


class LockHolder(BaseModel):
    """lock.json: the process that drives the run."""

    pid: int
    """The process id of the holder, on `host`."""
    host: str
    """The machine it runs on."""
    process_start: str | None = None
    """The process's start time (Linux: /proc/PID/stat, clock ticks since boot); tells the
    holder from a later process that got the same pid. None where /proc is absent."""
    command: str
    """`run` or `resume`."""
    started_at: float
    """When it took the lock (seconds since the epoch)."""
    heartbeat_at: float
    """Its last heartbeat (seconds since the epoch), refreshed every `HEARTBEAT_S` seconds."""

    def same_host(self) -> bool:
        return self.host == socket.gethostname()

    def describe(self) -> str:
        where = "this host" if self.same_host() else f"host {self.host}"
        return f"pid {self.pid} on {where} (`{self.command}`, started {duration(time.time() - self.started_at)} ago)"


LivenessState = Literal["running", "not_responding", "stopped"]


@dataclass(frozen=True)
class Liveness:
    """Whether a process drives the run right now, and the evidence."""

    state: LivenessState
    holder: LockHolder | None
    """The process lock.json names (None: no lock file, or an unreadable one)."""
    heartbeat_age: float | None
    """Seconds since the holder's last heartbeat."""
    reason: str
    """Why `state`: one clause for people ("pid 41 on this host is not running")."""


def effective_status(recorded: str | None, live: Liveness) -> str:
    """What a run is doing now: `running` or `not_responding` (a process holds it), `finished`,
    or `stopped` (killed, crashed, interrupted or failed: `resume` continues it). run.json's
    `recorded` status alone cannot tell a running loop from one killed with SIGKILL."""
    if live.state in ("running", "not_responding"):
        return live.state
    return "finished" if recorded == "finished" else "stopped"


def _proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat from the third on (state, ppid, ...); [] where unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": a comm may hold spaces


def _process_start(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None where it cannot be read."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    except OverflowError:
        return False
    return _proc_stat(pid)[:1] not in (["Z"], ["X"])  # a zombie is dead, only not yet reaped


class RunLock:
    """``RUN_DIR/lock.json`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lost = False
        """Set when another process took the lock from this one (it found our heartbeat stale)."""
        self._mine: LockHolder | None = None

    def read(self) -> LockHolder | None:
        """The holder the file names; None when there is no file or it does not parse (a
        lock is written atomically, so an unreadable one is damage, not a write in progress)."""
        try:
            return LockHolder.model_validate_json(self.path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None

    def liveness(self, now: float | None = None) -> Liveness:
        holder = self.read()
        if holder is None:
            return Liveness("stopped", None, None, "no process holds the run")
        now = time.time() if now is None else now
        age = max(0.0, now - holder.heartbeat_at)
        fresh = age < STALE_AFTER_S
        if holder.same_host():
            if not _pid_alive(holder.pid):
                return Liveness("stopped", holder, age, f"pid {holder.pid} on this host is not running")
            start = _process_start(holder.pid)
            if holder.process_start is not None and start is not None and start != holder.process_start:
                return Liveness("stopped", holder, age, f"pid {holder.pid} on this host is another process now")
            if not fresh:
                return Liveness(
                    "not_responding",
                    holder,
                    age,
                    f"pid {holder.pid} on this host is alive but its heartbeat is {duration(age)} old",
                )
            return Liveness("running", holder, age, f"{holder.describe()}, heartbeat {duration(age)} ago")
        if fresh:
            return Liveness("running", holder, age, f"{holder.describe()}, heartbeat {duration(age)} ago")
        return Liveness(
            "stopped",
            holder,
            age,
            f"the heartbeat of pid {holder.pid} on host {holder.host} stopped {duration(age)} ago",
        )

    def refuse_if_held(self, run_root: Path) -> None:
        """RunBusyError naming the holder when a live (or not responding) process holds the run."""
        live = self.liveness()
        if live.state == "running" and live.holder is not None:
            raise RunBusyError(
                f"{run_root} is being run by {live.holder.describe()}, heartbeat {duration(live.heartbeat_age)} ago; "
                f"wait for it to end or stop it, or follow it with `bias-discovery status {run_root}`"
            )
        if live.state == "not_responding" and live.holder is not None:
            raise RunBusyError(
                f"{run_root} is held by {live.holder.describe()}, which has not responded for "
                f"{duration(live.heartbeat_age)}; if it is stuck, stop it (kill {live.holder.pid}), then "
                f"`bias-discovery resume {run_root}`"
            )

    @contextmanager
    def hold(self, run_root: Path, command: str) -> Iterator[RunLock]:
        """Hold the run for this process while the block runs (refusing a live holder), with a
        heartbeat thread; the lock is removed on the way out, whatever happened."""
        guard = os.open(run_root, os.O_RDONLY)  # serialises check-and-write between processes
        try:
            try:
                import fcntl

                fcntl.flock(guard, fcntl.LOCK_EX)
            except (ImportError, OSError):
                pass  # no flock here: the check below still refuses a live holder
            self.refuse_if_held(run_root)
            now = time.time()
            self._mine = LockHolder(
                pid=os.getpid(),
                host=socket.gethostname(),
                process_start=_process_start(os.getpid()),
                command=command,
                started_at=now,
                heartbeat_at=now,
            )
            atomic_write_json(self.path, self._mine)
        finally:
            os.close(guard)
        self.lost = False
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(stop,), name="run-heartbeat", daemon=True)
        beat.start()
        try:
            yield self
        finally:
            stop.set()
            beat.join()
            if self._is_mine(self.read()):
                try:
                    self.path.unlink()
                except OSError:
                    pass
            self._mine = None

    def _is_mine(self, holder: LockHolder | None) -> bool:
        mine = self._mine
        return (
            holder is not None
            and mine is not None
            and (holder.pid, holder.host, holder.started_at) == (mine.pid, mine.host, mine.started_at)
        )

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_S):
            current = self.read()
            if current is not None and not self._is_mine(current):
                self.lost = True  # another process took the run over: stop beating for it
                return
            if self._mine is None:
                return
            self._mine = self._mine.model_copy(update={"heartbeat_at": time.time()})
            try:
                atomic_write_json(self.path, self._mine)
            except OSError:
                pass  # a full disk or a moved directory: the next beat tries again

"""Liveness of a run: lock.json names the process driving the loop, with a heartbeat.

`status` says `running` only while that process lives; a second `run` or `resume` refuses a
live holder and names it. The real SIGKILL case is in test_loop_real.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_loop import make_config, run_fake

from bias_discovery.loop.graph import execute
from bias_discovery.run import RunBusyError, RunDir
from bias_discovery.run.lock import STALE_AFTER_S, LockHolder, _process_start

from fakes import BagOfWordsEmbedder, ScriptedEngine, authority_world
from helpers import cli


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def write_lock(
    rd: RunDir, *, pid: int, host: str | None = None, age: float = 0.0, process_start: str | None = None
) -> None:
    now = time.time()
    holder = LockHolder(
        pid=pid,
        host=host or socket.gethostname(),
        process_start=process_start,
        command="run",
        started_at=now - age - 5,
        heartbeat_at=now - age,
    )
    rd.lock_path.write_text(holder.model_dump_json())


def status(rd: RunDir) -> tuple[str, dict]:
    text = " ".join(cli("status", str(rd.root)).stdout.split())
    data = json.loads(cli("status", str(rd.root), "--json").stdout)
    return text, data


def test_a_live_loop_holds_the_run_and_a_second_run_or_resume_refuses(tmp_path: Path):
    """While the loop runs: status says running with our pid; `resume` and `run` on the same
    directory refuse, naming the holder, and leave run.json alone. After it: no lock."""
    config = make_config(tmp_path, max_iterations=1)
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.config_path.write_text(config.to_yaml())
    seen: dict[str, object] = {}

    def respond(request):
        if not seen:
            seen["liveness"] = rd.liveness()
            before = rd.state_path.read_text()
            seen["resume"] = cli("resume", str(rd.root), check=False)
            seen["run"] = cli("run", str(rd.config_path), "--run-dir", str(rd.root), check=False)
            seen["status"] = cli("status", str(rd.root), check=False)
            seen["state_untouched"] = rd.state_path.read_text() == before
        return authority_world(request)

    execute(rd, config, resume=False, engines={"target": ScriptedEngine(respond)}, embedder=BagOfWordsEmbedder())
    live = seen["liveness"]
    assert live.state == "running" and live.holder.pid == os.getpid() and live.holder.host == socket.gethostname()
    for command in ("resume", "run"):
        result = seen[command]
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        message = " ".join(result.stderr.split())
        assert f"{rd.root} is being run by pid {os.getpid()} on this host" in message, message
    assert seen["state_untouched"]
    assert f"running (pid {os.getpid()} on this host" in " ".join(seen["status"].stdout.split())
    assert not rd.lock_path.exists()  # released at the end
    text, data = status(rd)
    assert "finished" in text and data["status"] == "finished" and data["liveness"]["state"] == "stopped"


def test_a_run_whose_process_died_is_stopped_and_resumes(tmp_path: Path):
    config = make_config(tmp_path, max_iterations=1)
    rd, _, _ = run_fake(tmp_path, config)
    state = rd.read_state().model_copy(update={"status": "running", "stage": "evaluate", "iteration": 1})
    rd.write_state(state)
    write_lock(rd, pid=dead_pid())

    text, data = status(rd)
    assert (
        "stopped at stage evaluate of iteration 1 (" in text
        and " ago), resume with: bias-discovery resume " + str(rd.root) in text
    )
    assert "running" not in text.split(";")[0]
    assert data["status"] == "stopped" and "is not running" in data["liveness"]["reason"]
    # the stale lock does not block a resume, which takes it over and releases it
    execute(rd, config, resume=True, engines={"target": ScriptedEngine(authority_world)}, embedder=BagOfWordsEmbedder())
    assert not rd.lock_path.exists()


@pytest.mark.parametrize(
    ("holder", "expected"),
    [
        ({"host": "other-node", "age": 5.0}, "running"),
        ({"host": "other-node", "age": STALE_AFTER_S + 30}, "stopped"),
        ({"age": STALE_AFTER_S + 30}, "not_responding"),  # this process, silent too long
        ({"process_start": "1"}, "stopped"),  # our pid, but another process's start time: a reused pid
        ({"pid": -1}, "stopped"),
    ],
    ids=["other-host-fresh", "other-host-stale", "same-host-silent", "reused-pid", "bad-pid"],
)
def test_liveness_from_pid_host_and_heartbeat(tmp_path: Path, holder: dict, expected: str):
    rd = RunDir(tmp_path)
    write_lock(rd, pid=holder.pop("pid", os.getpid()), **holder)
    live = rd.liveness()
    assert live.state == expected, live.reason
    if expected != "stopped":
        with pytest.raises(RunBusyError, match=str(live.holder.pid)):
            rd.lock.refuse_if_held(rd.root)
    else:
        rd.lock.refuse_if_held(rd.root)


def test_a_garbled_lock_counts_as_no_holder(tmp_path: Path):
    rd = RunDir(tmp_path)
    rd.lock_path.write_bytes(b"\x00{not json")
    assert rd.liveness().state == "stopped" and rd.liveness().holder is None


def test_own_process_start_is_readable():
    """The pid-reuse guard needs /proc on Linux (elsewhere it is skipped, and says None)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc")
    assert _process_start(os.getpid()) is not None

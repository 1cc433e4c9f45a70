"""A fork server for `bias-discovery` commands, for the tests that start hundreds of short ones
(tests/kill_anywhere.py: kills at random moments, at budgets, at the server's k-th answer).

A fresh `python -m bias_discovery.cli run` spends ~3.5 s of CPU importing (langgraph and
langsmith, scipy.stats, pydantic models) before a small stub run's ~0.5 s of work: most of each
trial. So one interpreter (`python tests/cli_forks.py`) imports what a discovery run loads,
once, and forks a child per command. Each child is a real process of its own, with its own
pid, signals and exit status (a SIGKILL is the kernel's, as for any process), that runs
`bias_discovery.cli.main` from the state a fresh interpreter reaches after the same imports,
its stdout and stderr in files. What it does not cover is a kill *during* the imports: a test
about the start-up itself starts a fresh interpreter (`kill_anywhere.run_trial` does for its
first-second kills).

The protocol, one line each way: the test writes `{"argv": [...], "out": PATH, "err": PATH}`,
the server answers `PID <pid>` at once and `EXIT <pid> <code>` when the child ends (the code as
`subprocess` gives it: negative for a signal). The server leaves when its stdin closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PRELOAD = (
    "bias_discovery.cli",
    "bias_discovery.api",
    "bias_discovery.loop.graph",
    "langgraph.graph",
    "langgraph.checkpoint.sqlite",
    "scipy.stats",
    "scipy.optimize",
)
"""What a discovery run imports that costs (`python -X importtime`); the rest it imports itself."""


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # not sys.stdout: no buffer or lock a child could inherit


def _child(request: dict[str, Any]) -> None:
    """In the forked child: stdio to the request's files, then the CLI's own entry point."""
    status = 1
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
        os.dup2(os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        sys.argv = ["bias-discovery", *request["argv"]]
        from bias_discovery.cli import main

        main()  # leaves with os._exit
        status = 0
    except SystemExit as exc:  # a bug's ordinary exit: as the interpreter would end it
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001  printed as a fresh interpreter would print it
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _preload() -> None:
    import importlib

    sys.path[0] = str(REPO)  # as `python -m bias_discovery.cli` run in the repository sees it
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a thread would not survive a fork, and could hold a lock
        raise RuntimeError(f"an import started a thread: {threading.enumerate()}")


def _reap(children: set[int]) -> None:
    for pid in list(children):
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _say(f"EXIT {pid} {os.waitstatus_to_exitcode(wait_status)}")


def serve() -> None:
    _preload()
    _say("READY")
    children: set[int] = set()
    pending = b""
    while True:
        if select.select([0], [], [], 0.02 if children else None)[0]:
            chunk = os.read(0, 1 << 16)
            if not chunk:  # the test is gone: so are its commands
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(line))
                children.add(pid)
                _say(f"PID {pid}")
        _reap(children)


class ForkServer:
    """The test's end: starts the server (with `env`, in the repository) and forks commands."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = {**os.environ, **(env or {})}
        """The environment every forked command has (a fork cannot be given another)."""
        self._process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            cwd=REPO,
        )
        self._pending = b""
        self._exits: dict[int, int] = {}
        self._folder = tempfile.TemporaryDirectory(prefix="cli-forks-")
        self._count = 0
        if self._line(timeout=600) != "READY":
            raise RuntimeError("the fork server did not start")

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line (None when `timeout` passes first); EXIT lines are recorded."""
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if b"\n" in self._pending:
                raw, self._pending = self._pending.split(b"\n", 1)
                line = raw.decode()
                if line.startswith("EXIT "):
                    _, pid, code = line.split()
                    self._exits[int(pid)] = int(code)
                return line
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"the fork server ended (exit {self._process.wait()})")
            self._pending += chunk

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """`pid`'s exit code once it has ended (waiting at most `timeout`), else None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self._exits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._line(left) is None:  # nothing more said within `timeout` (0: what was said)
                return None
        return self._exits[pid]

    def spawn(self, args: list[str]) -> ForkedProcess:
        """`bias-discovery ARGS` in a forked child."""
        assert self._process.stdin is not None
        self._count += 1
        out = Path(self._folder.name) / f"{self._count}.out"
        err = Path(self._folder.name) / f"{self._count}.err"
        self._process.stdin.write((json.dumps({"argv": args, "out": str(out), "err": str(err)}) + "\n").encode())
        self._process.stdin.flush()
        line = self._line(timeout=60)
        while line is not None and line.startswith("EXIT "):
            line = self._line(timeout=60)
        if line is None or not line.startswith("PID "):
            raise RuntimeError(f"the fork server did not fork: {line}")
        return ForkedProcess(self, int(line.split()[1]), [*args], out, err)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._folder.cleanup()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ForkedProcess:
    """What the trials use of `subprocess.Popen` (text mode), for a forked command."""

    def __init__(self, server: ForkServer, pid: int, args: list[str], out: Path, err: Path) -> None:
        self.pid, self.args = pid, args
        self.returncode: int | None = None
        self._server, self._out, self._err = server, out, err

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not after it ended: its pid may be another process's by now
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._out.read_text(errors="replace"), self._err.read_text(errors="replace")


if __name__ == "__main__":
    serve()

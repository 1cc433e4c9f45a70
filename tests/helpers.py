"""Helpers shared by the tests (imported as `from helpers import ...`).

They live here rather than in conftest.py: tests/data/ has a conftest.py of its own, and a
plain `import conftest` can resolve to either file depending on what was collected first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path


def model_cache_dir() -> Path:
    """Where the Hugging Face-format SmolLM2 is built once per machine (not the per-session
    BIAS_DISCOVERY_CACHE_DIR of tests/conftest.py, which would rebuild it every session)."""
    root = os.environ.get("BIAS_DISCOVERY_TEST_MODEL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "bias-discovery"


def link_built_models(cache_dir: Path) -> Path:
    """Make `cache_dir` (a fresh $BIAS_DISCOVERY_CACHE_DIR) see the Hugging Face-format SmolLM2
    builds of `model_cache_dir()` through symlinks, and return it. The hf/ engine builds the
    model under $BIAS_DISCOVERY_CACHE_DIR when it is not there (30-50 s of CPU, 260 MB): a fresh
    call cache per session or per test would pay that every time. Only complete builds are
    linked (`smollm2_hf.is_complete`); where there is none yet, the engine builds its own."""
    from bias_discovery.smollm2_hf import is_complete

    cache_dir.mkdir(parents=True, exist_ok=True)
    built = model_cache_dir()
    for model_dir in sorted(built.glob("smollm2-*-hf-*")) if built.resolve() != cache_dir.resolve() else []:
        link = cache_dir / model_dir.name
        if is_complete(model_dir) and not link.exists():
            link.symlink_to(model_dir, target_is_directory=True)
    return cache_dir


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


REPO = Path(__file__).resolve().parents[1]
# JudgeBench and RewardBench files for the loader tests: ../shared/data next to the clone, or
# wherever $BIAS_DISCOVERY_TEST_DATA_DIR points (a clone elsewhere); tests skip when absent.
SHARED_DATA = Path(os.environ.get("BIAS_DISCOVERY_TEST_DATA_DIR") or REPO.parent / "shared" / "data")


def shared_data(*sets: str) -> Path:
    """SHARED_DATA with `sets` in it (default: judgebench/ and rewardbench/); else the test
    skips, or fails when $BIAS_DISCOVERY_TEST_DATA_DIR names it (as .ci/run does): where the
    data is promised, a test that skips for want of it would hide a failure."""
    wanted = sets or ("judgebench", "rewardbench")
    if all((SHARED_DATA / name).is_dir() for name in wanted):
        return SHARED_DATA
    import pytest

    message = f"shared data not found at {SHARED_DATA} ({' and '.join(name + '/' for name in wanted)})"
    if os.environ.get("BIAS_DISCOVERY_TEST_DATA_DIR"):
        pytest.fail(message + ": $BIAS_DISCOVERY_TEST_DATA_DIR names it")
    pytest.skip(message)


# A real discovery run, small enough for CI: SmolLM2 as target and teacher, one iteration.
# The merge threshold is high so SmolLM2's candidates reach validation (it calls most pairs "same").
SMALL_RUN_OVERRIDES = [
    "name=small-real",
    "max_iterations=1",
    "data.target_limit=8",
    "data.test_limit=6",
    "merge.similarity_threshold=0.99",
    "validate.max_candidates=2",
    "validate.n_boot=500",
    "validate.seeds=false",  # the quick start validates seeds; the shared test run need not
    # SmolLM2 as teacher names its biases by the reply schema's key (`bias_found`), which the
    # loop drops as junk by default (issue 37): the shared run, a test of the machinery after
    # identification, keeps them as the paper's procedure does, so it has a candidate to validate.
    "identify.drop_junk=false",
]


def unwritable_dir(tmp_path: Path) -> Path | None:
    """A directory this process cannot create files in: a folder with mode 0555, or, for root
    (who ignores modes), /sys (read-only here); None when neither refuses a write."""
    folder = tmp_path / "read-only"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys")):
        try:
            fd, name = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(fd)
        os.unlink(name)
    return None


def cli(*args: str, env: dict | None = None, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Run `bias-discovery ARGS` as a user would, in a subprocess of its own session. Past
    `timeout` its whole process group is killed: the engine processes a run starts (vLLM's
    EngineCore and workers) outlive a SIGKILL of the run alone and would load every later test."""
    full_env = {**os.environ, **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "bias_discovery.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise AssertionError(
            f"bias-discovery {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def cli_in_process(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """`bias-discovery ARGS` in this process (typer's runner): what `cli` returns, without a
    Python start-up and the package's imports per call (1-10 s each on a busy 2-core machine,
    against a tenth of a second here). For the fast tests of argument handling and of what a
    command prints; tests of exit codes as a shell sees them, signals, kills, resume and the
    user's own commands use `cli`, a real process. `env` is set for the call only; the working
    directory is the checkout, as for `cli`. A bug (an exception the CLI does not turn into a
    message) exits 1 with its traceback on stderr, as the console script's would."""
    import traceback

    from typer.testing import CliRunner

    from bias_discovery.cli import _common, app

    # A console takes COLUMNS when it is made, once per process: give it this call's width (a
    # process started with this env would have it; 80 when piped and COLUMNS is unset).
    columns = (env or {}).get("COLUMNS") or os.environ.get("COLUMNS") or "80"
    consoles = [(c, c._width) for c in (_common.console, _common.err_console)]
    before = Path.cwd()
    os.chdir(REPO)
    try:
        for console, _ in consoles:
            console._width = int(columns)
        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(before)
        for console, width in consoles:
            console._width = width
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    completed = subprocess.CompletedProcess(["bias-discovery", *args], result.exit_code, result.stdout, stderr)
    if check and completed.returncode != 0:
        raise AssertionError(
            f"bias-discovery {' '.join(args)} exited {completed.returncode}:\n{completed.stdout}\n{stderr}"
        )
    return completed


def sigkill_when(
    process: subprocess.Popen,
    ready: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    before_kill: Callable[[], None] | None = None,
) -> None:
    """SIGKILL `process` as soon as `ready()` holds (a progress trigger, not a time: on a
    loaded machine a call can take many seconds), after `before_kill()` (checks on the live
    process); fails if it ends first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert process.poll() is None, f"the process ended before {what}"
            if time.monotonic() >= deadline:  # a hang guard, not a claim about speed
                raise AssertionError(f"no {what} within {timeout:.0f} s")
            time.sleep(0.05)
        if before_kill is not None:
            before_kill()
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


@contextlib.contextmanager
def llama_cpp_server(
    gguf: Path, log_path: Path, *, alias: str = "smollm2", n_ctx: int = 2048
) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real `python -m llama_cpp.server` on 127.0.0.1: yields (base URL ".../v1", process)
    once it answers /v1/models; stopped (terminate, then kill) on exit."""
    from bias_discovery.llm.llamacpp import default_threads

    port = free_port()
    threads = default_threads()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        # the server's default prompt threads (all cores) crawl when another process is busy
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
    ]
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                log.flush()
                tail = log_path.read_text(errors="replace")[-2000:]
                raise AssertionError(f"llama_cpp.server exited with {process.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("llama_cpp.server did not answer /v1/models within 120 s")
            time.sleep(0.25)
        yield base_url, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        log.close()


VLLM_MAX_MODEL_LEN = 2048
"""The context the real-vLLM tier runs SmolLM2 with (its own is 8192): a small KV cache and
cheap too-long prompts, for the offline engine and the server alike."""

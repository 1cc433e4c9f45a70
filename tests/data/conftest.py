"""Fixtures for the data-loader tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.data.loaders import DATA_DIR_ENV

from helpers import SHARED_DATA


@pytest.fixture(autouse=True)
def _no_data_dir_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir set in the developer's shell must not leak into the tests."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


@pytest.fixture
def shared_data() -> Path:
    """The project's read-only copy of JudgeBench and RewardBench; skip where absent."""
    if not (SHARED_DATA / "judgebench").is_dir() or not (SHARED_DATA / "rewardbench").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA

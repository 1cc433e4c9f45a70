"""Fixtures for the data-loader tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.data.loaders import DATA_DIR_ENV

from helpers import shared_data as find_shared_data


@pytest.fixture(autouse=True)
def _no_data_dir_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir set in the developer's shell must not leak into the tests."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


@pytest.fixture
def shared_data() -> Path:
    """The project's read-only copy of JudgeBench and RewardBench (`helpers.shared_data`)."""
    return find_shared_data()

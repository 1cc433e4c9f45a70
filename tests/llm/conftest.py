"""Fixtures of the OpenAI-compatible engine's tests: `scripted` starts scripted servers (closed
after the test), `fast_backoff` shortens the retry backoff."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from bias_discovery.llm.openai import engine as openai_engine

from openai_scripted import Handler, ScriptedServer


@pytest.fixture
def scripted() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        server = ScriptedServer(handler)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_engine, "BACKOFF_BASE_S", 0.01)

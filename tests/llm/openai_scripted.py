"""A scripted OpenAI-shaped HTTP server (replies from a Python function) and the fixtures the
OpenAI-compatible engine's tests share."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.conformance import PROBE_CONSTRAINTS
from bias_discovery.llm.openai import OpenAIServerEngine


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Handler = Callable[[str, str, dict[str, Any], dict[str, str]], tuple[int, Any]]


class ScriptedServer:
    """An OpenAI-shaped HTTP server whose replies come from a Python function."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[tuple[str, str, dict[str, Any], dict[str, str]]] = []
        self.lock = threading.Lock()
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer.lock:
                    outer.calls.append((self.command, self.path, body, headers))
                status, reply = outer.handler(self.command, self.path, body, headers)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve
            do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]  # a client that gave up (deadline)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def posts(self) -> list[dict[str, Any]]:
        return [c[2] for c in self.calls if c[0] == "POST"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(text: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 2},
    }


def engine_for(server: ScriptedServer, **settings: Any) -> OpenAIServerEngine:
    return OpenAIServerEngine(ModelConfig(provider="openai", model="served", base_url=server.base_url, **settings))


def obey(body: dict[str, Any], free_text: str = "Hello! How can I help?") -> str:
    """What a server that enforces constraints answers (first choice, the probe's forms);
    `free_text` for an unconstrained request."""
    so = body.get("structured_outputs")
    if so is None:
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        if schema and "choice" in schema.get("properties", {}):
            return json.dumps({"choice": schema["properties"]["choice"]["enum"][0]})
        return '{"probe": 7}' if schema else free_text
    if "choice" in so:
        return str(so["choice"][0])
    if "regex" in so:
        return "probe-417" if so["regex"] == PROBE_CONSTRAINTS["regex"].regex else "Verdict: A"
    return '{"probe": 7}'

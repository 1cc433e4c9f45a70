"""The OpenAI-compatible engine (llm.openai.engine): retries, errors, ordering, the deadline,
constraints checked, against a scripted in-process HTTP server; plus a server that is down."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import pytest

from bias_discovery.errors import ConfigError, EngineError
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai import DEFAULT_CONCURRENCY, OpenAIServerEngine
from bias_discovery.llm.openai import engine as openai_engine
from bias_discovery.llm.openai import wire as openai_wire
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import Constraint, GenerationRequest

from openai_scripted import completion, engine_for, free_port, obey

pytestmark = pytest.mark.usefixtures("fast_backoff")


def test_base_url_is_required() -> None:
    with pytest.raises(ConfigError, match="needs a base URL"):
        make_engine("openai/some-model")


def test_results_in_order_with_concurrency_and_progress(scripted) -> None:  # type: ignore[no-untyped-def]
    active, peak = [0], [0]
    lock = threading.Lock()

    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if method == "GET":
            return 200, {"data": [{"id": "served", "owned_by": "someone"}]}
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(random.uniform(0.0, 0.05))
        with lock:
            active[0] -= 1
        return 200, completion("re:" + body["messages"][-1]["content"])

    server = scripted(handler)
    engine = engine_for(server, max_concurrency=4)
    ticks: list[int] = []
    requests = [GenerationRequest.chat(f"q{i}", max_tokens=5) for i in range(20)]
    out = engine.generate(requests, progress=ticks.append)
    assert [r.text for r in out] == [f"re:q{i}" for i in range(20)]
    assert all(r.prompt_tokens == 11 and r.completion_tokens == 2 for r in out)
    assert sum(ticks) == 20
    assert 1 < peak[0] <= 4
    assert all(b["model"] == "served" for b in server.posts())
    assert engine.engine_id == f"openai/served@{server.base_url}"
    engine.close()


def test_retries_5xx_and_429_then_succeeds(scripted) -> None:  # type: ignore[no-untyped-def]
    replies = iter([(503, {"error": {"message": "warming up"}}), (429, {"error": "slow down"})])

    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        return next(replies, (200, completion("fine")))

    server = scripted(handler)
    engine = engine_for(server, max_retries=3, structured_outputs="openai")
    out = engine.generate([GenerationRequest.chat("x")])
    assert out[0].text == "fine"
    assert len(server.posts()) == 3


def test_retries_exhausted_names_url_and_reason(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(lambda *a: (500, {"error": {"message": "kaputt"}}))
    engine = engine_for(server, max_retries=2, structured_outputs="openai")
    with pytest.raises(EngineError, match=r"after 3 attempts: HTTP 500: kaputt") as info:
        engine.generate([GenerationRequest.chat("x")])
    assert server.base_url in str(info.value)
    assert len(server.posts()) == 3


def test_client_error_fails_with_the_server_message(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(lambda *a: (401, {"error": {"message": "invalid api key"}}))
    engine = engine_for(server, structured_outputs="openai")
    with pytest.raises(EngineError, match="401.*invalid api key"):
        engine.generate([GenerationRequest.chat("x")])
    assert len(server.posts()) == 1  # not retried


def test_context_overflow_is_a_per_request_error(scripted) -> None:  # type: ignore[no-untyped-def]
    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if body["messages"][-1]["content"] == "huge":
            return 400, {
                "error": {
                    "message": "Requested tokens (9000) exceed context window of 2048",
                    "code": "context_length_exceeded",
                }
            }
        return 200, completion("ok", finish="length")

    server = scripted(handler)
    engine = engine_for(server, structured_outputs="openai")
    out = engine.generate([GenerationRequest.chat("huge"), GenerationRequest.chat("small")])
    assert out[0].finish_reason == "error" and "context window" in out[0].text
    assert out[1].finish_reason == "length" and out[1].text == "ok"


def test_max_completion_tokens_when_the_server_refuses_max_tokens(scripted) -> None:  # type: ignore[no-untyped-def]
    # What OpenAI's reasoning models answer to `max_tokens` (their error text, verbatim).
    refusal = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }

    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        return (400, refusal) if "max_tokens" in body else (200, completion(f"budget {body['max_completion_tokens']}"))

    server = scripted(handler)
    engine = engine_for(server, structured_outputs="openai", max_concurrency=1)
    out = engine.generate([GenerationRequest.chat("a", max_tokens=7), GenerationRequest.chat("b", max_tokens=9)])
    assert [r.text for r in out] == ["budget 7", "budget 9"]
    # One refused request, then the field is renamed for this and every later request.
    assert [sorted(k for k in b if k.startswith("max_")) for b in server.posts()] == [
        ["max_tokens"],
        ["max_completion_tokens"],
        ["max_completion_tokens"],
    ]


def test_api_key_from_env_goes_only_into_the_header(scripted, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MY_TEST_KEY", "sk-secret-123")
    server = scripted(lambda *a: (200, completion("ok")))
    engine = engine_for(server, api_key_env="MY_TEST_KEY", structured_outputs="vllm")
    engine.generate([GenerationRequest.chat("x")])
    assert server.calls[0][3]["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in engine.engine_id
    assert "sk-secret" not in repr(engine.config)
    monkeypatch.delenv("MY_TEST_KEY")
    server2 = scripted(lambda *a: (200, completion("ok")))
    engine_for(server2, api_key_env="MY_TEST_KEY", structured_outputs="vllm").generate([GenerationRequest.chat("x")])
    assert "authorization" not in server2.calls[0][3]


def test_auto_dialect_asks_models_once(scripted) -> None:  # type: ignore[no-untyped-def]
    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": "served", "owned_by": "vllm"}]}
        return 200, completion(obey(body))

    server = scripted(handler)
    engine = engine_for(server)
    constraint = Constraint(choices=("A", "B"))
    engine.generate([GenerationRequest.chat("x", constraint=constraint)] * 3)
    engine.generate([GenerationRequest.chat("y", constraint=constraint)])
    assert engine.dialect == "vllm"
    assert engine.max_concurrency == DEFAULT_CONCURRENCY["vllm"] == 1024
    assert [c[1] for c in server.calls if c[0] == "GET"] == ["/v1/models"]
    sent = [b["structured_outputs"] for b in server.posts()]
    # one probe of the choices kind first, then the four requests
    assert sent == [{"choice": ["probe-zq", "probe-xv"]}] + [{"choice": ["A", "B"]}] * 4


def test_default_concurrency_follows_the_dialect(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(lambda m, p, b, h: (200, {"data": [{"id": "served", "owned_by": "me"}]}))
    engine = engine_for(server)
    assert engine.dialect == "llamacpp" and engine.max_concurrency == 4
    assert engine_for(server, max_concurrency=7, structured_outputs="vllm").max_concurrency == 7


def test_openai_dialect_unwraps_choice_object(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(lambda m, p, body, h: (200, completion(obey(body).replace("A", "B"))))
    engine = engine_for(server, structured_outputs="openai")
    out = engine.generate([GenerationRequest.chat("x", constraint=Constraint(choices=("A", "B")))])
    assert out[0].text == "B"


JUDGE_REGEX = Constraint(regex=r"Reasoning: [^\n]{1,200}\nVerdict: [AB]")


def ignores_constraints(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    """A server that answers every request with free text (like vLLM >= 0.12 given
    `guided_choice`, or llama_cpp.server given `structured_outputs`)."""
    if method == "GET":
        return 200, {"data": [{"id": "served", "owned_by": "vllm"}]}
    return 200, completion("A is better. Verdict: A")


def test_a_server_that_ignores_constraints_fails_the_probe(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(ignores_constraints)
    engine = engine_for(server)
    with pytest.raises(EngineError) as info:
        engine.generate([GenerationRequest.chat("judge", constraint=JUDGE_REGEX)])
    message = str(info.value)
    assert server.base_url in message and "'vllm'" in message and "does not enforce regex" in message
    assert len(server.posts()) == 1  # only the probe: the real request was never trusted


def test_a_reply_that_breaks_its_constraint_is_an_error_never_a_verdict(scripted) -> None:  # type: ignore[no-untyped-def]
    from bias_discovery.data.pairs import PreferencePair
    from bias_discovery.judging import JudgeSettings, judge_pairs

    # The probe passes, but the judge replies come back unconstrained.
    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if body.get("structured_outputs", {}).get("regex", "").startswith("probe"):
            return 200, completion("probe-417")
        return ignores_constraints(method, path, body, headers)

    server = scripted(handler)
    engine = engine_for(server)
    pairs = [PreferencePair(id=f"p{i}", question="2+2?", chosen="4", rejected="5") for i in range(3)]
    result = judge_pairs(engine, pairs, JudgeSettings(positions="swap", reasoning=True, reasoning_chars=200), seed=1)
    assert [j.verdict for j in result.judgments] == [None, None, None]
    assert {j.invalid_reason for j in result.judgments} == {"engine_error"}
    assert "did not enforce the regex constraint" in result.judgments[0].raw_output
    assert server.base_url in result.judgments[0].raw_output


def test_systematic_violations_fail_the_batch(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(ignores_constraints)
    engine = engine_for(server, constraint_probe=False, max_concurrency=1)
    constraint = Constraint(choices=("A", "B"))
    out = engine.generate([GenerationRequest.chat(f"q{i}", constraint=constraint) for i in range(7)])
    assert all(r.finish_reason == "error" for r in out)
    with pytest.raises(EngineError, match=r"8 constrained replies in a row broke their constraint"):
        engine.generate([GenerationRequest.chat("q7", constraint=constraint)])


def test_vllm_context_refusal_costs_that_request_only(scripted) -> None:  # type: ignore[no-untyped-def]
    # vLLM 0.32's reply to a prompt over max_model_len, verbatim (issue 10 findings).
    refusal = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, your prompt "
            "contains at least 2049 input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt. "
            "(parameter=input_tokens, value=2049)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    }

    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        return (400, refusal) if body["messages"][-1]["content"] == "huge" else (200, completion("ok"))

    server = scripted(handler)
    engine = engine_for(server, structured_outputs="vllm")
    out = engine.generate([GenerationRequest.chat("huge"), GenerationRequest.chat("small")])
    assert out[0].finish_reason == "error" and "maximum context length is 2048" in out[0].text
    assert out[1].text == "ok"
    assert openai_wire.is_context_error(400, "no hint in the text", "", "input_tokens")
    assert not openai_wire.is_context_error(400, "Grammar error: unclosed group", "", "")


def test_server_down_fails_fast_and_clearly(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(openai_engine, "BACKOFF_BASE_S", 0.5)  # the real default
    port = free_port()  # nothing listens there
    base_url = f"http://127.0.0.1:{port}/v1"
    engine = OpenAIServerEngine(ModelConfig(provider="openai", model="m", base_url=base_url, max_retries=2))
    with caplog.at_level(logging.INFO, logger="bias_discovery.llm"), pytest.raises(EngineError) as info:
        engine.generate([GenerationRequest.chat("x"), GenerationRequest.chat("y")])
    message = str(info.value)
    assert base_url in message
    assert "after 3 attempts" in message
    # bounded: one backoff before each retry, each short and capped (the log's own numbers:
    # how long it all took on this machine is the benchmarks' business, not a test's)
    backoffs = [r.args for r in caplog.records if r.getMessage().startswith("no replica of")]
    assert [(attempt, of) for _, _, attempt, of in backoffs] == [(2, 3), (3, 3)]  # type: ignore[misc]
    for _, delay, attempt, _ in backoffs:  # type: ignore[misc]
        assert 0 < delay <= min(openai_engine.BACKOFF_CAP_S, 0.5 * 2 ** (attempt - 2) * 1.5)


def test_retries_stop_at_one_total_deadline_not_per_attempt(scripted) -> None:  # type: ignore[no-untyped-def]
    def slow_failure(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        time.sleep(0.8)
        return 503, {"error": {"message": "overloaded"}}

    server = scripted(slow_failure)
    engine = engine_for(server, max_retries=10, timeout_s=2.0, structured_outputs="vllm")
    with pytest.raises(
        EngineError, match=r"within the 2 s deadline .*; \d+ of 11 attempts\): (HTTP 503: overloaded|timed out)"
    ) as info:
        engine.generate([GenerationRequest.chat("x")])
    # 11 attempts that reach the server take at least 0.8 s each (8.8 s): the one 2 s deadline
    # left room for 3 of them at most, however slow the machine. The error counts the attempts
    # started, which may include one that never reached the server (started with a moment of the
    # deadline left: CI saw 4 started, 3 arrived), so it is bounded by the deadline, not by 3.
    tried = int(str(info.value).split(" of 11 attempts")[0].rsplit(" ", 1)[1])
    assert 1 <= len(server.posts()) <= 3 and len(server.posts()) <= tried < 11, (tried, len(server.posts()))
    engine.close()


def test_a_failed_batch_drops_its_other_requests_and_frees_their_slots(scripted) -> None:  # type: ignore[no-untyped-def]
    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        text = body["messages"][-1]["content"]
        if text == "refused":
            return 401, {"error": {"message": "invalid api key"}}
        time.sleep(0.5)
        return 200, completion("re:" + text)

    server = scripted(handler)
    engine = engine_for(server, structured_outputs="vllm", max_concurrency=3)
    requests = [GenerationRequest.chat("refused")] + [GenerationRequest.chat(f"q{i}") for i in range(20)]
    with pytest.raises(EngineError, match="401.*invalid api key"):
        engine.generate(requests)
    # failed at once, not after the queued requests: when the error came, at most the first
    # slots' requests had been sent (each takes 0.5 s to answer, the refusal none)
    assert len(server.posts()) <= 3
    # the requests still queued were never sent, and every slot came back
    time.sleep(0.7)
    assert len(server.posts()) <= 3
    assert [r.in_flight for r in engine._replicas.replicas] == [0]
    out = engine.generate([GenerationRequest.chat("again")])
    assert out[0].text == "re:again"
    engine.close()


def test_submit_answers_one_request_on_its_own(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(lambda m, p, body, h: (200, completion("re:" + body["messages"][-1]["content"])))
    engine = engine_for(server, structured_outputs="vllm")
    futures = [engine.submit(GenerationRequest.chat(f"q{i}")) for i in range(3)]
    assert [f.result(timeout=30).text for f in futures] == ["re:q0", "re:q1", "re:q2"]
    engine.close()

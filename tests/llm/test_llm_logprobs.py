"""The verdict token's log-probabilities through the model layer (`final_top_logprobs`): the
request and its cache key, placing the final token among the generated ones, and each engine's
mapping (vLLM on its fake, an OpenAI-compatible server scripted in-process). The real engines
run in test_llm_llamacpp.py, test_llm_server_real.py and tests/vllm_real."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bias_discovery.errors import ConfigError, EngineError
from bias_discovery.llm import vllm_engine
from bias_discovery.llm.base import SequentialEngine, final_token_index
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai import OpenAIServerEngine, build_payload, final_logprobs_from_reply
from bias_discovery.llm.types import Constraint, FinalTokenLogprobs, GenerationRequest, GenerationResponse
from bias_discovery.llm.vllm_engine import VLLMEngine, final_logprobs, sampling_kwargs

from fake_vllm import EOS_TEXT, FAKE_API, FakeCompletion, FakeLogprob
from openai_scripted import ScriptedServer, completion

CHOICE = Constraint(choices=("A", "B"))


# ---------------------------------------------------------------- the request and its key


def test_the_cache_key_of_a_request_without_logprobs_is_unchanged() -> None:
    """Caches written before the field existed keep answering: the key of a request that does
    not ask for log-probabilities is the one computed without the field."""
    request = GenerationRequest.chat("Which is better?", constraint=CHOICE)
    dumped = request.model_dump(mode="json")
    del dumped["final_top_logprobs"]
    blob = json.dumps({"engine": "e", "request": dumped}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert request.content_hash("e") == hashlib.sha256(blob.encode("utf-8")).hexdigest()
    scored = request.model_copy(update={"final_top_logprobs": 5})
    assert scored.content_hash("e") != request.content_hash("e")
    assert scored.content_hash("e") != request.model_copy(update={"final_top_logprobs": 6}).content_hash("e")
    with pytest.raises(ValueError):
        GenerationRequest.chat("x", final_top_logprobs=21)  # more than vLLM and OpenAI return


def test_candidates_of_probability_zero_are_dropped_and_the_rest_ranked() -> None:
    out = FinalTokenLogprobs.from_candidates(
        " A", -0.4, [(" B", -1.2), ("x", float("-inf")), (" A", -0.4), ("y", -9999.0), (" ", -3.0)], k=2
    )
    assert out is not None
    assert [(t.token, t.logprob) for t in out.top] == [(" A", -0.4), (" B", -1.2)]
    assert FinalTokenLogprobs.from_candidates("A", float("-inf"), [], k=2) is None
    # what the cache stores reads back the same (no -inf in JSON)
    assert FinalTokenLogprobs.model_validate_json(out.model_dump_json()) == out


@pytest.mark.parametrize(
    ("tokens", "text", "expected"),
    [
        (["Reason", "ing", ":", " ok", "\n", "Ver", "dict", ":", " A"], "Reasoning: ok\nVerdict: A", 8),
        (["Ver", "dict", ":", " B", EOS_TEXT], "Verdict: B", 3),  # vLLM counts the EOS token
        (["Ver", "dict", ":", " ", "A"], "Verdict: A", 4),  # the space as a token of its own
        (["A", "\n", " "], "A\n ", 0),  # trailing whitespace tokens
        (['{"', "choice", '":"', "B", '"}'], "B", 3),  # tokens that are not in the output are passed over
        (["Verdict", ": A", "."], "Verdict: A.", 2),  # the final token is ".", not a label (judging says so)
        (["Ver", "dict: A"], "Verdict: B", None),  # tokens that do not line up with the text
        ([], "A", None),
    ],
)
def test_final_token_index(tokens: list[str], text: str, expected: int | None) -> None:
    assert final_token_index(tokens, text) == expected


# ---------------------------------------------------------------- the call cache


class LogprobEngine(SequentialEngine):
    """Answers "Verdict: A"; with logprobs when asked (A at 0.6, B at 0.4)."""

    name = "logprobs"

    def __init__(self) -> None:
        super().__init__("fake/logprobs")
        self.sent: list[GenerationRequest] = []

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        self.sent.append(request)
        final = None
        if request.final_top_logprobs:
            final = FinalTokenLogprobs.from_candidates(
                " A", math.log(0.6), [(" A", math.log(0.6)), (" B", math.log(0.4))], request.final_top_logprobs
            )
        return GenerationResponse(text="Verdict: A", finish_reason="stop", final_logprobs=final)


def test_the_cache_never_serves_a_choice_response_for_a_score_request(tmp_path: Path) -> None:
    inner = LogprobEngine()
    cached = CachedEngine(inner, tmp_path / "calls.sqlite")
    choice = GenerationRequest.chat("judge this", constraint=CHOICE)
    score = choice.model_copy(update={"final_top_logprobs": 5})
    [first] = cached.generate([choice])
    [second] = cached.generate([score])
    assert first.final_logprobs is None and second.final_logprobs is not None
    assert len(inner.sent) == 2
    again = CachedEngine(LogprobEngine(), tmp_path / "calls.sqlite")  # a new process: from the file
    [third] = again.generate([score])
    assert third.cached and third.final_logprobs == second.final_logprobs
    assert again.engine.sent == []  # type: ignore[attr-defined]


# ---------------------------------------------------------------- vLLM (on its fake)


def test_vllm_sampling_asks_for_logprobs_only_when_the_request_does() -> None:
    assert "logprobs" not in sampling_kwargs(GenerationRequest.chat("x"))
    assert sampling_kwargs(GenerationRequest.chat("x", final_top_logprobs=4))["logprobs"] == 4


def test_vllm_final_logprobs_skip_the_eos_token_and_keep_the_top_k() -> None:
    steps = [
        {10: FakeLogprob(-0.01, 1, "Verdict"), 11: FakeLogprob(-5.0, 2, "Ver")},
        {12: FakeLogprob(-0.2, 1, ":")},
        {
            13: FakeLogprob(-0.7, 1, " A"),
            14: FakeLogprob(-0.9, 2, " B"),
            15: FakeLogprob(-2.0, 3, " "),
            16: FakeLogprob(float("-inf"), 4, "<|endoftext|>"),
        },
        {2: FakeLogprob(0.0, 1, EOS_TEXT)},
    ]
    out = final_logprobs(FakeCompletion("Verdict: A", [10, 12, 13, 2], "stop", steps), k=3)
    assert out is not None and out.token == " A" and out.logprob == -0.7
    assert [t.token for t in out.top] == [" A", " B", " "]
    # a sampled token outside the top k (a temperature draw) is still the final token
    steps[2] = {14: FakeLogprob(-0.9, 2, " B"), 13: FakeLogprob(-0.7, 1, " A"), 17: FakeLogprob(-4.0, 5, " C")}
    out = final_logprobs(FakeCompletion("Verdict: C", [10, 12, 17, 2], "stop", steps), k=2)
    assert out is not None and out.token == " C" and [t.token for t in out.top] == [" A", " B"]
    assert final_logprobs(FakeCompletion("Verdict: A", [10, 12, 13, 2], "stop", None), k=3) is None


def test_vllm_engine_returns_the_verdict_tokens_logprobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: FAKE_API)
    engine = VLLMEngine(ModelConfig.from_spec("vllm/fake"))
    plain, scored = engine.generate(
        [
            GenerationRequest.chat("B", constraint=CHOICE),
            GenerationRequest.chat("B", constraint=CHOICE, final_top_logprobs=5),
        ]
    )
    assert engine._llm.kwargs["logprobs_mode"] == "raw_logprobs"
    assert plain.final_logprobs is None
    assert scored.text == "B" and scored.final_logprobs is not None
    assert scored.final_logprobs.token == "B"
    assert {t.token: round(math.exp(t.logprob), 6) for t in scored.final_logprobs.top} == {"B": 0.7, "A": 0.3}


# ---------------------------------------------------------------- OpenAI-compatible servers


def reply_with_logprobs(text: str, tokens: Sequence[tuple[str, float, list[tuple[str, float]]]]) -> dict[str, Any]:
    body = completion(text)
    body["choices"][0]["logprobs"] = {
        "content": [
            {
                "token": t,
                "logprob": lp,
                "bytes": None,
                "top_logprobs": [{"token": a, "logprob": alp, "bytes": None} for a, alp in top],
            }
            for t, lp, top in tokens
        ]
    }
    return body


VERDICT_TOKENS = [
    ("Ver", -0.1, [("Ver", -0.1)]),
    ("dict", -0.01, [("dict", -0.01)]),
    (":", -0.01, [(":", -0.01)]),
    (" B", -0.6, [(" B", -0.6), (" A", -0.9), (" ", -9999.0)]),
    (EOS_TEXT, 0.0, [(EOS_TEXT, 0.0)]),
]


def test_payload_asks_for_logprobs_where_the_verdict_ends_the_output() -> None:
    request = GenerationRequest.chat("x", constraint=CHOICE, final_top_logprobs=3)
    for dialect in ("vllm", "llamacpp"):
        body = build_payload("m", request, dialect)
        assert body["logprobs"] is True and body["top_logprobs"] == 3
    assert "logprobs" not in build_payload("m", GenerationRequest.chat("x"), "vllm")
    with pytest.raises(ConfigError, match="wraps verdicts in JSON"):  # hosted APIs: the verdict is inside JSON
        build_payload("m", request, "openai")


def test_final_logprobs_from_a_server_reply() -> None:
    choice = reply_with_logprobs("Verdict: B", VERDICT_TOKENS)["choices"][0]
    out = final_logprobs_from_reply(choice, "Verdict: B", 5)
    assert out is not None and out.token == " B"
    assert [(t.token, t.logprob) for t in out.top] == [(" B", -0.6), (" A", -0.9)]  # -9999: probability 0


def test_the_server_engine_returns_logprobs_and_refuses_a_server_that_ignores_them() -> None:
    def handler(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        if "probe" in body.get("grammar", ""):
            return 200, completion("probe-xv")
        if body.get("logprobs"):
            return 200, reply_with_logprobs("Verdict: B", VERDICT_TOKENS)
        return 200, completion("Verdict: B")

    def deaf(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        return 200, completion("probe-xv" if "probe" in body.get("grammar", "") else "A")

    servers = [ScriptedServer(handler), ScriptedServer(deaf)]
    try:
        listening, ignoring = (
            OpenAIServerEngine(
                ModelConfig(provider="openai", model="m", base_url=s.base_url, structured_outputs="llamacpp")
            )
            for s in servers
        )
        plain, scored = listening.generate(
            [
                GenerationRequest.chat("x", constraint=CHOICE),
                GenerationRequest.chat("x", constraint=CHOICE, final_top_logprobs=2),
            ]
        )
        assert plain.final_logprobs is None
        assert scored.final_logprobs is not None and scored.final_logprobs.token == " B"
        with pytest.raises(EngineError, match="sent no logprobs although the request asked for them"):
            ignoring.generate([GenerationRequest.chat("x", constraint=CHOICE, final_top_logprobs=2)])
    finally:
        for server in servers:
            server.close()

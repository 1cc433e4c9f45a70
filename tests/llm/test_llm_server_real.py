"""A real llama_cpp.server on 127.0.0.1, driven through the openai/ engine and the cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import Constraint, GenerationRequest

pytestmark = pytest.mark.server

JUDGE = "Which answer is better for 'What is 2+2?': A) 4  B) 5. Reply with the verdict."
VERDICT = r"Verdict: \[\[(A|B)\]\]"


def batch() -> list[GenerationRequest]:
    return [
        GenerationRequest.chat(JUDGE, max_tokens=6, constraint=Constraint(choices=("A", "B"))),
        GenerationRequest.chat(JUDGE, max_tokens=20, constraint=Constraint(regex=VERDICT)),
        GenerationRequest.chat(
            "How old are you? Number only.", max_tokens=6, constraint=Constraint(regex=r"[0-9]{1,3}")
        ),
        GenerationRequest.chat(
            JUDGE + " Answer in JSON.",
            max_tokens=40,
            constraint=Constraint(
                json_schema={"type": "object", "properties": {"verdict": {"enum": ["A", "B"]}}, "required": ["verdict"]}
            ),
        ),
        GenerationRequest.chat("Say hello.", max_tokens=4),
    ]


def test_openai_engine_against_llama_cpp_server(llama_server: str, tmp_path: Path) -> None:
    config = ModelConfig.from_spec("openai/smollm2", base_url=llama_server, max_concurrency=2)
    engine = make_engine(config, cache_path=tmp_path / "calls.sqlite")
    assert isinstance(engine, CachedEngine)
    assert engine.engine.dialect == "llamacpp"  # type: ignore[attr-defined]

    first = engine.generate(batch())
    assert first[0].text in ("A", "B")
    assert re.fullmatch(VERDICT, first[1].text), first[1].text
    assert re.fullmatch(r"[0-9]{1,3}", first[2].text), first[2].text
    assert json.loads(first[3].text)["verdict"] in ("A", "B")
    assert first[4].text and first[4].finish_reason in ("stop", "length")
    assert all(r.finish_reason != "error" for r in first)
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in first)
    assert engine.misses == 5 and engine.hits == 0

    second = engine.generate(batch())
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second)
    assert engine.misses == 5 and engine.hits == 5  # the second run sent nothing
    engine.close()


def test_oversize_prompt_through_the_server_is_a_per_request_error(llama_server: str) -> None:
    engine = make_engine(ModelConfig.from_spec("openai/smollm2", base_url=llama_server))
    out = engine.generate(
        [
            GenerationRequest.chat("word " * 3000, max_tokens=4),
            GenerationRequest.chat("Hi", max_tokens=2),
        ]
    )
    assert out[0].finish_reason == "error", out[0]
    assert out[1].finish_reason in ("stop", "length")
    engine.close()


def test_score_verdicts_through_the_llama_cpp_server(llama_server: str) -> None:
    """llama_cpp.server returns the logprobs of every generated token (logits_all is its
    default); the engine finds the verdict token at the end and the judge reads P(A), P(B)."""
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, judge_pairs

    engine = make_engine(ModelConfig.from_spec("openai/smollm2", base_url=llama_server))
    settings = JudgeSettings(positions="swap", reasoning_chars=120, max_tokens=64, verdict="score")
    result = judge_pairs(engine, load_pairs("demo:test", limit=2), settings, seed=0)
    engine.close()
    for judgment in result.judgments:
        assert judgment.invalid_reason is None and judgment.p_rejected is not None, judgment
        assert (judgment.picked == "rejected") == (judgment.p_rejected > 0.5), judgment

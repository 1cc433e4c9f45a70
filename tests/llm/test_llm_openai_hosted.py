"""Hosted OpenAI-style APIs: the judge's reasoning-and-verdict format goes out as a strict
JSON schema and comes back as the same Judgment, against a stub that behaves as OpenAI's
structured outputs do (tests/fake_openai.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bias_discovery.cli import app
from bias_discovery.data.pairs import PreferencePair
from bias_discovery.errors import EngineError
from bias_discovery.judging import JudgeSettings, judge_pairs, verdict_constraint
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.openai import OpenAIServerEngine, read_reply
from bias_discovery.llm.types import Constraint, GenerationRequest

from fake_openai import OpenAIStub
from openai_scripted import ScriptedServer

PAIRS = [PreferencePair(id=f"p{i}", question=f"{i}+{i}?", chosen=str(2 * i), rejected=str(2 * i + 1)) for i in range(3)]
LONG_REASONING = "Response A computes the sum correctly.\nResponse B is off by one. " + "It checks every step. " * 40


@pytest.fixture
def stub() -> Iterator[ScriptedServer]:
    """The OpenAI stub on 127.0.0.1; its reasoning runs over several lines and past the cap."""
    server = ScriptedServer(OpenAIStub(reasoning=LONG_REASONING).handle)
    yield server
    server.close()


def hosted(stub: ScriptedServer, **settings: object) -> OpenAIServerEngine:
    """An engine as a user configures a hosted API: no dialect given (auto)."""
    return OpenAIServerEngine(ModelConfig(provider="openai", model="gpt-4o-mini", base_url=stub.base_url, **settings))  # type: ignore[arg-type]


def test_the_stub_refuses_what_openai_refuses(stub: ScriptedServer) -> None:
    """The regex path is what failed before: OpenAI refuses vLLM's field (and strict mode
    refuses maxLength, which is why the reasoning cap cannot go into the schema)."""
    engine = hosted(stub, structured_outputs="vllm", constraint_probe=False)
    with pytest.raises(EngineError, match="refused the request \\(400\\): Unrecognized request argument supplied"):
        engine.generate([GenerationRequest.chat("judge", constraint=verdict_constraint(JudgeSettings()))])
    engine.close()
    api = OpenAIStub()
    regex_body = {"model": "m", "messages": [], "structured_outputs": {"regex": "Verdict: [AB]"}}
    assert (
        api.complete(regex_body)[1]["error"]["message"] == "Unrecognized request argument supplied: structured_outputs"
    )
    assert api.complete({"model": "m", "messages": [], "response_format": {"type": "regex"}})[0] == 400
    schema = {
        "type": "object",
        "properties": {"r": {"type": "string", "maxLength": 600}},
        "required": ["r"],
        "additionalProperties": False,
    }
    body = {
        "model": "m",
        "messages": [],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}},
    }
    status, reply = api.complete(body)
    assert status == 400 and "'maxLength' is not permitted" in reply["error"]["message"]


def test_hosted_api_judges_with_reasoning_by_default(stub: ScriptedServer) -> None:
    engine = hosted(stub)
    settings = JudgeSettings()  # reasoning on, cap 600: the defaults
    result = judge_pairs(engine, PAIRS, settings, seed=1)
    engine.close()
    assert engine.dialect == "openai"  # detected from GET /models (owned_by "system")
    assert [j.verdict for j in result.judgments] == ["A"] * 6  # the stub always picks the first value
    assert [j.correct for j in result.judgments] == [True, False] * 3  # both orders, mapped back
    assert {j.invalid_reason for j in result.judgments} == {None}
    first = result.judgments[0]
    one_line = " ".join(LONG_REASONING.split("\n")).strip()
    assert first.raw_output == f"Reasoning: {one_line}\nVerdict: A"
    assert first.explanation == one_line and len(one_line) > settings.reasoning_chars  # type: ignore[operator]
    posts = stub.posts()
    judged = [b for b in posts if b["response_format"]["json_schema"]["name"] == "reasoned_choice"]
    assert len(judged) == 6 and all(b["response_format"]["json_schema"]["strict"] is True for b in judged)
    assert not any("structured_outputs" in b or "grammar" in b for b in posts)
    # one probe went first, as a strict enum schema (the mechanism the verdict format uses)
    assert len(posts) == 7 and posts[0]["response_format"]["json_schema"]["name"] == "choice"


def test_a_reply_off_the_schema_is_invalid_never_a_verdict() -> None:
    constraint = verdict_constraint(JudgeSettings())
    text, problem = read_reply(constraint, "openai", "Verdict: A")
    assert problem is not None and "not JSON" in problem and text == "Verdict: A"
    text, problem = read_reply(constraint, "openai", json.dumps({"reasoning": "x", "verdict": "C"}))
    assert problem is not None and "'C' is not one of" in problem
    assert read_reply(constraint, "openai", json.dumps({"reasoning": "ok", "verdict": "B"})) == (
        "Reasoning: ok\nVerdict: B",
        None,
    )


def test_the_verdict_format_keeps_its_cache_key() -> None:
    """Calls cached before the format carried its structured form are still found."""
    constraint = verdict_constraint(JudgeSettings())
    assert constraint.reasoned is not None
    plain = Constraint(regex=constraint.regex)
    assert GenerationRequest.chat("q", constraint=constraint).content_hash("e") == GenerationRequest.chat(
        "q", constraint=plain
    ).content_hash("e")
    assert constraint.regex == r"Reasoning: [^\n]{1,600}\nVerdict: [AB]"


def test_judge_command_against_a_hosted_api(stub: ScriptedServer, tmp_path: Path) -> None:
    out = tmp_path / "j"
    result = CliRunner().invoke(
        app,
        [
            "judge",
            "--model",
            "openai/gpt-4o-mini",
            "--base-url",
            stub.base_url,
            "--data",
            "demo",
            "--limit",
            "2",
            "--out",
            str(out),
            "--no-cache",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "judging" not in result.output  # --quiet: no progress bar
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_invalid_judgments"] == 0 and summary["n_judgments"] == 4


def test_check_probes_the_verdict_format_as_it_is_sent(stub: ScriptedServer) -> None:
    from bias_discovery.llm.registry import make_engine
    from bias_discovery.preflight import check_endpoint
    from bias_discovery.preflight._endpoints import _Engines

    config = ModelConfig(provider="openai", model="gpt-4o-mini", base_url=stub.base_url)
    engines = _Engines(lambda c: make_engine(c))
    try:
        report = check_endpoint("target", config, engines, [verdict_constraint(JudgeSettings())], [])
    finally:
        engines.close()
    found = {f.what: f for f in report.findings}
    assert found["dialect"].detail.startswith("openai (detected from /models)")
    assert found["choices constraint"].status == "ok" and "regex constraint" not in found


def test_one_pair_is_one_pair_not_one_pairs(stub: ScriptedServer, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "judge",
            "--model",
            "openai/gpt-4o-mini",
            "--base-url",
            stub.base_url,
            "--data",
            "demo",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "j"),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "share of all 1 pair whose" in text and "1 pairs" not in text
    assert "judging 1 pair" in text  # the progress bar's label (stderr)

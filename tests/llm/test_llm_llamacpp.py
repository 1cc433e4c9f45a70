"""The embedded engine with the real SmolLM2 model: constraints hold, errors stay per request."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bias_discovery.errors import ConfigError, EngineError
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.registry import make_engine
from bias_discovery.llm.types import Constraint, GenerationRequest

pytestmark = [pytest.mark.model, pytest.mark.llamacpp]

JUDGE = "Which answer is better for 'What is 2+2?': A) 4  B) 5. Reply with the verdict."


@pytest.fixture(scope="module")
def engine(smollm2_gguf_path: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("llama_cpp")
    from bias_discovery.llm.llamacpp import LlamaCppEngine

    eng = LlamaCppEngine(ModelConfig.from_spec("llamacpp/smollm2", n_ctx=1024))
    yield eng
    eng.close()


def test_engine_id_names_the_file_and_size(engine, smollm2_gguf_path: Path) -> None:  # type: ignore[no-untyped-def]
    size = smollm2_gguf_path.stat().st_size
    assert engine.engine_id == f"llamacpp/{smollm2_gguf_path.name}:{size}"
    assert engine.n_ctx == 1024


def test_choices_constraint(engine) -> None:  # type: ignore[no-untyped-def]
    choices = ("A", "B", "tie")
    ticks: list[int] = []
    requests = [
        GenerationRequest.chat(JUDGE, max_tokens=8, constraint=Constraint(choices=choices)),
        GenerationRequest.chat(
            "Say something.", max_tokens=8, temperature=0.9, seed=7, constraint=Constraint(choices=choices)
        ),
    ]
    out = engine.generate(requests, progress=ticks.append)
    assert ticks == [1, 1]
    for r in out:
        assert r.text in choices
        assert r.finish_reason == "stop"
        assert r.prompt_tokens > 10 and r.completion_tokens >= 1


@pytest.mark.parametrize(
    "pattern",
    [
        r"Verdict: \[\[(A|B)\]\]",
        r"[0-9]{1,3}",
        r"(yes|no), because [a-z ]{3,20}\.",
    ],
)
def test_regex_constraint_fullmatches(engine, pattern: str) -> None:  # type: ignore[no-untyped-def]
    out = engine.generate([GenerationRequest.chat(JUDGE, max_tokens=40, constraint=Constraint(regex=pattern))])[0]
    assert out.finish_reason == "stop", out
    assert re.fullmatch(pattern, out.text), out.text


def test_json_schema_constraint(engine) -> None:  # type: ignore[no-untyped-def]
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["A", "B"]},
            "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["verdict", "confidence"],
        "additionalProperties": False,
    }
    out = engine.generate(
        [GenerationRequest.chat(JUDGE + " Answer in JSON.", max_tokens=60, constraint=Constraint(json_schema=schema))]
    )[0]
    assert out.finish_reason == "stop", out
    data = json.loads(out.text)
    assert set(data) == {"verdict", "confidence"}
    assert data["verdict"] in ("A", "B")
    assert isinstance(data["confidence"], int) and 0 <= data["confidence"] <= 100


def test_unconstrained_greedy_is_deterministic(engine) -> None:  # type: ignore[no-untyped-def]
    request = GenerationRequest.chat("What is the capital of France?", max_tokens=12)
    first, second = engine.generate([request, request])
    assert first.text.strip() and first.text == second.text
    assert first.finish_reason in ("stop", "length")


def test_truncation_is_length(engine) -> None:  # type: ignore[no-untyped-def]
    out = engine.generate([GenerationRequest.chat("Write a long story about a dragon.", max_tokens=3)])[0]
    assert out.finish_reason == "length"
    assert out.completion_tokens == 3


def test_stop_string(engine) -> None:  # type: ignore[no-untyped-def]
    out = engine.generate(
        [GenerationRequest.chat("Count from 1 to 10, separated by commas.", max_tokens=30, stop=(",",))]
    )[0]
    assert "," not in out.text
    assert out.finish_reason == "stop"


def test_oversize_prompt_is_an_error_response_not_a_crash(engine) -> None:  # type: ignore[no-untyped-def]
    huge = GenerationRequest.chat("word " * 3000, max_tokens=4)
    small = GenerationRequest.chat("Hi", max_tokens=2)
    out = engine.generate([huge, small])
    assert out[0].finish_reason == "error"
    assert "context window" in out[0].text
    assert out[1].finish_reason in ("stop", "length") and out[1].text


def test_unsupported_regex_fails_before_any_work(engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="lookahead"):
        engine.generate([GenerationRequest.chat("x", constraint=Constraint(regex=r"a(?=b)"))])


def test_missing_gguf_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(EngineError, match=re.escape(str(missing))):
        make_engine(f"llamacpp/{missing}")


@pytest.mark.model
def test_outputs_do_not_depend_on_call_order(engine) -> None:  # type: ignore[no-untyped-def]
    """A resumed run makes its calls in another order; greedy outputs must not change."""
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks

    settings = JudgeSettings(positions="both", reasoning_chars=120, max_tokens=64)
    requests = [t.request for t in build_tasks(load_pairs("demo", limit=4), settings, seed=42)]
    forward = [r.text for r in engine.generate(requests)]
    backward = [r.text for r in engine.generate(list(reversed(requests)))][::-1]
    assert forward == backward


@pytest.mark.model
def test_a_shared_prompt_prefix_is_evaluated_once_and_changes_no_output(engine) -> None:  # type: ignore[no-untyped-def]
    """Rewrite requests share their system prompt and instructions: after the first, each reuses
    the previous request's KV cache up to a chunk boundary. The outputs equal those of every
    request evaluated from scratch, in any order, interleaved with requests of another stage."""
    from bias_discovery.config import PerturbSettings
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks
    from bias_discovery.library import load_seed_library
    from bias_discovery.llm.llamacpp import PROMPT_CHUNK
    from bias_discovery.stages.perturb import build_perturb_request

    pairs = load_pairs("demo", limit=4)
    bias = load_seed_library("biasscope7").biases[0]
    rewrites = [build_perturb_request(p, bias, PerturbSettings(max_tokens=24), seed=1) for p in pairs]
    judges = [t.request for t in build_tasks(pairs, JudgeSettings(positions="swap", reasoning=False), seed=1)]
    requests = [r for pair in zip(rewrites, judges) for r in pair]  # another stage's request in between

    def from_scratch(request: GenerationRequest) -> str:
        engine._last_prompt = []  # nothing reusable: the whole prompt is evaluated
        return engine.generate([request])[0].text

    scratch = [from_scratch(r) for r in requests]
    before = engine.prompt_tokens_reused
    together = [r.text for r in engine.generate(rewrites)] + [r.text for r in engine.generate(judges)]
    reused = engine.prompt_tokens_reused - before
    assert together == [scratch[i] for i in range(0, len(requests), 2)] + [
        scratch[i] for i in range(1, len(requests), 2)
    ]
    assert reused >= (len(rewrites) - 1) * 3 * PROMPT_CHUNK  # the perturb system prompt: more than 3 chunks each
    backward = [r.text for r in engine.generate(list(reversed(requests)))][::-1]
    assert backward == scratch


@pytest.mark.model
def test_smollm2_follows_the_default_prompt_and_the_uncapped_verdict_format(engine) -> None:  # type: ignore[no-untyped-def]
    """The paper's setting (default neutral prompt, no reasoning cap) on the real model: every
    finished output is the verdict format, whatever its length; only an output cut by
    max_tokens is not, and it is scored invalid (`truncated`), never as a verdict."""
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, build_tasks, to_judgment, verdict_constraint

    settings = JudgeSettings(positions="both", reasoning_chars=None, max_tokens=160)
    pairs = load_pairs("demo:test", limit=3)
    tasks = build_tasks(pairs, settings, seed=42)
    assert "Which response is more helpful and accurate?" in tasks[0].request.messages[-1].content
    regex = verdict_constraint(settings).regex
    outputs = engine.generate([t.request for t in tasks])
    finished = 0
    for task, out in zip(tasks, outputs):
        judgment = to_judgment(pairs[task.pair_index], task.order, out)
        if out.finish_reason == "stop":
            finished += 1
            assert re.fullmatch(regex, out.text), out.text
            assert judgment.verdict in ("A", "B") and judgment.invalid_reason is None
        else:
            assert out.finish_reason == "length" and out.completion_tokens == 160
            assert judgment.verdict is None and judgment.invalid_reason == "truncated"
    print(
        "uncapped, max_tokens 160:", finished, "of", len(outputs), "finished;", [o.completion_tokens for o in outputs]
    )
    assert finished >= 1


def test_score_verdicts_read_the_verdict_tokens_raw_probabilities(engine, smollm2_gguf_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Score verdicts on the real model: the verdict token (the last one, after the reasoning)
    comes back with its top log-probabilities, equal to llama-cpp-python's own `logprobs`
    (which need a model built with logits_all); they give each judged order a probability of
    preferring the rejected response that agrees with the greedy verdict."""
    import llama_cpp

    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, judge_pairs, judge_request
    from bias_discovery.llm.base import message_dicts
    from bias_discovery.llm.llamacpp import sampling_fields

    settings = JudgeSettings(positions="both", reasoning_chars=120, max_tokens=64, verdict="score")
    pairs = load_pairs("demo:test", limit=2)
    result = judge_pairs(engine, pairs, settings, seed=0)
    for judgment in result.judgments:
        assert judgment.invalid_reason is None, judgment
        assert judgment.p_rejected is not None and 0.0 < judgment.p_rejected < 1.0
        assert (judgment.picked == "rejected") == (judgment.p_rejected > 0.5), (
            judgment
        )  # greedy picks the likelier label
    for outcome, (first, second) in zip(result.outcomes, zip(result.judgments[::2], result.judgments[1::2])):
        assert outcome.p_rejected == pytest.approx((first.p_rejected + second.p_rejected) / 2)

    request = judge_request(pairs[0], "chosen_first", settings, 0)
    [ours] = engine.generate([request])
    assert ours.final_logprobs is not None and ours.final_logprobs.token.strip() == ours.text[-1]
    reference = llama_cpp.Llama(
        model_path=str(smollm2_gguf_path),
        n_ctx=1024,
        logits_all=True,
        verbose=False,
        n_threads=engine.config.n_threads or 1,
    )
    try:
        out = reference.create_chat_completion(
            messages=message_dicts(request.messages),
            temperature=0.0,
            top_p=1.0,
            **sampling_fields(0.0),
            seed=0,
            max_tokens=64,
            grammar=engine._grammar(request.constraint),
            logprobs=True,
            top_logprobs=5,
        )
    finally:
        reference.close()
    assert out["choices"][0]["message"]["content"] == ours.text
    last = out["choices"][0]["logprobs"]["content"][-1]
    assert last["token"] == ours.final_logprobs.token
    assert {t["token"]: t["logprob"] for t in last["top_logprobs"]} == pytest.approx(
        {t.token: t.logprob for t in ours.final_logprobs.top}, abs=1e-4
    )

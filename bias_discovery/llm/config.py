"""Typed settings for one model role (target, teacher, filter...). One field, one docstring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError
from ..options import DEFAULT_TIMEOUT_S
from .providers import PROVIDERS

KNOWN_PROVIDERS: tuple[str, ...] = tuple(PROVIDERS)

if TYPE_CHECKING:
    Provider = str
else:  # the names of the registry's table, so pydantic's error lists the known providers
    Provider = Literal[KNOWN_PROVIDERS]


class Price(BaseModel):
    """What a hosted model charges, in dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    """Dollars per million prompt (input) tokens."""
    output_per_mtok: float = Field(ge=0)
    """Dollars per million completion (output) tokens."""


class ModelConfig(BaseModel):
    """How to reach one model. Built from a `provider/model` spec plus optional settings."""

    model_config = ConfigDict(extra="forbid")

    provider: Provider
    """Engine family: embedded llama.cpp, OpenAI-compatible server, vLLM offline, transformers."""

    model: str
    """Model name: `smollm2` or a .gguf path (llamacpp), the served model name (openai),
    a hub id or local path (vllm, hf)."""

    base_url: str | list[str] | None = None
    """OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (openai provider only). A
    list names replicas of the same model (servers on several nodes, each possibly a vLLM
    data-parallel deployment): every request goes to the least-loaded live replica, and a
    replica that fails is retried on the others."""

    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key; the key itself is never stored."""

    structured_outputs: Literal["auto", "vllm", "llamacpp", "openai"] = "auto"
    """How an OpenAI-compatible server takes output constraints: vLLM's structured outputs,
    llama.cpp's grammar, or OpenAI's response_format. `auto` asks the server (/v1/models)."""

    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight at once against each server (each replica). Default: by the
    server's dialect (see `openai.DEFAULT_CONCURRENCY`): enough to fill a vLLM
    server's batch, the slots of a llama.cpp server, a hosted API's usual rate limit."""

    constraint_probe: bool = True
    """Before a server's first constrained request of each kind (choices, regex, JSON schema),
    send a probe that only a server enforcing the constraint can answer; a server that
    answers it with free text is an error, never a source of verdicts."""

    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Deadline of one request to a server, from its first send: every attempt, retry and
    backoff counts against it, so a server that accepts connections and never answers fails
    within this many seconds (the CLI's `--timeout`)."""

    max_retries: int = Field(default=4, ge=0)
    """Retries with exponential backoff for connection errors, timeouts, 429 and 5xx replies,
    all within `timeout_s`."""

    n_ctx: int = Field(default=8192, ge=256)
    """Context window for llama.cpp (prompt + completion tokens)."""

    n_threads: int | None = None
    """CPU threads of an embedded engine (llama.cpp, or torch for hf/ on a CPU); default: all
    cores but one (a spinning thread that loses its core to another process stalls every step:
    on a busy 2-core machine 2 threads ran ~20x slower than 1)."""

    tensor_parallel_size: int = Field(default=1, ge=1)
    """vLLM: GPUs to shard the model over."""

    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """vLLM: fraction of GPU memory the engine may take (split it when two models share a GPU).
    On a CPU vLLM reads it as a fraction of RAM that must be free at start; the engine sets a
    fixed KV cache there instead (`kv_cache_memory_bytes`, 1 GiB), which skips that check."""

    max_model_len: int | None = None
    """vLLM: maximum sequence length (prompt + completion); default: the model's."""

    dtype: str = "auto"
    """vLLM / transformers: weight dtype. "auto" on a GPU: the engine's choice; on a CPU: bf16
    where the CPU computes it natively (AMX, AVX512_BF16), else fp32 (vLLM's own "auto" would
    keep a bf16 checkpoint in bf16, several times slower on an AVX2-only CPU)."""

    price: Price | None = None
    """What the model's provider charges (`--set teacher.price.input_per_mtok=3 --set
    teacher.price.output_per_mtok=15`): `check` and the end of `run` give dollars per role, and
    `budget.max_usd` counts them. None: free (a local model); calls answered by the call cache
    cost nothing either way."""

    engine_args: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments passed straight to the engine constructor (vllm.LLM, Llama); a
    key replaces the engine's default for it as a whole (vLLM's defaults here:
    `structured_outputs_config` {backend: xgrammar, disable_any_whitespace: true}; on a CPU
    also `enforce_eager: true`, `kv_cache_memory_bytes: 1073741824` and, for dtype "auto",
    the CPU's dtype; everywhere `enable_prefix_caching: true`). On the embedded `hf/` engine
    they go to transformers' `from_pretrained`, except `prefix_reuse` (true/false), which turns
    on or off the reuse of a shared prefix's KV cache (default: on in fp32 only,
    `hf.PREFIX_REUSE_DTYPES`)."""

    @field_validator("base_url")
    @classmethod
    def _urls_not_empty(cls, v: str | list[str] | None) -> str | list[str] | None:
        urls = v if isinstance(v, list) else [v] if v is not None else []
        if isinstance(v, list) and not v:
            raise ValueError("base_url: an empty list names no server")
        for url in urls:
            if not url.strip():
                raise ValueError("base_url must not be empty")
        if isinstance(v, list) and len(set(u.rstrip("/") for u in v)) != len(v):
            raise ValueError("base_url lists the same server twice")
        return v

    @property
    def base_urls(self) -> list[str]:
        """The server URLs (one, or the replicas), without trailing slashes."""
        if self.base_url is None:
            return []
        urls = self.base_url if isinstance(self.base_url, list) else [self.base_url]
        return [u.rstrip("/") for u in urls]

    @field_validator("model")
    @classmethod
    def _model_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model must not be empty")
        return v

    def with_timeout(self, timeout_s: float | None) -> ModelConfig:
        """This config with another request deadline (None: unchanged); validated."""
        if timeout_s is None:
            return self
        return ModelConfig.model_validate({**self.model_dump(), "timeout_s": timeout_s})

    @property
    def spec(self) -> str:
        return f"{self.provider}/{self.model}"

    @classmethod
    def from_spec(cls, spec: str, **settings: Any) -> ModelConfig:
        """Parse `provider/model` (the model part may itself contain slashes)."""
        provider, sep, model = spec.partition("/")
        if not sep or not model:
            raise ConfigError(
                f"model spec {spec!r} is not of the form provider/model; known providers: {', '.join(KNOWN_PROVIDERS)}"
            )
        if provider not in KNOWN_PROVIDERS:
            raise ConfigError(
                f"unknown provider {provider!r} in model spec {spec!r}; known providers: {', '.join(KNOWN_PROVIDERS)}"
            )
        return cls(provider=provider, model=model, **settings)


def same_model(a: ModelConfig, b: ModelConfig) -> bool:
    """Whether two configs name the same model, whichever provider serves it (an
    `openai/Qwen/X` server and a `vllm/Qwen/X` engine are one model). Compared by model name;
    one model under two different names (a served alias, a copied file) is not recognised."""

    def key(config: ModelConfig) -> str:
        return config.model.strip().rstrip("/").lower()

    return key(a) == key(b)

"""The provider table: which engine class serves each provider (the part of a model spec
before the first slash). Its own module so that `config.py` (which takes its provider names
from it) and `registry.py` (which builds engines from it) import it without importing each
other's module back."""

from __future__ import annotations

PROVIDERS: dict[str, str] = {
    "llamacpp": "llamacpp:LlamaCppEngine",
    "openai": "openai.engine:OpenAIServerEngine",
    "vllm": "vllm_engine:VLLMEngine",
    "hf": "hf:TransformersEngine",
}
"""Provider (the part of a model spec before the first slash) -> "module:class" of its engine
in this package, imported on first use. A new provider is one line here; `ModelConfig` takes
its provider names from this table."""

EMBEDDED_DEFAULT = "hf/smollm2"
"""The model spec of the embedded default: SmolLM2-135M-Instruct on the batched transformers
engine (llm/hf.py), installed by scripts/setup.sh with nothing to compile. `llamacpp/smollm2`
is the same model on the optional llama.cpp engine."""

"""Model specs, the engine registry, and lazy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bias_discovery.errors import ConfigError
from bias_discovery.llm.base import BaseEngine
from bias_discovery.llm.config import KNOWN_PROVIDERS, ModelConfig
from bias_discovery.llm.registry import PROVIDERS, engine_class, make_engine


def test_unknown_provider_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        make_engine("ollama/llama3")
    message = str(info.value)
    assert "'ollama'" in message
    for provider in KNOWN_PROVIDERS:
        assert provider in message


def test_unknown_provider_in_a_config_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="'llamacpp', 'openai', 'vllm' or 'hf'"):
        ModelConfig(provider="ollama", model="llama3")


def test_every_provider_in_the_table_is_an_engine_class() -> None:
    assert KNOWN_PROVIDERS == tuple(PROVIDERS) == ("llamacpp", "openai", "vllm", "hf")
    for provider in PROVIDERS:
        cls = engine_class(provider)
        assert isinstance(cls, type) and issubclass(cls, BaseEngine), provider


@pytest.mark.parametrize("spec", ["smollm2", "llamacpp/", "llamacpp", ""])
def test_spec_without_model_part(spec: str) -> None:
    with pytest.raises(ConfigError, match="provider/model"):
        ModelConfig.from_spec(spec)


def test_spec_keeps_slashes_in_the_model() -> None:
    config = ModelConfig.from_spec("vllm/Qwen/Qwen2.5-0.5B-Instruct", tensor_parallel_size=2)
    assert (config.provider, config.model, config.tensor_parallel_size) == ("vllm", "Qwen/Qwen2.5-0.5B-Instruct", 2)
    assert config.spec == "vllm/Qwen/Qwen2.5-0.5B-Instruct"


def test_blank_model_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        ModelConfig.from_spec("openai/   ")


def test_importing_the_package_imports_no_heavy_backend() -> None:
    code = (
        "import sys, bias_discovery, bias_discovery.llm, bias_discovery.llm.registry, "
        "bias_discovery.llm.cache, bias_discovery.llm.grammar, bias_discovery.llm.llamacpp, "
        "bias_discovery.llm.vllm_engine, bias_discovery.llm.openai.engine, bias_discovery.llm.hf\n"
        "heavy = [m for m in ('torch', 'vllm', 'llama_cpp', 'transformers') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

"""The transformers engine on a tiny random-weight model built on the spot (no hub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.errors import EngineError
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.types import Constraint, GenerationRequest

pytestmark = pytest.mark.model

WORDS = "the a judge answer is better worse yes no one two three four five six seven".split()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<pad>", "<eos>", "user", "assistant", "system", ":"]
    vocab = {tok: i for i, tok in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant :{% endif %}"
    )
    config = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=48,
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
    )
    import torch

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def engine(tiny_model: Path):  # type: ignore[no-untyped-def]
    from bias_discovery.llm.hf import TransformersEngine

    eng = TransformersEngine(ModelConfig(provider="hf", model=str(tiny_model), dtype="float32"))
    yield eng
    eng.close()


def test_generates_with_token_counts_and_length(engine) -> None:  # type: ignore[no-untyped-def]
    ticks: list[int] = []
    out = engine.generate(
        [
            GenerationRequest.chat("is the answer better", max_tokens=3),
            GenerationRequest.chat("one two", max_tokens=2, temperature=0.7, seed=1),
        ],
        progress=ticks.append,
    )
    assert ticks == [1, 1]
    assert out[0].prompt_tokens == 8  # user : is the answer better assistant :
    assert 1 <= out[0].completion_tokens <= 3
    assert out[0].finish_reason in ("stop", "length")
    assert engine.engine_id.startswith("hf/")


def test_greedy_is_deterministic(engine) -> None:  # type: ignore[no-untyped-def]
    request = GenerationRequest.chat("the judge", max_tokens=4)
    first, second = engine.generate([request, request])
    assert first == second


def test_oversize_prompt_is_an_error_response(engine) -> None:  # type: ignore[no-untyped-def]
    out = engine.generate([GenerationRequest.chat("one " * 60, max_tokens=2)])
    assert out[0].finish_reason == "error" and "context window" in out[0].text


def test_a_choices_constraint_holds_on_any_tokenizer(engine) -> None:  # type: ignore[no-untyped-def]
    """xgrammar reads the word-level tokenizer's vocabulary as it reads a BPE one's."""
    out = engine.generate(
        [
            GenerationRequest.chat("is the answer better", max_tokens=4, constraint=Constraint(choices=("yes", "no"))),
            GenerationRequest.chat(
                "one two", max_tokens=4, temperature=1.0, seed=5, constraint=Constraint(choices=("one", "two"))
            ),
        ]
    )
    assert out[0].text in ("yes", "no") and out[0].finish_reason == "stop"
    assert out[1].text in ("one", "two") and out[1].finish_reason == "stop"


def test_a_failed_forward_pass_names_the_engine(engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("out of memory")

    monkeypatch.setattr(engine, "model", broken)
    with pytest.raises(EngineError, match=r"transformers engine \(hf/.*\) failed in a forward pass: out of memory"):
        engine.generate([GenerationRequest.chat("one", max_tokens=2)])


def test_submitted_requests_are_gathered_into_one_batch(engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A streamed stage submits one request at a time; the engine runs what arrives together
    as one batch (as vLLM's scheduler admits what waits), not one by one."""
    sizes: list[int] = []
    real = engine._generate_batch

    def counting(requests, report):  # type: ignore[no-untyped-def]
        sizes.append(len(requests))
        return real(requests, report)

    monkeypatch.setattr(engine, "_generate_batch", counting)
    futures = [engine.submit(GenerationRequest.chat(f"one {word}", max_tokens=2)) for word in WORDS[:6]]
    answers = [f.result(timeout=120) for f in futures]
    assert len(answers) == 6 and all(a.finish_reason in ("stop", "length") for a in answers)
    assert sum(sizes) == 6 and len(sizes) < 6

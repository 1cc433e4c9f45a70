"""The embedded default engine (transformers + torch, batched) on the real SmolLM2: constraints
mean what they mean on the vLLM and OpenAI engines (the conformance checks hold), batches give
the answers requests give alone, sampling follows the seed, errors stay per request."""

from __future__ import annotations

import json
import re

import pytest

from bias_discovery.errors import ConfigError
from bias_discovery.llm import hf
from bias_discovery.llm.config import ModelConfig
from bias_discovery.llm.conformance import PROBE_CONSTRAINTS, probe_failure, probe_request, violation
from bias_discovery.llm.types import Constraint, GenerationRequest

pytestmark = pytest.mark.model

JUDGE = "Which answer is better for 'What is 2+2?': A) 4  B) 5. Reply with the verdict."


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    """The engine as a user gets it: the dtype this CPU computes (bf16 with AMX or
    AVX512_BF16, fp32 with AVX2 only)."""
    pytest.importorskip("xgrammar")
    from bias_discovery.llm.hf import TransformersEngine

    eng = TransformersEngine(ModelConfig.from_spec("hf/smollm2"))
    yield eng
    eng.close()


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def engine_in_each_dtype(request, engine):  # type: ignore[no-untyped-def]
    """The engine forced to each dtype the CPUs we run on pick, so both paths run on every CPU:
    an AVX2-only CPU emulates bf16 (slowly, but correctly) and a bf16 CPU still computes fp32.
    The dtype this CPU picks by itself is the module's `engine`, already loaded: the same
    weights in the same dtype, not loaded a second time."""
    if engine.dtype == request.param:
        yield engine
        return
    from bias_discovery.llm.hf import TransformersEngine

    eng = TransformersEngine(ModelConfig.from_spec("hf/smollm2", dtype=request.param))
    assert eng.dtype == request.param
    yield eng
    eng.close()


def test_engine_id_names_the_model_build_and_dtype(engine) -> None:  # type: ignore[no-untyped-def]
    from bias_discovery.smollm2_hf import build_hf_smollm2

    assert engine.engine_id == f"hf/{build_hf_smollm2().name}:{engine.dtype}"
    assert re.search(r"-hf-[0-9a-f]{12}:", engine.engine_id)  # the GGUF's hash
    assert engine.dtype in ("bfloat16", "float32")
    assert engine.max_model_len and engine.max_model_len >= 2048


@pytest.mark.parametrize("kind", ["choices", "regex", "json_schema"])
def test_the_conformance_probes_pass(engine_in_each_dtype, kind) -> None:  # type: ignore[no-untyped-def]
    """The probe that only a server enforcing the constraint can answer (llm/conformance.py), in
    each dtype."""
    request = probe_request(kind)
    [response] = engine_in_each_dtype.generate([request])
    assert probe_failure(kind, response) is None, response.text
    if response.finish_reason == "stop":  # a reply cut at max_tokens is a start the constraint allows
        assert violation(PROBE_CONSTRAINTS[kind], response.text) is None


def test_a_mixed_batch_keeps_every_constraint_and_order(engine) -> None:  # type: ignore[no-untyped-def]
    schema = {
        "type": "object",
        "properties": {"better": {"type": "string", "enum": ["A", "B"]}, "reason": {"type": "string", "maxLength": 60}},
        "required": ["better", "reason"],
        "additionalProperties": False,
    }
    requests = [
        GenerationRequest.chat(JUDGE, max_tokens=4, constraint=Constraint(choices=("A", "B", "tie"))),
        GenerationRequest.chat(JUDGE + " Answer as JSON.", max_tokens=60, constraint=Constraint(json_schema=schema)),
        GenerationRequest.chat("Rate 2+2=4 from 1 to 9.", max_tokens=12, constraint=Constraint(regex=r"Score: [1-9]")),
        GenerationRequest.chat("Say something about judges.", max_tokens=6),
        GenerationRequest.chat(
            JUDGE,
            max_tokens=24,
            temperature=0.9,
            seed=3,
            constraint=Constraint(regex=r"(yes|no), because [a-z ]{3,20}\."),
        ),
    ]
    ticks: list[int] = []
    out = engine.generate(requests, progress=ticks.append)
    assert len(out) == len(requests) and sum(ticks) == len(requests)
    for request, response in zip(requests, out):
        if request.constraint is not None and response.finish_reason == "stop":
            assert violation(request.constraint, response.text) is None, response.text
    assert out[0].text in ("A", "B", "tie") and out[0].finish_reason == "stop"
    assert out[2].finish_reason == "stop" and re.fullmatch(r"Score: [1-9]", out[2].text)
    if out[1].finish_reason == "stop":
        assert json.loads(out[1].text)["better"] in ("A", "B")
    assert out[3].finish_reason == "length" and out[3].completion_tokens == 6
    for response in out:
        assert response.prompt_tokens > 10


def test_a_batch_answers_as_the_requests_do_alone(engine_in_each_dtype) -> None:  # type: ignore[no-untyped-def]
    """Greedy answers do not depend on what else is in the batch, beyond bf16 rounding: the
    verdict letters of a batch equal those of the same requests one by one, in each dtype."""
    engine = engine_in_each_dtype
    prompts = [f"Question {i}: is {i} + {i} = {2 * i}? Answer A for yes, B for no." for i in range(6)]
    requests = [GenerationRequest.chat(p, max_tokens=2, constraint=Constraint(choices=("A", "B"))) for p in prompts]
    together = [r.text for r in engine.generate(requests)]
    alone = [engine.generate([r])[0].text for r in requests]
    assert together == alone


def test_the_growing_kv_cache_decodes_as_transformers_own_cache(engine_in_each_dtype, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The engine's in-place KV cache (`GROWING_KV_CACHE`) against transformers' DynamicCache on
    the same batch, in each dtype: rows that stop at different steps (the cache drops them) and
    decodes that outgrow the cache's first storage twice give the same tokens, greedy and seeded.

    The lengths are built, not hoped for: a regex of N words of 2-4 letters holds a row open
    for at least N and at most 5 N tokens whatever the dtype's numerics make the model say, so
    the rows end apart. The first storage is made small (8 tokens: the prompt's length then
    sizes it), so the storage doubles twice within a short decode; the test counts the
    doublings instead of assuming them from token counts."""
    from bias_discovery.llm import hf

    engine = engine_in_each_dtype
    assert hf._growing_cache(engine.model.config) is not None  # SmolLM2: every layer attends to its whole past
    monkeypatch.setattr(hf, "GROWING_KV_FIRST_STORAGE", 8)
    layer_class = hf._growing_layer_class()
    grow = layer_class._grow
    capacities: list[int] = []

    def counted_grow(layer, key_states, value_states, needed):  # type: ignore[no-untyped-def]
        grow(layer, key_states, value_states, needed)
        capacities.append(layer.stored_keys.shape[-2])

    monkeypatch.setattr(layer_class, "_grow", counted_grow)

    def words(n: int) -> GenerationRequest:
        return GenerationRequest.chat(
            f"Write {n} short words about rivers.",
            max_tokens=5 * n + 5,
            constraint=Constraint(regex=f"([a-z]{{2,4}} ){{{n}}}"),
        )

    requests = [words(8), words(45)]
    requests.append(GenerationRequest.chat("Name a colour.", max_tokens=40, temperature=1.0, top_p=0.9, seed=7))
    requests.append(
        GenerationRequest.chat("Is 2 + 2 = 4? Answer A or B.", max_tokens=2, constraint=Constraint(choices=("A", "B")))
    )
    growing = engine.generate(requests)
    # the storage was made (at least the padded prompt) and doubled at least twice in every layer
    first = min(capacities)
    assert first >= 8 and {first * 2, first * 4} <= set(capacities), capacities
    monkeypatch.setattr(hf, "GROWING_KV_CACHE", False)
    own = engine.generate(requests)
    assert [r.text for r in growing] == [r.text for r in own]
    assert [r.completion_tokens for r in growing] == [r.completion_tokens for r in own]
    assert [r.finish_reason for r in growing] == [r.finish_reason for r in own]
    for n, response in zip((8, 45), growing[:2]):  # the regex held each row open for n words
        assert response.finish_reason == "stop" and len(response.text.split()) == n, response.text
    # rows finished at different steps: the choice (<= 2 tokens), 8 words (<= 40), 45 words (>= 45)
    assert len({r.completion_tokens for r in (growing[3], growing[0], growing[1])}) == 3


def test_sampling_follows_the_seed(engine) -> None:  # type: ignore[no-untyped-def]
    """Seeds 11-17 sampled side by side, with a greedy row, twice: each seed draws again what it
    drew (every row has its own generator), and the seeds do not all draw the same."""

    def sample() -> list[str]:
        requests = [
            GenerationRequest.chat("Name a colour.", max_tokens=12, temperature=1.0, top_p=0.95, seed=seed)
            for seed in range(11, 18)
        ]
        return [r.text for r in engine.generate([*requests, GenerationRequest.chat("Hi.", max_tokens=3)])][:-1]

    first = sample()
    assert sample() == first
    assert len(set(first)) > 1


def test_stop_strings_and_truncation(engine) -> None:  # type: ignore[no-untyped-def]
    stop = engine.generate([GenerationRequest.chat("Count from 1 to 9 with commas.", max_tokens=40, stop=("5",))])[0]
    assert "5" not in stop.text and stop.finish_reason == "stop"
    cut = engine.generate([GenerationRequest.chat("Write a long story.", max_tokens=5)])[0]
    assert cut.finish_reason == "length" and cut.completion_tokens == 5


def test_oversize_prompt_is_an_error_response_not_a_crash(engine) -> None:  # type: ignore[no-untyped-def]
    long = GenerationRequest.chat("word " * (engine.max_model_len + 10), max_tokens=2)
    short = GenerationRequest.chat("Hi.", max_tokens=2)
    out = engine.generate([long, short])
    assert out[0].finish_reason == "error" and "context window" in out[0].text
    assert out[1].finish_reason in ("stop", "length") and out[1].text


def test_a_regex_xgrammar_cannot_compile_fails_before_any_work(engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="xgrammar cannot compile the regex constraint"):
        engine.generate([GenerationRequest.chat("x", constraint=Constraint(regex=r"(a"))])


def test_score_verdicts_come_with_the_verdict_tokens_probabilities(engine) -> None:  # type: ignore[no-untyped-def]
    """Score verdicts on the real model: the verdict token comes back with its top
    log-probabilities (after the grammar's mask, as vLLM's), and each judged order gets a
    probability of preferring the rejected response that agrees with the greedy verdict."""
    from bias_discovery.data.loaders import load_pairs
    from bias_discovery.judging import JudgeSettings, judge_pairs

    settings = JudgeSettings(positions="both", reasoning_chars=120, max_tokens=64, verdict="score")
    pairs = load_pairs("demo:test", limit=2)
    result = judge_pairs(engine, pairs, settings, seed=0)
    for judgment in result.judgments:
        assert judgment.invalid_reason is None, judgment
        assert judgment.p_rejected is not None and 0.0 < judgment.p_rejected < 1.0
        if judgment.p_rejected != 0.5:  # at an exact tie of the labels (bf16) either is the greedy one
            assert (judgment.picked == "rejected") == (judgment.p_rejected > 0.5), judgment


POLICY = (
    "You are grading an airline customer-service agent. The policy: the agent must verify the "
    "user's identity before any change, must never refund a basic economy ticket, must offer a "
    "travel certificate only to silver and gold members whose flight was delayed, and must "
    "explain every fee before the user confirms. "
) * 6


def test_prefix_reuse_gives_the_tokens_of_a_full_prefill(engine_in_each_dtype, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A sub-batch whose rows share a long system prompt, prefilled once and reused, against
    the same requests prefilled in full, in each dtype: the reuse happens, the prompts count
    the same tokens and the verdicts keep their constraint. fp32: the same tokens and stop
    reasons for greedy rows of different lengths, constrained verdicts and a seeded sample. bf16
    promises no more than the above: the prefix computed in one row rounds differently from the
    prefix computed in a padded batch, and a greedy row at a near-tie can part."""
    eng = engine_in_each_dtype
    dtype = eng.dtype

    def requests() -> list[GenerationRequest]:
        tasks = ["The agent refunded a basic economy ticket.", "The agent verified the user's identity first."]
        made = [
            GenerationRequest.chat(task + " Did the agent follow the policy? Explain.", system=POLICY, max_tokens=n)
            for task, n in zip(tasks, (24, 40))
        ]
        made.append(
            GenerationRequest.chat(
                "The agent offered a certificate to a regular member. Write one sentence about it.",
                system=POLICY,
                max_tokens=30,
                temperature=0.8,
                seed=11,
            )
        )
        verdict = Constraint(choices=("pass", "fail"))
        made += [
            GenerationRequest.chat(t + " Verdict, pass or fail:", system=POLICY, max_tokens=4, constraint=verdict)
            for t in tasks
        ]
        return made

    assert eng.prefix_reuse is (dtype in hf.PREFIX_REUSE_DTYPES)
    prefixes: list[int] = []
    prefill = eng._prefill_prefix
    monkeypatch.setattr(eng, "_prefill_prefix", lambda ids, *a: prefixes.append(len(ids)) or prefill(ids, *a))
    monkeypatch.setattr(eng, "prefix_reuse", True)
    reused = eng.generate(requests())
    assert len(prefixes) == 2 and min(prefixes) > 300  # both sub-batches (long, short) reused the policy
    monkeypatch.setattr(eng, "prefix_reuse", False)
    full = eng.generate(requests())
    assert len(prefixes) == 2
    assert [r.prompt_tokens for r in reused] == [r.prompt_tokens for r in full]
    assert all(reused[i].text in ("pass", "fail") and full[i].text in ("pass", "fail") for i in (3, 4))
    if dtype == "float32":
        assert [r.text for r in reused] == [r.text for r in full]
        assert [r.finish_reason for r in reused] == [r.finish_reason for r in full]
        assert [r.completion_tokens for r in reused] == [r.completion_tokens for r in full]

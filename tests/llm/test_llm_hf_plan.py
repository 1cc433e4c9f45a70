"""The transformers engine's choices that need no model: how a batch is cut, which dtype a
machine gets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bias_discovery.errors import ConfigError
from bias_discovery.llm import base, hf
from bias_discovery.llm.hf import (
    MAX_BATCH_ROWS,
    MAX_BATCH_TOKENS,
    MAX_PADDING_SHARE,
    MIN_SHARED_PREFIX,
    choose_device_dtype,
    plan_batches,
    shared_prefix_length,
)


@given(st.lists(st.integers(min_value=1, max_value=4000), max_size=200))
def test_every_request_runs_once_within_the_batch_bounds(lengths: list[int]) -> None:
    batches = plan_batches(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert lengths[batch[0]] == longest
        if len(batch) > 1:  # a single request always runs, whatever its length
            padded = longest * len(batch)
            assert len(batch) <= MAX_BATCH_ROWS and padded <= MAX_BATCH_TOKENS
            assert padded - sum(lengths[i] for i in batch) <= MAX_PADDING_SHARE * padded


def test_similar_lengths_share_a_batch() -> None:
    assert plan_batches([300, 310, 305, 320]) == [[3, 1, 2, 0]]


def test_the_shared_prefix_is_common_to_every_prompt_and_leaves_each_a_token() -> None:
    policy = list(range(1000, 1300))
    assert shared_prefix_length([policy + [1, 2, 3], policy + [1, 2, 4], policy + [9]]) == 300
    assert shared_prefix_length([policy + [1, 2, 3], policy + [1, 2, 3]]) == 302  # identical: all but the last
    assert shared_prefix_length([policy, policy + [5]]) == 299  # a prompt that is the prefix keeps one token
    assert shared_prefix_length([policy + [1]]) == 0  # one row: nothing to share
    assert shared_prefix_length([policy[:100] + [1], policy[:100] + [2]]) == 0  # below the minimum (128)
    assert shared_prefix_length([policy[:100] + [1], policy[:100] + [2]], minimum=50) == 100
    assert shared_prefix_length([[7] + policy, policy]) == 0  # differ at the first token
    assert MIN_SHARED_PREFIX > 32  # the chat template's default system prompt is not worth a pass


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=2, max_size=6))
def test_a_shared_prefix_is_a_prefix_of_every_prompt(prompts: list[list[int]]) -> None:
    length = shared_prefix_length(prompts, minimum=1)
    assert all(p[:length] == prompts[0][:length] and len(p) > length for p in prompts)
    if length and length < min(len(p) for p in prompts) - 1:  # not cut by the one-token rule: maximal
        assert len({p[length] for p in prompts}) > 1


class _FakeTorch:
    """What `choose_device_dtype` asks of torch."""

    float32 = object()
    bfloat16 = object()
    dtype = object

    def __init__(self, cuda: bool = False, bf16: bool = False, mps: bool = False) -> None:
        self.cuda = SimpleNamespace(is_available=lambda: cuda, is_bf16_supported=lambda: bf16)
        self.backends = SimpleNamespace(mps=SimpleNamespace(is_available=lambda: mps))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx2", "avx512f", "avx512_bf16"}, "bfloat16"),
        ({"avx2", "amx_bf16", "amx_tile"}, "bfloat16"),
        ({"avx2", "fma"}, "float32"),
        (set(), "float32"),
    ],
)
def test_a_cpu_gets_bf16_only_where_it_computes_it(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], expected: str
) -> None:
    monkeypatch.setattr(base, "cpu_flags", lambda: flags)
    assert choose_device_dtype(_FakeTorch()) == ("cpu", expected)


@pytest.mark.parametrize(
    ("flags", "dtype", "reason"),
    [
        ({"avx2", "fma"}, "float32", "this CPU has neither AVX512_BF16 nor AMX: bf16 would be emulated"),
        ({"avx2", "avx512f", "avx512_bf16"}, "bfloat16", "this CPU computes bf16 (avx512_bf16)"),
        ({"avx2", "avx512_bf16", "amx_bf16", "amx_tile"}, "bfloat16", "this CPU computes bf16 (amx_bf16, avx512_bf16)"),
    ],
    ids=["avx2-only", "avx512-bf16", "amx"],
)
def test_the_dtype_is_said_with_why_for_each_cpu_kind(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], dtype: str, reason: str
) -> None:
    """The three CPU kinds we run on: the choice and the reason the smoke check and `check`
    print beside it; a dtype the config names is said to come from the config."""
    monkeypatch.setattr(base, "cpu_flags", lambda: flags)
    device, chosen = choose_device_dtype(_FakeTorch())
    assert (device, chosen) == ("cpu", dtype)
    assert hf.dtype_reason(device, chosen).startswith(reason)
    assert hf.dtype_reason(device, "float32", requested="float32") == "the dtype the config asks for"


def test_a_gpu_is_used_when_there_is_one() -> None:
    assert choose_device_dtype(_FakeTorch(cuda=True, bf16=True)) == ("cuda", "bfloat16")
    assert choose_device_dtype(_FakeTorch(cuda=True, bf16=False)) == ("cuda", "float16")
    assert choose_device_dtype(_FakeTorch(mps=True)) == ("mps", "float16")


def test_a_requested_dtype_is_kept_and_a_wrong_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "cpu_flags", lambda: set())
    torch = _FakeTorch()
    torch.dtype = type(torch.float32)
    assert choose_device_dtype(torch, "bfloat16") == ("cpu", "bfloat16")
    with pytest.raises(ConfigError, match="'bf17' is not a torch dtype"):
        choose_device_dtype(torch, "bf17")


def test_choices_become_an_alternation_of_literals() -> None:
    assert hf.choices_ebnf(["A", "B", 'say "x"', "A"]) == 'root ::= "A" | "B" | "say \\"x\\""'

"""The run's budget (`llm/budget.py`) as the meters keep it: a paid request is admitted only
when it fits, a batch is sent up to the first request that does not, cached calls are free,
the in-flight requests are booked, per-role and run limits both hold, dollars from prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from bias_discovery.config import RunConfig
from bias_discovery.errors import EngineError
from bias_discovery.llm.budget import Budget, BudgetReached, BudgetSettings, Spend, worst_case
from bias_discovery.llm.cache import CachedEngine, read_spend
from bias_discovery.llm.config import ModelConfig, Price
from bias_discovery.llm.meter import MeteredEngine
from bias_discovery.llm.types import GenerationRequest, GenerationResponse

from fakes import ScriptedEngine

PRICE = Price(input_per_mtok=2.0, output_per_mtok=10.0)


def requests(n: int, prefix: str = "q") -> list[GenerationRequest]:
    return [GenerationRequest.chat(f"{prefix} {i}", max_tokens=5) for i in range(n)]


def metered(budget: Budget, tmp_path: Path, role: str = "teacher") -> tuple[MeteredEngine, ScriptedEngine]:
    inner = ScriptedEngine(lambda r: "one two")  # 10 prompt tokens, 2 completion tokens
    return MeteredEngine(CachedEngine(inner, tmp_path / "calls.sqlite"), role, budget), inner


def test_a_batch_is_sent_up_to_the_first_request_that_would_pass_the_limit(tmp_path: Path) -> None:
    budget = Budget(BudgetSettings(max_calls=3), {})
    engine, inner = metered(budget, tmp_path)
    with pytest.raises(BudgetReached, match="max calls = 3"):
        engine.generate(requests(5))
    assert len(inner.sent) == 3  # the three that fit were sent (and kept by the cache)
    assert budget.spend()["teacher"] == Spend(calls=3, prompt_tokens=30, completion_tokens=6)
    # a larger budget, counted on from the spend so far: the three come from the cache, free
    larger = Budget(BudgetSettings(max_calls=5), {}, spent=budget.spend())
    engine2, inner2 = metered(larger, tmp_path)
    assert len(engine2.generate(requests(5))) == 5
    assert len(inner2.sent) == 2 and larger.total().calls == 5


def test_cached_calls_are_free_and_in_batch_copies_are_paid_once(tmp_path: Path) -> None:
    budget = Budget(BudgetSettings(max_calls=2), {"teacher": PRICE})
    engine, inner = metered(budget, tmp_path)
    same = requests(1) * 3 + requests(2, "r")[:1]
    engine.generate(same)
    assert len(inner.sent) == 2 and budget.total().calls == 2
    engine.generate(same)  # all cached now: nothing paid, nothing refused
    assert budget.total().calls == 2
    assert budget.total().usd == pytest.approx(2 * (10 * 2.0 + 2 * 10.0) / 1e6)


def test_submitted_requests_are_admitted_one_by_one_and_booked_when_they_arrive(tmp_path: Path) -> None:
    budget = Budget(BudgetSettings(max_tokens=30), {})
    engine, _ = metered(budget, tmp_path)
    first = engine.submit(requests(1)[0])
    assert first.result(timeout=10).text == "one two"
    assert budget.wait_idle(5) and budget.total().tokens == 12
    with pytest.raises(BudgetReached, match="max tokens = 30"):  # 12 spent, each at most 9 + 5: the second does not fit
        for r in requests(3, "s"):
            engine.submit(r).result(timeout=10)
    assert budget.wait_idle(5)


def test_role_limits_and_run_limits_both_hold_and_dollars_come_from_prices(tmp_path: Path) -> None:
    settings = BudgetSettings(max_usd=1.0, roles={"target": BudgetSettings(max_calls=1)})
    budget = Budget(settings, {"teacher": PRICE, "target": None})
    request = requests(1)[0]
    need = budget.admit("target", request)
    budget.settle("target", need, None)
    budget.admit("target", request)
    with pytest.raises(BudgetReached, match="the target past max calls = 1"):
        budget.admit("target", request)  # the first is still in flight
    assert worst_case(request, PRICE).usd == pytest.approx(
        (worst_case(request, None).prompt_tokens * 2.0 + 5 * 10.0) / 1e6
    )
    with pytest.raises(BudgetReached, match="past max usd"):
        Budget(BudgetSettings(max_usd=1e-9), {"teacher": PRICE}).admit("teacher", request)
    Budget(BudgetSettings(max_usd=0.0), {"teacher": None}).admit("teacher", request)  # no price: free


def test_the_budget_is_a_run_setting_settable_by_set_and_checked() -> None:
    from bias_discovery.config import validate_settings

    raw = {"target": "openai/x", "teacher": {"spec": "openai/y", "price": {"input_per_mtok": 3, "output_per_mtok": 15}}}
    config = validate_settings(
        dict(raw), RunConfig, source="t", overrides=["budget.max_usd=5", "budget.roles.teacher.max_calls=100"]
    )
    assert config.budget.max_usd == 5 and config.budget.roles["teacher"].max_calls == 100
    assert config.teacher.price == Price(input_per_mtok=3, output_per_mtok=15)
    from bias_discovery.errors import ConfigError

    with pytest.raises(ConfigError, match="budget.roles"):
        validate_settings(dict(raw), RunConfig, source="t", overrides=["budget.roles.judge.max_calls=1"])
    # a price is not the engine's: two roles that differ only in price share one engine
    from bias_discovery.llm.roles import ModelRoles

    roles = ModelRoles({"a": ModelConfig.from_spec("openai/x"), "b": ModelConfig.from_spec("openai/x", price=PRICE)})
    assert roles._key("a") == roles._key("b")


class FailsAfter(ScriptedEngine):
    """Answers its first `n` requests, then raises (an engine error mid-batch)."""

    def __init__(self, n: int) -> None:
        super().__init__(lambda r: "one two")
        self.n = n

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        if len(self.sent) >= self.n:
            raise EngineError("the server went away")
        return super()._generate_one(request)


def test_a_failed_batch_books_the_calls_paid_before_it_failed_in_memory_and_in_the_ledger(tmp_path: Path) -> None:
    budget = Budget(BudgetSettings(max_calls=10), {"teacher": PRICE})
    engine = MeteredEngine(CachedEngine(FailsAfter(3), tmp_path / "calls.sqlite"), "teacher", budget)
    with pytest.raises(EngineError, match="went away"):
        engine.generate(requests(6))
    paid = Spend(calls=3, prompt_tokens=30, completion_tokens=6)
    booked, ledger = budget.spend()["teacher"], read_spend(tmp_path / "calls.sqlite")["teacher"]
    for spend in (booked, ledger):  # before the fix: released, nothing booked in memory, no ledger
        assert spend.model_copy(update={"usd": 0.0}) == paid
        assert spend.usd == pytest.approx(3 * (10 * 2.0 + 2 * 10.0) / 1e6)
    assert engine.take_usage()["unknown"].requests == 3
    engine.close()


def test_the_ledger_books_every_paid_call_with_its_role_and_no_cached_one(tmp_path: Path) -> None:
    budget = Budget(BudgetSettings(), {"teacher": PRICE, "target": None})
    cache = CachedEngine(ScriptedEngine(lambda r: "one two"), tmp_path / "calls.sqlite")
    teacher, target = MeteredEngine(cache, "teacher", budget), MeteredEngine(cache, "target", budget)
    teacher.generate(requests(3) * 2)  # copies in the batch are paid once
    assert [f.result(timeout=10).text for f in [target.submit(r) for r in requests(2, "s")]] == ["one two"] * 2
    target.generate(requests(3))  # the teacher's calls, from the cache: free
    cache.flush()
    ledger = read_spend(tmp_path / "calls.sqlite")
    assert ledger["teacher"].calls == 3 and ledger["target"] == Spend(calls=2, prompt_tokens=20, completion_tokens=4)
    assert ledger == budget.spend()
    cache.close()
    assert read_spend(tmp_path / "missing.sqlite") == {}


def test_a_run_counts_its_spend_from_the_larger_of_run_json_and_the_ledger(tmp_path: Path) -> None:
    from bias_discovery.llm.budget import merged_spend

    ledger = {"teacher": Spend(calls=5, prompt_tokens=50, completion_tokens=10, usd=1.0)}
    stale = {"teacher": Spend(calls=3, prompt_tokens=30, completion_tokens=6, usd=0.5), "target": Spend(calls=1)}
    assert merged_spend(stale, ledger) == {"teacher": ledger["teacher"], "target": Spend(calls=1)}

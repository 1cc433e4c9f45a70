"""A run's budget: limits on paid calls, tokens and dollars, kept before every request.

Only calls the call cache cannot answer are paid; the meter of each role (`meter.py`) asks
`Budget.admit` before it sends one, and books what the response cost (`Budget.settle`). A
request is admitted when the spend so far, the requests still in flight and the request's
worst case all fit under every limit that applies (the role's and the run's): its prompt
estimated at `CHARS_PER_TOKEN` characters a token (servers report the exact count afterwards),
its completion at `max_tokens`. So a limit is kept up to the error of that prompt estimate, and
the run stops at a request boundary (`BudgetReached`) instead of sending the request that
could pass it. Dollars come from each role's `price` (per million input and output tokens); a
role without a price costs nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from ..errors import BiasDiscoveryError
from .config import Price
from .types import GenerationRequest, GenerationResponse

CHARS_PER_TOKEN = 3.0
"""Characters per prompt token in a request's worst case (English text runs about 4 a token
with the usual tokenizers: 3 leaves a margin), plus `TOKENS_PER_MESSAGE` for the chat template."""
TOKENS_PER_MESSAGE = 8
ROLES = ("target", "teacher", "checker")


class BudgetLimits(BaseModel):
    """Upper bounds on what is paid (cached calls are free); None: no bound."""

    max_usd: float | None = Field(default=None, ge=0)
    """Dollars, from the roles' prices (`price` of each role's model; a role without one costs nothing)."""
    max_calls: int | None = Field(default=None, ge=0)
    """Requests sent to a model (not answered by the call cache)."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Prompt and completion tokens together, as the servers report them."""

    def limits(self) -> dict[str, float]:
        """The bounds set, by name (`max_usd` ...)."""
        values = {"max_usd": self.max_usd, "max_calls": self.max_calls, "max_tokens": self.max_tokens}
        return {k: v for k, v in values.items() if v is not None}


class BudgetSettings(BudgetLimits):
    """The run's budget: the limits above on all roles together, and `roles` on one role each
    (`--set budget.max_usd=5`, `--set budget.roles.teacher.max_calls=1000`). `resume` takes a
    new budget with `--set budget...` and keeps it in the run's config."""

    roles: dict[str, BudgetLimits] = Field(default_factory=dict)
    """Limits of one role (`target`, `teacher`, `checker`), kept besides the run's."""

    def is_set(self) -> bool:
        return bool(self.limits()) or any(r.limits() for r in self.roles.values())


class Spend(BaseModel):
    """What one role (or the run) paid: calls sent, their tokens and dollars."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus(self, other: Spend) -> Spend:
        return Spend(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            usd=self.usd + other.usd,
        )

    def text(self) -> str:
        return f"{self.calls:,} calls, {self.tokens:,} tokens, ${self.usd:,.4f}"


def cost(price: Price | None, prompt_tokens: int, completion_tokens: int) -> float:
    """Dollars of a call at `price` (0 without one)."""
    if price is None:
        return 0.0
    return (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6


class Payer(NamedTuple):
    """Who pays for a call and at what price: the role a meter books it to. The call cache
    writes what each fresh response cost to its ledger, in the transaction that stores the
    response (`llm.cache`), so spend survives a kill exactly as the calls it paid for do."""

    role: str
    price: Price | None

    def charge(self, response: GenerationResponse) -> Spend:
        """What `response` cost this payer: one call, its tokens as the server reported them."""
        return Spend(
            calls=1,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            usd=cost(self.price, response.prompt_tokens, response.completion_tokens),
        )


def merged_spend(*sources: Mapping[str, Spend]) -> dict[str, Spend]:
    """Per role, the largest of each figure over `sources` (run.json's spend and the call
    cache's ledger): each source may miss calls (run.json is written at a stage's end, the
    ledger began with this version), neither counts a call that was not paid."""
    out: dict[str, Spend] = {}
    for source in sources:
        for role, s in source.items():
            known = out.get(role, Spend())
            out[role] = Spend(
                calls=max(known.calls, s.calls),
                prompt_tokens=max(known.prompt_tokens, s.prompt_tokens),
                completion_tokens=max(known.completion_tokens, s.completion_tokens),
                usd=max(known.usd, s.usd),
            )
    return out


def worst_case(request: GenerationRequest, price: Price | None) -> Spend:
    """What `request` can cost at most (its prompt estimated, see the module docstring)."""
    chars = sum(len(m.content) for m in request.messages)
    prompt = math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(request.messages)
    return Spend(
        calls=1, prompt_tokens=prompt, completion_tokens=request.max_tokens, usd=cost(price, prompt, request.max_tokens)
    )


class BudgetReached(BiasDiscoveryError):
    """The next request would pass a limit: the run stops before it (exit code 4)."""

    def __init__(self, message: str, spend: Mapping[str, Spend], setting: str = "budget.max_usd") -> None:
        super().__init__(message)
        self.spend = dict(spend)
        self.setting = setting
        """The limit that was reached, as the setting that raises it (`budget.max_calls`,
        `budget.roles.teacher.max_usd` ...): what the hint tells a user to raise."""


_MEASURES = {
    "max_calls": ("calls", lambda s: s.calls),
    "max_tokens": ("tokens", lambda s: s.tokens),
    "max_usd": ("dollars", lambda s: s.usd),
}


class Budget:
    """The limits of `settings`, the spend so far by role (`spent`, from run.json on a resume),
    the requests in flight; thread-safe (streamed stages admit from several threads)."""

    def __init__(
        self, settings: BudgetSettings, prices: Mapping[str, Price | None], spent: Mapping[str, Spend] | None = None
    ) -> None:
        self.settings = settings
        self.prices = dict(prices)
        self.spent: dict[str, Spend] = {role: s.model_copy() for role, s in (spent or {}).items()}
        self._reserved: dict[str, Spend] = {}
        self._in_flight = 0
        self._lock = threading.Condition()

    def spend(self) -> dict[str, Spend]:
        """Spend so far by role (a copy)."""
        with self._lock:
            return {role: s.model_copy() for role, s in self.spent.items()}

    def total(self) -> Spend:
        with self._lock:
            return _sum(self.spent.values())

    def admit(self, role: str, request: GenerationRequest) -> Spend:
        """Reserve `request`'s worst case for `role`, or raise `BudgetReached` (nothing reserved)."""
        need = worst_case(request, self.prices.get(role))
        with self._lock:
            scopes: list[tuple[str, BudgetLimits, Spend]] = [
                ("the run", self.settings, _sum([*self.spent.values(), *self._reserved.values()]))
            ]
            settings = {"the run": "budget", f"the {role}": f"budget.roles.{role}"}
            if role in self.settings.roles:
                scopes.append(
                    (
                        f"the {role}",
                        self.settings.roles[role],
                        self.spent.get(role, Spend()).plus(self._reserved.get(role, Spend())),
                    )
                )
            for scope, limits, used in scopes:
                for key, bound in limits.limits().items():
                    what, measure = _MEASURES[key]
                    if measure(used.plus(need)) > bound:
                        raise BudgetReached(
                            self._message(scope, key, bound, what, used, need), self.spent, f"{settings[scope]}.{key}"
                        )
            self._reserved[role] = self._reserved.get(role, Spend()).plus(need)
            self._in_flight += 1
        return need

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every admitted request has its response (or failed), at most `timeout`
        seconds: a run stopped at its budget books what is still in flight before it says what
        it spent. False: some were still out."""
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, timeout)

    def settle(self, role: str, reserved: Spend, response: GenerationResponse | None, paid: bool = True) -> None:
        """Release a reservation and book what the response cost (`paid` False: the cache
        answered it after all, or the request failed before a response)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._lock.notify_all()
            left = self._reserved.get(role, Spend())
            self._reserved[role] = Spend(**{k: max(0, v - getattr(reserved, k)) for k, v in left.model_dump().items()})
            if response is not None and paid:
                booked = self.payer(role).charge(response)
                self.spent[role] = self.spent.get(role, Spend()).plus(booked)

    def payer(self, role: str) -> Payer:
        """`role` with its price, as the call cache's ledger books it."""
        return Payer(role, self.prices.get(role))

    def _message(self, scope: str, key: str, bound: float, what: str, used: Spend, need: Spend) -> str:
        shown: Any = f"${bound:g}" if key == "max_usd" else f"{bound:,.0f}"
        return (
            f"budget reached: the next request could take {scope} past {key.replace('_', ' ')} = {shown} "
            f"({what}: spent and in flight {_MEASURES[key][1](used):,.4g}, this request at most "
            f"{_MEASURES[key][1](need):,.4g})"
        )


def _sum(spends: Any) -> Spend:
    total = Spend()
    for s in spends:
        total = total.plus(s)
    return total

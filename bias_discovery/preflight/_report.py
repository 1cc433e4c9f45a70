"""The preflight's reports and models: findings per endpoint, planned calls per stage, the
expected calls, tokens and dollars with what they assume."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ..llm.types import GenerationRequest
from ..loop.pilot import PilotRecord

Status = Literal["ok", "warn", "fail", "info"]
LONGEST_PER_STAGE = 1
"""Prompts measured per stage: the longest by characters (tokens follow characters closely
enough to find the longest), measured exactly by the model: one prefill each, which on a
busy CPU costs seconds."""


class Finding(BaseModel):
    status: Status
    what: str
    detail: str


class EndpointReport(BaseModel):
    role: str
    spec: str
    endpoint: str
    findings: list[Finding] = []
    tokens_per_s: float | None = None
    """Completion tokens a second the server (or engine) gave in `check`'s throughput probe."""

    @property
    def failed(self) -> bool:
        return any(f.status == "fail" for f in self.findings)


class StageCalls(BaseModel):
    stage: str
    role: str
    per_iteration: int
    total: int
    exact: bool
    note: str = ""


class PreflightReport(BaseModel):
    endpoints: list[EndpointReport]
    calls: list[StageCalls]
    estimates: list[StageEstimate] = []
    """Expected calls, tokens and dollars per stage and role beside their bounds (`estimate_run`)."""
    assumptions: Assumptions | None = None
    max_iterations: int
    n_target: int
    n_test: int
    skipped_rows: int = 0
    """Bad data rows skipped at load (`data.skip_bad_rows`), target and test together."""
    pilot: PilotRecord | None = None
    """What `check --pilot N` measured (`loop.pilot`), when it ran."""

    @property
    def problems(self) -> int:
        return sum(1 for e in self.endpoints for f in e.findings if f.status == "fail")


class _Prompt(BaseModel):
    """One prompt to measure: the request (with max_tokens=1 sent), what the run adds to it
    (generated parts, in tokens) and its own output budget."""

    stage: str
    request: GenerationRequest
    added_tokens: int = 0
    added_note: str = ""
    output_tokens: int


class Assumptions(BaseModel):
    """What the expected figures of `check` assume (each printed with them; the bounds assume
    none of it)."""

    misjudged_share: float = 0.3
    """Share of the perturbed target pairs the judge gets wrong (each goes on to deeper_explain,
    identify and merge)."""
    candidates_per_iteration: float = 5
    """New candidates Merge leaves per iteration (at most `validate.max_candidates`)."""
    sequential_share: float = 0.5
    """Share of the test items a candidate is judged on before its sequential validation stops
    (stopping early for futility or efficacy; 1 without sequential looks)."""
    chars_per_token: float = 4.0
    """Characters per prompt token (English text with the usual tokenizers)."""
    completion_share: float = 0.5
    """Share of `max_tokens` a free-text completion uses (explanations, identified biases)."""
    measured: dict[str, str] = {}
    """The figures a pilot measured (`check --pilot N`), by field name: how, on what n; the
    others are assumed."""

    @classmethod
    def from_pilot(cls, pilot: PilotRecord, n_target: int) -> Assumptions:
        """The defaults, with what `pilot` measured in their place: the misjudged share (with
        its Wilson interval), the candidates per iteration (candidates per counted misjudgment,
        times the misjudgments expected on `n_target` pairs: merging across more pairs leaves
        fewer, so this leans high) and the share of test items validation rewrote."""
        a = cls()
        m = pilot.misjudged
        a.misjudged_share = m.share
        a.measured["misjudged_share"] = (
            f"{m.k} of {m.n} perturbed target pairs, Wilson 95% CI {m.ci_low:.0%}–{m.ci_high:.0%}"
        )
        per = pilot.candidates_per_misjudged
        a.candidates_per_iteration = (per or 0.0) * m.share * n_target
        a.measured["candidates_per_iteration"] = (
            f"{pilot.candidates} candidates from {m.k} misjudgments, x {m.share:.0%} of {n_target} pairs"
        )
        if pilot.sequential is not None:
            q = pilot.sequential
            a.sequential_share = q.share
            a.measured["sequential_share"] = (
                f"{q.k} of {q.n} rewrites of {pilot.validated} candidate(s) on {pilot.n_test} test items"
            )
        return a


class StageEstimate(BaseModel):
    """One stage and role: calls, prompt and completion tokens, expected and at most, and dollars."""

    stage: str
    role: str
    calls: float
    calls_bound: int
    prompt_tokens: float
    prompt_tokens_bound: float
    completion_tokens: float
    completion_tokens_bound: float
    usd: float | None = None
    usd_bound: float | None = None
    measured_calls: int = 0
    """Calls of the pilot the stage's calls per target pair were measured on (0: assumed)."""
    measured_tokens: int = 0
    """Calls of the pilot its tokens per call were measured on (0: from characters, assumed)."""


PreflightReport.model_rebuild()

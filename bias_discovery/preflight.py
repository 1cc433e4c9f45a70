"""`bias-discovery check CONFIG`: what a long run would meet, found out in a minute.

Run on the GPU node before a run. For each role (target, teacher) and each of its servers:

- the endpoint or engine, and whether it answers (`GET /models`; an embedded or in-process
  model is loaded);
- whether the served model name is the config's `model` (a 404 hours later otherwise);
- a constraint probe per constraint kind the role needs (judge: regex or choices; teacher:
  JSON schema and choices), through the engine exactly as the run would send it: a server
  that answers with free text does not enforce structured outputs;
- the longest prompts of the run's stages on its data, measured in tokens by the model itself
  (one request with max_tokens=1 each), against the model's context: `max_model_len` from
  `/v1/models` (vLLM), `n_ctx` (llama.cpp), `max_model_len` or config.json's
  `max_position_embeddings` (offline vLLM; an estimate when the engine does not say);
- the planned calls per stage, from the config and the data sizes.

Prompts whose inputs the run generates (the teacher's rewrite, the judge's reasoning) are
measured with those parts empty and their token budgets added: a worst case, reported as a
warning when only the worst case does not fit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel

from .config import RunConfig
from .data.pairs import PreferencePair
from .errors import BiasDiscoveryError
from .formatting import plural
from .judging import build_tasks, verdict_constraint
from .library import Bias, BiasLibrary, load_seed_library
from .llm.base import Engine
from .llm.config import ModelConfig, Price
from .llm.conformance import PROBE_CONSTRAINTS, ConstraintKind, probe_failure, probe_request
from .llm.openai.wire import probe_kind
from .llm.types import Constraint, GenerationRequest
from .loop.pilot import PilotRecord
from .progress import ProgressFactory

if TYPE_CHECKING:
    from .llm.smoke import SmokeResult
    from .stages.records import MisjudgedCase

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


# --------------------------------------------------------------------------------------
# Planned calls
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CallSizes:
    """What every stage's call count is a product of, computed once and handed to the helper of
    each stage group (so the groups cannot disagree on, say, the calls per judged pair)."""

    n_target: int
    n_test: int
    per_pair: int
    """Judge calls per pair (`judging.calls_per_pair`: both orders, a mitigation's extra calls)."""
    iterations: int
    checks: int
    """Answer checks per run of the test pairs, at most (0 without `validate.answer_check`)."""


def planned_calls(config: RunConfig, n_target: int, n_test: int, n_seeds: int = 0) -> list[StageCalls]:
    """Calls per stage and role: exact where the config fixes them, else upper bounds (the
    number of misjudgments and candidates is only known during the run; sequential validation
    stops many candidates before the last slice, so its rows are what validating every item
    would cost). `n_seeds`: the seed library's size (validated at iteration 0 with
    `validate.seeds`)."""
    from .judging import calls_per_pair

    s = _CallSizes(
        n_target=n_target,
        n_test=n_test,
        per_pair=calls_per_pair(config.judge),
        iterations=config.max_iterations,
        checks=2 * n_test if config.validate_.answer_check else 0,
    )  # each rewrite, each original once
    return [
        *_discovery_calls(config, s),
        *_placebo_calls(config, s),
        *_seed_calls(config, s, n_seeds),
        *_validate_calls(config, s),
    ]


def _discovery_calls(config: RunConfig, s: _CallSizes) -> list[StageCalls]:
    """The loop's per-iteration stages (perturb, evaluate, deeper_explain, identify, merge) and
    the once-per-run baseline: the rows that hold for every control and validation setting."""
    n_target, t, per_pair = s.n_target, s.iterations, s.per_pair
    judged = n_target * per_pair
    how = f"{config.judge.positions}" + (
        f", mitigation {config.judge.mitigation}" if config.judge.mitigation != "none" else ""
    )
    if config.judge.mode == "pointwise":
        how = f"pointwise: each response scored alone on {config.judge.scale}"
    rows = [
        StageCalls(
            stage="perturb",
            role="teacher",
            per_iteration=n_target,
            total=n_target * t,
            exact=True,
            note=plural(n_target, "target pair"),
        ),
        StageCalls(
            stage="evaluate",
            role="target",
            per_iteration=judged,
            total=judged * t,
            exact=False,
            note=f"{plural(per_pair, 'call')} per pair ({how}); invalid rewrites are not judged",
        ),
    ]
    if config.deeper_explain.enabled:
        rows.append(
            StageCalls(
                stage="deeper_explain",
                role="target",
                per_iteration=n_target,
                total=n_target * t,
                exact=False,
                note="one per misjudged pair",
            )
        )
    tries = 1 + config.identify.retries
    return [
        *rows,
        StageCalls(
            stage="identify",
            role="teacher",
            per_iteration=n_target * tries,
            total=n_target * tries * t,
            exact=False,
            note=f"one per misjudged pair, up to {plural(tries, 'try', 'tries')}",
        ),
        StageCalls(
            stage="merge",
            role="teacher",
            per_iteration=n_target * config.merge.top_k,
            total=n_target * config.merge.top_k * t,
            exact=False,
            note=f"top_k={config.merge.top_k} neighbours above similarity {config.merge.similarity_threshold:g}",
        ),
        StageCalls(
            stage="baseline",
            role="target",
            per_iteration=s.n_test * per_pair,
            total=s.n_test * per_pair,
            exact=True,
            note=f"{plural(s.n_test, 'test pair')}, once per run",
        ),
    ]


def _placebo_calls(config: RunConfig, s: _CallSizes) -> list[StageCalls]:
    """The placebo control's rows (none with another control): neutral rewrites of the test
    pairs, their judgments and answer checks, once per run."""
    if config.validate_.control != "placebo":
        return []
    n_test = s.n_test
    rows = [
        StageCalls(
            stage="placebo (rewrite)",
            role="teacher",
            per_iteration=n_test,
            total=n_test,
            exact=True,
            note="neutral rewrites of the test pairs, once per run",
        ),
        StageCalls(
            stage="placebo (judge)",
            role="target",
            per_iteration=n_test * s.per_pair,
            total=n_test * s.per_pair,
            exact=False,
            note="once per run; invalid rewrites are not judged",
        ),
    ]
    if s.checks:
        rows.append(
            StageCalls(
                stage="placebo (check)",
                role="checker",
                per_iteration=s.checks,
                total=s.checks,
                exact=False,
                note="at most: answer check of each rewrite and its original (none where the answers are read mechanically)",
            )
        )
    return rows


def _seed_calls(config: RunConfig, s: _CallSizes, n_seeds: int) -> list[StageCalls]:
    """The seed library's validation at iteration 0 (`validate.seeds`; none without seeds)."""
    v = config.validate_
    if not (v.seeds and n_seeds):
        return []
    seeds = min(n_seeds, v.max_candidates or n_seeds)
    rewrites = seeds * s.n_test
    return _validation_rows(
        "validate_seeds",
        s,
        rewrites=rewrites,
        checks=rewrites,
        times=1,
        note=f"{seeds} seed bias(es), once per run",
        check_note="at most: answer check of each rewrite",
    )


def _validate_calls(config: RunConfig, s: _CallSizes) -> list[StageCalls]:
    """Each iteration's validation of its candidates on every test pair: an upper bound, since
    the candidates are only known during the run and sequential looks stop many early."""
    v = config.validate_
    candidates = v.max_candidates or s.n_target
    cand_note = f"max_candidates={v.max_candidates}" if v.max_candidates else "one per misjudged pair at most"
    rewrites = candidates * s.n_test
    return _validation_rows(
        "validate",
        s,
        rewrites=rewrites,
        checks=rewrites + s.n_test,
        times=s.iterations,
        note=cand_note,
        check_note="at most: answer check of each rewrite (originals once; none where the answers are read mechanically)",
    )


def _validation_rows(
    stage: str, s: _CallSizes, *, rewrites: int, checks: int, times: int, note: str, check_note: str
) -> list[StageCalls]:
    """A validation's rows, per iteration and over `times` of them: the teacher's rewrites, the
    target's judgments of them (`s.per_pair` each) and, where answers are checked, at most
    `checks` checker calls. Upper bounds (`exact=False`): sequential looks stop many early."""
    rows = [
        StageCalls(
            stage=f"{stage} (perturb)",
            role="teacher",
            per_iteration=rewrites,
            total=rewrites * times,
            exact=False,
            note=note,
        ),
        StageCalls(
            stage=f"{stage} (judge)",
            role="target",
            per_iteration=rewrites * s.per_pair,
            total=rewrites * s.per_pair * times,
            exact=False,
            note=note,
        ),
    ]
    if s.checks:
        rows.append(
            StageCalls(
                stage=f"{stage} (check)",
                role="checker",
                per_iteration=checks,
                total=checks * times,
                exact=False,
                note=check_note,
            )
        )
    return rows


# --------------------------------------------------------------------------------------
# The prompts of a run
# --------------------------------------------------------------------------------------


def _longest(prompts: Sequence[_Prompt]) -> list[_Prompt]:
    def size(p: _Prompt) -> int:
        return sum(len(m.content) for m in p.request.messages)

    return sorted(prompts, key=size, reverse=True)[:LONGEST_PER_STAGE]


def _one_token(request: GenerationRequest) -> GenerationRequest:
    """The request as it is measured: one output token and no constraint (only its prompt's
    length in tokens is wanted)."""
    return request.model_copy(update={"max_tokens": 1, "constraint": None})


def run_prompts(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    library: BiasLibrary,
) -> dict[str, list[_Prompt]]:
    """The longest prompts of each stage, per role, built with the stages' own builders
    (`library`: the run's seed library, whose longest bias goes into the teacher's prompts)."""
    from .stages.records import MisjudgedCase

    bias = max(library.biases, key=lambda b: len(b.as_prompt_text()))
    all_pairs = list(target_pairs) + list(test_pairs)
    # every pair as a misjudgment, its generated parts empty; a pointwise judge's case is its
    # score of the rejected response (no position), as the loop makes it (stages.evaluate)
    pointwise = config.judge.mode == "pointwise"
    shown = (
        {"order": "rejected", "verdict": None, "score": config.judge.scale_spec.high}
        if pointwise
        else {"order": "chosen_first", "verdict": "B"}
    )
    cases = [
        MisjudgedCase(
            pair_id=p.id,
            bias_id=bias.id,
            domain=p.domain,
            question=p.question,
            chosen=p.chosen,
            original_rejected=p.rejected,
            perturbed_rejected="",
            judge_output="",
            explanation="",
            **shown,
        )
        for p in all_pairs
    ]
    return {
        "target": _target_prompts(config, target_pairs, test_pairs, cases),
        "teacher": _teacher_prompts(config, all_pairs, bias, cases),
    }


def _target_prompts(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    cases: Sequence[MisjudgedCase],
) -> list[_Prompt]:
    """The judge's longest prompts: the baseline on the test pairs, evaluate on the perturbed
    target pairs (the rewrite's budget added) and deeper_explain (when enabled)."""
    from .stages.explain import build_explain_request

    seed, judge = config.seed, config.judge
    perturb_budget = config.perturb.max_tokens
    target: list[_Prompt] = []
    target += _longest(
        [
            _Prompt(stage="baseline judge (test data)", request=_one_token(t.request), output_tokens=judge.max_tokens)
            for t in build_tasks(test_pairs, judge, seed=seed)
        ]
    )
    emptied = [p.model_copy(update={"rejected": ""}) for p in target_pairs]
    target += _longest(
        [
            _Prompt(
                stage="evaluate (perturbed target pairs)",
                request=_one_token(t.request),
                added_tokens=perturb_budget,
                added_note=f"the rewrite, at most perturb.max_tokens={perturb_budget}",
                output_tokens=judge.max_tokens,
            )
            for t in build_tasks(emptied, judge, seed=seed)
        ]
    )
    if config.deeper_explain.enabled:
        target += _longest(
            [
                _Prompt(
                    stage="deeper_explain",
                    request=_one_token(build_explain_request(c, judge, config.deeper_explain, seed=seed)),
                    added_tokens=perturb_budget + judge.max_tokens,
                    added_note=f"the rewrite ({perturb_budget}) and the judge's answer ({judge.max_tokens})",
                    output_tokens=config.deeper_explain.max_tokens,
                )
                for c in cases
            ]
        )
    return target


def _teacher_prompts(
    config: RunConfig, all_pairs: Sequence[PreferencePair], bias: Bias, cases: Sequence[MisjudgedCase]
) -> list[_Prompt]:
    """The teacher's longest prompts: perturb with the longest seed bias, and identify (the
    rewrite's, the verdict's and the explanation's budgets added)."""
    from .stages.identify import build_identify_request
    from .stages.perturb import build_perturb_request

    seed, judge = config.seed, config.judge
    perturb_budget = config.perturb.max_tokens
    explain_budget = config.deeper_explain.max_tokens if config.deeper_explain.enabled else 0
    teacher: list[_Prompt] = []
    teacher += _longest(
        [
            _Prompt(
                stage="perturb (target and test pairs)",
                request=_one_token(build_perturb_request(p, bias, config.perturb, seed)),
                output_tokens=perturb_budget,
            )
            for p in all_pairs
        ]
    )
    teacher += _longest(
        [
            _Prompt(
                stage="identify",
                request=_one_token(build_identify_request(c, config.identify, seed)),
                added_tokens=perturb_budget + judge.max_tokens + explain_budget,
                added_note=f"the rewrite ({perturb_budget}), the judge's answer ({judge.max_tokens})"
                + (f" and its deeper explanation ({explain_budget})" if explain_budget else ""),
                output_tokens=config.identify.max_tokens,
            )
            for c in cases
        ]
    )
    return teacher


def role_constraints(config: RunConfig, role: str) -> list[Constraint]:
    """A constraint of each kind a role's requests use."""
    if role == "target":
        return [verdict_constraint(config.judge)]
    return [PROBE_CONSTRAINTS["json_schema"], PROBE_CONSTRAINTS["choices"]]  # identify, merge


# --------------------------------------------------------------------------------------
# Checking one endpoint
# --------------------------------------------------------------------------------------


def _context_of(config: ModelConfig, engine: Engine, models_entry: dict[str, Any] | None) -> tuple[int | None, str]:
    """The model's context in tokens and where that number comes from."""
    if models_entry and isinstance(models_entry.get("max_model_len"), int):
        return int(models_entry["max_model_len"]), "max_model_len from /v1/models"
    n_ctx = getattr(engine, "n_ctx", None)
    if isinstance(n_ctx, int):
        return n_ctx, "n_ctx of the llama.cpp engine"
    max_len = getattr(engine, "max_model_len", None)
    if isinstance(max_len, int):
        return max_len, "max_model_len of the engine"
    if config.provider in ("vllm", "hf"):
        if config.max_model_len:
            return config.max_model_len, "max_model_len from the config"
        path = Path(config.model).expanduser() / "config.json"
        try:
            import json

            value = json.loads(path.read_text()).get("max_position_embeddings")
            if isinstance(value, int):
                return value, f"max_position_embeddings of {path} (an estimate: vLLM may cap it lower)"
        except (OSError, ValueError):
            pass
    return None, "the server does not report its context"


class _Engines:
    """Engines by config, built once (a target that is also the teacher is loaded once),
    closed together."""

    def __init__(self, build: Callable[[ModelConfig], Engine]) -> None:
        self.build = build
        self.built: dict[str, tuple[Engine | None, str, float]] = {}

    def get(self, config: ModelConfig) -> tuple[Engine | None, str, float, bool]:
        """(engine or None, error, seconds to build, built before)."""
        key = config.model_dump_json()
        again = key in self.built
        if not again:
            started = time.monotonic()
            try:
                self.built[key] = (self.build(config), "", time.monotonic() - started)
            except BiasDiscoveryError as exc:
                self.built[key] = (None, str(exc), time.monotonic() - started)
        engine, error, seconds = self.built[key]
        return engine, error, seconds, again

    def close(self) -> None:
        for engine, _, _ in self.built.values():
            if engine is not None:
                engine.close()
        self.built.clear()


def _endpoint_name(config: ModelConfig) -> str:
    if config.provider == "openai":
        return f"OpenAI-compatible server {config.base_urls[0] if config.base_urls else '(no base_url)'}"
    if config.provider == "llamacpp":
        return f"embedded llama.cpp ({config.model}, n_ctx {config.n_ctx})"
    if config.provider == "hf":
        return f"embedded transformers ({config.model}, batched)"
    if config.provider == "vllm":
        return f"vLLM in this process ({config.model}, TP {config.tensor_parallel_size})"
    return f"{config.provider} in this process ({config.model})"


def _check_smoke(
    config: ModelConfig, smoke: Callable[[ModelConfig], SmokeResult], add: Callable[[Finding], None]
) -> bool:
    """The child-process check of an embedded engine, run first because a build that crashes on
    this CPU would take the check down; False when it failed (nothing more to check then)."""
    result = smoke(config)
    if not result.ok:
        how = f"killed by {result.signal}" if result.signal else (result.failure or "failed")
        add(
            Finding(
                status="fail",
                what="engine (child process)",
                detail=(
                    f"{result.engine}: {how}: {result.detail}" + (f"; remedy: {result.remedy}" if result.remedy else "")
                ),
            )
        )
        return False
    add(Finding(status="ok", what="engine (child process)", detail=f"{result.detail} in {result.seconds:.1f} s"))
    return True


@dataclass(frozen=True)
class _Served:
    """What a server told the check that its later steps need: its `/models` entry for the
    configured model (which may carry the context) and the constraint kinds to probe, as its
    dialect will send them."""

    entry: dict[str, Any] | None
    kinds: list[ConstraintKind]


def _check_model_name(
    config: ModelConfig, data: Sequence[dict[str, Any]], add: Callable[[Finding], None]
) -> dict[str, Any] | None:
    """Whether the server serves the config's model (a 404 hours into the run otherwise), from
    the entries of its `GET /models`; returns the model's entry when it does."""
    ids = [str(e.get("id")) for e in data]
    if config.model in ids:
        add(Finding(status="ok", what="model name", detail=f"{config.model!r} is served"))
        return next(e for e in data if e.get("id") == config.model)
    if ids:
        add(
            Finding(
                status="fail",
                what="model name",
                detail=(
                    f"the server serves {', '.join(repr(i) for i in ids)}, not {config.model!r}: set the role's model to "
                    f"the served name, or start the server with --served-model-name {config.model}"
                ),
            )
        )
    else:
        add(Finding(status="warn", what="model name", detail="GET /models listed no model; cannot check the name"))
    return None


def _check_server(
    engine: Engine, config: ModelConfig, constraints: Sequence[Constraint], add: Callable[[Finding], None]
) -> _Served | None:
    """An OpenAI-compatible server's own checks: it answers `GET /models`, serves the model,
    and has a dialect; None when the server cannot be checked further."""
    url = config.base_urls[0]
    started = time.monotonic()
    try:
        models = engine.list_models()  # type: ignore[attr-defined]
    except BiasDiscoveryError as exc:
        add(Finding(status="fail", what="reachable", detail=str(exc)))
        return None
    took = time.monotonic() - started
    data = [e for e in ((models or {}).get("data") or []) if isinstance(e, dict)]
    owners = sorted({str(e.get("owned_by")) for e in data})
    add(
        Finding(
            status="ok",
            what="reachable",
            detail=f"GET {url}/models answered in {took:.2f} s"
            + (f" (owned_by {', '.join(owners)})" if owners else ""),
        )
    )
    entry = _check_model_name(config, data, add)
    try:
        dialect = engine.dialect  # type: ignore[attr-defined]
    except BiasDiscoveryError as exc:
        add(Finding(status="fail", what="dialect", detail=str(exc)))
        return None
    how = "configured" if config.structured_outputs != "auto" else "detected from /models"
    add(
        Finding(
            status="info",
            what="dialect",
            detail=f"{dialect} ({how}); {engine.max_concurrency} requests in flight per server",  # type: ignore[attr-defined]
        )
    )
    # probe what the run will send: the openai dialect sends the verdict format as a JSON schema
    return _Served(entry=entry, kinds=list(dict.fromkeys(probe_kind(c, dialect) for c in constraints)))


def check_endpoint(
    role: str,
    config: ModelConfig,
    engines: _Engines,
    constraints: Sequence[Constraint],
    prompts: Sequence[_Prompt],
    smoke: Callable[[ModelConfig], SmokeResult] | None = None,
) -> EndpointReport:
    """Every check of one server (or one embedded / in-process engine) for one role.
    `smoke`: the child-process check of an embedded engine, transformers or llama.cpp
    (`llm.smoke`), run before the engine is loaded in this process."""
    report = EndpointReport(role=role, spec=config.spec, endpoint=_endpoint_name(config))
    add = report.findings.append
    if smoke is not None and config.provider in SMOKE_CHECKED_PROVIDERS and not _check_smoke(config, smoke, add):
        return report
    engine, error, seconds, again = engines.get(config)
    if engine is None:
        add(Finding(status="fail", what="engine", detail=error))
        return report
    served = _Served(entry=None, kinds=list(dict.fromkeys(c.kind for c in constraints)))
    if config.provider == "openai":
        server = _check_server(engine, config, constraints, add)
        if server is None:
            return report
        served = server
    elif again:
        add(Finding(status="ok", what="loaded", detail=f"the same engine as above ({engine.engine_id})"))
    else:
        add(Finding(status="ok", what="loaded", detail=f"{engine.engine_id} in {seconds:.1f} s"))
    _probe(engine, served.kinds, add)
    context, source = _context_of(config, engine, served.entry)
    add(
        Finding(
            status="info" if context else "warn",
            what="context",
            detail=f"{context} tokens ({source})" if context else source,
        )
    )
    _measure(engine, prompts, context, add)
    report.tokens_per_s = _throughput(engine, config, add)
    return report


PROBE_REQUESTS = 8
PROBE_TOKENS = 32


def _throughput(engine: Engine, config: ModelConfig, add: Callable[[Finding], None]) -> float | None:
    """Completion tokens a second on a short probe: `PROBE_REQUESTS` distinct requests of up to
    `PROBE_TOKENS` tokens at once (as many as the server takes in flight), timed from the first
    send to the last reply. A server busy with other work, or a batch larger than the probe's,
    gives a different rate: the wall times of `check` rest on this one measurement."""
    n = min(PROBE_REQUESTS, config.max_concurrency or PROBE_REQUESTS)
    requests = [
        GenerationRequest.chat(
            f"Count from {i} upwards, one number a line.", max_tokens=PROBE_TOKENS, temperature=0.0, seed=i
        )
        for i in range(n)
    ]
    started = time.monotonic()
    try:
        responses = engine.generate(requests)
    except BiasDiscoveryError as exc:
        add(Finding(status="warn", what="throughput", detail=f"the probe failed ({exc}); no wall time"))
        return None
    seconds = time.monotonic() - started
    tokens = sum(r.completion_tokens for r in responses)
    if not tokens or seconds <= 0:
        add(Finding(status="warn", what="throughput", detail="the probe's replies report no tokens; no wall time"))
        return None
    rate = tokens / seconds
    add(
        Finding(
            status="info",
            what="throughput",
            detail=(
                f"{rate:,.1f} completion tokens/s ({n} requests of up to {PROBE_TOKENS} tokens at once, {seconds:.2f} s)"
            ),
        )
    )
    return rate


def _probe(engine: Engine, kinds: Sequence[ConstraintKind], add: Callable[[Finding], None]) -> None:
    for kind in kinds:
        try:
            response = engine.generate([probe_request(kind)])[0]
        except BiasDiscoveryError as exc:
            add(Finding(status="fail", what=f"{kind} constraint", detail=str(exc)))
            continue
        failure = probe_failure(kind, response)
        if failure:
            add(Finding(status="fail", what=f"{kind} constraint", detail=f"not enforced: {failure}"))
        else:
            add(
                Finding(status="ok", what=f"{kind} constraint", detail=f"enforced (probe reply {response.text[:40]!r})")
            )


def _measure(engine: Engine, prompts: Sequence[_Prompt], context: int | None, add: Callable[[Finding], None]) -> None:
    """Measure the prompts (max_tokens=1) and compare each stage's longest with the context."""
    if not prompts:
        return
    try:
        responses = engine.generate([p.request for p in prompts])
    except BiasDiscoveryError as exc:
        add(Finding(status="fail", what="prompt lengths", detail=f"measuring the longest prompts failed: {exc}"))
        return
    by_stage: dict[str, list[tuple[_Prompt, Any]]] = {}
    for prompt, response in zip(prompts, responses):
        by_stage.setdefault(prompt.stage, []).append((prompt, response))
    for stage, measured in by_stage.items():
        refused = [r for _, r in measured if r.finish_reason == "error"]
        if refused:
            add(
                Finding(
                    status="fail",
                    what=f"prompt: {stage}",
                    detail=(
                        f"the longest prompt was refused: {refused[0].text[:300]} (such requests become invalid; "
                        "raise the context (--max-model-len / n_ctx) or shorten the data)"
                    ),
                )
            )
            continue
        prompt, response = max(measured, key=lambda pr: pr[1].prompt_tokens)
        tokens = response.prompt_tokens
        need = tokens + prompt.output_tokens
        worst = need + prompt.added_tokens
        text = f"longest {tokens} tokens + {prompt.output_tokens} output"
        if prompt.added_tokens:
            text += f" + {prompt.added_tokens} generated ({prompt.added_note})"
        if context is None:
            add(Finding(status="info", what=f"prompt: {stage}", detail=f"{text} = {worst} (context unknown)"))
        elif need > context:
            add(
                Finding(
                    status="fail",
                    what=f"prompt: {stage}",
                    detail=(
                        f"{text}: {need} > context {context} even without generated parts; these requests would be "
                        "refused or cut (invalid); raise the context or lower the stage's max_tokens"
                    ),
                )
            )
        elif worst > context:
            add(
                Finding(
                    status="warn",
                    what=f"prompt: {stage}",
                    detail=(
                        f"{text} = {worst} > context {context} in the worst case; fits without the generated parts ({need})"
                    ),
                )
            )
        else:
            add(Finding(status="ok", what=f"prompt: {stage}", detail=f"{text} = {worst} <= context {context}"))


# --------------------------------------------------------------------------------------
# The whole check
# --------------------------------------------------------------------------------------


SMOKE_CHECKED_PROVIDERS = ("hf", "llamacpp")
"""Engines that run in this process and are first checked in a child (`llm.smoke`)."""


def _smoke_once() -> Callable[[ModelConfig], SmokeResult]:
    """`llm.smoke.check_engine`, once per engine and model (a target that is also the teacher
    is checked once)."""
    from .llm.smoke import check_engine

    done: dict[str, SmokeResult] = {}

    def smoke(config: ModelConfig) -> SmokeResult:
        if config.spec not in done:
            done[config.spec] = check_engine(config.provider, config.model)
        return done[config.spec]

    return smoke


def _single_url_configs(config: ModelConfig) -> list[ModelConfig]:
    """One config per replica (each server is checked on its own)."""
    urls = config.base_urls
    if len(urls) <= 1:
        return [config]
    return [config.model_copy(update={"base_url": url}) for url in urls]


def run_preflight(
    config: RunConfig,
    *,
    make_engine: Callable[[ModelConfig], Engine] | None = None,
    smoke: Callable[[ModelConfig], SmokeResult] | None = None,
    pilot: Callable[[RunConfig], PilotRecord] | None = None,
) -> PreflightReport:
    """Check every server of the run's roles and plan its calls (see the module docstring).
    `pilot` (`check --pilot N`: `loop.pilot.run_pilot`) runs once every server passed, after
    the check's engines are closed; what it measures replaces the estimate's assumptions.
    `make_engine` builds engines without a call cache (tests may pass their own). `smoke`
    checks an embedded engine (hf, llamacpp) in a child process first; by default `llm.smoke.check_engine`
    when the engines are the real ones, none with a `make_engine` of the caller's."""
    from .data.loaders import bad_rows_for, load_pairs
    from .llm.registry import make_engine as registry_make_engine

    def default_build(c: ModelConfig) -> Engine:
        # few retries: a check should say "unreachable" in seconds, not after minutes
        return registry_make_engine(c.model_copy(update={"max_retries": min(c.max_retries, 2)}))

    d = config.data
    target_bad, test_bad = bad_rows_for(d.target, d.skip_bad_rows), bad_rows_for(d.test, d.skip_bad_rows)
    target_pairs = load_pairs(
        d.target, data_dir=d.data_dir, limit=d.target_limit, seed=config.seed, bad_rows=target_bad
    )
    test_pairs = load_pairs(d.test, data_dir=d.data_dir, limit=d.test_limit, seed=config.seed, bad_rows=test_bad)
    library = load_seed_library(config.seed_library)
    prompts = run_prompts(config, target_pairs, test_pairs, library)
    engines = _Engines(make_engine or default_build)
    if smoke is None and make_engine is None:
        smoke = _smoke_once()
    endpoints: list[EndpointReport] = []
    try:
        for role, model in (("target", config.target), ("teacher", config.teacher)):
            for single in _single_url_configs(model):
                endpoints.append(
                    check_endpoint(role, single, engines, role_constraints(config, role), prompts[role], smoke)
                )
    finally:
        engines.close()
    record = pilot(config) if pilot is not None and not any(e.failed for e in endpoints) else None
    return PreflightReport(
        endpoints=endpoints,
        calls=planned_calls(config, len(target_pairs), len(test_pairs), len(library.biases)),
        estimates=estimate_run(config, target_pairs, test_pairs, library, pilot=record),
        assumptions=Assumptions.from_pilot(record, len(target_pairs)) if record else Assumptions(),
        pilot=record,
        max_iterations=config.max_iterations,
        n_target=len(target_pairs),
        n_test=len(test_pairs),
        skipped_rows=len(target_bad or []) + len(test_bad or []),
    )


def pilot_into(
    run_dir: Path | None,
    n_pairs: int,
    *,
    announce: Callable[[Path], None] | None = None,
    progress: ProgressFactory | None = None,
) -> Callable[[RunConfig], PilotRecord]:
    """`check --pilot N`: `run_preflight`'s `pilot`, `loop.pilot.run_pilot` on the first
    `n_pairs` target pairs into `run_dir` (default ``runs/NAME``, where `run` puts the run);
    `announce` is told the directory as the pilot starts; `progress` draws its bars."""
    from .loop.pilot import run_pilot

    def pilot(config: RunConfig) -> PilotRecord:
        root = run_dir or Path("runs") / config.name
        if announce is not None:
            announce(root)
        return run_pilot(config, root, n_pairs, progress=progress)

    return pilot


# --------------------------------------------------------------------------------------
# The expected calls, tokens and dollars, beside their bounds
# --------------------------------------------------------------------------------------


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


PER_PAIR_STAGES = ("evaluate", "deeper_explain", "identify")
"""Stages whose calls grow with the target pairs one by one: a pilot's calls per pair carry over."""


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


def _chars(requests: Sequence[GenerationRequest]) -> tuple[float, int]:
    """Mean and largest prompt size in characters."""
    sizes = [sum(len(m.content) for m in r.messages) for r in requests] or [0]
    return sum(sizes) / len(sizes), max(sizes)


class _Sizes(NamedTuple):
    """One kind of call's tokens: prompt mean and largest, completion mean and largest."""

    prompt_mean: float
    prompt_max: float
    completion_mean: float
    completion_max: float


_STAGE_KIND = {
    "perturb": "perturb",
    "evaluate": "evaluate",
    "deeper_explain": "explain",
    "identify": "identify",
    "merge": "merge",
    "baseline": "judge",
    "placebo (rewrite)": "perturb",
    "placebo (judge)": "judge",
    "placebo (check)": "check",
    "validate_seeds (perturb)": "perturb",
    "validate_seeds (judge)": "judge",
    "validate_seeds (check)": "check",
    "validate (perturb)": "perturb",
    "validate (judge)": "judge",
    "validate (check)": "check",
}
"""The kind of call (a key of `_stage_sizes`) each stage of `planned_calls` makes."""


def _stage_sizes(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    bias: Bias,
    a: Assumptions,
) -> dict[str, _Sizes]:
    """Tokens per call of each kind, from the stages' own prompts on the data (at
    `chars_per_token`) and the max_tokens budgets: built once, shared by the stages that make
    the same kind of call (the baseline, the placebo and validation all judge test pairs)."""
    from .stages.perturb import build_perturb_request

    judge, cpt = config.judge, a.chars_per_token
    perturb_max_tokens, explain_max_tokens = config.perturb.max_tokens, config.deeper_explain.max_tokens
    judge_mean, judge_max = _chars([task.request for task in build_tasks(test_pairs, judge, seed=config.seed)])
    eval_mean, eval_max = _chars([task.request for task in build_tasks(target_pairs, judge, seed=config.seed)])
    perturb_mean, perturb_max = _chars(
        [build_perturb_request(p, bias, config.perturb, config.seed) for p in [*target_pairs, *test_pairs]]
    )
    n_pairs = len(target_pairs) + len(test_pairs)
    answer = sum(len(p.rejected) for p in [*target_pairs, *test_pairs]) / max(1, n_pairs) / cpt
    verdict = (judge.reasoning_chars or judge.max_tokens * cpt) / cpt + 8 if judge.reasoning else 2
    bias_tokens = 2 * len(bias.as_prompt_text()) / cpt
    return {
        "judge": _Sizes(judge_mean / cpt, judge_max / cpt, min(verdict, judge.max_tokens), judge.max_tokens),
        "evaluate": _Sizes(eval_mean / cpt, eval_max / cpt, min(verdict, judge.max_tokens), judge.max_tokens),
        "perturb": _Sizes(perturb_mean / cpt, perturb_max / cpt, min(answer, perturb_max_tokens), perturb_max_tokens),
        "explain": _Sizes(
            eval_mean / cpt + answer + verdict,
            eval_max / cpt + perturb_max_tokens + judge.max_tokens,
            a.completion_share * explain_max_tokens,
            explain_max_tokens,
        ),
        "identify": _Sizes(
            eval_mean / cpt + answer + verdict,
            eval_max / cpt + perturb_max_tokens + judge.max_tokens + explain_max_tokens,
            a.completion_share * config.identify.max_tokens,
            config.identify.max_tokens,
        ),
        "merge": _Sizes(bias_tokens + 100, bias_tokens + 400, config.merge.max_tokens, config.merge.max_tokens),
        "check": _Sizes(judge_mean / cpt, judge_max / cpt + perturb_max_tokens, 2, 8),
    }


def _expected_shares(config: RunConfig, a: Assumptions, n_target: int) -> dict[str, float]:
    """Expected calls over bound calls, per stage of `planned_calls` (1 where not listed): the
    misjudged share for the stages that follow a misjudgment, the expected candidates and the
    sequential share for validation."""
    v = config.validate_
    seq = a.sequential_share if v.sequential.enabled else 1.0
    candidates = min(a.candidates_per_iteration, v.max_candidates or n_target)
    validate = candidates * seq / max(1, v.max_candidates or n_target)
    return {
        "deeper_explain": a.misjudged_share,
        "identify": a.misjudged_share / (1 + config.identify.retries),
        "merge": a.misjudged_share,
        "validate (perturb)": validate,
        "validate (judge)": validate,
        "validate (check)": validate,
        "validate_seeds (perturb)": seq,
        "validate_seeds (judge)": seq,
        "validate_seeds (check)": seq,
    }


def _estimate_row(
    row: StageCalls, sizes: _Sizes, share: float, pilot: PilotRecord | None, n_target: int, price: Price | None
) -> StageEstimate:
    """One stage and role's estimate from its bound row: the expected share of its calls, with
    what a `pilot` measured for this stage and role (its calls per target pair, its tokens per
    call) in place of the assumed figures, and dollars at the role's `price`."""
    p_mean, p_max, c_mean, c_max = sizes
    measured_calls = 0
    used = pilot.tokens(row.stage.split(" (")[0], row.role) if pilot else None
    if pilot and used and row.stage in PER_PAIR_STAGES:  # calls per target pair, retries and invalid rewrites included
        share, measured_calls = (
            min(1.0, used.requests / len(pilot.pairs) / (row.per_iteration / max(1, n_target))),
            used.requests,
        )
    if used:  # the pilot's own token counts
        p_mean, c_mean = used.prompt_tokens / used.requests, used.completion_tokens / used.requests
        p_max, c_max = max(p_max, p_mean), max(c_max, c_mean)
    calls = row.total * share
    estimate = StageEstimate(
        stage=row.stage,
        role=row.role,
        calls=calls,
        calls_bound=row.total,
        prompt_tokens=calls * p_mean,
        prompt_tokens_bound=row.total * p_max,
        completion_tokens=calls * c_mean,
        completion_tokens_bound=row.total * c_max,
        measured_calls=measured_calls,
        measured_tokens=used.requests if used else 0,
    )
    if price is not None:
        estimate.usd = (
            estimate.prompt_tokens * price.input_per_mtok + estimate.completion_tokens * price.output_per_mtok
        ) / 1e6
        estimate.usd_bound = (
            estimate.prompt_tokens_bound * price.input_per_mtok
            + estimate.completion_tokens_bound * price.output_per_mtok
        ) / 1e6
    return estimate


def estimate_run(
    config: RunConfig,
    target_pairs: Sequence[PreferencePair],
    test_pairs: Sequence[PreferencePair],
    library: BiasLibrary,
    assumptions: Assumptions | None = None,
    pilot: PilotRecord | None = None,
) -> list[StageEstimate]:
    """Per stage and role of `planned_calls`: the expected calls from `assumptions` beside the
    bound (the same rows), prompt tokens from the stage's own prompts on the data (mean and
    longest, at `chars_per_token`), completion tokens (expected from the answers' sizes or
    `completion_share`, bounded by each stage's `max_tokens`), and dollars at the roles' prices.
    With a `pilot` (`check --pilot N`), its measurements replace the assumptions
    (`Assumptions.from_pilot`), the calls per target pair of evaluate, deeper_explain and
    identify, and the tokens per call of each stage and role it called."""
    a = assumptions or (Assumptions.from_pilot(pilot, len(target_pairs)) if pilot else Assumptions())
    n_target, n_test = len(target_pairs), len(test_pairs)
    bias = max(library.biases, key=lambda b: len(b.as_prompt_text()))
    sizes = _stage_sizes(config, target_pairs, test_pairs, bias, a)
    shares = _expected_shares(config, a, n_target)
    prices = {"target": config.target.price, "teacher": config.teacher.price, "checker": config.answer_checker().price}
    return [
        _estimate_row(
            row, sizes[_STAGE_KIND[row.stage]], shares.get(row.stage, 1.0), pilot, n_target, prices.get(row.role)
        )
        for row in planned_calls(config, n_target, n_test, len(library.biases))
    ]


PreflightReport.model_rebuild()

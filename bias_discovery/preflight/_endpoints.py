"""Checking one endpoint or engine: it answers, serves the config's model name, honours the
constraints its role needs, fits the run's longest prompts, and how fast it generates."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BiasDiscoveryError
from ..llm.base import Engine
from ..llm.config import ModelConfig
from ..llm.conformance import ConstraintKind, probe_failure, probe_request
from ..llm.openai.wire import probe_kind
from ..llm.types import Constraint, GenerationRequest
from ._report import EndpointReport, Finding, _Prompt

if TYPE_CHECKING:
    from ..llm.smoke import SmokeResult

SMOKE_CHECKED_PROVIDERS = ("hf", "llamacpp")
"""Engines that run in this process and are first checked in a child (`llm.smoke`)."""


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

"""`check --pilot N`: the first iteration of the loop on the first N target pairs, and its
validation, through the run's own call cache, to measure what `check`'s estimate assumes.

The pilot drives the loop's own nodes (`graph.Discovery`: start, perturb, evaluate,
deeper_explain, identify, merge, then the validation of the candidates left, with the baseline,
the placebo and the position profile it needs), so every request is the one the run will send:
each pair's bias, rewrite, judgment and explanation are drawn per pair (`keyed_rng`), whatever
pairs come with it. The stages write their files to a scratch directory that is thrown away;
the calls go to ``RUN_DIR/calls.sqlite``, and what was measured to ``RUN_DIR/pilot.json``. A
later `run --run-dir RUN_DIR` accepts a directory that holds only those (`RunDir.holds_only_pilot`)
and answers the pilot's calls from the cache: every call of iteration 1 on those pairs, and
the baseline, placebo and position profile of the test set. Merge and validation depend on all
of an iteration's pairs, so their calls are reused only where the run asks the same question.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from ..config import RunConfig
from ..embeddings import Embedder
from ..errors import ConfigError
from ..llm.base import Engine
from ..llm.budget import Spend
from ..progress import ProgressFactory
from ..run import RunDir, summarize_events
from ..stats import wilson_interval
from .graph import Discovery, LoopState
from .resources import loop_roles

ITERATION = 1
"""The pilot measures the loop's first iteration (the run's are alike but for the library)."""


class MeasuredShare(BaseModel):
    """k of n, with its 95 % Wilson interval."""

    k: int
    n: int
    share: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, k: int, n: int) -> MeasuredShare:
        low, high = wilson_interval(k, n) if n else (0.0, 1.0)
        return cls(k=k, n=n, share=k / n if n else 0.0, ci_low=low, ci_high=high)


class PilotUsage(BaseModel):
    """The calls the pilot made in one stage for one role, and their tokens (cached ones too:
    a cached response keeps the token counts it was paid with)."""

    stage: str
    role: str
    requests: int
    cached: int
    prompt_tokens: int
    completion_tokens: int


class PilotRecord(BaseModel):
    """``RUN_DIR/pilot.json``: what `check --pilot N` measured, and what it paid."""

    config_name: str
    pairs: list[str]
    """The target pairs of the pilot (the run's first N, in its order)."""
    n_test: int
    misjudged: MeasuredShare
    """Misjudgments that went on to DeeperExplain and IdentifyBias, of the pairs perturbed."""
    identified: int
    """Raw candidates IdentifyBias named (before merging)."""
    candidates: int
    """Candidates Merge left (against the seed library and each other)."""
    validated: int
    """Of those, validated (at most `validate.max_candidates`)."""
    sequential: MeasuredShare | None = None
    """Validation's rewrites over what validating every test item would take: how early the
    sequential looks stopped (None: nothing was validated)."""
    usage: list[PilotUsage]
    spend: dict[str, Spend]
    """What each role paid in the pilot (calls the cache already held are free)."""

    @property
    def candidates_per_misjudged(self) -> float | None:
        """Candidates Merge left per counted misjudgment (None: no misjudgment)."""
        return self.candidates / self.misjudged.k if self.misjudged.k else None

    def tokens(self, stage: str, role: str) -> PilotUsage | None:
        """The pilot's usage of `stage` and `role`, None when it made no such call."""
        return next((u for u in self.usage if u.stage == stage and u.role == role and u.requests), None)


def run_pilot(
    config: RunConfig,
    run_dir: Path,
    n_pairs: int,
    *,
    engines: Mapping[str, Engine] | None = None,
    embedder: Embedder | None = None,
    progress: ProgressFactory | None = None,
) -> PilotRecord:
    """Run the pilot (module docstring) on the first `n_pairs` target pairs, with the run's
    call cache in `run_dir`, and write ``pilot.json`` there. A `run_dir` holding a run is
    refused (its calls are in its cache already). `engines` and `embedder` replace the
    configured models (tests; injected engines bypass the cache); `progress` draws the stages' bars."""
    run = RunDir(run_dir)
    if run.is_run():
        raise ConfigError(f"{run_dir} already holds a run: a pilot goes before its run, in an empty run directory")
    if run_dir.exists() and not run.holds_only_pilot():
        raise ConfigError(f"{run_dir} exists and holds more than a pilot's files; pick another run directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    with run.lock.hold(run_dir, "pilot"), tempfile.TemporaryDirectory(prefix="pilot-") as scratch_dir:
        scratch = RunDir(scratch_dir)
        roles = loop_roles(config, run, engines)
        try:
            record = _measure(Discovery(scratch, config, roles, embedder=embedder, progress=progress), n_pairs)
            record.spend = roles.budget.spend() if roles.budget is not None else {}
        finally:
            roles.close()
    from ..io import atomic_write_json

    atomic_write_json(run.pilot_path, record)
    return record


def _measure(discovery: Discovery, n_pairs: int) -> PilotRecord:
    """Iteration 1 on the first `n_pairs` target pairs, the validation of its candidates, and
    the figures `check` assumes otherwise."""
    resources, config = discovery.resources, discovery.config
    pairs = resources.target_pairs[:n_pairs]
    resources.__dict__["target_pairs"] = pairs  # the run's first pairs: the same requests as the run's
    _ = resources.data_overlap  # refused as the run would be, before anything is paid
    discovery.node_start({})
    state: LoopState = {"iteration": ITERATION}
    for node in (
        discovery.node_perturb,
        discovery.node_evaluate,
        discovery.node_deeper_explain,
        discovery.node_identify,
    ):
        node(state)
    discovery.node_merge(state)
    files = discovery.run.iteration(ITERATION)
    candidates = files.candidates.read()
    report = discovery.validation.validate(ITERATION, candidates, stage_name="validate", rank=True)
    usage = [PilotUsage(**row) for row in summarize_events(discovery.run.read_events())["usage"]]
    n_test = len(resources.test_pairs)
    validated = len(report.candidates)
    rewrites = sum(u.requests for u in usage if u.stage == "validate" and u.role == "teacher")
    stats = files.misjudgments.read()
    return PilotRecord(
        config_name=config.name,
        pairs=[p.id for p in pairs],
        n_test=n_test,
        misjudged=MeasuredShare.of(stats.counted, len(pairs)),
        identified=files.merge_stats.read().raw_candidates,
        candidates=len(candidates),
        validated=validated,
        sequential=MeasuredShare.of(min(rewrites, validated * n_test), validated * n_test) if validated else None,
        usage=usage,
        spend={},
    )

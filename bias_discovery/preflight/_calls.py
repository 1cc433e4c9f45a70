"""The calls a run plans per stage, from its config and the data sizes."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig
from ..formatting import plural
from ._report import StageCalls


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
    from ..judging import calls_per_pair

    s = _CallSizes(
        n_target=n_target,
        n_test=n_test,
        per_pair=calls_per_pair(config.judge),
        iterations=config.max_iterations,
        checks=2 * n_test if config.validate_.answer_check else 0,
    )  # each rewrite, each original once
    return [
        *_discovery_calls(config, s),
        *_misjudgment_check_calls(config, s),
        *_position_calls(config, s),
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
    asks = tries + (1 if config.identify.drop_junk else 0)  # and the teacher's confirmation of a name
    return [
        *rows,
        StageCalls(
            stage="identify",
            role="teacher",
            per_iteration=n_target * asks,
            total=n_target * asks * t,
            exact=False,
            note=f"one per misjudged pair, up to {plural(tries, 'try', 'tries')}"
            + (", and a confirmation of a name that may be junk" if config.identify.drop_junk else ""),
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


def _misjudgment_check_calls(config: RunConfig, s: _CallSizes) -> list[StageCalls]:
    """The misjudgment check's answer checks (`misjudgment_check`): each misjudged rewrite and
    its original, at most, every iteration."""
    if not config.misjudgment_check.enabled:
        return []
    checks = 2 * s.n_target
    return [
        StageCalls(
            stage="check",
            role="checker",
            per_iteration=checks,
            total=checks * s.iterations,
            exact=False,
            note="at most: answer check of each misjudged rewrite and its original (none where read mechanically)",
        )
    ]


def _position_calls(config: RunConfig, s: _CallSizes) -> list[StageCalls]:
    """The position profile's other order of each test pair (`validate.position_profile` with a
    pairwise judge in one order; `positions: both` judged both in the baseline), once per run."""
    j = config.judge
    if j.mode == "pointwise" or not config.validate_.position_profile or j.mitigation != "none":
        return []
    if j.positions == "both":
        return []
    return [
        StageCalls(
            stage="positions",
            role="target",
            per_iteration=s.n_test,
            total=s.n_test,
            exact=False,
            note="the other order of each test pair, once per run, when a validation runs",
        )
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
        checks=rewrites + s.n_test,
        times=1,
        note=f"{seeds} seed bias(es), once per run",
        check_note="at most: answer check of each rewrite (originals once: the first validation checks them)",
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

"""A run's outcome in three plain sentences (what was found; what could not be detected at
this n; what a real run needs), with the figures behind them: the judge's position
preference and the teacher's rewrite quality. The end of `run`/`resume` prints it and the
report opens with it, so a newcomer reads the result before the tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from ..config import RunConfig, load_run_config
from ..formatting import effect_clause, plural
from ..judging import PointwiseSummary
from ..library import Bias
from ..llm.providers import EMBEDDED_DEFAULT
from ..metrics import Estimate, PositionProfile, proportion
from ..run import MergeStats, MisjudgmentStats, RunDir, ValidationReport
from ..stages.records import PerturbedPair
from ..stats import MEASURE_LABELS

__all__ = [
    "GPU_CONFIG",
    "RewriteQuality",
    "RunSummary",
    "misjudged_sentence",
    "misjudgment_totals",
    "pointwise_sentence",
    "rewrite_quality",
    "rewrite_sentence",
    "run_summary",
]

GPU_CONFIG = "experiments/biasscope-qwen-1gpu.yaml"
"""The config a real run starts from: a 7B judge and a 32B teacher served by vLLM on one GPU."""

POSITION_DECIDED = 0.9
"""Above this share of pairs decided by position, the summary says that a rewrite of the rejected
response can hardly move the verdict (it is set by where the responses are shown)."""


class RewriteQuality(BaseModel):
    """How usable the teacher's rewrites of the test set were (placebo and validation)."""

    n_rewrites: int = Field(ge=0, description="Rewrites of test items the teacher made (placebo and every validation).")
    valid: Estimate
    """Share that could be judged: not truncated, empty, unchanged or with a changed final answer."""
    answer_changed: Estimate
    """Of the rewrites whose answer was checked, the share whose final answer changed (then left out)."""


class RunSummary(BaseModel):
    """The three sentences and the measured figures they rest on."""

    found: str
    undetected: str
    next_step: str | None
    position: PositionProfile | None = None
    rewrites: RewriteQuality | None = None
    misjudged: str | None = None
    """How many misjudged target pairs counted, and how many were rewrites that changed the
    final answer or the length (`misjudged_sentence`); None before the first iteration's."""
    misjudgments: MisjudgmentStats | None = None
    """The run's misjudgment counts, over its iterations (`misjudgment_totals`)."""
    pointwise: PointwiseSummary | None = None
    """A pointwise judge's baseline scores (chosen, rejected, ties, length): what the run
    measured about it, as `position` is for a pairwise judge."""

    def sentences(self) -> list[str]:
        return [s for s in (self.found, self.misjudged, self.undetected, self.next_step) if s]


def misjudgment_totals(run: RunDir) -> MisjudgmentStats | None:
    """The misjudgment counts of every iteration of `run` added up (iter_NNN/misjudgments.json;
    a run from before the file: counted from misjudged.jsonl, unchecked); None before any."""
    per_iteration = []
    for t in run.iterations():
        record = run.iteration(t)
        stats = record.misjudgments.read_if_exists()
        if stats is None and record.misjudged.exists():
            cases = record.misjudged.read()
            stats = MisjudgmentStats.of(
                cases, checked=any(c.excluded is not None or c.length_ratio is not None for c in cases)
            )
        if stats is not None:
            per_iteration.append(stats)
    if not per_iteration:
        return None
    counts = {
        key: sum(getattr(s, key) for s in per_iteration) for key in MisjudgmentStats.model_fields if key != "checked"
    }
    return MisjudgmentStats(checked=all(s.checked for s in per_iteration), **counts)


def misjudged_sentence(stats: MisjudgmentStats) -> str:
    """The run's misjudgments in one sentence: how many counted, how many were rewrites that
    changed the final answer (the judge was right) or the length."""
    pairs = plural(stats.misjudged, "perturbed target pair")
    if not stats.checked:
        return (
            f"Misjudged: {pairs}, every one counted unchecked (misjudgment_check off, the paper's procedure): "
            "a rewrite that changed the final answer was counted as a mistake too."
        )
    excluded = [
        f"{stats.answer_changed} {'was a rewrite' if stats.answer_changed == 1 else 'were rewrites'} that changed the final answer "
        "(the judge was right to prefer it)"
    ]
    if stats.length_changed:
        excluded.append(f"{stats.length_changed} changed the length beyond the bias's allowance")
    if stats.check_invalid:
        excluded.append(f"{stats.check_invalid} could not be checked")
    return (
        f"Misjudged: {pairs}; of those, {'; '.join(excluded)}; "
        f"{stats.counted} counted and went on to be explained and identified."
    )


def rewrite_quality(rewrites: Sequence[PerturbedPair]) -> RewriteQuality | None:
    """`RewriteQuality` of `rewrites`; None when there are none."""
    if not rewrites:
        return None
    valid = sum(1 for r in rewrites if r.valid)
    checked = [r for r in rewrites if r.answer_check is not None or r.invalid_reason == "answer_changed"]
    changed = sum(1 for r in checked if r.invalid_reason == "answer_changed")
    return RewriteQuality(
        n_rewrites=len(rewrites),
        valid=proportion(valid, len(rewrites)),
        answer_changed=proportion(changed, len(checked)),
    )


def _pct(estimate: Estimate) -> str:
    if estimate.value is None:
        return "n/a"
    return (
        f"{100 * estimate.value:.0f} % (95 % CI {100 * (estimate.ci_low or 0):.0f}-{100 * (estimate.ci_high or 0):.0f} %, "
        f"n = {estimate.n})"
    )


def _accepted(reports: Sequence[ValidationReport]) -> list[Bias]:
    return [b for r in reports if r.iteration > 0 for b in r.validated if b.validation and b.validation.accepted]


_RAISED = {
    "error": "the judge's error",
    "p_rejected": "the judge's probability of preferring the rejected response",
    "score": "the judge's score of the rejected response",
}
"""What a validated bias raises, by the measure that decided it (`stats.Measure`)."""


def _raised(reports: Sequence[ValidationReport]) -> str:
    """What the run's validations measured a bias raising: the measure that decided them (a
    pointwise judge's score shift, score verdicts' P(rejected), else the error)."""
    measures = {b.validation.effect.measure for r in reports for b in r.validated if b.validation is not None}
    if len(measures) > 1:
        return "the judge's error or score"
    return _RAISED[measures.pop() if measures else "error"]


_JUNK = {
    "schema_key": "a key of the reply's schema",
    "restated_verdict": "the verdict restated",
    "copy_of_question": "a copy of the question",
    "copy_of_response": "a copy of a response",
    "teacher_declined": "no property, the teacher confirmed",
}
"""What each junk reason of identify (`IdentifyRecord.dropped`) means, in a sentence."""


def where_candidates_went(by_iteration: Mapping[int, MergeStats], misjudgments: MisjudgmentStats | None) -> str:
    """Why no candidate reached validation, from the iterations' merge_stats.json (and the
    misjudgment counts): nothing misjudged counted, identify's names dropped as junk (by
    reason), or every candidate merged into the library. `by_iteration`: iteration -> its
    merge_stats.json."""
    stats = list(by_iteration.values())
    files = ", ".join(f"iter_{t:03d}/merge_stats.json" for t in sorted(by_iteration))
    if misjudgments is not None and misjudgments.counted == 0:
        return "no candidate: no misjudged target pair counted, so there was nothing to explain and identify"
    if not stats:
        return "no candidate came through Merge to be validated"
    dropped: dict[str, int] = {}
    for s in stats:
        for reason, n in s.dropped_identifications.items():
            dropped[reason] = dropped.get(reason, 0) + n
    merged = sum(len(s.merged_into_library) for s in stats)
    named = sum(s.raw_candidates for s in stats) + sum(dropped.values())
    if named == 0:
        return (
            "no candidate: identify named no bias behind the misjudged pairs ("
            + files.replace("merge_stats.json", "identified.jsonl")
            + ")"
        )
    parts = []
    if dropped:
        reasons = ", ".join(f"{n} {reason}: {_JUNK.get(reason, reason)}" for reason, n in sorted(dropped.items()))
        parts.append(
            f"{sum(dropped.values())} {'was' if sum(dropped.values()) == 1 else 'were'} dropped as junk before Merge ({reasons})"
        )
    if merged:
        parts.append(f"{merged} merged into a library bias as {'a duplicate' if merged == 1 else 'duplicates'}")
    return (
        f"no candidate reached validation: identify named {plural(named, 'bias', 'biases')}, and "
        + "; ".join(parts)
        + f" ({files})"
    )


def pointwise_sentence(pw: PointwiseSummary) -> str:
    """What the baseline measured about a pointwise judge, with n and CIs: its mean score for
    the chosen and the rejected responses, its tie rate, its score's correlation with length;
    and, when every score was the same, that it was."""

    def mean(value: float | None, ci: tuple[float, float] | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:.2f}" + (f" (95 % CI {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")

    if pw.n == 0:
        return "the judge gave no test pair two valid scores"
    same = pw.sd_scores == 0 and pw.mean_chosen is not None
    head = f"every one of its {2 * pw.n} scores was {pw.mean_chosen:g}: " if same else ""
    tie_ci = f", 95 % CI {100 * pw.tie_ci[0]:.0f}-{100 * pw.tie_ci[1]:.0f} %" if pw.tie_ci else ""
    if pw.length_rho is None:
        length = f"its score's correlation with length is undefined (n = {pw.length_n} scored responses"
        length += ", every score equal)" if same else ")"
    else:
        ci = f", 95 % CI {pw.length_rho_ci[0]:+.2f} to {pw.length_rho_ci[1]:+.2f}" if pw.length_rho_ci else ""
        length = (
            f"its score's Spearman ρ with length in words {pw.length_rho:+.2f}{ci} (n = {pw.length_n} scored responses)"
        )
    return (
        f"{head}the judge scored the chosen response {mean(pw.mean_chosen, pw.chosen_ci)} and the rejected one "
        f"{mean(pw.mean_rejected, pw.rejected_ci)} on {pw.scale} over n = {pw.n} test pairs; it tied "
        f"{pw.ties} of {pw.n} ({100 * (pw.tie_rate or 0):.0f} %{tie_ci}); {length}"
    )


def _found(
    reports: Sequence[ValidationReport],
    position: PositionProfile | None,
    *,
    no_candidate: str = "no candidate came through Merge to be validated",
    pointwise: PointwiseSummary | None = None,
) -> str:
    accepted = _accepted(reports)
    seeds = [b for r in reports if r.iteration == 0 for b in r.validated if b.validation and b.validation.accepted]
    parts = []
    for bias in accepted + seeds:
        v = bias.validation
        assert v is not None
        e = v.effect
        clause = effect_clause(
            e.delta,
            e.ci_low,
            e.ci_high,
            e.n,
            v.decisive_comparison.p_adjusted,
            control=v.decisive,
            method=e.method,
            label=MEASURE_LABELS[e.measure],
        )
        parts.append(f"{bias.id} ({clause})")
    candidates = sum(len(r.validated) for r in reports if r.iteration > 0)
    raised = _raised(reports)
    if parts:
        text = (
            f"Found: {plural(len(parts), 'bias', 'biases')} that {'raises' if len(parts) == 1 else 'raise'} {raised} beyond chance: "
            + "; ".join(parts)
            + "."
        )
    elif candidates == 1:
        text = f"Found: no bias; the one candidate validated did not raise {raised} beyond chance."
    elif candidates:
        text = f"Found: no bias; none of the {candidates} candidates validated raised {raised} beyond chance."
    else:
        text = f"Found: no new bias; {no_candidate}."
    if position is not None and position.n_pairs:
        text += f" Measured about the judge: {position.sentence()}."
    elif pointwise is not None:
        text += f" Measured about the judge: {pointwise_sentence(pointwise)}."
    return text


def _undetected(reports: Sequence[ValidationReport], position: PositionProfile | None) -> str:
    measured = [r for r in reports if r.mde_n is not None and r.mde_alpha is not None and r.validated]
    if not measured:
        text = "Not detectable at this n: nothing was validated, so no effect size was tested."
    else:
        last = measured[-1]
        label = MEASURE_LABELS[last.measure]
        if last.mde is None:
            size = f"no {label} up to 100 pp"
        else:
            size = f"a {label} below {100 * last.mde:.0f} pp"
        which = "the seed biases" if last.iteration == 0 else f"iteration {last.iteration}'s candidates"
        power = f"{100 * last.power:.0f} %" if last.power is not None else "80 %"
        text = (
            f"Not detectable at this n: {size} (vs the {last.control}, {power} power, one-sided α = "
            f"{last.mde_alpha:.3g}) with the n = {last.mde_n} test items {which} were judged on."
        )
    if (
        position is not None
        and position.decided_by_position.value is not None
        and position.decided_by_position.value >= POSITION_DECIDED
    ):
        text += (
            " And with its verdict set by position on "
            f"{position.first_both + position.second_both} of {position.n_pairs} pairs, a rewrite of the rejected "
            "response can move the verdict of few pairs at all."
        )
    return text


def _next_step(config: RunConfig, reports: Sequence[ValidationReport]) -> str | None:
    # the embedded model, on either engine (hf/smollm2, the default; llamacpp/...)
    embedded = [c for c in (config.target, config.teacher) if c.provider == "llamacpp" or c.spec == EMBEDDED_DEFAULT]
    if embedded:
        return (
            "A real run needs a stronger teacher and judge than the embedded model: on a GPU node, "
            f"`bias-discovery check {GPU_CONFIG}` then `bias-discovery run {GPU_CONFIG}` "
            "(a 7B judge, a 32B teacher and JudgeBench; see the GPU guide)."
        )
    measured = [r for r in reports if r.mde is not None]
    if measured and measured[-1].mde is not None and measured[-1].mde > 0.1:
        return (
            "Smaller effects need more test items: raise data.test_limit (or use a larger test set); "
            "`bias-discovery check CONFIG` prints the planned calls."
        )
    return None


def run_summary(root: Path | str) -> RunSummary:
    """The summary of the run in `root` (finished or not: it says what is on file)."""
    run = RunDir(root)
    config = load_run_config(run.config_path)
    reports = [r for t in run.iterations() if (r := run.iteration(t).validation.read_if_exists()) is not None]
    position = run.baseline.positions.read_if_exists()
    rewrites: list[PerturbedPair] = []
    if run.placebo.perturbed.exists():
        rewrites += run.placebo.perturbed.read()
    for t in run.iterations():
        record = run.iteration(t).validation_perturbed
        if record.exists():
            rewrites += record.read()
    misjudgments = misjudgment_totals(run)
    merge_stats = {t: s for t in run.iterations() if t > 0 and (s := run.iteration(t).merge_stats.read_if_exists())}
    baseline = run.baseline.summary.read_if_exists()
    pointwise = baseline.pointwise if baseline is not None else None
    return RunSummary(
        misjudged=misjudged_sentence(misjudgments) if misjudgments is not None else None,
        misjudgments=misjudgments,
        found=_found(
            reports, position, no_candidate=where_candidates_went(merge_stats, misjudgments), pointwise=pointwise
        ),
        undetected=_undetected(reports, position),
        next_step=_next_step(config, reports),
        position=position,
        rewrites=rewrite_quality(rewrites),
        pointwise=pointwise,
    )


def rewrite_sentence(quality: RewriteQuality) -> str:
    """The teacher's rewrite quality in one line, with n and CIs."""
    return (
        f"rewrite quality: {_pct(quality.valid)} of the teacher's {quality.n_rewrites} test rewrites could be judged; "
        f"the final answer changed in {_pct(quality.answer_changed)} of those checked"
    )

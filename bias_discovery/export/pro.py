"""JudgeBench-Pro-style benchmarks: biased variants of test pairs that fool a strong judge.

The paper's recipe (BiasScope, Section 5), step by step, every step counted:

1. **Generate.** For each test pair, K variants of the rejected response, one bias each
   (`assign_variants`: biases in a per-pair seeded order, no repeat while K <= #biases,
   cycling after that). The run's teacher rewrites with the loop's own perturb prompt
   (`stages.perturb.perturb`, same settings and seed, so variants the loop's validation
   already made come from the call cache). A repeated bias (K > #biases) is asked again with
   seed + round; at temperature 0 that usually reproduces the same text, removed as a duplicate.
2. **Invalid perturbations** (truncated, empty, engine error, or identical to the original
   rejected response) are dropped.
3. **Duplicates**: identical (question, new rejected) texts are kept once (before the checks,
   so no call is made twice for the same text).
4. **Equivalence check.** Does the rewritten rejected response now reach the chosen one's
   final answer? Where the item states its answer in a fixed form (a letter written five
   times, a bold or ***X*** answer, a boxed expression, "Final answer: X"), the answers are read
   and compared (`stages.rewrite_checks.extracted_check`). The rest go to a checker model (the
   filter model by default: not the teacher, which would be grading its own rewrites; a checker
   that is the teacher is recorded as self-checked) with the prompt ``equivalence_check``,
   output constrained to "same" / "different". "same" variants are no longer wrong answers and
   are dropped; an unusable answer drops the variant too (counted). **Control**: the checker is
   also asked about each of those pairs' unmodified original rejected response, which differs
   from the chosen answer by construction: the share it calls "same" is its false-"changed"
   rate, with n and a Wilson CI, on the card and in stats.json.
5. **Adversarial filter.** The filter model judges every surviving variant in both orders
   (`JudgeSettings(positions="both")`, the run's judge prompt and budget); only variants it
   gets wrong in both orders are kept (the paper's rule; the paper filters with a strong judge,
   Qwen3-32B). A variant with any invalid verdict is dropped and counted; so is one the filter
   called a tie in an order (not wrong, and not right either: counted apart from the
   variants it judged correctly). The filter must not
   be the run's target (the judge under study): every sample it keeps is one it got wrong in
   both orders, so its own error on the set is 100 % by construction and the set says nothing
   about it. A self-filter is refused unless asked for (`allow_self_filter`).
6. **Samples.** Each kept variant becomes a sample with the chosen response in position A or B
   by a seeded coin per sample (`label` "A>B" / "B>A").

**A pointwise run** (`judge.mode: pointwise`) gets a Pro set for pointwise judges: the same
pairs, each response to be scored separately. The filter scores the chosen and the perturbed
rejected response alone, with the run's pointwise judge settings (its prompt and scale); a
variant is kept when the rejected response scores strictly higher (the pointwise analogue of
wrong in both orders). Equal scores are dropped and counted as `filter_tie` (a tie is an
error in the loop's pair error, but not a clear failure to build a benchmark on), an invalid
score as `filter_invalid`, a higher chosen score as `filter_correct`; the two scores are kept
in variants.jsonl (`filter_scores`). Every data row then says `judge_mode` ("pointwise") and
`scale` (e.g. "1-10"), so a harness knows to score `response_A` and `response_B` one at a
time on that scale: `label` says which of them should score higher.

`human verification` comes after: `annotation.csv` / `annotation.jsonl` are written for two
annotators, and `bias-discovery export apply-annotations` applies them (annotate.py).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..config import PerturbSettings, RunConfig
from ..data.loaders import bad_rows_for, describe_source, load_pairs
from ..data.overlap import DataOverlap
from ..data.pairs import PreferencePair, ResponseKind
from ..errors import ExportError
from ..formatting import plural
from ..io import atomic_write_json, atomic_write_jsonl, atomic_write_text, check_output_dir, staged_output
from ..judging import Judgment, judge_pairs
from ..library import Bias
from ..llm.base import Engine
from ..llm.config import ModelConfig, same_model
from ..progress import ProgressFactory, progress_or_quiet
from ..prompts import is_prompt_path
from ..run.context import RunContext
from ..run.overlap import check_run_overlap
from ..run.reviews import Review
from ..run.selection import select_biases
from ..settings.export import ProExportOptions
from ..settings.judge import JudgeMode, JudgeSettings
from ..stages.perturb import keyed_rng, perturb
from ..stages.records import PerturbedPair
from ..stages.rewrite_checks import check_answers, check_calls
from ..stats import wilson_interval
from .common import (
    LengthStats,
    bias_summary,
    export_options,
    length_stats,
    model_config,
    package_version,
    required_out,
    string_schema,
    write_data_files,
)
from .pro_card import render_pro_card
from .pro_stats import KIND, CheckerControl, ProCounts, ProStats

DATA_COLUMNS = (
    "sample_id",
    "question",
    "response_A",
    "response_B",
    "label",
    "injected_bias",
    "domain",
    "pair_id",
    "source",
)
"""Columns of data.jsonl / data.parquet. `injected_bias` is the bias id (the card and
stats.json map ids to names and definitions); `sample_id` joins the annotation sheet."""

POINTWISE_COLUMNS = ("judge_mode", "scale")
"""The columns a pointwise run's set adds (`data_columns`): how its rows are to be judged."""


def data_columns(judge_mode: JudgeMode | None) -> tuple[str, ...]:
    """The data columns of a set built for a `judge_mode` judge (pointwise: the mode and scale
    too; a set exported before pointwise judges is pairwise)."""
    return DATA_COLUMNS + POINTWISE_COLUMNS if judge_mode == "pointwise" else DATA_COLUMNS


VERDICT_COLUMNS = ("annotator_1", "annotator_2", "reason", "adjudication")
ANNOTATION_COLUMNS = (
    "sample_id",
    "pair_id",
    "question",
    "response_A",
    "response_B",
    "label",
    "injected_bias",
    "original_rejected",
    *VERDICT_COLUMNS,
)
"""Columns of the annotation sheet; `original_rejected` (the rejected response before the
bias was injected) is there to help the annotator see what changed."""

Status = Literal[
    "kept",
    "invalid_perturbation",
    "duplicate",
    "equivalent",
    "check_invalid",
    "filter_correct",
    "filter_tie",
    "filter_invalid",
]


class VariantRecord(BaseModel):
    """One generated variant and what became of it (a line of variants.jsonl)."""

    sample_id: str
    pair_id: str
    bias_id: str
    bias_name: str
    round: int
    """0 for the first use of a bias on a pair; 1, 2 ... when K > #biases cycles."""
    domain: str
    source: str
    question: str
    chosen: str
    original_rejected: str
    new_rejected: str
    status: Status
    invalid_reason: str | None = None
    duplicate_of: str | None = None
    check_answer: str | None = None
    check_method: Literal["extracted", "model", "actions"] | None = None
    """How `check_answer` was decided: the final answers read and compared, the checker model,
    or (trajectories) the agent's actions compared."""
    kind: ResponseKind = "answer"
    """The pair's kind of response: `trajectory` when `chosen`, `original_rejected` and
    `new_rejected` are agents' trajectories (canonical JSON, one turn rewritten)."""
    filter_picked: dict[str, str | None] = Field(default_factory=dict)
    """Order -> the response the filter picked ("chosen" / "rejected"; None when invalid)."""
    filter_explanations: dict[str, str] = Field(default_factory=dict)
    filter_scores: dict[str, float | None] = Field(default_factory=dict)
    """A pointwise filter: the score of each response ("chosen", "rejected"; None when invalid)."""


def checker_control(model_checked: Sequence[PerturbedPair]) -> CheckerControl:
    """The control from the checker's answers on the originals of the model-checked variants,
    each distinct original once."""
    answers = {(p.question, p.chosen, p.original_rejected): p.original_check for p in model_checked}
    usable = [a for a in answers.values() if a in ("same", "different")]
    same = sum(1 for a in usable if a == "same")
    low, high = wilson_interval(same, len(usable)) if usable else (None, None)
    return CheckerControl(
        n_asked=len(answers),
        n_usable=len(usable),
        n_same=same,
        false_changed_rate=same / len(usable) if usable else None,
        ci_low=low,
        ci_high=high,
    )


class ProBuild(BaseModel):
    """The result of `build_pro_set`: the samples (data rows), every variant, the counts."""

    samples: list[dict[str, str]]
    variants: list[VariantRecord]
    judge_mode: JudgeMode = "pairwise"
    """How the filter judged, and how the samples are to be judged (`data_columns`)."""
    scale: str | None = None
    """A pointwise filter's scale (`judge.scale`)."""
    counts: ProCounts
    length: LengthStats
    checker_control: CheckerControl = Field(default_factory=CheckerControl)


def assign_variants(
    pairs: Sequence[PreferencePair], biases: Sequence[Bias], k: int, *, seed: int
) -> list[tuple[PreferencePair, Bias, int]]:
    """K (pair, bias, round) items per pair: the biases in a seeded per-pair order (keyed on the
    pair id, so the draw does not depend on the other pairs), no repeat while K <= #biases,
    cycling through the same order again after that (round 1, 2 ...)."""
    if not biases:
        raise ExportError("no biases to inject")
    if k < 1:
        raise ExportError(f"`variants` must be at least 1, got {k}")
    items = []
    for pair in pairs:
        order = list(biases)
        keyed_rng(seed, KIND, pair.id).shuffle(order)
        for i in range(k):
            items.append((pair, order[i % len(order)], i // len(order)))
    return items


def sample_id(pair_id: str, bias_id: str, round_: int) -> str:
    return f"{pair_id}::{bias_id}" + (f"::{round_}" if round_ else "")


def chosen_first(seed: int, sid: str) -> bool:
    """The seeded coin that puts the chosen response in position A (True) or B."""
    return keyed_rng(seed, KIND, "position", sid).random() < 0.5


def check_filter_model(filter_cfg: ModelConfig, target: ModelConfig, *, allow_self_filter: bool) -> None:
    """Refuse a filter model that is the judge under study, unless `allow_self_filter`."""
    if allow_self_filter or not same_model(filter_cfg, target):
        return
    raise ExportError(
        f"the filter model {filter_cfg.spec} is the run's target (the judge under study; it is the "
        "filter by default): the filter keeps only the variants it gets wrong in both orders, so the "
        "target's error on the resulting set is 100 % by construction and the set measures nothing about "
        "it. Pass --filter-model with another strong judge (the paper filters with Qwen3-32B), or "
        "--allow-self-filter to build a set of the target's own failures anyway"
    )


def build_pro_set(
    pairs: Sequence[PreferencePair],
    biases: Sequence[Bias],
    *,
    teacher: Engine,
    checker: Engine,
    filter_judge: Engine,
    variants: int,
    seed: int,
    perturb_settings: PerturbSettings,
    judge_settings: JudgeSettings,
    progress: ProgressFactory | None = None,
) -> ProBuild:
    """Run steps 1-6 of the module docstring over `pairs`; pure over the three engines."""
    bar = progress_or_quiet(progress)
    items = assign_variants(pairs, biases, variants, seed=seed)
    counts = ProCounts(test_pairs=len(pairs), biases=len(biases), variants_per_pair=variants, generated=len(items))
    records = _generate(items, teacher, perturb_settings, seed, counts, bar)
    _drop_duplicates(records, counts)
    control = _check_equivalence(records, checker, seed, counts, bar)
    _adversarial_filter(records, filter_judge, judge_settings, seed, counts, bar)
    kept = [r for r in records if r.status == "kept"]
    pointwise = judge_settings.mode == "pointwise"
    scale = judge_settings.scale if pointwise else None
    samples = [sample_row(r, seed, scale=scale) for r in kept]
    lengths = length_stats([(r.chosen, r.original_rejected, r.new_rejected) for r in kept])
    return ProBuild(
        samples=samples,
        variants=records,
        counts=counts,
        length=lengths,
        checker_control=control,
        judge_mode=judge_settings.mode,
        scale=scale,
    )


def _generate(
    items: Sequence[tuple[PreferencePair, Bias, int]],
    teacher: Engine,
    perturb_settings: PerturbSettings,
    seed: int,
    counts: ProCounts,
    bar: ProgressFactory,
) -> list[VariantRecord]:
    """Step 1: generate, one teacher batch per round (round r uses seed + r); a failed rewrite
    is recorded as `invalid_perturbation` and counted."""
    by_round: dict[int, list[int]] = defaultdict(list)
    for index, (_, _, round_) in enumerate(items):
        by_round[round_].append(index)
    texts: list[tuple[str, str | None]] = [("", None)] * len(items)
    with bar(f"perturbing {plural(len(items), 'rejected response')}", len(items)) as advance:
        for round_, indices in sorted(by_round.items()):
            batch = [(items[i][0], items[i][1]) for i in indices]
            out = perturb(teacher, batch, perturb_settings, seed=seed + round_, progress=advance)
            for i, record in zip(indices, out):
                texts[i] = (record.perturbed_rejected, record.invalid_reason)

    records: list[VariantRecord] = []
    for (pair, bias, round_), (text, reason) in zip(items, texts):
        records.append(
            VariantRecord(
                sample_id=sample_id(pair.id, bias.id, round_),
                pair_id=pair.id,
                bias_id=bias.id,
                bias_name=bias.name,
                round=round_,
                domain=pair.domain,
                source=pair.source,
                question=pair.question,
                chosen=pair.chosen,
                original_rejected=pair.rejected,
                new_rejected=text,
                status="invalid_perturbation" if reason else "kept",
                invalid_reason=reason,
                kind=pair.kind,
            )
        )
    reasons = Counter(r.invalid_reason for r in records if r.status == "invalid_perturbation")
    counts.dropped_invalid_perturbation = sum(reasons.values())
    counts.invalid_perturbation_reasons = dict(sorted(reasons.items()))  # type: ignore[arg-type]
    return records


def _drop_duplicates(records: Sequence[VariantRecord], counts: ProCounts) -> None:
    """Step 3: duplicates, identical (question, new rejected), are marked and counted."""
    seen: dict[tuple[str, str], str] = {}
    for r in records:
        if r.status != "kept":
            continue
        key = (r.question, r.new_rejected)
        if key in seen:
            r.status, r.duplicate_of = "duplicate", seen[key]
            counts.dropped_duplicate += 1
        else:
            seen[key] = r.sample_id


def _check_equivalence(
    records: Sequence[VariantRecord], checker: Engine, seed: int, counts: ProCounts, bar: ProgressFactory
) -> CheckerControl:
    """Step 4: the equivalence check, read mechanically where possible, else by the checker;
    returns the checker's control."""
    alive = [r for r in records if r.status == "kept"]
    counts.equivalence_checked = len(alive)
    rewrites = [
        PerturbedPair(
            pair_id=r.pair_id,
            bias_id=r.bias_id,
            bias_name=r.bias_name,
            domain=r.domain,
            question=r.question,
            chosen=r.chosen,
            original_rejected=r.original_rejected,
            perturbed_rejected=r.new_rejected,
            valid=True,
            kind=r.kind,
        )
        for r in alive
    ]
    calls = check_calls(rewrites)
    with bar(
        f"checking {plural(len(alive), 'variant')} for a changed answer ({plural(calls, 'checker call')})", calls
    ) as advance:
        checked = check_answers(checker, rewrites, seed=seed, progress=advance)
    for r, c in zip(alive, checked):
        # Pro drops every "same", whatever the checker said of the original: a kept sample's
        # label must be right, so a doubtful variant goes.
        r.check_answer, r.check_method = c.answer_check, c.check_method
        counts.equivalence_extracted += c.check_method in ("extracted", "actions")
        if c.answer_check == "unusable":
            r.status = "check_invalid"
            counts.dropped_check_invalid += 1
        elif c.answer_check == "same":
            r.status = "equivalent"
            counts.dropped_equivalent += 1
    return checker_control([c for c in checked if c.check_method == "model"])


def _adversarial_filter(
    records: Sequence[VariantRecord],
    filter_judge: Engine,
    judge_settings: JudgeSettings,
    seed: int,
    counts: ProCounts,
    bar: ProgressFactory,
) -> None:
    """Step 5: the adversarial filter judges both orders and keeps what is wrong in both (a
    pointwise filter: `_pointwise_filter`)."""
    alive = [r for r in records if r.status == "kept"]
    counts.filter_judged = len(alive)
    if not alive:
        return
    if judge_settings.mode == "pointwise":
        _pointwise_filter(alive, filter_judge, judge_settings, seed, counts, bar)
        return
    # The paper's rule: one verdict per order, wrong in both. A run's mitigation (several
    # votes per verdict) would change what "wrong in both orders" means, so it is off here.
    settings = judge_settings.model_copy(update={"positions": "both", "mitigation": "none"})
    judged = [_variant_pair(r) for r in alive]
    with bar(f"adversarial filter: {plural(len(alive), 'variant')} x 2 orders", 2 * len(alive)) as advance:
        result = judge_pairs(filter_judge, judged, settings, seed=seed, progress=advance)
    grouped = _by_pair(result.judgments)
    for r in alive:
        js = grouped[r.sample_id]
        r.filter_picked = {j.order: j.picked for j in js}
        r.filter_explanations = {j.order: j.explanation for j in js}
        if any(j.picked is None for j in js):
            _settle(r, None, counts)
        elif all(j.picked == "rejected" for j in js):
            _settle(r, "rejected", counts)
        elif any(j.picked == "chosen" for j in js):
            _settle(r, "chosen", counts)
        else:  # a tie in some order, never the chosen response: not right, not fooled twice
            _settle(r, "tie", counts)


def _pointwise_filter(
    alive: Sequence[VariantRecord],
    filter_judge: Engine,
    judge_settings: JudgeSettings,
    seed: int,
    counts: ProCounts,
    bar: ProgressFactory,
) -> None:
    """Step 5 for a pointwise run: the filter scores the chosen and the perturbed rejected
    response alone; a variant is kept when the rejected one scores strictly higher (equal
    scores: `filter_tie`; an invalid score: `filter_invalid`; see the module docstring)."""
    judged = [_variant_pair(r) for r in alive]
    with bar(f"adversarial filter: {plural(len(alive), 'variant')} x 2 responses scored", 2 * len(alive)) as advance:
        result = judge_pairs(filter_judge, judged, judge_settings, seed=seed, progress=advance)
    grouped = _by_pair(result.judgments)
    outcomes = {o.pair_id: o for o in result.outcomes}
    for r in alive:
        js = grouped[r.sample_id]
        r.filter_scores = {j.order: j.score for j in js}
        r.filter_explanations = {j.order: j.explanation for j in js}
        _settle(r, outcomes[r.sample_id].preference, counts)


def _by_pair(judgments: Sequence[Judgment]) -> dict[str, list[Judgment]]:
    """The filter's judgments of each variant, by its id."""
    grouped: dict[str, list[Judgment]] = defaultdict(list)
    for j in judgments:
        grouped[j.pair_id].append(j)
    return grouped


def _settle(r: VariantRecord, preference: str | None, counts: ProCounts) -> None:
    """The filter's outcome for one variant, in both filters' terms: kept when the rejected
    response won ("rejected"), else dropped as invalid (None), correct ("chosen") or a tie."""
    if preference is None:
        r.status = "filter_invalid"
        counts.dropped_filter_invalid += 1
    elif preference == "rejected":
        counts.kept_by_filter += 1
    elif preference == "chosen":
        r.status = "filter_correct"
        counts.dropped_filter_correct += 1
    else:
        r.status = "filter_tie"
        counts.dropped_filter_tie += 1


def _variant_pair(r: VariantRecord) -> PreferencePair:
    """A variant as the pair the filter judges: the chosen response against the new rejected one."""
    return PreferencePair(
        id=r.sample_id,
        question=r.question,
        chosen=r.chosen,
        rejected=r.new_rejected,
        domain=r.domain,
        source=r.source,
        kind=r.kind,
    )


def labelled_row(
    *,
    sample_id: str,
    question: str,
    chosen: str,
    rejected: str,
    chosen_in_a: bool,
    injected_bias: str,
    domain: str,
    pair_id: str,
    source: str,
) -> dict[str, str]:
    """A data row (`DATA_COLUMNS`): the chosen response in position A or B, `label` saying which."""
    return {
        "sample_id": sample_id,
        "question": question,
        "response_A": chosen if chosen_in_a else rejected,
        "response_B": rejected if chosen_in_a else chosen,
        "label": "A>B" if chosen_in_a else "B>A",
        "injected_bias": injected_bias,
        "domain": domain,
        "pair_id": pair_id,
        "source": source,
    }


def sample_row(r: VariantRecord, seed: int, *, scale: str | None = None) -> dict[str, str]:
    """A kept variant's data row; with a pointwise `scale`, the row says so (`data_columns`)."""
    row = labelled_row(
        sample_id=r.sample_id,
        question=r.question,
        chosen=r.chosen,
        rejected=r.new_rejected,
        chosen_in_a=chosen_first(seed, r.sample_id),
        injected_bias=r.bias_id,
        domain=r.domain,
        pair_id=r.pair_id,
        source=r.source,
    )
    if scale is not None:
        row.update({"judge_mode": "pointwise", "scale": scale})
    return row


def per_bias_and_domain(
    variants: Sequence[VariantRecord],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    by_bias: dict[str, dict[str, int]] = {}
    by_domain: dict[str, dict[str, int]] = {}
    for v in variants:
        for table, key in ((by_bias, v.bias_id), (by_domain, v.domain)):
            row = table.setdefault(key, {"generated": 0, "kept_by_filter": 0})
            row["generated"] += 1
            row["kept_by_filter"] += v.status == "kept"
    return by_bias, dict(sorted(by_domain.items()))


# --------------------------------------------------------------------------------------------
# Files: data, annotation sheet, stats.json, dataset card
# --------------------------------------------------------------------------------------------


def annotation_rows(samples: Sequence[Mapping[str, str]], originals: Mapping[str, str]) -> list[dict[str, str]]:
    rows = []
    for s in samples:
        row = {name: s.get(name, "") for name in ANNOTATION_COLUMNS if name not in VERDICT_COLUMNS}
        row["original_rejected"] = originals.get(s["sample_id"], "")
        row.update({name: "" for name in VERDICT_COLUMNS})
        rows.append({name: row[name] for name in ANNOTATION_COLUMNS})
    return rows


def write_annotation_sheet(directory: Path, rows: Sequence[Mapping[str, str]]) -> None:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(ANNOTATION_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(directory / "annotation.csv", buffer.getvalue())
    atomic_write_jsonl(directory / "annotation.jsonl", rows)


def write_pro_dir(directory: Path, build: ProBuild, stats: Mapping[str, Any]) -> None:
    """Every file of a Pro set into `directory` (the staging directory of an export)."""
    write_data_files(directory, build.samples, string_schema(data_columns(build.judge_mode)))
    originals = {v.sample_id: v.original_rejected for v in build.variants}
    write_annotation_sheet(directory, annotation_rows(build.samples, originals))
    atomic_write_jsonl(directory / "variants.jsonl", build.variants)
    atomic_write_json(directory / "stats.json", stats)
    atomic_write_text(directory / "README.md", render_pro_card(ProStats.model_validate(stats), directory))


def pro_stats(
    build: ProBuild,
    *,
    ctx_info: Mapping[str, Any],
    biases: Sequence[Bias],
    reviews: Mapping[str, Review] | None = None,
) -> dict[str, Any]:
    """stats.json of a Pro set; `reviews`: each bias's newest review, by id."""
    by_bias, by_domain = per_bias_and_domain(build.variants)
    return {
        "kind": KIND,
        **ctx_info,
        "judge_mode": build.judge_mode,
        "scale": build.scale,
        "biases": [bias_summary(b, (reviews or {}).get(b.id)) for b in biases],
        "counts": build.counts.model_dump(),
        "per_bias": by_bias,
        "per_domain": by_domain,
        "length": build.length.model_dump(),
        "checker_control": build.checker_control.model_dump(),
        "annotation": None,
    }


# --------------------------------------------------------------------------------------------
# The export command
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ProData:
    """The Pro set's pairs and what stats.json says of them: their source, the bad rows skipped
    and the overlap with the items the run discovered its biases on."""

    pairs: list[PreferencePair]
    description: str
    skipped_rows: int
    overlap: DataOverlap


def _pro_data(ctx: RunContext, opts: ProExportOptions) -> _ProData:
    """The pairs to build on (the run's test data unless `opts.data`), refused when empty or,
    unless `opts.allow_overlap`, when they share pairs with the run's discovery items."""
    config, limit = ctx.config, opts.limit
    source = opts.data or config.data.test
    where = opts.data_dir if opts.data_dir is not None else config.data.data_dir
    # bad data rows: skipped and counted when asked, or when the run itself skipped them
    bad_rows = bad_rows_for(source, opts.skip_bad_rows or config.data.skip_bad_rows)
    pairs = load_pairs(source, data_dir=where, limit=limit, seed=config.seed if limit else None, bad_rows=bad_rows)
    if not pairs:
        raise ExportError(f"data {source!r} has no pairs")
    description = describe_source(source, where, portable=True)
    overlap = check_run_overlap(
        ctx.run, config, pairs, data_name=f"the Pro data {description}", allow=opts.allow_overlap
    )
    return _ProData(pairs=pairs, description=description, skipped_rows=len(bad_rows or []), overlap=overlap)


@dataclass(frozen=True)
class _ProModels:
    """The build's models and the filter judge's settings, chosen together: the checker
    defaults to the filter, which defaults to the run's target."""

    teacher: ModelConfig
    checker: ModelConfig
    filter: ModelConfig
    judge_settings: JudgeSettings


def _pro_models(config: RunConfig, opts: ProExportOptions) -> _ProModels:
    """The filter (refused when it is the target, unless `allow_self_filter`), the checker and
    the filter judge's settings: a pairwise filter judges both orders, one verdict each, as the
    paper's does."""
    filter_cfg = model_config(opts.filter_model, opts.filter_base_url, config.target)
    check_filter_model(filter_cfg, config.target, allow_self_filter=opts.allow_self_filter)
    judge_settings = config.judge
    if judge_settings.mode == "pairwise":  # the paper's filter: both orders, one verdict each
        judge_settings = judge_settings.model_copy(update={"positions": "both", "mitigation": "none"})
    return _ProModels(
        teacher=config.teacher,
        checker=model_config(opts.checker_model, opts.checker_base_url, filter_cfg),
        filter=filter_cfg,
        judge_settings=judge_settings,
    )


def _pro_info(ctx: RunContext, data: _ProData, models: _ProModels, opts: ProExportOptions) -> dict[str, Any]:
    """stats.json's account of the build: the run, the data, the bias selection, the models and
    the settings it was made with."""
    config = ctx.config
    return {
        "run_name": config.name,
        "run_dir": ctx.root.name,
        "library_file": ctx.library_file,
        "data": data.description,
        "limit": opts.limit,
        "skipped_rows": data.skipped_rows,
        "bias_selection": opts.biases or "all",
        "reviewed_only": opts.reviewed_only,
        "seed": config.seed,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bias_discovery_version": package_version(),
        **_models_info(models.teacher, models.checker, models.filter, config.target, models.judge_settings),
        "perturb_settings": config.perturb.model_dump(mode="json"),
        "data_overlap": data.overlap.model_dump(mode="json"),
    }


def export_judgebench_pro(
    run_dir: Path | str,
    out: Path | str | None = None,
    options: ProExportOptions | None = None,
    *,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    **overrides: Any,
) -> ProStats:
    """Build a Pro set from a run and write it to `out` (see the module docstring), as
    `options` (`ProExportOptions`) and keyword `overrides` of its fields say
    (``export_judgebench_pro(run, out, variants=2, filter_model=...)``); returns stats.json's
    content as a `ProStats`. `engines` ({"teacher", "checker", "filter"}) replaces models
    (tests); `timeout_s` every model's request deadline (None: the run's).

    Models: the filter is `filter_model`, else the run's target, which is refused (see
    `check_filter_model`) unless `allow_self_filter`; the equivalence checker is
    `checker_model`, else the filter model.

    Data: the run's test data (`data.test`, `data.data_dir`) unless `data` is given; `limit`
    takes a seeded sample of N pairs with the run's seed (with N = the run's `test_limit`,
    exactly the pairs the run validated on, whose rewrites are then in the call cache). Data
    that shares pairs (by id or content) with the items the run discovered its biases on is
    refused unless `allow_overlap`; the overlap goes into stats.json either way.

    Biases: `biases` (`select_biases`); `reviewed_only` keeps only those a reviewer confirmed.
    The card and stats.json give each bias's newest review.
    """
    opts = export_options(ProExportOptions, options, out, overrides)
    out_dir = required_out(opts)
    run_path = Path(run_dir)
    check_output_dir(out_dir, overwrite=opts.overwrite, protect=[run_path], error=ExportError)
    with RunContext(run_path, engines=engines, timeout_s=opts.timeout_s) as ctx:
        chosen = select_biases(ctx.library, opts.biases, run_dir=run_path, reviewed_only=opts.reviewed_only)
        pro_data = _pro_data(ctx, opts)
        models = _pro_models(ctx.config, opts)
        roles = ctx.roles({"teacher": models.teacher, "checker": models.checker, "filter": models.filter})
        build = build_pro_set(
            pro_data.pairs,
            chosen,
            teacher=roles["teacher"],
            checker=roles["checker"],
            filter_judge=roles["filter"],
            variants=opts.variants,
            seed=ctx.config.seed,
            perturb_settings=ctx.config.perturb,
            judge_settings=models.judge_settings,
            progress=progress,
        )
        info = _pro_info(ctx, pro_data, models, opts)
        stats = pro_stats(build, ctx_info=info, biases=chosen, reviews=ctx.run.reviews.decisions())
    with staged_output(out_dir, overwrite=opts.overwrite, protect=[run_path], error=ExportError) as tmp:
        write_pro_dir(tmp, build, stats)
    return ProStats.model_validate(stats)


def _models_info(
    teacher: ModelConfig, checker: ModelConfig, filter_: ModelConfig, target: ModelConfig, judge_settings: JudgeSettings
) -> dict[str, Any]:
    """stats.json's models: their specs, whether the filter is the target and the checker the
    teacher, and the filter judge's settings."""
    return {
        "models": {
            "teacher": teacher.spec,
            "checker": checker.spec,
            "filter": filter_.spec,
            "target": target.spec,
        },
        "self_filter": same_model(filter_, target),
        "self_checked": same_model(checker, teacher),
        # A user's template by file name: the exporting machine's paths mean nothing to readers.
        "filter_judge_settings": {
            **judge_settings.model_dump(mode="json"),
            "prompt": Path(judge_settings.prompt).name
            if is_prompt_path(judge_settings.prompt)
            else judge_settings.prompt,
        },
    }

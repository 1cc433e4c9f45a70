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

`human verification` comes after: `annotation.csv` / `annotation.jsonl` are written for two
annotators, and `bias-discovery export apply-annotations` applies them (annotate.py).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..config import PerturbSettings
from ..data.loaders import describe_source, load_pairs
from ..data.pairs import PreferencePair
from ..errors import ExportError
from ..formatting import ci_pp, delta_clause, number, p_value, percent, plural, pp
from ..io import atomic_write_json, atomic_write_jsonl, atomic_write_text, check_output_dir, staged_output
from ..judging import JudgeSettings, Judgment, judge_pairs
from ..library import Bias
from ..llm.base import Engine
from ..llm.config import ModelConfig, same_model
from ..progress import ProgressFactory, progress_or_quiet
from ..prompts import is_prompt_path
from ..run.context import RunContext
from ..run.overlap import check_run_overlap
from ..run.reviews import Review
from ..run.selection import select_biases
from ..stages.perturb import keyed_rng, perturb
from ..stages.records import PerturbedPair
from ..stages.rewrite_checks import check_answers, check_calls
from ..stats import wilson_interval
from .common import (
    CARD_MISSING,
    LengthStats,
    bias_summary,
    dataset_card_meta,
    length_stats,
    model_config,
    one_line,
    package_version,
    review_lines,
    settings_text,
    string_schema,
    write_data_files,
    yaml_front_matter,
)

KIND = "judgebench-pro"


def read_pro_stats(directory: Path, *, label: str) -> dict[str, Any]:
    """stats.json of the exported Pro set in `directory` (the caller checked it exists),
    refused when it is not JSON or not a Pro set's; `label` starts the kind error."""
    stats_path = directory / "stats.json"
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ExportError(f"{stats_path}: not valid JSON ({exc})") from None
    kind = stats.get("kind") if isinstance(stats, dict) else None
    if kind != KIND:
        raise ExportError(f"{label}: stats.json says kind {kind!r}, expected {KIND!r}")
    return stats

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

class ProCounts(BaseModel):
    """Every count of the pipeline. `generated` = the sum of all drops + `kept_by_filter`."""

    test_pairs: int
    biases: int
    variants_per_pair: int
    generated: int = 0
    """Variants asked of the teacher: test_pairs x variants_per_pair."""
    dropped_invalid_perturbation: int = 0
    invalid_perturbation_reasons: dict[str, int] = Field(default_factory=dict)
    """truncated / empty / engine_error / unchanged (identical to the original rejected)."""
    dropped_duplicate: int = 0
    """Same (question, new rejected) text as an earlier variant."""
    equivalence_checked: int = 0
    equivalence_extracted: int = 0
    """Of those, decided by reading the final answers mechanically (the rest: the checker model)."""
    dropped_equivalent: int = 0
    """The checker said the new rejected response reaches the chosen one's final answer."""
    dropped_check_invalid: int = 0
    """The checker's answer was unusable (truncated, error, neither same nor different)."""
    filter_judged: int = 0
    dropped_filter_correct: int = 0
    """The filter model picked the chosen response in at least one order."""
    dropped_filter_tie: int = 0
    """The filter model called a tie in an order and never picked the chosen response: not
    fooled in both orders, but not right either."""
    dropped_filter_invalid: int = 0
    """A verdict of the filter model was invalid (unparseable, truncated, engine error)."""
    kept_by_filter: int = 0
    """Wrong in both orders: the samples of the set before human verification."""
    after_annotation: int | None = None
    """Samples left after `apply-annotations`; None until annotations are applied."""


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
    check_method: Literal["extracted", "model"] | None = None
    """How `check_answer` was decided: the final answers read and compared, or the checker model."""
    filter_picked: dict[str, str | None] = Field(default_factory=dict)
    """Order -> the response the filter picked ("chosen" / "rejected"; None when invalid)."""
    filter_explanations: dict[str, str] = Field(default_factory=dict)


class CheckerControl(BaseModel):
    """The equivalence checker asked about unmodified originals: the rejected response of each
    pair it checked a variant of, against the chosen one. Their answers differ by construction,
    so every "same" is a false "changed"."""

    n_asked: int = 0
    """Distinct original pairs asked (the pairs with a variant the rules could not decide)."""
    n_usable: int = 0
    """Of those, answered "same" or "different" (the n of the rate)."""
    n_same: int = 0
    false_changed_rate: float | None = None
    """n_same / n_usable: how often the checker calls a different answer "same" (a variant it
    calls "same" is dropped, so this is roughly the share of good variants it throws away)."""
    ci_low: float | None = None
    ci_high: float | None = None
    """95 % Wilson interval of the rate."""


def checker_control(model_checked: Sequence[PerturbedPair]) -> CheckerControl:
    """The control from the checker's answers on the originals of the model-checked variants,
    each distinct original once."""
    answers = {(p.question, p.chosen, p.original_rejected): p.original_check for p in model_checked}
    usable = [a for a in answers.values() if a in ("same", "different")]
    same = sum(1 for a in usable if a == "same")
    low, high = wilson_interval(same, len(usable)) if usable else (None, None)
    return CheckerControl(
        n_asked=len(answers), n_usable=len(usable), n_same=same,
        false_changed_rate=same / len(usable) if usable else None, ci_low=low, ci_high=high,
    )


class ProBuild(BaseModel):
    """The result of `build_pro_set`: the samples (data rows), every variant, the counts."""

    samples: list[dict[str, str]]
    variants: list[VariantRecord]
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
        raise ExportError(f"--variants must be at least 1, got {k}")
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

    # 1. Generate, one teacher batch per round (round r uses seed + r).
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
            )
        )
    reasons = Counter(r.invalid_reason for r in records if r.status == "invalid_perturbation")
    counts.dropped_invalid_perturbation = sum(reasons.values())
    counts.invalid_perturbation_reasons = dict(sorted(reasons.items()))  # type: ignore[arg-type]

    # 3. Duplicates: identical (question, new rejected).
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

    # 4. Equivalence check: read mechanically where possible, else the checker, with its control.
    alive = [r for r in records if r.status == "kept"]
    counts.equivalence_checked = len(alive)
    rewrites = [
        PerturbedPair(
            pair_id=r.pair_id, bias_id=r.bias_id, bias_name=r.bias_name, domain=r.domain, question=r.question,
            chosen=r.chosen, original_rejected=r.original_rejected, perturbed_rejected=r.new_rejected, valid=True,
        )
        for r in alive
    ]
    calls = check_calls(rewrites)
    with bar(f"checking {plural(len(alive), 'variant')} for a changed answer ({plural(calls, 'checker call')})", calls) as advance:
        checked = check_answers(checker, rewrites, seed=seed, progress=advance)
    for r, c in zip(alive, checked):
        # Pro drops every "same", whatever the checker said of the original: a kept sample's
        # label must be right, so a doubtful variant goes.
        r.check_answer, r.check_method = c.answer_check, c.check_method
        counts.equivalence_extracted += c.check_method == "extracted"
        if c.answer_check == "unusable":
            r.status = "check_invalid"
            counts.dropped_check_invalid += 1
        elif c.answer_check == "same":
            r.status = "equivalent"
            counts.dropped_equivalent += 1
    control = checker_control([c for c in checked if c.check_method == "model"])

    # 5. Adversarial filter: both orders, keep what is wrong in both.
    alive = [r for r in records if r.status == "kept"]
    counts.filter_judged = len(alive)
    if alive:
        # The paper's rule: one verdict per order, wrong in both. A run's mitigation (several
        # votes per verdict) would change what "wrong in both orders" means, so it is off here.
        settings = judge_settings.model_copy(update={"positions": "both", "mitigation": "none"})
        judged = [
            PreferencePair(
                id=r.sample_id, question=r.question, chosen=r.chosen, rejected=r.new_rejected, domain=r.domain, source=r.source
            )
            for r in alive
        ]
        with bar(f"adversarial filter: {plural(len(alive), 'variant')} x 2 orders", 2 * len(alive)) as advance:
            result = judge_pairs(filter_judge, judged, settings, seed=seed, progress=advance)
        grouped: dict[str, list[Judgment]] = defaultdict(list)
        for j in result.judgments:
            grouped[j.pair_id].append(j)
        for r in alive:
            js = grouped[r.sample_id]
            r.filter_picked = {j.order: j.picked for j in js}
            r.filter_explanations = {j.order: j.explanation for j in js}
            if any(j.picked is None for j in js):
                r.status = "filter_invalid"
                counts.dropped_filter_invalid += 1
            elif all(j.picked == "rejected" for j in js):
                counts.kept_by_filter += 1
            elif any(j.picked == "chosen" for j in js):
                r.status = "filter_correct"
                counts.dropped_filter_correct += 1
            else:  # a tie in some order, never the chosen response: not right, not fooled twice
                r.status = "filter_tie"
                counts.dropped_filter_tie += 1

    kept = [r for r in records if r.status == "kept"]
    samples = [sample_row(r, seed) for r in kept]
    lengths = length_stats([(r.chosen, r.original_rejected, r.new_rejected) for r in kept])
    return ProBuild(samples=samples, variants=records, counts=counts, length=lengths, checker_control=control)


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


def sample_row(r: VariantRecord, seed: int) -> dict[str, str]:
    return labelled_row(
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


def per_bias_and_domain(variants: Sequence[VariantRecord]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
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
    write_data_files(directory, build.samples, string_schema(DATA_COLUMNS))
    originals = {v.sample_id: v.original_rejected for v in build.variants}
    write_annotation_sheet(directory, annotation_rows(build.samples, originals))
    atomic_write_jsonl(directory / "variants.jsonl", build.variants)
    atomic_write_json(directory / "stats.json", stats)
    atomic_write_text(directory / "README.md", render_pro_card(stats, directory))


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
        "biases": [bias_summary(b, (reviews or {}).get(b.id)) for b in biases],
        "counts": build.counts.model_dump(),
        "per_bias": by_bias,
        "per_domain": by_domain,
        "length": build.length.model_dump(),
        "checker_control": build.checker_control.model_dump(),
        "annotation": None,
    }


LICENCES = """\
- **JudgeBench** (questions, reference responses and labels): MIT licence
  (ScalerLab/JudgeBench). Its responses were written by GPT-4o and Claude-3.5-Sonnet; their
  providers' terms of use apply to those texts.
- **RewardBench** (when it is the source): ODC-BY; its subsets keep their own licences.
- **The demo set** shipped with bias-discovery: written by the project, same licence as the code.
- **Rewritten responses** were generated by the teacher model named above; the checker and
  filter models only produced verdicts. Model outputs are subject to the licence and terms of
  use of the model that produced them (e.g. Qwen's, Llama's or an API provider's terms);
  check them before redistributing or training on this data.
"""


def comparison_cell(comparison: Mapping[str, Any] | None) -> str:
    """One validation comparison of the card's bias table, as the terminal words it, with the
    p adjusted for the iteration's candidates when there is one."""
    if comparison is None:
        return CARD_MISSING
    c = comparison
    adjusted = "" if c.get("p_adjusted") is None else f" (adjusted {p_value(c['p_adjusted'])})"
    return delta_clause(c["delta"], c.get("ci_low"), c.get("ci_high"), c["n"], c.get("p_value")) + adjusted


def _effect_cell(effect: Mapping[str, Any] | None, decided: str | None) -> str:
    """A bias's reported effect in the card: Δ against the control that decided, CI, n and the
    estimator (honest after an early stop)."""
    if effect is None:
        return CARD_MISSING
    return (
        f"{pp(effect['delta'])} vs {decided or CARD_MISSING} (CI {ci_pp(effect.get('ci_low'), effect.get('ci_high'), missing=CARD_MISSING)}, "
        f"n = {effect.get('n') if effect.get('n') is not None else CARD_MISSING}; {effect['method']})"
    )


def _overlap_line(overlap: Mapping[str, Any] | None) -> str:
    """Provenance: how many test pairs the run had discovered its biases on (0 unless allowed)."""
    if overlap is None:
        return "- overlap with the discovery run's target pairs: not checked"
    allowed = " (allowed with --allow-overlap)" if overlap["shared"] else ""
    return (
        f"- overlap with the discovery run's target pairs: {overlap['shared']} of {overlap['n_validation']} test pairs "
        f"({overlap['by_id']} by id, {overlap['by_content']} by content){allowed}"
    )


def _counts_table(c: Mapping[str, Any]) -> str:
    reasons = c.get("invalid_perturbation_reasons") or {}
    reason_text = ", ".join(f"{k} {v}" for k, v in reasons.items()) or "none"
    after = c.get("after_annotation")
    lines = [
        "| step | count |",
        "| --- | ---: |",
        f"| test pairs | {c['test_pairs']} |",
        f"| biases | {c['biases']} |",
        f"| variants per pair (K) | {c['variants_per_pair']} |",
        f"| generated variants | {c['generated']} |",
        f"| dropped as invalid perturbation ({reason_text}) | {c['dropped_invalid_perturbation']} |",
        f"| dropped as duplicate (question, rejected) | {c['dropped_duplicate']} |",
        f"| equivalence-checked | {c['equivalence_checked']} |",
        f"| dropped as equivalent (same final answer as chosen) | {c['dropped_equivalent']} |",
        f"| of those, decided by reading the final answers (no model) | {c.get('equivalence_extracted', 0)} |",
        f"| dropped: checker answer unusable | {c['dropped_check_invalid']} |",
        f"| judged by the filter (both orders) | {c['filter_judged']} |",
        f"| dropped: filter right in at least one order | {c['dropped_filter_correct']} |",
        f"| dropped: filter called a tie (never right, not wrong in both orders) | {c.get('dropped_filter_tie', 0)} |",
        f"| dropped: filter verdict invalid | {c['dropped_filter_invalid']} |",
        f"| **kept by the filter** | **{c['kept_by_filter']}** |",
        f"| **after annotation** | **{'not annotated yet' if after is None else after}** |",
    ]
    return "\n".join(lines)


def _answer_check_text(stats: Mapping[str, Any]) -> list[str]:
    """The card's answer-check paragraph: what was read mechanically, who checked the rest,
    and the checker's false-"changed" rate on unmodified originals (sets exported before the
    control have none)."""
    c, models = stats["counts"], stats["models"]
    control = stats.get("checker_control")
    lines = [
        f"Of the {c['equivalence_checked']} equivalence-checked variants, {c.get('equivalence_extracted', 0)} were decided "
        "by reading the final answers (a letter written five times, a bold or ***X*** answer, a boxed expression, "
        f"\"Final answer: X\") and comparing them; the rest by `{models['checker']}` with the prompt `equivalence_check`."
    ]
    if stats.get("self_checked"):
        lines.append(
            "**Self-checked**: that checker is the teacher that wrote the rewrites (no other model was given), so its "
            "checks are the rewriter grading itself."
        )
    if control is None:
        lines.append("No checker control was run for this set (exported before the control existed).")
    elif control["n_asked"] == 0:
        lines.append("Control: no variant needed the checker model, so it was not asked about any original.")
    else:
        rate = percent(control["false_changed_rate"], unit=" %", missing=CARD_MISSING)
        ci = (
            "" if control["ci_low"] is None
            else f" (95 % Wilson CI {percent(control['ci_low'], unit=' %')} to {percent(control['ci_high'], unit=' %')})"
        )
        lines.append(
            f"Control: the checker was also asked about the {control['n_asked']} original pairs behind those variants, "
            "unmodified (their rejected response reaches a different answer than the chosen one by construction). It "
            f"called {control['n_same']} of the {control['n_usable']} it answered usably \"same\": a false-\"changed\" "
            f"rate of {rate}{ci}, n = {control['n_usable']}. A variant it calls \"same\" is dropped, so about that share "
            "of good variants is lost; a high rate says the checker cannot tell these answers apart."
        )
    return lines


def render_pro_card(stats: Mapping[str, Any], directory: Path) -> str:
    """README.md of the Pro set in `directory`, rendered from stats.json's content and the
    size of its data.parquet (re-rendered by apply-annotations)."""
    c = stats["counts"]
    n = c["after_annotation"] if c.get("after_annotation") is not None else c["kept_by_filter"]
    models = stats["models"]
    front = yaml_front_matter(
        dataset_card_meta(
            directory,
            split="test",
            n_rows=n,
            extra={
                "pretty_name": f"{stats['run_name']} JudgeBench-Pro-style set",
                "license": "other",
                "language": ["en"],
                "tags": ["llm-as-a-judge", "bias", "judgebench-pro", "bias-discovery"],
                "size_categories": ["n<1K" if n < 1000 else "1K<n<10K"],
            },
        )
    )
    length = stats["length"]
    ann = stats.get("annotation")
    lines = [
        front,
        f"# {stats['run_name']}: a JudgeBench-Pro-style benchmark",
        "",
        "Pairwise judging samples built by bias-discovery from the biases its "
        "discovery run found: a test pair's rejected (wrong) response was rewritten by a teacher model "
        "to carry one bias, kept only if the rewrite still has a different final answer than the chosen "
        "response, and kept only if a strong judge then preferred it in both orders (the BiasScope "
        "paper's JudgeBench-Pro recipe).",
        "",
        f"**{plural(n, 'sample')}** (split `test`). Columns: `sample_id`, `question`, `response_A`, `response_B`, "
        "`label` (`A>B`: response A is the correct one; `B>A`: B is), `injected_bias` (bias id, see "
        "below), `domain`, `pair_id` (the original test pair), `source`.",
        "",
        "```python",
        "from datasets import load_dataset",
        "ds = load_dataset(\"path/to/this/folder\", split=\"test\")",
        "```",
        "",
    ]
    if n == 0:
        lines += [
            "> **This set is empty**: no variant survived the filters (see the counts). "
            "`datasets.load_dataset` refuses an empty split (\"Instruction 'test' corresponds to no "
            "data!\"); `datasets.Dataset(pyarrow.parquet.read_table(\"data.parquet\"))` loads it "
            "as 0 rows with the columns above.",
            "",
        ]
    lines += [
        "The same rows are in `data.jsonl`. Also here: `stats.json` (every count below, machine-"
        "readable), `variants.jsonl` (every generated variant with its fate: invalid, duplicate, "
        "checker answer, the filter's verdicts and explanations), `annotation.csv` / "
        "`annotation.jsonl` (the human-verification sheet).",
        "",
        "## Pipeline counts",
        "",
        _counts_table(c),
        "",
        "## Provenance",
        "",
        f"- discovery run: `{stats['run_name']}` ({stats['run_dir']}), library `{stats['library_file']}`",
        f"- test data: {stats['data']}",
        f"- bias selection: `{stats['bias_selection']}`; seed {stats['seed']}",
        _overlap_line(stats.get("data_overlap")),
        f"- built {stats['created_at']} with bias-discovery {stats['bias_discovery_version']}",
        "",
        "## Models",
        "",
        "| role | model |",
        "| --- | --- |",
        f"| teacher (rewrites rejected responses; the loop's perturb prompt) | `{models['teacher']}` |",
        f"| equivalence checker (prompt `equivalence_check`, answers same/different) | `{models['checker']}` |",
        f"| adversarial filter (judges both orders, keeps wrong-in-both) | `{models['filter']}` |",
        f"| target judge of the discovery run | `{models['target']}` |",
        "",
        f"Filter judge settings: {settings_text(stats['filter_judge_settings'])}. "
        f"Teacher settings: {settings_text(stats['perturb_settings'])}.",
        "",
        "## Answer checks",
        "",
        " ".join(_answer_check_text(stats)),
        "",
    ]
    if stats.get("self_filter"):
        lines += [
            "> **The filter is the run's target** (built with `--allow-self-filter`): every sample is one "
            "the target judged wrong in both orders, so the target's error on this set is 100 % by "
            "construction. The set shows the target's failures; it does not measure the target.",
            "",
        ]
    lines += [
        "## Biases",
        "",
        "Validation: the judge's error on the run's test items with the bias injected, minus its "
        "error on the same items unchanged (vs baseline) and with a neutral rewrite (vs placebo); "
        "95 % CI, n paired items, one-sided p (and adjusted for the iteration's candidates). "
        "*Effect* is the reported Δerror against the comparison that decided, estimated so that it "
        "stays honest when validation stopped early (the estimator is named); the two comparisons "
        "are as measured on the items used.",
        "",
        "| id | name | definition | origin | effect | Δerror vs baseline | Δerror vs placebo "
        "| generated | kept |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    per_bias = stats.get("per_bias", {})
    for b in stats["biases"]:
        row = per_bias.get(b["id"], {"generated": 0, "kept_by_filter": 0})
        origin = b["origin"] if b["origin"] == "seed" else f"discovered (iteration {b['iteration']})"
        lines.append(
            f"| `{b['id']}` | {one_line(b['name'])} | {one_line(b['definition'])} | {origin} | "
            f"{_effect_cell(b.get('effect'), b.get('decided_against'))} | "
            f"{comparison_cell(b.get('vs_baseline'))} | {comparison_cell(b.get('vs_placebo'))} | "
            f"{row['generated']} | {row['kept_by_filter']} |"
        )
    statements = list(dict.fromkeys(b["error_statement"] for b in stats["biases"] if b.get("error_statement")))
    if statements:
        lines += ["", "Error control of these validations: " + " ".join(statements)]
    lines += review_lines(stats["biases"], reviewed_only=bool(stats.get("reviewed_only")))
    lines += ["", "## Domains", "", "| domain | generated | kept by the filter |", "| --- | ---: | ---: |"]
    for domain, row in stats.get("per_domain", {}).items():
        lines.append(f"| {domain} | {row['generated']} | {row['kept_by_filter']} |")
    lines += [
        "",
        "## Lengths",
        "",
        f"Average length in {length['method']} tokens (`str.split`) over the {plural(length['n'], 'sample')}: "
        f"chosen {number(length['chosen'], missing=CARD_MISSING)}, original rejected {number(length['original_rejected'], missing=CARD_MISSING)}, "
        f"new rejected {number(length['new_rejected'], missing=CARD_MISSING)}; relative increase of the rejected response "
        f"{percent(length['relative_increase'], signed=True, unit=' %', missing=CARD_MISSING)} (the paper reports +8.4 %).",
        "",
        "## Human verification",
        "",
    ]
    if ann is None:
        lines += [
            "Not annotated yet. Two annotators fill `annotator_1` and `annotator_2` of "
            "`annotation.csv` (or `annotation.jsonl`) with `keep` (the new rejected response is still "
            "wrong, its final answer differs from the chosen one, and the label is right) or `reject` "
            "(anything else: the rewrite fixed or changed the answer, the label is wrong, the sample is "
            "broken), a `reason` when rejecting, and an `adjudication` (keep/reject) wherever they "
            "disagree. Then run `bias-discovery export apply-annotations DIR SHEET`.",
        ]
    else:
        kappa = number(ann["kappa"], digits=3, missing="undefined (one label everywhere)")
        lines += [
            f"Two annotators verified {plural(ann['n_annotated'], 'sample')} (sheet `{ann['sheet']}`, applied "
            f"{ann['applied_at']}): they agreed on {ann['n_agreed']} ({percent(ann['observed_agreement'], unit=' %', missing=CARD_MISSING)}), "
            f"Cohen's kappa {kappa}; {plural(ann['n_adjudicated'], 'disagreement')} "
            + ("was" if ann["n_adjudicated"] == 1 else "were") + " adjudicated. "
            f"{plural(ann['n_rejected'], 'sample')} " + ("was" if ann["n_rejected"] == 1 else "were")
            + f" rejected and removed, {ann['n_kept']} kept.",
        ]
    lines += ["", "## Licences", "", LICENCES]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The export command
# --------------------------------------------------------------------------------------------


def export_judgebench_pro(
    run_dir: Path | str,
    out: Path | str,
    *,
    biases: str | None = None,
    variants: int = 10,
    filter_model: str | None = None,
    filter_base_url: str | None = None,
    checker_model: str | None = None,
    checker_base_url: str | None = None,
    data: str | None = None,
    data_dir: Path | str | None = None,
    limit: int | None = None,
    overwrite: bool = False,
    allow_self_filter: bool = False,
    allow_overlap: bool = False,
    skip_bad_rows: bool = False,
    reviewed_only: bool = False,
    progress: ProgressFactory | None = None,
    engines: Mapping[str, Engine] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Build a Pro set from a run and write it to `out` (see the module docstring); returns
    stats.json's content. `engines` ({"teacher", "checker", "filter"}) replaces models (tests);
    `timeout_s` every model's request deadline (None: the run's).

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
    out = Path(out)
    run_path = Path(run_dir)
    check_output_dir(out, overwrite=overwrite, protect=[run_path], error=ExportError)
    if variants < 1:
        raise ExportError(f"--variants must be at least 1, got {variants}")
    with RunContext(run_path, engines=engines, timeout_s=timeout_s) as ctx:
        config = ctx.config
        chosen = select_biases(ctx.library, biases, run_dir=run_path, reviewed_only=reviewed_only)
        source = data or config.data.test
        where = data_dir if data_dir is not None else config.data.data_dir
        # bad data rows: skipped and counted when asked, or when the run itself skipped them
        bad_rows: list[str] | None = [] if skip_bad_rows or config.data.skip_bad_rows else None
        pairs = load_pairs(source, data_dir=where, limit=limit, seed=config.seed if limit else None, bad_rows=bad_rows)
        if not pairs:
            raise ExportError(f"data {source!r} has no pairs")
        overlap = check_run_overlap(
            ctx.run, config, pairs, data_name=f"the Pro data {describe_source(source, where, portable=True)}", allow=allow_overlap
        )
        teacher_cfg = config.teacher
        filter_cfg = model_config(filter_model, filter_base_url, config.target)
        check_filter_model(filter_cfg, config.target, allow_self_filter=allow_self_filter)
        checker_cfg = model_config(checker_model, checker_base_url, filter_cfg)
        judge_settings = config.judge.model_copy(update={"positions": "both", "mitigation": "none"})
        roles = ctx.roles({"teacher": teacher_cfg, "checker": checker_cfg, "filter": filter_cfg})
        build = build_pro_set(
            pairs,
            chosen,
            teacher=roles["teacher"],
            checker=roles["checker"],
            filter_judge=roles["filter"],
            variants=variants,
            seed=config.seed,
            perturb_settings=config.perturb,
            judge_settings=judge_settings,
            progress=progress,
        )
        info = {
            "run_name": config.name,
            "run_dir": ctx.root.name,
            "library_file": ctx.library_file,
            "data": describe_source(source, where, portable=True),
            "limit": limit,
            "skipped_rows": len(bad_rows or []),
            "bias_selection": biases or "all",
            "reviewed_only": reviewed_only,
            "seed": config.seed,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "bias_discovery_version": package_version(),
            "models": {
                "teacher": teacher_cfg.spec,
                "checker": checker_cfg.spec,
                "filter": filter_cfg.spec,
                "target": config.target.spec,
            },
            "self_filter": same_model(filter_cfg, config.target),
            "self_checked": same_model(checker_cfg, teacher_cfg),
            # A user's template by file name: the exporting machine's paths mean nothing to readers.
            "filter_judge_settings": {
                **judge_settings.model_dump(mode="json"),
                "prompt": Path(judge_settings.prompt).name if is_prompt_path(judge_settings.prompt) else judge_settings.prompt,
            },
            "perturb_settings": config.perturb.model_dump(mode="json"),
            "data_overlap": overlap.model_dump(mode="json"),
        }
        stats = pro_stats(build, ctx_info=info, biases=chosen, reviews=ctx.run.reviews.decisions())
    with staged_output(out, overwrite=overwrite, protect=[run_path], error=ExportError) as tmp:
        write_pro_dir(tmp, build, stats)
    return stats

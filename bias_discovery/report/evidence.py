"""One bias with its evidence, read from a run's records: where it came from and what it does.

A discovered bias is a claim; this module gathers what a reader needs to judge it, as typed
records (`BiasDetail`) that `library show RUN BIAS`, the report's per-bias panels, `--json`
and the Python API all show:

* **provenance** (`Provenance`): the misjudged cases the bias was identified from (the pair,
  the judge's verdict, explanation and deeper explanation, the teacher's identification), the
  candidates merged into it (pooled with it in its iteration, or named again later and called
  the same by the teacher) with their similarity and the teacher's answer, and the iteration;
  a seed says "seed (its library)";
* **examples from validation** (`Examples`): test items whose verdict the bias flipped (right
  on the control, wrong with the bias) and a few it did not, each with the original and the
  perturbed rejected response as a word diff, the verdicts on both and the judge's reasoning,
  the answer check and the length ratio. They are drawn with a generator keyed on the run's
  seed and the bias id, so two renders of one run show the same examples;
* the per-domain effect, and the reviewers' decisions (`run.reviews`), newest first.

Nothing here writes. Records that are missing or do not parse leave their part out and say so
in `notes` (a run shared without its iteration folders still shows its library's numbers).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError

from ..data.pairs import PreferencePair, Shown
from ..errors import BiasDiscoveryError, ConfigError
from ..judging import JudgeResult, Judgment, calls_per_pair, combine, combine_scores
from ..library import Bias, BiasLibrary, BiasValidation
from ..metrics import Preference
from ..run import JsonArtifact, RunDir, ValidationReport
from ..run.library_ref import LibraryRef
from ..run.reviews import Review
from ..settings.common import DEFAULT_EXAMPLES
from ..settings.judge import JudgeSettings
from ..stages import candidates_from_records
from ..stages.merge import MergeDecision
from ..stages.perturb import keyed_rng
from ..stages.records import IdentifyRecord, MisjudgedCase, PerturbedPair
from ..stages.rewrite_checks import count_tokens
from ..stages.turns import as_read
from ..stats import PairedComparison
from .data import BiasRow, bias_row, rejected_candidates

__all__ = [
    "DEFAULT_EXAMPLES",
    "BiasDetail",
    "DiffSegment",
    "EvidenceReader",
    "Examples",
    "Identification",
    "ItemVerdict",
    "JudgedItem",
    "MergeAnswer",
    "MergedCandidate",
    "Provenance",
    "ProvenanceCase",
    "ValidationExample",
    "bias_detail",
    "find_bias",
    "not_flipped_count",
    "word_diff",
]


def not_flipped_count(k: int) -> int:
    """How many items the bias did not flip are shown beside `k` flipped ones: "a few", half
    as many (at least one when any are asked for)."""
    return 0 if k <= 0 else max(1, k // 2)


# --------------------------------------------------------------------------------------------
# Word diff
# --------------------------------------------------------------------------------------------

DiffSegment = tuple[Literal["eq", "del", "ins"], str]
"""A run of text that is the same in both (``eq``), only in the original (``del``) or only in
the perturbed response (``ins``). Texts are raw model text: every view escapes them."""

_TOKEN = re.compile(r"\s+|[^\s]+")


def _merge(segments: list[DiffSegment]) -> list[DiffSegment]:
    out: list[DiffSegment] = []
    for kind, text in segments:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        elif text:
            out.append((kind, text))
    return out


def inline_diff(original: str, perturbed: str) -> list[DiffSegment]:
    """The two texts as one word diff: what stayed (``eq``), what went (``del``) and what came
    (``ins``), in reading order (the terminal shows it as ``[-went-]{+came+}``). Two
    trajectories are diffed as their transcripts: the one rewritten turn shows as a diff
    inside the transcript, every other turn as it stayed."""
    a, b = _TOKEN.findall(as_read(original)), _TOKEN.findall(as_read(perturbed))
    out: list[DiffSegment] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("eq", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("ins", "".join(b[j1:j2])))
    return _merge(out)


def word_diff(original: str, perturbed: str) -> tuple[list[DiffSegment], list[DiffSegment]]:
    """The word diff as two sides: (segments of the original, segments of the perturbed
    response), each a list of (``eq`` | ``del`` | ``ins``, text)."""
    both = inline_diff(original, perturbed)
    return _merge([x for x in both if x[0] != "ins"]), _merge([x for x in both if x[0] != "del"])


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


class _Record(BaseModel):
    """Read-only view records (JSON-ready with `model_dump(mode="json")`)."""


class Identification(_Record):
    """The teacher's reading of one misjudged case (``identified.jsonl``)."""

    status: Literal["bias", "none", "invalid"]
    """bias: it named one; none: it found none; invalid: no usable reply."""
    name: str | None = None
    definition: str | None = None
    manifestations: list[str] = Field(default_factory=list)
    attempts: int = 1
    dropped: str | None = None
    """Why the name was dropped as junk (`IdentifyRecord.dropped`), None when kept."""


class ProvenanceCase(_Record):
    """One misjudged case a bias was identified from: the judge preferred the perturbed
    rejected response over the chosen one."""

    pair_id: str
    iteration: int
    domain: str | None = None
    question: str | None = None
    chosen: str | None = None
    original_rejected: str | None = None
    perturbed_rejected: str
    diff: list[DiffSegment] | None = None
    """The original and the perturbed rejected response as one word diff (None when the
    original is not recorded)."""
    injected_bias: str | None = None
    """The library bias the teacher was asked to inject."""
    order: Shown | None = None
    """Which response the judge saw first."""
    verdict: str | None = None
    """The judge's verdict letter (it picked the perturbed rejected response)."""
    explanation: str = ""
    """The judge's reasoning ("" when it gave only its verdict)."""
    deeper_explanation: str | None = None
    """The judge's answer when asked to explain further (DeeperExplain)."""
    identification: Identification | None = None
    candidate_id: str | None = None
    """The candidate the teacher's name for this case became, before merging."""
    answer_check: str | None = None
    score: float | None = None
    """A pointwise judge: its score of the perturbed rejected response, scored alone (at least
    `chosen_score`: that is what made the case misjudged)."""
    chosen_score: float | None = None
    """A pointwise judge: its score of the chosen response, scored alone."""
    """The misjudgment check of its rewrite, in words (None: a run without it)."""


class ExcludedMisjudgment(_Record):
    """A misjudged pair of the bias's iteration that did not count (`misjudgment_check`): it
    was neither explained nor identified, so no bias of the iteration rests on it."""

    pair_id: str
    injected_bias: str
    reason: Literal["answer_changed", "check_invalid", "length_changed"]
    answer_check: str
    """The answer check in words."""
    length_ratio: float | None = None
    """Whitespace tokens of the rewrite over the original's."""


class MergeAnswer(_Record):
    """One "same or new?" question the teacher answered about a merged candidate."""

    other_id: str
    """The other bias of the question (a candidate of the same iteration, or a library bias)."""
    similarity: float
    """Cosine similarity of the two biases' embeddings (what shortlisted the question)."""
    answer: Literal["same", "new", "invalid"]


class MergedCandidate(_Record):
    """A candidate that did not become a bias of its own because it is this one."""

    id: str
    iteration: int
    how: Literal["pooled", "duplicate"]
    """pooled: the teacher called it the same as this bias's candidate in their iteration, and
    their cases were pooled; duplicate: named in a later iteration, the teacher called it the
    same as this library bias, and it was dropped (the library unchanged)."""
    name: str | None = None
    definition: str | None = None
    pair_ids: list[str] = Field(default_factory=list)
    """The misjudged cases it was named from."""
    answers: list[MergeAnswer] = Field(default_factory=list)


class Provenance(_Record):
    """Where a bias came from."""

    origin: Literal["seed", "discovered"]
    summary: str
    """``seed (biasscope7)`` or ``discovered in iteration 1 (judge hf/smollm2)``."""
    iteration: int
    seed_library: str | None = None
    target_model: str | None = None
    cases: list[ProvenanceCase] = Field(default_factory=list)
    merged: list[MergedCandidate] = Field(default_factory=list)
    excluded: list[ExcludedMisjudgment] = Field(default_factory=list)
    """The misjudged pairs of its iteration that the misjudgment check excluded."""


class ItemVerdict(_Record):
    """One judged order of one test item."""

    order: Shown
    verdict: str | None
    """The verdict letter (A, B, tie), None when the output had none."""
    picked: Preference | None
    correct: bool | None
    invalid_reason: str | None = None
    reasoning: str = ""
    """The judge's reasoning without the verdict line ("" when it gave none)."""
    score: float | None = None
    """A pointwise judge's score of the response shown alone (`order` chosen or rejected)."""


class JudgedItem(_Record):
    """The judge on one version of a test item: its outcome over the orders judged."""

    outcome: Literal["right", "wrong", "invalid", "not judged"]
    """right: every judged order picked the chosen response (with a mitigation: the combined
    verdict did; a pointwise judge: the chosen response scored strictly higher); invalid: a
    verdict was invalid; not judged: the rewrite was invalid."""
    verdicts: list[ItemVerdict] = Field(default_factory=list)
    score_chosen: float | None = None
    """A pointwise judge: the chosen response's score (None: pairwise, or invalid)."""
    score_rejected: float | None = None
    """A pointwise judge: the rejected response's score as shown on this version (the
    original, the placebo's neutral rewrite or the rewrite with the bias)."""

    @property
    def pointwise(self) -> bool:
        """Whether a pointwise judge scored this version (its responses each alone)."""
        return any(v.order in ("chosen", "rejected") for v in self.verdicts)


class ValidationExample(_Record):
    """One test item of a bias's validation: the original rejected response, the same response
    rewritten to carry the bias, and the judge on both."""

    pair_id: str
    domain: str
    question: str
    chosen: str
    original_rejected: str
    perturbed_rejected: str
    diff: list[DiffSegment]
    """Original and perturbed as one word diff."""
    flipped: bool
    """Right on the control, wrong with the bias."""
    control: Literal["placebo", "baseline"]
    """The control the bias was decided against (the placebo: the same item with the rejected
    response rewritten neutrally; the baseline: the item unchanged)."""
    on_control: JudgedItem
    with_bias: JudgedItem
    on_original: JudgedItem | None = None
    """The unchanged item's verdicts, when the control is the placebo."""
    placebo_rewrite: str | None = None
    """The neutral rewrite the judge saw on the control, when the control is the placebo."""
    answer_check: str
    """The answer check in words: kept, checked how, or not checked."""
    length_ratio: float | None
    """Whitespace tokens of the perturbed response over the original's."""


class Examples(_Record):
    """A bias's examples from one validation (iteration `iteration`'s files)."""

    iteration: int
    control: Literal["placebo", "baseline"]
    seed: int
    """The run's seed, which (with the bias id) drew the examples."""
    n_judged: int
    """Valid rewrites judged with a valid verdict on both the control and the bias."""
    n_flipped: int
    """Of those, right on the control and wrong with the bias."""
    n_unflipped: int
    n_invalid: int
    """Rewrites not judged (invalid) or judged with an invalid verdict on either side."""
    flipped: list[ValidationExample] = Field(default_factory=list)
    not_flipped: list[ValidationExample] = Field(default_factory=list)


class BiasDetail(_Record):
    """Everything shown about one bias: its row of numbers, definition, provenance, examples,
    per-domain effect and reviews (newest first)."""

    library: str
    """The library it was read from (``RUN_DIR@N`` or a file)."""
    run_dir: str | None
    row: BiasRow
    definition: str
    manifestations: list[str]
    validation: BiasValidation | None
    """The validation whole (`row` flattens it): both comparisons with their n, the answer check."""
    provenance: Provenance
    examples: Examples | None
    """None when the bias was not validated or its validation files are not there (`notes`)."""
    domains: dict[str, PairedComparison]
    """The bias against the unchanged items, per test domain (descriptive), by domain."""
    reviews: list[Review]
    """Newest first; the first is the bias's decision."""
    notes: list[str] = Field(default_factory=list)
    """What could not be read or matched, and was left out."""

    @property
    def bias_id(self) -> str:
        return self.row.id

    @property
    def decision(self) -> Review | None:
        return self.reviews[0] if self.reviews else None


# --------------------------------------------------------------------------------------------
# Reading a run's records, once per run
# --------------------------------------------------------------------------------------------


@dataclass
class _Iteration:
    """The records of one iteration that evidence reads (each None when absent or damaged)."""

    validation: ValidationReport | None = None
    explanations: dict[str, MisjudgedCase] = field(default_factory=dict)
    excluded: list[MisjudgedCase] = field(default_factory=list)
    """The misjudged cases the misjudgment check excluded (misjudged.jsonl)."""
    identified: dict[str, IdentifyRecord] = field(default_factory=dict)
    merges: list[MergeDecision] = field(default_factory=list)
    merged_into_library: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Bias] = field(default_factory=dict)
    """The candidates identified before merging, by id (as `loop.iteration` made them)."""


def reasoning_of(explanation: str | None, verdict: str | None) -> str:
    """The judge's reasoning, "" when it gave none: with `judge.reasoning` off its output is the
    verdict letter alone, which is not a reason."""
    text = (explanation or "").strip()
    return "" if text in ("A", "B", "tie", verdict or "") else text


def _judged(judgments: Sequence[Judgment], correct: bool | None) -> JudgedItem:
    outcome: Literal["right", "wrong", "invalid", "not judged"] = (
        "invalid" if correct is None else "right" if correct else "wrong"
    )
    scores = {j.order: j.score for j in judgments}
    return JudgedItem(
        outcome=outcome,
        score_chosen=scores.get("chosen"),
        score_rejected=scores.get("rejected"),
        verdicts=[
            ItemVerdict(
                order=j.order,
                verdict=j.verdict,
                picked=j.picked,
                correct=j.correct,
                invalid_reason=j.invalid_reason,
                reasoning=reasoning_of(j.explanation, j.verdict),
                score=j.score,
            )
            for j in judgments
        ],
    )


def _by_pair(result: JudgeResult) -> dict[str, JudgedItem]:
    """Each outcome's judged item by pair id; the judgments are in outcome order, each
    outcome's orders adjacent (as `judging.judge_pairs` writes them)."""
    items, k = {}, 0
    for outcome in result.outcomes:
        mine = result.judgments[k : k + len(outcome.orders)]
        k += len(outcome.orders)
        items[outcome.pair_id] = (
            JudgedItem(outcome="not judged") if not outcome.orders else _judged(mine, outcome.correct)
        )
    return items


def _answer_check_text(record: PerturbedPair) -> str:
    if record.answer_check is None:
        return "not checked"
    how = "read mechanically" if record.check_method == "extracted" else "by the checker model"
    if record.original_check == "same":
        return "unverifiable (kept): the checker called the original's answer the chosen one's too"
    if record.answer_check == "different":
        return f"kept: the rewrite keeps the original's final answer ({how})"
    return f"{record.answer_check} ({how})"


def misjudgment_check_text(case: MisjudgedCase) -> str | None:
    """A misjudged case's check in words ("kept: ...", "answer changed: ..."); None unchecked."""
    how = "read mechanically" if case.check_method == "extracted" else "by the checker model"
    length = f"; length ×{case.length_ratio:.2f}" if case.length_ratio is not None else ""
    if case.answer_check is None:
        answer = "answer not checked"
    elif case.original_check is not None and case.original_check != "different":
        answer = "answer unverifiable (kept): the checker called the original's answer the chosen one's too"
    elif case.answer_check == "same":
        answer = f"the rewrite reaches the chosen answer ({how})"
    elif case.answer_check == "different":
        answer = f"the rewrite keeps the original's final answer ({how})"
    else:
        answer = "the checker gave no usable answer"
    if case.length_ratio is None and case.answer_check is None:
        return None
    reason = {
        "answer_changed": "excluded, answer changed: ",
        "check_invalid": "excluded, check unusable: ",
        "length_changed": "excluded, length beyond the bias's allowance: ",
        None: "counted: ",
    }[case.excluded]
    return f"{reason}{answer}{length}"


class EvidenceReader:
    """A run's records as evidence reads them: each file read once, on first use, however many
    biases are shown (the report shows them all)."""

    def __init__(self, root: Path | str, problems: list[str] | None = None) -> None:
        self.run = RunDir(root)
        self.problems: list[str] = problems if problems is not None else []
        """Lines and files that could not be read (file and line): left out, the rest is shown."""
        self.notes: list[str] = []
        """What is missing from a bias's evidence and why (each detail shows the notes it caused)."""
        self._iterations: dict[int, _Iteration] = {}
        self._validation_items: dict[int, list[tuple[PerturbedPair, JudgedItem]] | str] = {}

    @cached_property
    def config(self) -> dict[str, Any]:
        if not self.run.config_path.is_file():
            return {}
        try:
            loaded = yaml.safe_load(self.run.config_path.read_text(encoding="utf-8", errors="replace"))
        except (yaml.YAMLError, RecursionError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    @property
    def seed(self) -> int:
        from ..config import RunConfig

        value = self.config.get("seed", RunConfig.model_fields["seed"].default)
        return value if isinstance(value, int) else 0

    @cached_property
    def judge(self) -> JudgeSettings | None:
        """How the run judged, as far as it lays out its judgments (positions, mitigation; a
        pointwise judge's mode); None when the config does not say it in a form the judge
        settings take."""
        from ..config import RunConfig

        default = RunConfig.model_fields["judge"].get_default(call_default_factory=True)
        found = self.config.get("judge")
        raw: dict[str, Any] = found if isinstance(found, dict) else {}
        try:
            if raw.get("mode") == "pointwise":  # two calls per pair, each response alone; no position
                return JudgeSettings.model_validate({"mode": "pointwise", "scale": raw.get("scale", "1-10")})
            return JudgeSettings.model_validate(
                {
                    "positions": raw.get("positions", default.positions),
                    "mitigation": raw.get("mitigation", default.mitigation),
                }
            )
        except ValidationError:
            return None

    def _read(self, artifact: JsonArtifact[Any]) -> Any:
        """A JSON document of the run, None when absent or damaged (named in `problems`)."""
        if not artifact.exists():
            return None
        try:
            return artifact.read()
        except BiasDiscoveryError as exc:
            self.problems.append(str(exc).splitlines()[0])
            return None

    @cached_property
    def baseline(self) -> dict[str, JudgedItem]:
        result = self._read(self.run.baseline.result)
        return _by_pair(result) if result is not None else {}

    @cached_property
    def placebo(self) -> tuple[dict[str, JudgedItem], dict[str, str]]:
        """The placebo's judged items and its neutral rewrites, by pair id."""
        record = self.run.placebo
        result = self._read(record.result)
        if result is None:
            return {}, {}
        rewrites = record.perturbed.read_lenient(self.problems)
        return _by_pair(result), {p.pair_id: p.perturbed_rejected for p in rewrites}

    def _library(self, iteration: int) -> BiasLibrary | None:
        if iteration not in self.run.library.iterations():
            return None
        try:
            return self.run.library.load_iteration(iteration)
        except BiasDiscoveryError as exc:
            self.problems.append(str(exc).splitlines()[0])
            return None

    def iteration(self, t: int) -> _Iteration:
        if t not in self._iterations:
            self._iterations[t] = self._load_iteration(t)
        return self._iterations[t]

    def _load_iteration(self, t: int) -> _Iteration:
        files = self.run.iteration(t)
        out = _Iteration(validation=self._read(files.validation))
        source = files.explanations if files.explanations.exists() else files.misjudged
        cases = source.read_lenient(self.problems)
        out.explanations = {c.pair_id: c for c in cases}
        out.excluded = [c for c in files.misjudged.read_lenient(self.problems) if c.excluded is not None]
        identified = files.identified.read_lenient(self.problems)
        out.identified = {r.pair_id: r for r in identified}
        out.merges = files.merges.read_lenient(self.problems)
        stats = self._read(files.merge_stats)
        if stats is not None:
            out.merged_into_library = dict(stats.merged_into_library)
        if identified and cases:
            out.raw = {b.id: b for b in self._raw_candidates(t, identified, cases)}
        return out

    def _raw_candidates(self, t: int, identified: list[IdentifyRecord], cases: list[MisjudgedCase]) -> list[Bias]:
        """The candidates of iteration `t` before merging, made as the loop made them (the ids
        taken are the library's before `t`, and with `validate: late` the candidates pending)."""
        library = self._library(t - 1)
        taken = library.ids() if library is not None else []
        validate = self.config.get("validate")
        if isinstance(validate, dict) and validate.get("when") == "late":
            for u in range(1, t):
                candidates = self.run.iteration(u).candidates
                if candidates.exists():
                    try:
                        taken += [b.id for b in candidates.read()]
                    except BiasDiscoveryError as exc:
                        self.problems.append(str(exc).splitlines()[0])
        named = {c.pair_id for c in cases}
        try:
            return candidates_from_records(
                [r for r in identified if r.pair_id in named], cases, iteration=t, target_model="", taken_ids=taken
            )
        except ValueError as exc:  # a record the loop would not have written (a damaged file)
            self.problems.append(
                f"{self.run.iteration(t).identified.path}: cannot be read as the loop's candidates ({exc})"
            )
            return []

    def validation_of(self, bias_id: str, upto: int | None) -> tuple[int, ValidationReport] | None:
        """The newest validation (up to iteration `upto`) that validated `bias_id`."""
        for t in sorted(self.run.iterations(), reverse=True):
            if upto is not None and t > upto:
                continue
            report = self.iteration(t).validation
            if report is not None and any(c.bias_id == bias_id for c in report.candidates):
                return t, report
        return None

    def validation_items(self, t: int) -> list[tuple[PerturbedPair, JudgedItem]] | str:
        """Iteration `t`'s validation rewrites, each with the judge on it (the judgments of the
        valid rewrites are in rewrite order, `calls_per_pair` adjacent judgments each); or why
        there are none."""
        if t not in self._validation_items:
            self._validation_items[t] = self._align(t)
        return self._validation_items[t]

    def _align(self, t: int) -> list[tuple[PerturbedPair, JudgedItem]] | str:
        files = self.run.iteration(t)
        if not (files.validation_perturbed.exists() and files.validation_judgments.exists()):
            return f"iteration {t}: its validation rewrites and judgments are not on file, so no examples"
        problems_before = len(self.problems)
        rewrites = files.validation_perturbed.read_lenient(self.problems)
        judgments = files.validation_judgments.read_lenient(self.problems)
        if len(self.problems) > problems_before:
            return f"iteration {t}: its validation files have unreadable lines, so no examples"
        judge = self.judge
        if judge is None:
            return (
                f"{self.run.config_path}: its judge settings do not say how the judgments are laid out, so no examples"
            )
        calls = calls_per_pair(judge)
        items: list[tuple[PerturbedPair, JudgedItem]] = []
        k = 0
        for record in rewrites:
            if not record.valid:
                items.append((record, JudgedItem(outcome="not judged")))
                continue
            mine = judgments[k : k + calls]
            k += calls
            if len(mine) != calls or any(j.pair_id != record.pair_id for j in mine):
                break
            pair = PreferencePair.model_construct(id=record.pair_id, domain=record.domain)  # what combine reads
            outcome = (
                combine_scores(pair, mine, judge.scale_spec)
                if judge.mode == "pointwise"
                else combine(pair, mine, judge.mitigation)
            )
            items.append((record, _judged(mine, outcome.correct)))
        else:
            if k == len(judgments):
                return items
        return (
            f"{files.validation_judgments.path}: the judgments do not line up with the rewrites (judge positions "
            f"{judge.positions}, mitigation {judge.mitigation}), so no examples"
        )


# --------------------------------------------------------------------------------------------
# Building a bias's detail
# --------------------------------------------------------------------------------------------


def _origin_summary(bias: Bias) -> str:
    origin = bias.origin
    if origin.kind == "seed":
        return "seed" + (f" ({origin.seed_library})" if origin.seed_library else "")
    judge = f" (judge {origin.target_model})" if origin.target_model else ""
    return f"discovered in iteration {origin.iteration}{judge}"


def _identification(record: IdentifyRecord | None) -> Identification | None:
    if record is None:
        return None
    return Identification(
        status=record.status,
        name=record.name,
        definition=record.definition,
        manifestations=list(record.manifestations),
        attempts=record.attempts,
        dropped=record.dropped,
    )


def _cases(reader: EvidenceReader | None, bias: Bias) -> list[ProvenanceCase]:
    t = bias.origin.iteration
    files = reader.iteration(t) if reader is not None and bias.origin.kind == "discovered" else _Iteration()
    by_pair = {e.pair_id: bid for bid, raw in files.raw.items() for e in raw.evidence}
    cases = []
    for e in bias.evidence:
        case = files.explanations.get(e.pair_id)
        if case is not None and e.bias_injected is not None and case.bias_id != e.bias_injected:
            case = None  # not the same case (a record from another run in this folder)
        original = (
            e.original_rejected if e.original_rejected is not None else (case.original_rejected if case else None)
        )
        cases.append(
            ProvenanceCase(
                pair_id=e.pair_id,
                iteration=t,
                domain=case.domain if case else None,
                question=case.question if case else None,
                chosen=as_read(case.chosen) if case else None,
                original_rejected=as_read(original) if original is not None else None,
                perturbed_rejected=as_read(e.perturbed_response),
                diff=inline_diff(original, e.perturbed_response) if original is not None else None,
                injected_bias=e.bias_injected,
                order=e.order or (case.order if case else None),
                verdict=case.verdict if case else None,
                explanation=reasoning_of(e.judge_explanation, case.verdict if case else None),
                deeper_explanation=e.deeper_explanation,
                identification=_identification(files.identified.get(e.pair_id)),
                candidate_id=by_pair.get(e.pair_id),
                answer_check=misjudgment_check_text(case) if case else None,
                score=case.score if case else None,
                chosen_score=case.chosen_score if case else None,
            )
        )
    return cases


def _excluded(reader: EvidenceReader | None, bias: Bias) -> list[ExcludedMisjudgment]:
    if reader is None or bias.origin.kind != "discovered":
        return []
    return [
        ExcludedMisjudgment(
            pair_id=c.pair_id,
            injected_bias=c.bias_id,
            reason=c.excluded,
            answer_check=misjudgment_check_text(c) or "",
            length_ratio=c.length_ratio,
        )
        for c in reader.iteration(bias.origin.iteration).excluded
        if c.excluded is not None
    ]


def _merged(reader: EvidenceReader, bias: Bias, upto: int | None) -> list[MergedCandidate]:
    found: list[MergedCandidate] = []
    if bias.origin.kind == "discovered" and bias.merged_from:
        t = bias.origin.iteration
        files = reader.iteration(t)
        cluster = {bias.id, *bias.merged_from}
        for member in bias.merged_from:
            raw = files.raw.get(member)
            answers = [
                MergeAnswer(
                    other_id=d.other_id if d.candidate_id == member else d.candidate_id,
                    similarity=d.similarity,
                    answer=d.decision,
                )
                for d in files.merges
                if d.other_kind == "candidate"
                and member in (d.candidate_id, d.other_id)
                and {d.candidate_id, d.other_id} <= cluster
            ]
            found.append(
                MergedCandidate(
                    id=member,
                    iteration=t,
                    how="pooled",
                    name=raw.name if raw else None,
                    definition=raw.definition if raw else None,
                    pair_ids=[e.pair_id for e in raw.evidence] if raw else [],
                    answers=answers,
                )
            )
    for u in reader.run.iterations():
        if upto is not None and u > upto:
            continue
        files = reader.iteration(u)
        for candidate, into in files.merged_into_library.items():
            if into != bias.id:
                continue
            raw = files.raw.get(candidate)
            answers = [
                MergeAnswer(other_id=d.other_id, similarity=d.similarity, answer=d.decision)
                for d in files.merges
                if d.candidate_id == candidate and d.other_id == bias.id
            ]
            found.append(
                MergedCandidate(
                    id=candidate,
                    iteration=u,
                    how="duplicate",
                    name=raw.name if raw else None,
                    definition=raw.definition if raw else None,
                    pair_ids=[e.pair_id for e in raw.evidence] if raw else [],
                    answers=answers,
                )
            )
    return found


def _domains(bias: Bias, report: ValidationReport | None) -> dict[str, PairedComparison]:
    """The validation's per-domain comparisons; a library from before they had CIs takes them
    from the validation report's record."""
    v = bias.validation
    if v is None:
        return {}
    record = next((c for c in report.candidates if c.bias_id == bias.id), None) if report is not None else None
    domains = {}
    for domain, d in sorted(v.per_domain.items()):
        older = record.per_domain.get(domain) if record is not None else None
        if d.ci_low is None and older is not None:
            d = d.model_copy(update={"ci_low": older.ci_low, "ci_high": older.ci_high})
        domains[domain] = d
    return domains


def _example(
    record: PerturbedPair, with_bias: JudgedItem, control: Literal["placebo", "baseline"], reader: EvidenceReader
) -> ValidationExample:
    original = reader.baseline.get(record.pair_id, JudgedItem(outcome="not judged"))
    placebo_items, placebo_texts = reader.placebo
    on_control = (
        original if control == "baseline" else placebo_items.get(record.pair_id, JudgedItem(outcome="not judged"))
    )
    tokens = count_tokens(record.original_rejected)
    return ValidationExample(
        pair_id=record.pair_id,
        domain=record.domain,
        question=record.question,
        chosen=as_read(record.chosen),
        original_rejected=as_read(record.original_rejected),
        perturbed_rejected=as_read(record.perturbed_rejected),
        diff=inline_diff(record.original_rejected, record.perturbed_rejected),
        flipped=on_control.outcome == "right" and with_bias.outcome == "wrong",
        control=control,
        on_control=on_control,
        with_bias=with_bias,
        on_original=original if control == "placebo" else None,
        placebo_rewrite=as_read(placebo_texts.get(record.pair_id, "")) or None if control == "placebo" else None,
        answer_check=_answer_check_text(record),
        length_ratio=count_tokens(record.perturbed_rejected) / tokens if tokens else None,
    )


def _examples(
    reader: EvidenceReader, bias: Bias, k: int, found: tuple[int, ValidationReport] | None
) -> Examples | None:
    if found is None or bias.validation is None:
        return None
    t, _ = found
    aligned = reader.validation_items(t)
    if isinstance(aligned, str):
        reader.notes.append(aligned)
        return None
    control = bias.validation.decisive
    if control == "placebo" and not reader.placebo[0]:
        reader.notes.append("the placebo's judgments are not on file: the examples are shown against the baseline")
        control = "baseline"
    mine = [_example(record, judged, control, reader) for record, judged in aligned if record.bias_id == bias.id]
    decided = [
        x for x in mine if x.on_control.outcome in ("right", "wrong") and x.with_bias.outcome in ("right", "wrong")
    ]
    flipped = [x for x in decided if x.flipped]
    unflipped = [x for x in decided if not x.flipped]
    rng = keyed_rng(reader.seed, "examples", bias.id)
    chosen_flipped = rng.sample(flipped, min(k, len(flipped))) if k > 0 else []
    chosen_unflipped = rng.sample(unflipped, min(not_flipped_count(k), len(unflipped))) if k > 0 else []
    order = {id(x): i for i, x in enumerate(mine)}
    return Examples(
        iteration=t,
        control=control,
        seed=reader.seed,
        n_judged=len(decided),
        n_flipped=len(flipped),
        n_unflipped=len(unflipped),
        n_invalid=len(mine) - len(decided),
        flipped=sorted(chosen_flipped, key=lambda x: order[id(x)]),
        not_flipped=sorted(chosen_unflipped, key=lambda x: order[id(x)]),
    )


def bias_detail(
    bias: Bias,
    *,
    in_library: bool = True,
    reader: EvidenceReader | None = None,
    library: str = "",
    upto: int | None = None,
    examples: int = DEFAULT_EXAMPLES,
    reviews: Sequence[Review] = (),
) -> BiasDetail:
    """`bias` with its evidence from the run `reader` reads (None: a library file, which has
    its numbers and evidence but no run records). `upto`: the library's iteration (merges
    after it are not shown); `examples`: flipped examples shown (and half as many not
    flipped); `reviews`: the run's reviews, oldest first."""
    notes_before = len(reader.notes) if reader is not None else 0
    found = reader.validation_of(bias.id, upto) if reader is not None and bias.validation is not None else None
    detail = BiasDetail(
        library=library,
        run_dir=str(reader.run.root) if reader is not None else None,
        row=BiasRow.model_validate(bias_row(bias, in_library=in_library)),
        definition=bias.definition,
        manifestations=list(bias.manifestations),
        validation=bias.validation,
        provenance=Provenance(
            origin=bias.origin.kind,
            summary=_origin_summary(bias),
            iteration=bias.origin.iteration,
            seed_library=bias.origin.seed_library,
            target_model=bias.origin.target_model,
            cases=_cases(reader, bias),
            merged=_merged(reader, bias, upto) if reader is not None else [],
            excluded=_excluded(reader, bias),
        ),
        examples=_examples(reader, bias, examples, found) if reader is not None else None,
        domains=_domains(bias, found[1] if found else None),
        reviews=[r for r in reversed(reviews) if r.bias_id == bias.id],
    )
    if reader is not None:
        detail.notes = list(dict.fromkeys(reader.notes[notes_before:]))
    elif bias.validation is not None:
        detail.notes = [
            "a library file: its run's records (examples, the teacher's identifications, merges) are not read"
        ]
    return detail


def find_bias(ref: LibraryRef, spec: str) -> tuple[Bias, bool]:
    """The bias `spec` names (an id, a name or its slug) in the library `ref`, or among the
    candidates its run's validations rejected up to that library; (bias, in the library).
    ConfigError naming the bias and listing the ids otherwise."""
    found = ref.library.find(spec)
    if found is not None:
        return found, True
    rejected = rejected_candidates(ref.run_dir, upto=ref.library.iteration) if ref.run_dir is not None else []
    others = BiasLibrary(name="rejected", iteration=0, biases=[b for b in rejected if b.id not in ref.library])
    found = others.find(spec)
    if found is not None:
        return found, False
    listing = ", ".join(ref.library.ids() + others.ids()) or "none"
    raise ConfigError(f"no bias {spec!r} in {ref.label} (nor among its rejected candidates); ids: {listing}")

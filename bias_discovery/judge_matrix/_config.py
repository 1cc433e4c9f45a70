"""The matrix's settings: which judges, which biases, which test items, how to decide.

A matrix config is a YAML file (`experiments/matrix-cpu.yaml`) validated against
`MatrixConfig`; the `matrix` command's flags replace parts of it (`--judges`, `--library`,
`--data`, `--teacher`, `--limit`). Every judge has a name that identifies it in the outputs;
its own judge settings (prompt, mitigation, reasoning ...) sit on top of the matrix's shared
`judge` settings, except `positions`, which every judge shares so that the jury sees the same
orders from all of them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config import (
    DEFAULT_SEED,
    ModelSpec,
    PerturbSettings,
    SequentialSettings,
    ValidateSettings,
    load_settings,
    read_settings_file,
    validate_settings,
)
from ..errors import ConfigError
from ..library import Bias, BiasLibrary
from ..llm.config import ModelConfig, same_model
from ..llm.providers import EMBEDDED_DEFAULT
from ..options import DataOptions, OverlapOptions
from ..settings.judge import JudgeSettings

__all__ = [
    "JURY",
    "MatrixConfig",
    "MatrixData",
    "MatrixJudge",
    "judge_from_spec",
    "load_matrix_config",
    "matrix_settings",
]

JURY = "jury"
"""The name of the jury row (reserved: no judge may be called so)."""
SEED_LIBRARY = "seeds"
"""`library: seeds`: the shipped seed library named by `seed_library`."""
NOT_FOR_A_MATRIX = ("when", "seeds", "max_candidates", "error_control")
"""`validate` settings of the discovery loop that mean nothing for a matrix (one validation,
one family: the whole matrix)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MatrixJudge(_Strict):
    """One judge of the matrix: a name, a model and how it judges."""

    name: str
    """How the outputs name this judge (unique in the matrix; `jury` is reserved). Two
    configurations of one model (another prompt, a mitigation) are two judges with two names."""
    model: ModelSpec
    judge: JudgeSettings
    """This judge's settings: the matrix's `judge` settings with the judge's own on top (in
    the YAML, written next to `name` and `model`: `prompt: judge_pairwise_mitigated`)."""

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        name = value.strip()
        if not name:
            raise ValueError("a judge's name must not be empty")
        if name == JURY:
            raise ValueError(f"'{JURY}' names the jury row; give the judge another name")
        if "," in name:
            raise ValueError(f"judge name {name!r}: no commas (the CSV and `judges` use them)")
        return name

    @property
    def spec(self) -> str:
        return self.model.spec


class MatrixData(_Strict):
    """The test items every judge is measured on."""

    test: str = "demo:test"
    """The test set every bias is validated on: a named set (demo:test, judgebench ...) or a file."""
    data_dir: Path | None = None
    """Local copy of the named sets (else $BIAS_DISCOVERY_DATA_DIR, else the hub)."""
    limit: int | None = Field(default=None, ge=1)
    """A seeded sample of this many test pairs (all when unset)."""
    allow_overlap: bool = False
    """With a run's library: go on when test pairs are pairs the run discovered its biases on
    (same id or content); refused otherwise (`--allow-overlap`). Recorded in matrix.json."""
    skip_bad_rows: bool = False
    """Skip test rows that cannot be used (malformed, a missing field, two identical responses,
    a repeated id) instead of stopping (`--skip-bad-rows`); counted in matrix.json. A published
    set (`judgebench`, `rewardbench`) skips and counts them without it."""


def _matrix_validate_defaults() -> ValidateSettings:
    return ValidateSettings(sequential=SequentialSettings(enabled=False), held_out=0.0)


def _judge_on_shared(index: int, entry: Any, shared: dict[str, Any]) -> Any:
    """One `judges` entry with its own settings on top of the `shared` judge settings (a
    pointwise judge has no position: the shared position settings do not apply to it)."""
    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict):
        return entry
    own = {k: v for k, v in entry.items() if k not in ("name", "model", "judge")}
    nested = entry.get("judge") or {}
    if isinstance(nested, dict):
        own = {**nested, **own}
    if own.get("mode", shared.get("mode")) == "pointwise":
        base = {k: v for k, v in shared.items() if k not in ("positions", "mitigation", "allow_tie")}
    else:
        base = shared
    if "positions" in own and own["positions"] != shared["positions"]:
        raise ValueError(
            f"judges.{index}: positions is shared by every judge (judge.positions: {shared['positions']}), "
            "so the jury sees each item in the same orders; set it once under `judge`"
        )
    resolved: dict[str, Any] = {"model": entry.get("model"), "judge": {**base, **own}}
    name = entry.get("name")
    if name is None and isinstance(entry.get("model"), str):
        name = entry["model"]
    if name is not None:
        resolved["name"] = name
    return resolved


class MatrixConfig(_Strict):
    """A bias matrix: every bias of a library validated against every judge, on the same
    perturbed and placebo items."""

    name: str = "matrix"
    """The matrix's name, shown on its page and in matrix.json (the directory is `--out`)."""
    seed: int = DEFAULT_SEED
    """One seed for everything: the test sample, the position swaps, every model's sampling.
    The same seed gives every judge the same rewrites (and the call cache answers them)."""
    teacher: ModelSpec = Field(default_factory=lambda: ModelConfig.from_spec(EMBEDDED_DEFAULT))
    """The model that rewrites the rejected responses (each bias, and the neutral placebo)."""
    library: str = SEED_LIBRARY
    """The biases: `seeds` (the seed library `seed_library`), a shipped seed library name
    (`calm12`, `biasscope7+chen4`), a run directory (its newest library; RUN_DIR@N the
    library after iteration N) or a library .json file."""
    seed_library: str = "biasscope7"
    """The seed library `library: seeds` stands for."""
    biases: list[str] | None = None
    """Validate only these biases of the library (ids or names, in this order); all when unset."""
    data: MatrixData = Field(default_factory=MatrixData)
    judge: JudgeSettings = Field(default_factory=lambda: JudgeSettings(positions="swap"))
    """Judge settings shared by every judge (each judge may set its own on top, but not
    `positions`, which the jury needs the same for all)."""
    judges: list[MatrixJudge] = Field(min_length=1)
    perturb: PerturbSettings = Field(default_factory=PerturbSettings)
    validate_: ValidateSettings = Field(default_factory=_matrix_validate_defaults, alias="validate")
    """The test, the control, alpha, the correction and the answer check, as in the loop; the
    family is the whole matrix (every judge x bias cell and the jury row). Every cell sees
    every test item, so `sequential.enabled` must stay false and `held_out` 0."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _judges_on_shared_settings(cls, raw: Any) -> Any:
        """Each judge's own settings, written next to its `name` and `model`, go on top of the
        shared `judge` settings; a judge without a name is named by its model spec."""
        if not isinstance(raw, dict) or not isinstance(raw.get("judge") or {}, dict):
            return raw
        shared = {"positions": "swap", **(raw.get("judge") or {})}  # the field's default, also when other keys are set
        raw = {**raw, "judge": shared}
        if not isinstance(raw.get("judges"), list):
            return raw
        judges = [_judge_on_shared(index, entry, shared) for index, entry in enumerate(raw["judges"])]
        return {**raw, "judges": judges}

    @model_validator(mode="before")
    @classmethod
    def _one_look(cls, raw: Any) -> Any:
        """A `validate` section without `sequential.enabled` means no sequential looks here
        (the loop's default is on), and without `held_out` no item held out (the loop's
        default holds some out)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("validate"), dict):
            return raw
        section = dict(raw["validate"])
        sequential = section.get("sequential") or {}
        if isinstance(sequential, dict) and "enabled" not in sequential:
            section["sequential"] = {**sequential, "enabled": False}
        section.setdefault("held_out", 0.0)
        return {**raw, "validate": section}

    @field_validator("validate_")
    @classmethod
    def _one_family(cls, value: ValidateSettings) -> ValidateSettings:
        if value.sequential.enabled:
            raise ValueError(
                "sequential.enabled: the matrix tests every cell on every test item (judges are compared on "
                "the same items), so sequential looks do not apply; set it to false"
            )
        if value.held_out > 0.0:
            raise ValueError(
                "held_out: the matrix tests every cell on every test item (judges are compared on the same items), "
                "so no item is held out of the decision; set it to 0"
            )
        for name in NOT_FOR_A_MATRIX:
            if name in value.model_fields_set:
                raise ValueError(f"{name}: a setting of the discovery loop; a matrix is one validation, one family")
        return value

    @model_validator(mode="after")
    def _distinct_judges(self) -> MatrixConfig:
        seen: dict[str, MatrixJudge] = {}
        for index, judge in enumerate(self.judges):
            if judge.judge.mode == "pairwise" and judge.judge.positions != self.judge.positions:
                raise ValueError(
                    f"judges.{index} ({judge.name}): positions {judge.judge.positions} differs from judge.positions "
                    f"{self.judge.positions}: every judge shows each item in the same orders (the jury needs them)"
                )
            if judge.judge.verdict != "choice":
                raise ValueError(
                    f"judges.{index} ({judge.name}): verdict: {judge.judge.verdict}: the matrix compares the judges' "
                    "choice verdicts (errors), so every judge uses verdict: choice"
                )
            if judge.name in seen:
                raise ValueError(
                    f"judges: two judges are named {judge.name!r}; give each its own `name` "
                    "(two configurations of one model need two names)"
                )
            for other in seen.values():
                if other.model == judge.model and other.judge == judge.judge:
                    raise ValueError(
                        f"judges: {other.name!r} and {judge.name!r} are the same model with the same settings: "
                        "they would give the same verdicts (and the jury would count them twice)"
                    )
            seen[judge.name] = judge
        return self

    def answer_checker(self) -> ModelConfig | None:
        """The model that checks the rewrites' answers (None: no check): `validate.checker`;
        else the first judge whose model is not the teacher (the model that wrote a rewrite
        does not grade it; appending judges keeps it); else the teacher (self-checked). One
        checker for the whole matrix, so every judge sees the same valid items."""
        if not self.validate_.answer_check:
            return None
        if self.validate_.checker is not None:
            return self.validate_.checker
        for judge in self.judges:
            if not same_model(judge.model, self.teacher):
                return judge.model
        return self.teacher

    @property
    def self_checked(self) -> bool | None:
        checker = self.answer_checker()
        return None if checker is None else same_model(checker, self.teacher)

    def to_yaml(self) -> str:
        """The resolved settings, loadable again (the loop's settings a matrix refuses left out)."""
        dumped = self.model_dump(mode="json", by_alias=True, exclude={"validate_": set(NOT_FOR_A_MATRIX)})
        return yaml.safe_dump(dumped, sort_keys=False)


def load_matrix_config(path: Path | str, overrides: list[str] | None = None) -> MatrixConfig:
    """Read and validate a matrix config; every error names the file and the field."""
    return load_settings(path, MatrixConfig, overrides)


class MatrixOptions(DataOptions, OverlapOptions):
    """What one invocation of the matrix sets on top of its config (`bias-discovery matrix`'s
    options, the arguments of `api.matrix`): where it writes, and the parts of the config it
    replaces (the inherited data fields too: `limit` takes a seeded sample of the test pairs)."""

    out: Path
    """The matrix directory (its call cache: a rerun continues, a judge added later pays only
    its own calls)."""
    judges: str | None = None
    """SPEC,SPEC,...: model specs or per-judge YAML files (replaces the config's judges)."""
    library: str | None = None
    """seeds, a seed library, a run directory (RUN_DIR, RUN_DIR@N) or a library file."""
    biases: str | None = None
    """ID,NAME,...: the biases of the library to validate (None: all)."""
    data: str | None = None
    """The test data: a named set or a file."""
    teacher: str | None = None
    """The model that writes the rewrites."""
    overrides: list[str] = Field(default_factory=list)
    """KEY=VALUE settings applied last (dotted keys)."""

    @field_validator("judges", "biases", mode="before")
    @classmethod
    def _names_as_text(cls, value: Any) -> Any:
        """A list of specs or names is the same as their comma-separated text."""
        return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value


def matrix_settings(path: Path | str | Mapping[str, Any] | None, options: MatrixOptions) -> MatrixConfig:
    """The `matrix` command's settings: the config file (if any), the options on top
    (`judges`: SPEC,SPEC,... model specs or per-judge YAML files; `biases`: ID,NAME,...), then
    the `overrides`. `path` may also be the settings themselves (a dict, as the API takes
    them)."""
    judges, library, biases, teacher = options.judges, options.library, options.biases, options.teacher
    data, data_dir, limit = options.data, options.data_dir, options.limit
    allow_overlap, skip_bad_rows = options.allow_overlap or None, options.skip_bad_rows or None
    if isinstance(path, Mapping):
        raw: dict[str, Any] = copy.deepcopy(dict(path))
        where = "the config given"
    else:
        raw = read_settings_file(path) if path is not None else {}
        where = str(path)
    if judges is not None:
        entries = [e for e in judges.split(",") if e.strip()]
        if not entries:
            raise ConfigError(f"`judges` {judges!r}: expected SPEC,SPEC,... (model specs or judge .yaml files)")
        raw["judges"] = [judge_from_spec(e) for e in entries]
    if not raw.get("judges"):
        raise ConfigError(
            "no judges: name them with `judges` SPEC,SPEC (model specs or judge .yaml files) or in a CONFIG"
        )
    if library is not None:
        raw["library"] = library
    if biases is not None:
        raw["biases"] = [b.strip() for b in biases.split(",") if b.strip()]
    flags = (
        ("test", data),
        ("data_dir", None if data_dir is None else str(data_dir)),
        ("limit", limit),
        ("allow_overlap", allow_overlap),
        ("skip_bad_rows", skip_bad_rows),
    )
    for key, value in flags:
        if value is not None:
            section = raw.get("data")
            raw["data"] = {**(section if isinstance(section, dict) else {}), key: value}
    if teacher is not None:
        raw["teacher"] = teacher
    source = f"{where} (with the command's flags)" if path is not None else "the command's flags"
    return validate_settings(raw, MatrixConfig, source=source, overrides=options.overrides)


def judge_from_spec(spec: str) -> dict[str, Any]:
    """One `--judges` entry as a judge mapping: a per-judge YAML file (name, model and the
    judge's own settings) or a model spec (named by itself)."""
    text = spec.strip()
    path = Path(text)
    if text.endswith((".yaml", ".yml")) or path.is_file():
        raw = read_settings_file(path)
        if "model" not in raw:
            raise ConfigError(f"`judges` {text}: a judge file needs `model` (and `name`, `prompt` ...)")
        return {"name": path.stem, **raw}
    if "/" not in text:
        raise ConfigError(f"`judges` {text!r}: expected a model spec (provider/model) or a judge .yaml file")
    return {"name": text, "model": text}


def selected_biases(library: BiasLibrary, wanted: list[str] | None, where: str) -> list[Bias]:
    """The library's biases named by `wanted` (ids or names, in that order, duplicates once),
    or all of them; an unknown name is an error listing the available ids."""
    if not wanted:
        return list(library.biases)
    chosen: list[Bias] = []
    unknown = []
    for entry in wanted:
        bias = library.find(entry)
        if bias is None:
            unknown.append(entry)
        elif bias not in chosen:
            chosen.append(bias)
    if unknown:
        raise ConfigError(
            f"biases: {', '.join(repr(u) for u in unknown)} not in {where}; available: {', '.join(library.ids())}"
        )
    return chosen


def load_matrix_library(spec: str, seed_library: str) -> tuple[BiasLibrary, str, Path | None]:
    """The library `library` names, how the outputs describe it, and the run it belongs to
    (None for a seed library or a file): `seeds`, a run directory (RUN_DIR, RUN_DIR@N), a
    library file, or shipped seed library names joined by '+'."""
    from ..library import load_seed_library
    from ..run.library_ref import resolve_library

    text = spec.strip()
    if text == SEED_LIBRARY:
        return load_seed_library(seed_library), f"seed library {seed_library}", None
    if Path(text).exists() or ("@" in text and Path(text.rsplit("@", 1)[0]).is_dir()):
        ref = resolve_library(text)
        where = f"{ref.run_dir.name}@{ref.library.iteration}" if ref.run_dir is not None else ref.path.name
        return ref.library, where, ref.run_dir
    return load_seed_library(text), f"seed library {text}", None

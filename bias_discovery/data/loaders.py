"""Turn named data sets and data files into `PreferencePair`s.

`load_pairs(source)` accepts

- a named set (case-insensitive):
  - ``demo``: the 48 objective pairs shipped in this package (``demo_pairs.jsonl``);
    ``demo:target`` / ``demo:test`` for its two disjoint halves (24 pairs each, 6 per domain:
    the odd-numbered pairs of each domain are the target half, the even-numbered the test
    half), so a quick run discovers on one half and validates on the other;
  - ``judgebench``: JudgeBench, both response-model splits (gpt first, then claude);
    ``judgebench:gpt`` / ``judgebench:claude`` for one of them; ``judgebench:cross`` for the
    matched cross-model pairs of the questions both models answered (`data.cross_model`:
    one model's correct answer against the other's incorrect one, for self-preference);
  - ``rewardbench``: RewardBench's ``filtered`` split; ``rewardbench:<section>`` for one of its
    sections (``chat``, ``chat-hard``, ``safety``, ``reasoning``; case, ``-``, ``_`` and spaces
    are ignored);
  - ``taubench``: τ-bench's GPT-4o airline trajectories (`data.trajectories`): a completed
    against a failed trial of each of the 26 tasks that have both, as trajectory pairs
    (`PreferencePair.kind == "trajectory"`); read from a data directory only (MIT, not shipped);
- ``hf:<owner>/<name>[:<split>]``: any hub data set, mapped like a generic file;
- a path to a ``.jsonl`` file, a ``.json`` file holding a list of objects, or a ``.parquet``
  file, mapped with a `FieldMap`. A response that is a list of OpenAI-style chat messages (or
  an object with `messages`) is an agent's trajectory: the pair is a trajectory pair, and
  without a question its task is the first user message;
- a path to an inspect_ai ``.eval`` log: per sample id, its best-scored epoch against its
  worst (`data.trajectories.read_inspect_log` reads every sample).

Named sets (other than ``demo``) are read from a local data directory when one is configured:
the ``data_dir`` argument, else the ``BIAS_DISCOVERY_DATA_DIR`` environment variable. The
directory has the layout of the project's shared data copy::

    judgebench/dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl
    judgebench/dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl
    rewardbench/rewardbench_filtered.jsonl
    taubench/gpt-4o-airline.json

Without a data directory they come from the hub (``ScalerLab/JudgeBench`` splits ``gpt`` and
``claude``; ``allenai/reward-bench`` split ``filtered``), through ``datasets`` imported only then.

Every problem with the input is a `DataError` that names the file and line (or row), the field
and the offending value. Decisions worth knowing:

- JudgeBench's ``label`` must be ``"A>B"`` or ``"B>A"``; anything else is an error, never a
  guess. Its domain comes from ``source`` (``mmlu-pro-*`` knowledge, ``livebench-reasoning``
  reasoning, ``livebench-math`` math, ``livecodebench`` code); a source outside these (a future
  hub revision) gets domain ``"unknown"`` and keeps its ``source``, so nothing is dropped.
- A row whose two responses are the same text (after trimming whitespace) has no better
  response: any verdict on it would be scored as a judge error. It is a bad row. JudgeBench's
  claude split has one (line 265).
- A bad row (malformed JSON or bytes that are not UTF-8 on its line, a missing or mistyped
  field, a bad label, identical responses, a repeated id) is a `DataError` naming its file and
  line (or row) and the field; with ``bad_rows`` it is skipped and its message recorded
  instead. Problems with a whole file (missing, not a list, not parquet) are always errors.
- A published benchmark (``judgebench``, ``rewardbench``: `is_published`) loads as published:
  its callers pass ``bad_rows`` without being asked (`bad_rows_for`), so the rows the loader
  refuses are skipped, counted and named in one line (`skipped_rows_message`); ``judgebench``
  loads 619 of its 620 pairs. A user's own file keeps the error unless ``--skip-bad-rows``.
- RewardBench's ``id`` 3692 occurs twice (a ``donotanswer`` and a ``hep-python`` row). An id
  that occurs more than once in the file gets its subset appended (``"3692-donotanswer"``,
  ``"3692-hep-python"``) on every occurrence, so ids do not depend on row order, filtering or
  sampling; the raw id stays in ``meta["rewardbench_id"]``.
- Pair ids must be unique in what one call returns: a duplicate in a file is an error naming
  both lines. If the two JudgeBench splits ever share a pair id (they do not today), the
  claude one is prefixed ``"claude:"``.
- ``limit`` takes the first N pairs in file order; with ``seed`` it takes a seeded random
  sample of N, returned in file order (the same seed gives the same pairs). ``seed`` without
  ``limit`` changes nothing.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import DataError, json_problem
from ..formatting import plural
from ..io import read_utf8, scan_jsonl
from .pairs import Order, PreferencePair, ResponseKind
from .trajectories import TAUBENCH_FILE, load_inspect_pairs, load_taubench, openai_trajectory

DATA_DIR_ENV = "BIAS_DISCOVERY_DATA_DIR"
"""Environment variable naming the local data directory for named sets."""

DEMO_FILE = Path(__file__).resolve().parent / "demo_pairs.jsonl"

JUDGEBENCH_HUB_ID = "ScalerLab/JudgeBench"
REWARDBENCH_HUB_ID = "allenai/reward-bench"
REWARDBENCH_SPLIT = "filtered"

JUDGEBENCH_FILES: dict[str, str] = {
    "gpt": "judgebench/dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
    "claude": "judgebench/dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl",
}
"""JudgeBench split -> file, relative to the data directory (gpt first: the load order)."""

REWARDBENCH_FILE = "rewardbench/rewardbench_filtered.jsonl"

REWARDBENCH_SECTIONS: tuple[str, ...] = ("Chat", "Chat Hard", "Safety", "Reasoning")

REWARDBENCH_SUBSET_SECTIONS: dict[str, str] = {
    "alpacaeval-easy": "Chat",
    "alpacaeval-hard": "Chat",
    "alpacaeval-length": "Chat",
    "mt-bench-easy": "Chat",
    "mt-bench-med": "Chat",
    "mt-bench-hard": "Chat Hard",
    "llmbar-natural": "Chat Hard",
    "llmbar-adver-neighbor": "Chat Hard",
    "llmbar-adver-GPTInst": "Chat Hard",
    "llmbar-adver-GPTOut": "Chat Hard",
    "llmbar-adver-manual": "Chat Hard",
    "refusals-dangerous": "Safety",
    "refusals-offensive": "Safety",
    "xstest-should-refuse": "Safety",
    "xstest-should-respond": "Safety",
    "donotanswer": "Safety",
    "math-prm": "Reasoning",
    "hep-cpp": "Reasoning",
    "hep-go": "Reasoning",
    "hep-java": "Reasoning",
    "hep-js": "Reasoning",
    "hep-python": "Reasoning",
    "hep-rust": "Reasoning",
}
"""RewardBench's own grouping of subsets into sections. The local copy carries a `section`
field; the hub's `filtered` split does not, so hub rows get their section from here."""

DEMO_SPLITS: dict[str, int] = {"target": 1, "test": 0}
"""Demo split -> the parity of the pair numbers it holds (`demo-math-01` is number 1: target).
The halves are disjoint, cover the set, and hold 6 pairs of each of the four domains."""

KNOWN_DATASETS: dict[str, str] = {
    "demo": "the 48 objective pairs shipped with the package (math, knowledge, reasoning, code)",
    "demo:target": "24 demo pairs (6 per domain) for discovery; disjoint from demo:test",
    "demo:test": "the other 24 demo pairs (6 per domain) for validation",
    "judgebench": "JudgeBench, both response-model splits (gpt then claude)",
    "judgebench:gpt": "JudgeBench, pairs answered by gpt-4o",
    "judgebench:claude": "JudgeBench, pairs answered by claude-3.5-sonnet",
    "judgebench:cross": "JudgeBench's questions answered by both models, crossed: one model's correct answer against the other's incorrect one",
    "rewardbench": "RewardBench, filtered split (domain = section)",
    "rewardbench:<section>": "one RewardBench section: " + ", ".join(REWARDBENCH_SECTIONS),
    "taubench": "τ-bench's GPT-4o airline trajectories: a completed against a failed trial of each of 26 tasks (local copy only)",
}
"""Named sets `load_pairs` accepts, with a one-line description each (for help texts)."""

FILE_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".parquet", ".eval")

_KNOWN_HINT = (
    "known data sets: "
    + ", ".join(KNOWN_DATASETS)
    + "; or hf:<owner>/<name>[:<split>]; or a path to a "
    + " / ".join(FILE_SUFFIXES)
    + " file"
)


# --------------------------------------------------------------------------------------
# Field mapping for generic files


def _judgebench_label_values() -> dict[str, Literal["A", "B"]]:
    return {"A>B": "A", "B>A": "B"}


class FieldMap(BaseModel):
    """Which field of a generic data file holds which part of a preference pair.

    Two styles of file are understood:

    - ``chosen_rejected``: the record names the better response (``chosen``) and the worse
      one (``rejected``) directly;
    - ``label``: the record has two responses (``response_a``, ``response_b``) and a ``label``
      saying which one is better, JudgeBench-style; ``label_values`` maps each allowed label
      value to ``"A"`` or ``"B"``. Any other label value is an error.

    With ``style="auto"`` (the default) a record with the ``chosen`` field is read
    chosen/rejected, otherwise a record with the ``label`` field is read label-style.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    style: Literal["auto", "chosen_rejected", "label"] = Field(
        default="auto", description="How the better response is given; see the class docstring."
    )
    id: str = Field(default="id", description="Pair id; when absent, `<file stem>-<line>`.")
    question: str = Field(
        default="question",
        description="The prompt. Left at the default, a record without `question` but with `prompt` uses `prompt`.",
    )
    chosen: str = Field(default="chosen", description="The better response (chosen_rejected style).")
    rejected: str = Field(default="rejected", description="The worse response (chosen_rejected style).")
    response_a: str = Field(default="response_A", description="First response (label style).")
    response_b: str = Field(default="response_B", description="Second response (label style).")
    label: str = Field(default="label", description="Which response is better (label style).")
    label_values: dict[str, Literal["A", "B"]] = Field(
        default_factory=_judgebench_label_values,
        description="Allowed label values and the response each one names as better.",
    )
    domain: str = Field(
        default="domain",
        description="Domain; when absent, inferred from a JudgeBench-style `source`, else 'unknown'.",
    )
    source: str = Field(default="source", description="Provenance; when absent, the file stem.")

    @field_validator("label_values")
    @classmethod
    def _label_values_not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("label_values must name at least one label")
        return value

    @model_validator(mode="after")
    def _distinct_text_fields(self) -> FieldMap:
        if self.chosen == self.rejected:
            raise ValueError(f"chosen and rejected name the same field {self.chosen!r}")
        if self.response_a == self.response_b:
            raise ValueError(f"response_a and response_b name the same field {self.response_a!r}")
        return self

    @classmethod
    def parse(cls, text: str) -> FieldMap:
        """Build a FieldMap from ``"question=prompt,chosen=good,rejected=bad"`` (CLI syntax).

        Keys are this model's field names (except ``label_values``); unknown keys or a
        malformed entry raise DataError.
        """
        values: dict[str, str] = {}
        allowed = [name for name in cls.model_fields if name != "label_values"]
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key or not value:
                raise DataError(f"field map entry {part!r} is not of the form key=field")
            if key not in allowed:
                raise DataError(f"field map key {key!r} is unknown; known keys: {', '.join(allowed)}")
            values[key] = value
        try:
            return cls.model_validate(values)
        except ValueError as exc:
            raise DataError(f"invalid field map {text!r}: {exc}") from None


# --------------------------------------------------------------------------------------
# Records: rows of any origin with a printable location


@dataclass(frozen=True)
class _Row:
    where: str
    """Printable location for error messages: ``file:line``, ``file row 3``, ``hub ... row 3``."""
    fallback_id: str
    """Id used when the record has none: ``<stem>-<line or index>``."""
    record: Mapping[str, Any]
    problem: str | None = None
    """Why the row is not a record at all (malformed JSON, not UTF-8, not an object), with
    its location; such a row is a bad row like one with a missing field."""


def _jsonl_rows(path: Path) -> Iterator[_Row]:
    for line, obj, problem in scan_jsonl(path):
        yield _Row(f"{path}:{line}", f"{path.stem}-{line}", obj or {}, problem)


def _json_rows(path: Path) -> Iterator[_Row]:
    text = read_utf8(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: malformed JSON ({json_problem(exc, line=False)})") from None
    except RecursionError:
        raise DataError(f"{path}: malformed JSON (nested too deeply)") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    for index, obj in enumerate(data):
        where = f"{path}: item {index}"
        problem = None if isinstance(obj, dict) else f"{where}: expected a JSON object, got {type(obj).__name__}"
        yield _Row(where, f"{path.stem}-{index}", obj if isinstance(obj, dict) else {}, problem)


def _parquet_rows(path: Path) -> Iterator[_Row]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a core dependency
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise DataError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from None
    for index, obj in enumerate(table.to_pylist()):
        yield _Row(f"{path} row {index}", f"{path.stem}-{index}", obj)


def _hub_rows(repo: str, split: str) -> Iterator[_Row]:
    """Rows of a hub data set, via `datasets.load_dataset` (imported here, not at import time)."""
    hint = (
        f"Point to a local copy instead with `data_dir` DIR or {DATA_DIR_ENV}=DIR "
        f"(layout: {JUDGEBENCH_FILES['gpt']}, {JUDGEBENCH_FILES['claude']}, {REWARDBENCH_FILE})."
    )
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"loading {repo} (split {split}) from the hub needs the `datasets` package, which is not installed. {hint}"
        ) from None
    try:
        dataset = datasets.load_dataset(repo, split=split)
    except Exception as exc:  # offline, unknown repo, bad split, network: all the same to a user
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DataError(
            f"could not reach the hub to load {repo} (split {split}): "
            f"{type(exc).__name__}{': ' + message if message else ''}. {hint}"
        ) from None
    stem = repo.rsplit("/", 1)[-1]
    for index, obj in enumerate(dataset):
        where = f"hub {repo}[{split}] row {index}"
        if not isinstance(obj, Mapping):
            yield _Row(where, f"{stem}-{split}-{index}", {}, f"{where}: expected a record, got {type(obj).__name__}")
            continue
        yield _Row(where, f"{stem}-{split}-{index}", dict(obj))


# --------------------------------------------------------------------------------------
# Field access with precise errors


def _require(row: _Row, field: str, *, text: bool = True) -> Any:
    if field not in row.record or row.record[field] is None:
        raise DataError(f"{row.where}: missing field {field!r}")
    value = row.record[field]
    if text and not isinstance(value, str):
        raise DataError(f"{row.where}: field {field!r} must be a string, got {type(value).__name__}")
    return value


def _optional_str(row: _Row, field: str) -> str | None:
    value = row.record.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{row.where}: field {field!r} must be a string, got {type(value).__name__}")
    return value


def _id_value(row: _Row, field: str) -> str | None:
    value = row.record.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(
            f"{row.where}: field {field!r} (the id) must be a string or an integer, got {type(value).__name__}"
        )
    text = str(value).strip()
    if not text:
        raise DataError(f"{row.where}: field {field!r} (the id) is empty")
    return text


SKIP_HINT = "to skip bad rows and count them: `skip_bad_rows` (in a run config: data.skip_bad_rows: true)"


def _bad_row(message: str, bad_rows: list[str] | None) -> None:
    """A bad row: raise its DataError, or with `bad_rows` (`--skip-bad-rows`) record it there."""
    if bad_rows is None:
        raise DataError(f"{message}; {SKIP_HINT}")
    bad_rows.append(message)


def _build(
    rows: Iterable[_Row], make: Callable[[_Row], PreferencePair], bad_rows: list[str] | None
) -> list[tuple[PreferencePair, str]]:
    """`make` applied to every row, each pair with its location; a row that is not a record or
    that `make` refuses is a bad row (see `_bad_row`)."""
    built: list[tuple[PreferencePair, str]] = []
    for row in rows:
        try:
            if row.problem is not None:
                raise DataError(row.problem)
            built.append((make(row), row.where))
        except DataError as exc:
            _bad_row(str(exc), bad_rows)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "(row)"
            _bad_row(f"{row.where}: field {field!r}: {first['msg']}", bad_rows)
    return built


def _unique(
    pairs_with_where: list[tuple[PreferencePair, str]], bad_rows: list[str] | None = None
) -> list[tuple[PreferencePair, str]]:
    """The pairs with their first id; a later row with the same id is a bad row naming both."""
    seen: dict[str, str] = {}
    kept: list[tuple[PreferencePair, str]] = []
    for pair, where in pairs_with_where:
        if pair.id in seen:
            _bad_row(f"duplicate pair id {pair.id!r}: {seen[pair.id]} and {where}", bad_rows)
            continue
        seen[pair.id] = where
        kept.append((pair, where))
    return kept


def _distinct(row: _Row, first: tuple[str, str], second: tuple[str, str]) -> None:
    """Two responses that are the same text give the judge nothing to choose: any verdict on
    them would be scored as a judge error, so such a row is refused (a bad row)."""
    (first_field, first_text), (second_field, second_text) = first, second
    if first_text.strip() == second_text.strip():
        raise DataError(
            f"{row.where}: fields {first_field!r} and {second_field!r} hold the same text: "
            "the pair has no better response to pick"
        )


# --------------------------------------------------------------------------------------
# JudgeBench


def judgebench_domain(source: str) -> str:
    """JudgeBench's domain for a `source` value; 'unknown' for a source outside the four."""
    if source.startswith("mmlu-pro"):
        return "knowledge"
    return {
        "livebench-reasoning": "reasoning",
        "livebench-math": "math",
        "livecodebench": "code",
    }.get(source, "unknown")


_JUDGEBENCH_LABELS = {"A>B": "A", "B>A": "B"}


def _judgebench_pair(row: _Row, split: str) -> PreferencePair:
    pair_id = _id_value(row, "pair_id")
    if pair_id is None:
        raise DataError(f"{row.where}: missing field 'pair_id'")
    question = _require(row, "question")
    response_a = _require(row, "response_A")
    response_b = _require(row, "response_B")
    source = _require(row, "source")
    label = row.record.get("label")
    if label is None:
        raise DataError(f"{row.where}: missing field 'label'")
    if not isinstance(label, str) or label not in _JUDGEBENCH_LABELS:
        raise DataError(
            f"{row.where}: field 'label' has value {label!r}; expected one of "
            + ", ".join(repr(k) for k in _JUDGEBENCH_LABELS)
        )
    _distinct(row, ("response_A", response_a), ("response_B", response_b))
    better = _JUDGEBENCH_LABELS[label]
    chosen, rejected = (response_a, response_b) if better == "A" else (response_b, response_a)
    meta: dict[str, Any] = {
        "original_id": row.record.get("original_id"),
        "response_model": row.record.get("response_model"),
        "label": label,
        "split": split,
    }
    return PreferencePair(
        id=pair_id,
        question=question,
        chosen=chosen,
        rejected=rejected,
        domain=judgebench_domain(source),
        source=source,
        data_order="chosen_first" if better == "A" else "rejected_first",
        meta=meta,
    )


def _load_judgebench(splits: list[str], data_dir: Path | None, bad_rows: list[str] | None) -> list[PreferencePair]:
    loaded: list[tuple[PreferencePair, str]] = []
    earlier_ids: set[str] = set()
    for split in splits:
        rows = (
            _jsonl_rows(_local_file(data_dir, JUDGEBENCH_FILES[split]))
            if data_dir is not None
            else _hub_rows(JUDGEBENCH_HUB_ID, split)
        )
        this_split = _unique(_build(rows, functools.partial(_judgebench_pair, split=split), bad_rows), bad_rows)
        for pair, where in this_split:
            if pair.id in earlier_ids:
                pair = pair.model_copy(update={"id": f"{split}:{pair.id}", "meta": {**pair.meta, "pair_id": pair.id}})
            loaded.append((pair, where))
        earlier_ids.update(pair.id for pair, _ in this_split)
    return [pair for pair, _ in _unique(loaded, bad_rows)]


# --------------------------------------------------------------------------------------
# RewardBench


def _normalise_section(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


def _rewardbench_section_filter(selector: str) -> str:
    wanted = _normalise_section(selector)
    for section in REWARDBENCH_SECTIONS:
        if _normalise_section(section) == wanted:
            return section
    raise DataError(
        f"unknown RewardBench section {selector!r}; known sections: "
        + ", ".join(s.lower().replace(" ", "-") for s in REWARDBENCH_SECTIONS)
    )


def _rewardbench_raw_id(row: _Row) -> str | None:
    """The row's own id, None when it has none or a bad one (the row is refused when built)."""
    if row.problem is not None:
        return None
    try:
        return _id_value(row, "id")
    except DataError:
        return None


def _load_rewardbench(section: str | None, data_dir: Path | None, bad_rows: list[str] | None) -> list[PreferencePair]:
    rows = list(
        _jsonl_rows(_local_file(data_dir, REWARDBENCH_FILE))
        if data_dir is not None
        else _hub_rows(REWARDBENCH_HUB_ID, REWARDBENCH_SPLIT)
    )
    counts: dict[str, int] = {}
    for row in rows:
        raw = _rewardbench_raw_id(row)
        if raw is not None:
            counts[raw] = counts.get(raw, 0) + 1

    def make(row: _Row) -> PreferencePair:
        raw = _id_value(row, "id")
        if raw is None:
            raise DataError(f"{row.where}: missing field 'id'")
        subset = _require(row, "subset")
        row_section = _optional_str(row, "section")
        if row_section is None:
            row_section = REWARDBENCH_SUBSET_SECTIONS.get(subset, "unknown")
        chosen, rejected = _require(row, "chosen"), _require(row, "rejected")
        _distinct(row, ("chosen", chosen), ("rejected", rejected))
        return PreferencePair(
            id=raw if counts[raw] == 1 else f"{raw}-{subset}",
            question=_require(row, "prompt"),
            chosen=chosen,
            rejected=rejected,
            domain=row_section,
            source=subset,
            meta={
                "rewardbench_id": row.record.get("id"),
                "chosen_model": row.record.get("chosen_model"),
                "rejected_model": row.record.get("rejected_model"),
            },
        )

    # unique on the whole file, so a filter cannot hide a clash
    pairs = [pair for pair, _ in _unique(_build(rows, make, bad_rows), bad_rows)]
    if section is not None:
        pairs = [p for p in pairs if _normalise_section(p.domain) == _normalise_section(section)]
    return pairs


# --------------------------------------------------------------------------------------
# Generic files


def _generic_pairs(
    rows: Iterable[_Row], fields: FieldMap, default_source: str, bad_rows: list[str] | None = None
) -> list[PreferencePair]:
    built = _build(rows, lambda row: _generic_pair(row, fields, default_source), bad_rows)
    return [pair for pair, _ in _unique(built, bad_rows)]


def _generic_pair(row: _Row, fields: FieldMap, default_source: str) -> PreferencePair:
    record = row.record
    style = fields.style
    if style == "auto":
        if fields.chosen in record:
            style = "chosen_rejected"
        elif fields.label in record:
            style = "label"
        else:
            raise DataError(
                f"{row.where}: missing field {fields.chosen!r} (or, for a labelled file, "
                f"{fields.label!r} with {fields.response_a!r} and {fields.response_b!r})"
            )
    used = {fields.id, fields.domain, fields.source}

    question_field = fields.question
    if (
        question_field == "question"
        and "question" not in fields.model_fields_set
        and record.get("question") is None
        and record.get("prompt") is not None
    ):
        question_field = "prompt"
    used.add(question_field)

    data_order: Order | None = None
    if style == "chosen_rejected":
        chosen, rejected, kind = _responses(row, fields.chosen, fields.rejected)
        _distinct(row, (fields.chosen, chosen), (fields.rejected, rejected))
        used.update({fields.chosen, fields.rejected})
    else:
        label = record.get(fields.label)
        if label is None:
            raise DataError(f"{row.where}: missing field {fields.label!r}")
        response_a, response_b, kind = _responses(row, fields.response_a, fields.response_b)
        if not isinstance(label, str) or label not in fields.label_values:
            raise DataError(
                f"{row.where}: field {fields.label!r} has value {label!r}; expected one of "
                + ", ".join(repr(k) for k in fields.label_values)
            )
        _distinct(row, (fields.response_a, response_a), (fields.response_b, response_b))
        if fields.label_values[label] == "A":
            chosen, rejected, data_order = response_a, response_b, "chosen_first"
        else:
            chosen, rejected, data_order = response_b, response_a, "rejected_first"
        used.update({fields.response_a, fields.response_b})  # the label itself stays in meta

    question = _question(row, question_field, chosen if kind == "trajectory" else None)
    pair_id = _id_value(row, fields.id) or row.fallback_id
    source = _optional_str(row, fields.source)
    domain = _optional_str(row, fields.domain)
    if domain is None:
        domain = judgebench_domain(source) if source else "unknown"
    meta: dict[str, Any] = {}
    extra_meta = record.get("meta")
    if isinstance(extra_meta, Mapping):
        meta.update(extra_meta)
        used.add("meta")
    meta.update({k: v for k, v in record.items() if k not in used})
    return PreferencePair(
        id=pair_id,
        question=question,
        chosen=chosen,
        rejected=rejected,
        domain=domain or "unknown",
        source=source if source is not None else default_source,
        data_order=data_order,
        meta=meta,
        kind=kind,
    )


def _responses(row: _Row, first: str, second: str) -> tuple[str, str, ResponseKind]:
    """A row's two responses: two texts, or two agent trajectories (OpenAI-style message lists,
    or objects with `messages`), each turned into its canonical JSON; one of each is an error."""
    (a, kind_a), (b, kind_b) = _response(row, first), _response(row, second)
    if kind_a != kind_b:
        raise DataError(
            f"{row.where}: field {first!r} is {'a trajectory' if kind_a == 'trajectory' else 'a text'} but "
            f"field {second!r} is not: both responses of a pair are texts or both are trajectories"
        )
    return a, b, kind_a


def _response(row: _Row, field: str) -> tuple[str, ResponseKind]:
    value = _require(row, field, text=False)
    if isinstance(value, str):
        return value, "answer"
    if isinstance(value, Mapping) and "messages" in value:
        value = value["messages"]
    if isinstance(value, list) and value and all(isinstance(message, Mapping) for message in value):
        return openai_trajectory(value, where=f"{row.where}: field {field!r}").to_response(), "trajectory"
    raise DataError(
        f"{row.where}: field {field!r} must be a string or a list of chat messages, got {type(value).__name__}"
    )


def _question(row: _Row, field: str, trajectory: str | None) -> str:
    """The row's question; a trajectory pair without one takes its first user message."""
    if trajectory is not None and row.record.get(field) is None:
        from .trajectory import Trajectory

        first_user = next((m.content for m in Trajectory.from_response(trajectory).messages if m.role == "user"), "")
        if first_user.strip():
            return first_user
    return str(_require(row, field))


def _load_file(path: Path, fields: FieldMap, bad_rows: list[str] | None) -> list[PreferencePair]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows: Iterable[_Row] = _jsonl_rows(path)
    elif suffix == ".json":
        rows = _json_rows(path)
    elif suffix == ".parquet":
        rows = _parquet_rows(path)
    elif suffix == ".eval":
        return load_inspect_pairs(path)
    else:
        raise DataError(
            f"{path}: unsupported file type {path.suffix or '(none)'!r}; expected one of " + ", ".join(FILE_SUFFIXES)
        )
    return _generic_pairs(rows, fields, default_source=path.stem, bad_rows=bad_rows)


# --------------------------------------------------------------------------------------
# Resolution of a source string


@dataclass(frozen=True)
class _Resolved:
    kind: Literal["demo", "judgebench", "rewardbench", "taubench", "hf", "file"]
    name: str
    """Canonical name: `judgebench:gpt`, `rewardbench:reasoning`, the hub id, or the path."""
    splits: tuple[str, ...] = ()
    section: str | None = None
    path: Path | None = None


def _resolve(source: str | Path) -> _Resolved:
    if isinstance(source, Path):
        return _Resolved("file", str(source), path=source)
    if not isinstance(source, str) or not source.strip():
        raise DataError(f"empty data source; {_KNOWN_HINT}")
    text = source.strip()
    lowered = text.lower()
    if lowered == "demo":
        return _Resolved("demo", "demo")
    if lowered.startswith("demo:"):
        return _named_split("demo", "demo", text, DEMO_SPLITS, whole="demo (all 48 pairs)")
    if lowered == "judgebench":
        return _Resolved("judgebench", "judgebench", splits=tuple(JUDGEBENCH_FILES))
    if lowered == "judgebench:cross":  # matched cross-model pairs (data/cross_model.py)
        return _Resolved("judgebench", "judgebench:cross", splits=tuple(JUDGEBENCH_FILES), section="cross")
    if lowered.startswith("judgebench:"):
        return _named_split("judgebench", "JudgeBench", text, JUDGEBENCH_FILES)
    if lowered == "rewardbench":
        return _Resolved("rewardbench", "rewardbench")
    if lowered.startswith("rewardbench:"):
        section = _rewardbench_section_filter(text.split(":", 1)[1])
        return _Resolved("rewardbench", f"rewardbench:{section.lower().replace(' ', '-')}", section=section)
    if lowered in ("taubench", "taubench:airline"):
        return _Resolved("taubench", "taubench")
    if lowered.startswith("hf:"):
        spec = text[3:].strip()
        repo, _, split = spec.partition(":")
        if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo):
            raise DataError(f"hub data set {text!r} is not of the form hf:<owner>/<name>[:<split>]")
        return _Resolved("hf", repo, splits=(split or "train",))
    path = Path(text).expanduser()
    if path.suffix or path.exists() or "/" in text or os.sep in text:
        return _Resolved("file", str(path), path=path)
    raise DataError(f"unknown data set {text!r}; {_KNOWN_HINT}")


def _named_split(
    kind: Literal["demo", "judgebench"], label: str, text: str, known: Iterable[str], *, whole: str = ""
) -> _Resolved:
    """`kind:split` for a data set with named splits; an unknown split is an error listing the
    known ones (after `whole`, the name of the whole set, when it has one)."""
    split = text.split(":", 1)[1].strip().lower()
    if split not in known:
        listed = ([whole] if whole else []) + [f"{kind}:{s}" for s in known]
        raise DataError(f"unknown {label} split {split!r} in {text!r}; known: " + ", ".join(listed))
    return _Resolved(kind, f"{kind}:{split}", splits=(split,))


def demo_split(pair_id: str) -> str:
    """The demo split (`target` / `test`) of a demo pair id such as ``demo-math-07``."""
    match = re.fullmatch(r"demo-[a-z]+-(\d+)", pair_id)
    if match is None:
        raise DataError(f"{DEMO_FILE}: pair id {pair_id!r} is not of the form demo-<domain>-<number>")
    parity = int(match.group(1)) % 2
    return next(name for name, p in DEMO_SPLITS.items() if p == parity)


def resolve_data_dir(data_dir: Path | str | None = None) -> Path | None:
    """The local data directory for named sets: `data_dir`, else $BIAS_DISCOVERY_DATA_DIR, else None (hub)."""
    if data_dir is None or (isinstance(data_dir, str) and not data_dir.strip()):
        env = os.environ.get(DATA_DIR_ENV, "").strip()
        if not env:
            return None
        data_dir, origin = env, f"{DATA_DIR_ENV}={env}"
    else:
        origin = f"data dir {data_dir}"
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataError(f"{origin}: {path} is not a directory")
    return path


def _local_file(data_dir: Path, relative: str) -> Path:
    path = data_dir / relative
    if not path.is_file():
        raise DataError(f"data directory {data_dir} has no {relative}: expected the file {path}")
    return path


# --------------------------------------------------------------------------------------
# Public API


def load_pairs(
    source: str | Path,
    *,
    data_dir: Path | str | None = None,
    field_map: FieldMap | None = None,
    limit: int | None = None,
    seed: int | None = None,
    bad_rows: list[str] | None = None,
) -> list[PreferencePair]:
    """Load preference pairs from a named set, a hub data set or a file (see the module docstring).

    `data_dir` (else $BIAS_DISCOVERY_DATA_DIR) is where named sets are read from; without one
    they come from the hub. `field_map` applies to files and `hf:` sets only. `limit` keeps
    the first N pairs in file order, or, with `seed`, a seeded random sample of N kept in file
    order. Every input problem raises `DataError`, except that with `bad_rows` (a list:
    `--skip-bad-rows`) a bad row is skipped and its message appended there; `limit` then
    counts good rows.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit must be a positive integer, got {limit!r}")
    resolved = _resolve(source)
    fields = field_map or FieldMap()
    if resolved.kind == "demo":
        pairs = _generic_pairs(_jsonl_rows(DEMO_FILE), fields=FieldMap(), default_source="demo")
        if resolved.splits:
            pairs = [p for p in pairs if demo_split(p.id) == resolved.splits[0]]
    elif resolved.kind == "judgebench":
        pairs = _load_judgebench(list(resolved.splits), resolve_data_dir(data_dir), bad_rows)
        if resolved.section == "cross":
            from .cross_model import cross_model_pairs

            pairs = cross_model_pairs(pairs)
    elif resolved.kind == "rewardbench":
        pairs = _load_rewardbench(resolved.section, resolve_data_dir(data_dir), bad_rows)
    elif resolved.kind == "taubench":
        pairs = load_taubench(resolve_data_dir(data_dir), on_bad=functools.partial(_bad_row, bad_rows=bad_rows))
    elif resolved.kind == "hf":
        split = resolved.splits[0]
        pairs = _generic_pairs(_hub_rows(resolved.name, split), fields, default_source=resolved.name, bad_rows=bad_rows)
    else:
        assert resolved.path is not None
        pairs = _load_file(resolved.path, fields, bad_rows)
    return _take(pairs, limit, seed)


def _take(pairs: list[PreferencePair], limit: int | None, seed: int | None) -> list[PreferencePair]:
    if limit is None or limit >= len(pairs):
        return pairs
    if seed is None:
        return pairs[:limit]
    keep = sorted(random.Random(seed).sample(range(len(pairs)), limit))
    return [pairs[i] for i in keep]


PUBLISHED_KINDS: tuple[str, ...] = ("judgebench", "rewardbench", "taubench")
"""Named sets that are published benchmarks: loaded as published, never fixed by hand."""


def is_published(source: str | Path) -> bool:
    """Whether `source` names a published benchmark (``judgebench``, ``rewardbench`` and their
    splits). Its rows are the benchmark as its authors released it: a user cannot fix them, so
    the rows the loader refuses are skipped and counted without `skip_bad_rows`. A user's own
    file (or an ``hf:`` set) keeps the error: it can be fixed. A source `load_pairs` would
    refuse by name is not published (`load_pairs` then raises its error)."""
    try:
        return _resolve(source).kind in PUBLISHED_KINDS
    except DataError:
        return False


def bad_rows_for(source: str | Path, skip_bad_rows: bool) -> list[str] | None:
    """The `bad_rows` argument of `load_pairs` for `source`: an empty list (skip and count)
    with `skip_bad_rows` or for a published benchmark (`is_published`), else None (the first
    bad row is an error naming it)."""
    return [] if skip_bad_rows or is_published(source) else None


def skipped_rows_message(bad_rows: list[str], data: str | Path) -> str:
    """The one-line warning for the rows skipped at load: how many, why they were skipped
    (a published benchmark, or `skip_bad_rows`), and the first few by name."""
    shown = "; ".join(bad_rows[:3]) + (f"; and {len(bad_rows) - 3} more" if len(bad_rows) > 3 else "")
    if is_published(data):
        why = "the rows of a published benchmark the loader refuses are skipped and counted, not fixed"
        return f"skipped {plural(len(bad_rows), 'row')} of {data} ({why}): {shown}"
    return f"skipped {plural(len(bad_rows), 'bad row')} of {data} (`skip_bad_rows`): {shown}"


def describe_source(source: str | Path, data_dir: Path | str | None = None, *, portable: bool = False) -> str:
    """A short human description of where `source` is read from, for summaries and logs.

    E.g. ``"judgebench:gpt (local: /data/judgebench/...jsonl)"``, ``"judgebench (hub:
    ScalerLab/JudgeBench, splits gpt+claude)"``, ``"demo (packaged: .../demo_pairs.jsonl)"``,
    ``"file: /abs/pairs.jsonl"``. `portable` names files without their directories (what
    exported data sets record: the exporting machine's paths mean nothing to their readers).
    Raises DataError for a source `load_pairs` would refuse by name.
    """

    def where(path: Path) -> str:
        return path.name if portable else str(path)

    resolved = _resolve(source)
    if resolved.kind == "demo":
        return (
            f"{resolved.name} (packaged with bias-discovery)"
            if portable
            else f"{resolved.name} (packaged: {DEMO_FILE})"
        )
    if resolved.kind == "file":
        assert resolved.path is not None
        return f"file: {where(resolved.path.resolve())}"
    if resolved.kind == "hf":
        return f"hf:{resolved.name}:{resolved.splits[0]} (hub: {resolved.name}, split {resolved.splits[0]})"
    local = resolve_data_dir(data_dir)
    if resolved.kind == "taubench":
        copy = where(local / TAUBENCH_FILE) if local is not None else "no data directory"
        return f"{resolved.name} (local: {copy}; tau-bench, MIT, sierra-research/tau-bench)"
    if resolved.kind == "judgebench":
        if local is not None:
            files = [local / JUDGEBENCH_FILES[s] for s in resolved.splits]
            if len(files) == 1:
                copy = where(files[0])
            else:
                copy = ", ".join(f.name for f in files) if portable else str(local / "judgebench")
            return f"{resolved.name} (local: {copy})"
        return f"{resolved.name} (hub: {JUDGEBENCH_HUB_ID}, split{'s' if len(resolved.splits) > 1 else ''} {'+'.join(resolved.splits)})"
    if local is not None:
        return f"{resolved.name} (local: {where(local / REWARDBENCH_FILE)})"
    return f"{resolved.name} (hub: {REWARDBENCH_HUB_ID}, split {REWARDBENCH_SPLIT})"


__all__ = [
    "DATA_DIR_ENV",
    "DEMO_SPLITS",
    "FieldMap",
    "KNOWN_DATASETS",
    "PUBLISHED_KINDS",
    "bad_rows_for",
    "describe_source",
    "is_published",
    "judgebench_domain",
    "load_pairs",
    "resolve_data_dir",
    "skipped_rows_message",
]
